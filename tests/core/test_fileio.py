"""All-or-nothing writes: errors name the path, old files survive, links are written through."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from railplan.errors import RailplanError
from railplan.fileio import atomic_write, check_target


def _text(text: str) -> Callable[[Path], None]:
    def write(tmp: Path) -> None:
        Path(tmp).write_text(text)

    return write


def test_writes_and_replaces(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    atomic_write(out, _text("one"))
    atomic_write(out, _text("two"))
    assert out.read_text() == "two"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]  # no temp file left


def test_failed_write_keeps_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    out.write_text("old")

    def boom(tmp: Path) -> None:
        Path(tmp).write_text("partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(RailplanError, match="No space left"):
        atomic_write(out, boom)
    assert out.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_symlink_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.csv"
    real.write_text("old")
    link = tmp_path / "link.csv"
    link.symlink_to(real)
    atomic_write(link, _text("new"))
    assert link.is_symlink() and real.read_text() == "new"


@pytest.mark.parametrize("kind", ["missing_dir", "directory", "device"])
def test_bad_targets_are_one_line_errors(tmp_path: Path, kind: str) -> None:
    target = {
        "missing_dir": tmp_path / "nope" / "a.txt",
        "directory": tmp_path,
        "device": Path(os.devnull),
    }[kind]
    with pytest.raises(RailplanError) as err:
        check_target(target, "out")
    assert str(err.value).startswith("out: ") and "\n" not in str(err.value)
