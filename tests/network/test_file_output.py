"""Graph export and the cost plot: all-or-nothing writes and one-line errors for OS errors."""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import matplotlib.figure
import networkx as nx
import pytest

from railplan.errors import RailplanError
from railplan.network.graph import export_graph, graph_for
from railplan.network.plots import cost_plot
from tests.conftest import Cli


def _disk_full(*args: Any, **kwargs: Any) -> None:
    """A writer that gets half-way, then fails as a full disk does."""
    target = args[1] if len(args) > 1 else args[0]
    Path(target).write_bytes(b"half")
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("suffix", [".graphml", ".json"])
def test_export_writes_a_readable_graph(tmp_path: Path, suffix: str) -> None:
    g = graph_for("rail-only", 64, 8, 16)
    out = export_graph(g, tmp_path / f"g{suffix}")
    if suffix == ".graphml":
        back = nx.read_graphml(out)
    else:
        back = nx.node_link_graph(json.loads(out.read_text()), edges="links")
    assert back.number_of_nodes() == g.number_of_nodes()
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


@pytest.mark.parametrize("suffix", [".graphml", ".json"])
def test_failed_export_keeps_the_old_file(
    tmp_path: Path, suffix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / f"g{suffix}"
    out.write_text("old")
    monkeypatch.setattr(nx, "write_graphml", _disk_full)
    monkeypatch.setattr(Path, "write_text", lambda self, *a, **k: _disk_full(self))
    with pytest.raises(RailplanError, match=r"^export: cannot write .*No space left"):
        export_graph(graph_for("ideal", 8, 8, 16), out)
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_export_to_a_missing_directory(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "nope" / "g.json"
    r = cli(
        "topology", "--arch", "ideal", "--gpus", "64", "--hb-domain", "64", "--export", str(out)
    )
    assert r.exit_code == 2
    assert str(r.exception) == f"export: directory {str(out.parent)!r} does not exist"
    assert not out.parent.exists()


def test_export_to_a_directory(tmp_path: Path) -> None:
    d = tmp_path / "d.json"
    d.mkdir()
    with pytest.raises(RailplanError, match=r"^export: .* is a directory"):
        export_graph(graph_for("ideal", 8, 8, 16), d)


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_cost_plot_format_follows_the_suffix(tmp_path: Path, suffix: str) -> None:
    out = cost_plot(tmp_path / f"c{suffix}", [256, 1024], [64])
    head = out.read_bytes()[:5]
    assert {".png": b"\x89PNG", ".pdf": b"%PDF"}.get(suffix, b"<?xml") in head
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_failed_cost_plot_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "c.png"
    out.write_bytes(b"old")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", _disk_full)
    with pytest.raises(RailplanError, match=r"^out: cannot write .*No space left"):
        cost_plot(out, [256, 1024], [64])
    assert out.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == [out.name]


def test_cost_plot_to_a_missing_directory(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "nope" / "c.png"
    r = cli("cost-plot", "--out", str(out), "--radices", "64")
    assert r.exit_code == 2 and str(r.exception).startswith("out: directory")
    assert not out.parent.exists()
