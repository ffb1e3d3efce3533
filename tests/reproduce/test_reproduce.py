"""The evaluation reproductions run, have the paper's numbers beside ours, and plot."""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any

import pytest

from railplan.errors import RailplanError
from railplan.reproduce import evaluation as ev
from tests.conftest import Cli


def test_fig7_rows(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli.json("reproduce", "fig7")
    assert len(r["points"]) == 5
    assert {c["paper"] for c in r["comparisons"]} == {1.8, 10.8}
    for p in r["points"]:
        assert 0 < p["predicted_hfu"] < 1 and 0 < p["measured_hfu"] < 1


def test_fig9_structure_and_trends() -> None:
    r = ev.fig9()
    assert len(r["points"]) == 2 * 4 * 4
    t = {(p["hb_domain"], p["hb_tbps"], p["nic_gbps"]): p["iteration_s"] for p in r["points"]}
    for k in (8, 256):  # more bandwidth never makes the best strategy slower
        assert t[k, 9.6, 400.0] <= t[k, 2.4, 400.0] and t[k, 9.6, 400.0] <= t[k, 9.6, 100.0]
    assert {c["paper"] for c in r["comparisons"]} == {8.0, 13.3, 35.9}


def test_nic_count_trend(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli.json("reproduce", "nic-count")
    rel = [p["fixed_strategy_relative"] for p in r["points"]]
    assert rel[0] == 1.0 and rel == sorted(rel)
    assert [p["measured_relative"] for p in r["points"]] == pytest.approx(
        [1.0, 1.0088, 1.1520, 1.5638], abs=1e-3
    )


def test_unknown_figure(cli) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(Exception, match="figure"):
        ev.run("fig99")
    r = cli("reproduce", "fig99")
    assert r.exit_code != 0


def test_plots(tmp_path: Path) -> None:
    for name in ("fig7", "nic-count"):
        out = tmp_path / f"{name}.png"
        ev.plot(ev.run(name), out)
        assert out.stat().st_size > 1000


def test_cli_table_and_plot(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "f7.svg"
    r = cli("reproduce", "fig7", "--plot", str(out))
    assert r.exit_code == 0 and "paper vs ours" in r.output and out.exists()


def test_plot_errors_before_the_evaluation_runs(
    cli: Cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def never(name: str) -> None:
        raise AssertionError("the evaluation ran")

    monkeypatch.setattr(ev, "run", never)
    for plot, problem in [
        (tmp_path / "f7.gif", "'f7.gif': use a .png, .svg or .pdf file name"),
        (tmp_path / "nope" / "f7.png", f"directory {str(tmp_path / 'nope')!r} does not exist"),
    ]:
        r = cli("reproduce", "fig7", "--plot", str(plot))
        assert r.exit_code == 2 and str(r.exception) == f"plot: {problem}"
    assert list(tmp_path.iterdir()) == []


def test_failed_plot_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.figure

    out = tmp_path / "f7.pdf"
    out.write_bytes(b"old")
    report = ev.run("fig7")

    def disk_full(fig: Any, where: Path, **kwargs: Any) -> None:
        Path(where).write_bytes(b"half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", disk_full)
    with pytest.raises(RailplanError, match=r"^plot: cannot write .*No space left"):
        ev.plot(report, out)
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["f7.pdf"]
    monkeypatch.undo()
    ev.plot(report, out)
    assert out.read_bytes().startswith(b"%PDF")
    assert [p.name for p in tmp_path.iterdir()] == ["f7.pdf"]


def test_every_registered_figure_has_a_command() -> None:
    """The registry (evaluation.FIGURES) and the commands' help (names.REPRODUCE_FIGURES, light
    enough for the CLI to import at start) name the same figures."""
    from railplan.names import REPRODUCE_FIGURES

    assert list(ev.FIGURES) == list(REPRODUCE_FIGURES)
