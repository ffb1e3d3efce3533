"""The evaluation reproductions run, have the paper's numbers beside ours, and plot."""

from __future__ import annotations

from pathlib import Path

import pytest

from railplan.reproduce import evaluation as ev


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
