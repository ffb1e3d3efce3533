"""The `railplan` command line: thin wrappers that parse, call the library and print.

Each command group lives in its own module and registers itself on the shared apps, so the
pipeline's parts (core model, network, traffic, search, reports) can grow independently. The
command modules import the library inside their command functions, so `railplan --help` and
`import railplan.cli` load neither numpy nor pydantic.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import typer
from typer.core import TyperCommand

from railplan import __version__
from railplan.errors import RailplanError


class _OnceCommand(TyperCommand):
    """A command whose single-valued options may be given once: `--gpus 8 --gpus 16` is an
    error naming the flag, not a silent "last one wins"."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        check_repeated_options(self.params, args)
        return super().parse_args(ctx, args)


def check_repeated_options(params: Sequence[Any], args: Sequence[str]) -> None:
    """Raise a usage error if an option that takes one value appears more than once in `args`."""
    owner: dict[str, Any] = {}
    for p in params:
        if getattr(p, "param_type_name", "") != "option" or getattr(p, "multiple", False):
            continue
        for flag in (*p.opts, *p.secondary_opts):
            owner[flag] = p
    seen: dict[str, list[str]] = {}
    for i, arg in enumerate(args):
        if arg == "--":
            break
        flag = arg.split("=", 1)[0]
        p = owner.get(flag)
        if p is not None:
            takes_value = not getattr(p, "is_flag", False) and "=" not in arg
            given = f"{arg} {args[i + 1]}" if takes_value and i + 1 < len(args) else arg
            seen.setdefault(p.name, []).append(given)
    for flags in seen.values():
        if len(flags) > 1:
            raise typer.BadParameter(
                f"given {len(flags)} times ({', '.join(flags)}); give it once",
                param_hint=f"'{flags[0].split()[0].split('=')[0]}'",
            )


class _App(typer.Typer):
    """typer.Typer whose commands refuse repeated single-valued options."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        kwargs.setdefault("cls", _OnceCommand)
        return super().command(*args, **kwargs)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"railplan {__version__}")
        raise typer.Exit(0)


app = _App(
    name="railplan",
    help="Rail-only networks for LLM training: performance, traffic, topology, cost, failures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: readable at 80 columns, no `<bool>` metavars
)
reproduce_app = _App(
    help="Reproduce the Rail-only paper's tables and figures, ours beside the paper's.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(reproduce_app, name="reproduce")


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", help="print the version and exit", callback=_version, is_eager=True
    ),
) -> None:
    """Rail-only networks for LLM training: performance, traffic, topology, cost, failures."""


def _register() -> None:
    from railplan.cli import (
        collective,
        core,
        flowsim,
        infer,
        moe,
        network,
        report,
        search,
        traffic,
    )

    for module in (core, network, traffic, search, moe, flowsim, report, infer, collective):
        module.register(app, reproduce_app)


_register()


def run(args: Sequence[str] | None = None) -> int:
    """Run the CLI on `args` (default: sys.argv) and return the exit code; bad input prints one
    line (or the usage help) to stderr, never a traceback."""
    try:
        # Outside standalone mode click hands back what ended the command: an exit code for
        # typer.Exit (a sweep with failed points: 1) and 130 for ^C, which it catches itself
        # (commands return None otherwise)
        code = app(
            args=None if args is None else list(args), standalone_mode=False, prog_name="railplan"
        )
    except RailplanError as err:
        typer.echo(f"error: {err}", err=True)
        return 2
    except typer.Exit as ex:
        return int(ex.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        return INTERRUPTED
    except Terminated:
        typer.echo("terminated", err=True)
        return TERMINATED
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return INTERRUPTED
    except MemoryError:  # numpy's allocation errors too: a request too large for this machine
        typer.echo(
            "error: out of memory: this request needs more memory than this machine has; "
            "use fewer GPUs or fewer values per option",
            err=True,
        )
        return 2
    except OSError as err:  # a file the user named cannot be read or written
        name = err.filename if err.filename is not None else "file"
        typer.echo(f"error: {name!s:.200}: {err.strerror or err}", err=True)
        return 2
    except Exception as err:
        if not _is_usage_exception(err):
            raise
        if "NoArgsIsHelp" in type(err).__name__:  # `railplan` alone, or a group: its help
            err.show()  # type: ignore[attr-defined]
        else:  # one line, as every other bad input (click's own shows usage and a hint too)
            message = " ".join(err.format_message().split())  # type: ignore[attr-defined]
            typer.echo(f"error: {message}", err=True)
        return int(err.exit_code)  # type: ignore[attr-defined]
    if isinstance(code, bool) or not isinstance(code, int):
        return 0
    if code == INTERRUPTED:
        typer.echo("interrupted", err=True)
    return code


INTERRUPTED = 130  # the shell's code for a command ended by SIGINT (128 + 2)


class Terminated(BaseException):
    """SIGTERM, raised where the program is so that files being written are cleaned up as on ^C
    (`atomic_write`'s temporary files, the sweep's lock), instead of the process just ending."""


TERMINATED = 143  # the shell's code for a command ended by SIGTERM (128 + 15)


_MAIN_PID: list[int] = []  # the process main() runs in: forked workers are not it


def _on_sigterm(signum: int, frame: object) -> None:
    import os
    import signal

    if _MAIN_PID and os.getpid() != _MAIN_PID[0]:  # a forked worker before its initializer
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    raise Terminated


def main() -> None:
    """Console entry point: bad input prints one line and exits 2, never a traceback."""
    import os
    import signal

    _MAIN_PID[:] = [os.getpid()]
    signal.signal(signal.SIGTERM, _on_sigterm)
    code = run()
    if code:
        sys.exit(code)


def _is_usage_exception(err: BaseException) -> bool:
    """Usage errors of the click copy typer bundles (typer.exceptions.TyperException), or of a
    separately installed click, recognised without importing click (a plain install lacks it)."""
    from typer.exceptions import TyperException

    if isinstance(err, TyperException):
        return True
    return any(
        cls.__name__ == "ClickException" and cls.__module__.endswith("exceptions")
        for cls in type(err).__mro__
    )
