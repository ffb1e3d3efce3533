"""All-or-nothing writes: errors name the path, old files survive, links are written through."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from railplan.errors import RailplanError
from railplan.fileio import (
    INPUT_CAP_BYTES,
    YAML_DEPTH_LIMIT,
    atomic_write,
    check_target,
    load_yaml,
    parse_yaml,
    read_input_text,
)
from tests.conftest import Cli


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


def _bomb(levels: int, fan: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * fan) + "]")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("levels", "fan"), [(10, 9), (12, 10)])
def test_alias_bomb_is_refused_without_echo(tmp_path: Path, levels: int, fan: int) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(_bomb(levels, fan))
    assert bomb.stat().st_size < 650
    with pytest.raises(RailplanError) as err:
        load_yaml(bomb, "model")
    text = str(err.value)
    assert text.startswith("model: ") and "refused" in text and "\n" not in text
    assert "lol" not in text  # the document is never echoed


def test_deep_nesting_is_refused(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("[" * (YAML_DEPTH_LIMIT + 1) + "]" * (YAML_DEPTH_LIMIT + 1))
    with pytest.raises(RailplanError, match=f"deeper than {YAML_DEPTH_LIMIT}"):
        load_yaml(deep, "spec")
    ok = tmp_path / "ok.yaml"
    ok.write_text("[" * 10 + "]" * 10)
    assert load_yaml(ok, "spec") == [[[[[[[[[[]]]]]]]]]]


def test_a_few_aliases_still_work(tmp_path: Path) -> None:
    f = tmp_path / "a.yaml"
    f.write_text("base: &b {x: 1}\none: *b\ntwo: {<<: *b, y: 2}\n")
    assert load_yaml(f, "spec") == {"base": {"x": 1}, "one": {"x": 1}, "two": {"x": 1, "y": 2}}


@pytest.mark.parametrize("kind", ["fifo", "zero", "urandom", "directory"])
def test_only_regular_files_are_read(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        target = tmp_path / "f.yaml"
        os.mkfifo(target)  # no writer: a blocking open would wait forever
    else:
        target = {
            "zero": Path("/dev/zero"),
            "urandom": Path("/dev/urandom"),
            "directory": tmp_path,
        }[kind]
    with pytest.raises(RailplanError) as err:
        read_input_text(target, "model")
    text = str(err.value)
    assert text.startswith("model: ") and "\n" not in text
    assert ("directory" if kind == "directory" else "not a regular file") in text


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"\xff\xfen\x00a\x00m\x00e\x00", "NUL"),  # UTF-16
        ("name: é".encode("latin-1"), "not UTF-8"),
        (b"name: x\x00", "NUL"),
    ],
)
def test_non_utf8_input_is_one_line(tmp_path: Path, data: bytes, needle: str) -> None:
    f = tmp_path / "m.yaml"
    f.write_bytes(data)
    with pytest.raises(RailplanError, match=needle) as err:
        read_input_text(f, "model")
    assert "\n" not in str(err.value)


def test_size_cap_is_stated(tmp_path: Path) -> None:
    f = tmp_path / "big.yaml"
    f.write_text("x" * 101)
    with pytest.raises(RailplanError, match="the limit is 100 bytes"):
        read_input_text(f, "model", cap_bytes=100)
    assert read_input_text(f, "model", cap_bytes=101) == "x" * 101
    assert f"{INPUT_CAP_BYTES:,}" == "8,388,608"


def test_stale_temp_of_a_killed_write_is_removed(tmp_path: Path) -> None:
    out = tmp_path / "t.csv"
    dead = _dead_pid()
    stale = tmp_path / f".t.csv.railplan-{dead}-abcd1234.csv"
    stale.write_text("partial")
    live = tmp_path / f".t.csv.railplan-{os.getpid()}-abcd1234.csv"  # a write in progress
    live.write_text("partial")
    other = tmp_path / f".u.csv.railplan-{dead}-abcd1234.csv"  # another target's
    other.write_text("partial")
    atomic_write(out, _text("new"))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["t.csv", live.name, other.name])


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("kind", ["too_long", "loop", "not_utf8"])
def test_bad_names_are_one_line_errors(tmp_path: Path, kind: str) -> None:
    if kind == "too_long":
        target = tmp_path / ("x" * 300 + ".csv")
    elif kind == "loop":
        target = tmp_path / "loop.csv"
        target.symlink_to(tmp_path / "loop.csv")
    else:
        target = tmp_path / os.fsdecode(b"bad\xff.csv")
    with pytest.raises(RailplanError) as err:
        atomic_write(target, _text("x"), field="export")
    text = str(err.value)
    assert text.startswith("export: ") and "\n" not in text
    text.encode("utf-8")  # printable
    assert list(tmp_path.iterdir()) == ([target] if kind == "loop" else [])


def test_a_killed_export_leaves_no_temp_after_the_next_write(cli: Cli, tmp_path: Path) -> None:
    """A process killed (SIGKILL) half-way through an export leaves its temporary file; the
    next export to the same target removes it."""
    out = tmp_path / "t.csv"
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from railplan.fileio import atomic_write\n"
        "def write(tmp):\n"
        "    Path(tmp).write_text('src,dst,kind,bytes\\n0,1,tp,')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "atomic_write(Path(sys.argv[1]), write)\n"
    )
    killed = subprocess.run([sys.executable, "-c", script, str(out)], check=False)
    assert killed.returncode == -signal.SIGKILL
    left = [p.name for p in tmp_path.iterdir()]
    assert len(left) == 1 and left[0].startswith(".t.csv.railplan-")  # the killed write's temp
    small = ["--model", "gpt-1.7b", "--gpus", "16", "--global-batch", "32", "--tp", "2"]
    r = cli("traffic", *small, "--export", str(out))
    assert r.exit_code == 0, r.output
    assert [p.name for p in tmp_path.iterdir()] == ["t.csv"]
    assert out.read_text().startswith("src,dst,kind,bytes")


def test_a_key_given_twice_is_refused_with_its_line() -> None:
    text = "name: x\nhidden: 4096\nlayers: 32\nhidden: 8192\n"
    with pytest.raises(RailplanError, match=r"'hidden' appears twice \(line 4\)"):
        parse_yaml(text, "model", "m.yaml")


def test_merge_keys_may_still_be_overridden() -> None:
    text = "base: &b\n  hidden: 4096\n  layers: 2\nm:\n  <<: *b\n  hidden: 8192\n"
    assert parse_yaml(text, "model", "m.yaml")["m"] == {"hidden": 8192, "layers": 2}


def test_sigterm_while_writing_leaves_no_temporary_file(tmp_path: Path) -> None:
    """SIGTERM (a job scheduler's stop) cleans up as ^C does: the export's temporary file is
    removed and the command exits 143."""
    import time

    out = tmp_path / "ex.csv"
    code = "from railplan.cli import main; main()"
    args = ["traffic", "--model", "moe-1.3b", "--gpus", "65536", "--ep", "128"]
    args += ["--global-batch", "65536", "--export", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".ex.csv.railplan-*")) and time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.skip("the export finished before it could be stopped")
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert list(tmp_path.iterdir()) == []


def test_chained_merge_overrides_are_not_taken_for_duplicates() -> None:
    # a mapping that merges and overrides, itself merged later: no key is written twice
    text = "base: &b {x: 1}\na:\n  mid: &m {<<: *b, x: 5}\ntop: {<<: *m, z: 3}\n"
    assert parse_yaml(text, "spec", "s.yaml")["a"]["mid"] == {"x": 5}
