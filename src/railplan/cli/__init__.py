"""The `railplan` command line: thin wrappers that parse, call the library and print.

Each command group lives in its own module and registers itself on the shared apps, so the
pipeline's parts (core model, network, traffic, search, reports) can grow independently.
"""

from __future__ import annotations

import sys

import typer

from railplan.errors import RailplanError

app = typer.Typer(
    name="railplan",
    help="Rail-only networks for LLM training: performance, traffic, topology, cost, failures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
reproduce_app = typer.Typer(
    help="Reproduce the Rail-only paper's tables and figures, ours beside the paper's.",
    no_args_is_help=True,
)
app.add_typer(reproduce_app, name="reproduce")


def _register() -> None:
    from railplan.cli import collective, core, flowsim, moe, network, report, search, traffic

    for module in (core, network, traffic, search, moe, flowsim, report, collective):
        module.register(app, reproduce_app)


_register()


def main() -> None:
    """Console entry point: bad input prints one line and exits 2, never a traceback."""
    try:
        app(standalone_mode=False)
    except RailplanError as err:
        typer.echo(f"error: {err}", err=True)
        sys.exit(2)
    except typer.Exit as ex:
        sys.exit(ex.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(130)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as err:
        if _is_click_exception(err):
            err.show()  # type: ignore[attr-defined]
            sys.exit(int(err.exit_code))  # type: ignore[attr-defined]
        raise


def _is_click_exception(err: BaseException) -> bool:
    """Usage errors from click, or from the copy of click that newer typer bundles."""
    import click

    if isinstance(err, click.exceptions.ClickException):
        return True
    return any(
        cls.__name__ == "ClickException" and cls.__module__.endswith("exceptions")
        for cls in type(err).__mro__
    )
