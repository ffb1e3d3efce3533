"""Files the user names: bounded reading of inputs, all-or-nothing writing of outputs.

Reading (`read_input_text`, `load_yaml`): only regular files are read (a FIFO, a device such as
/dev/zero or a directory is refused before any byte is read, so nothing blocks), at most
`INPUT_CAP_BYTES`, as UTF-8 text without NUL bytes. YAML is parsed by a safe loader that refuses
more than `YAML_ALIAS_BUDGET` aliases, nesting deeper than `YAML_DEPTH_LIMIT` and more than
`YAML_NODE_BUDGET` values once aliases are expanded, so an alias bomb of a few hundred bytes
fails at once and the error never echoes the document.

Writing (`atomic_write`): the writer runs on a temporary file next to the target, which is then
renamed into place, so an error or an interrupt leaves neither a partial file nor a damaged old
one. A temporary file carries the writer's pid; one left by a killed writer (pid no longer alive)
is removed by the next write to the same target. Operating-system errors (missing directory, no
permission, disk full, a name too long, a symlink loop) and names that are not UTF-8 become
one-line `RailplanError`s that name the path.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from railplan.errors import RailplanError

INPUT_CAP_BYTES = 8 * 1024 * 1024
"""Largest spec, price-book or sweep file read (8 MiB; the shipped catalogs are < 64 KiB)."""
YAML_ALIAS_BUDGET = 100
"""Most YAML aliases (`*name`) one document may use."""
YAML_DEPTH_LIMIT = 64
"""Deepest nesting of YAML collections one document may use."""
YAML_NODE_BUDGET = 100_000
"""Most values (scalars and collections) a YAML document may hold with its aliases expanded;
the largest shipped catalog holds fewer than 300."""


def show_path(path: Path | str) -> str:
    """A path quoted for a one-line message, printable even when the name is not UTF-8."""
    return ascii(str(path)) if not _is_utf8(str(path)) else repr(str(path))


def _is_utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _os_problem(err: OSError) -> str:
    if err.errno == errno.ELOOP:
        return "too many levels of symbolic links (a symlink loop)"
    if err.errno == errno.ENAMETOOLONG:
        return "file name too long for the file system"
    return str(err.strerror or err)


def _check_name(path: Path, field: str) -> None:
    if not _is_utf8(str(path)):
        raise RailplanError(field, f"{show_path(path)} is not a UTF-8 file name; rename it")


# ---- reading -------------------------------------------------------------------------------


def read_input_text(path: Path, field: str, cap_bytes: int = INPUT_CAP_BYTES) -> str:
    """The text of a regular file of at most `cap_bytes`, UTF-8 without NUL; one-line errors."""
    path = Path(path)
    _check_name(path, field)
    where = show_path(path)
    try:
        # O_NONBLOCK: opening a FIFO without a writer returns at once (then refused below)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        raise RailplanError(field, f"cannot read {where}: {_os_problem(err)}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
            raise RailplanError(field, f"{where} is {kind}; give a YAML file")
        if info.st_size > cap_bytes:
            raise RailplanError(
                field, f"{where} has {info.st_size:,} bytes; the limit is {cap_bytes:,} bytes"
            )
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= cap_bytes:  # a file growing while read is still capped
            chunk = os.read(fd, min(1 << 20, cap_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as err:
        raise RailplanError(field, f"cannot read {where}: {_os_problem(err)}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > cap_bytes:
        raise RailplanError(field, f"{where} is larger than the limit of {cap_bytes:,} bytes")
    if b"\0" in data:
        raise RailplanError(field, f"{where} holds NUL bytes; give a UTF-8 text file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise RailplanError(
            field, f"{where} is not UTF-8 text (byte {err.start:,}); save it as UTF-8"
        ) from None


class _BoundedLoader(yaml.SafeLoader):
    """Safe YAML loader with an alias budget and a nesting limit."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.aliases_seen = 0
        self.depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self.aliases_seen += 1
            if self.aliases_seen > YAML_ALIAS_BUDGET:
                raise _YamlLimit(f"more than {YAML_ALIAS_BUDGET} aliases (*name)")
            return super().compose_node(parent, index)
        self.depth += 1
        try:
            if self.depth > YAML_DEPTH_LIMIT:
                raise _YamlLimit(f"nesting deeper than {YAML_DEPTH_LIMIT} levels")
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _duplicate_key(node: yaml.Node, seen: set[int]) -> str | None:
    """The first key given twice in one mapping of the document as written (before merge keys,
    `<<`, are flattened: a mapping may override what it merges), as a message; None if none."""
    if id(node) in seen:
        return None
    seen.add(id(node))
    children: list[yaml.Node] = []
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                if key_node.value in keys:
                    line = key_node.start_mark.line + 1
                    return f"key {key_node.value!r} appears twice (line {line})"
                keys.add(key_node.value)
            children += [key_node, value]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    for child in children:
        found = _duplicate_key(child, seen)
        if found:
            return found
    return None


def _expanded_nodes(node: yaml.Node, memo: dict[int, int]) -> int:
    """How many nodes the document has with every alias expanded (shared nodes counted once
    per use), computed over the distinct nodes only."""
    key = id(node)
    if key not in memo:
        count = 1
        if isinstance(node, yaml.SequenceNode):
            count += sum(_expanded_nodes(child, memo) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            count += sum(_expanded_nodes(k, memo) + _expanded_nodes(v, memo) for k, v in node.value)
        memo[key] = count
    return memo[key]


class _YamlLimit(Exception):
    """A document over the alias budget or the depth limit."""


def parse_yaml(text: str, field: str, where: str) -> Any:
    """Parse YAML text with the bounded safe loader; errors name `where`, never echo the text."""
    loader = _BoundedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, {}) > YAML_NODE_BUDGET:
            raise _YamlLimit(f"more than {YAML_NODE_BUDGET:,} values once aliases are expanded")
        twice = _duplicate_key(node, set())
        if twice:  # a key given twice would silently keep its last value
            raise _YamlLimit(twice)
        return loader.construct_document(node)
    except _YamlLimit as err:
        raise RailplanError(field, f"{where} refused: {err}") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(err, "problem", None) or "invalid YAML"
        raise RailplanError(field, f"malformed YAML in {where}{at}: {problem}") from None
    except RecursionError:
        raise RailplanError(field, f"{where} refused: nesting too deep") from None
    finally:
        loader.dispose()


def load_yaml(path: Path, field: str) -> Any:
    """A YAML file read with `read_input_text` and parsed with `parse_yaml`."""
    return parse_yaml(read_input_text(path, field), field, show_path(path))


# ---- writing -------------------------------------------------------------------------------


def check_target(path: Path, field: str = "output") -> Path:
    """Check, before any long work, that `path` can be a file we write: a UTF-8 name the file
    system allows, not a directory, no symlink loop, and its directory exists (we never create
    directories the user did not ask for). Returns the path to write (links resolved)."""
    path = Path(path)
    _check_name(path, field)
    try:
        if path.is_symlink():
            path = path.resolve(strict=False)  # write through the link: replace its target
        info = os.stat(path) if path.exists() else None
        parent_ok = path.parent.is_dir()
        name_max = os.pathconf(path.parent, "PC_NAME_MAX") if parent_ok else 255
    except (OSError, RuntimeError) as err:
        problem = _os_problem(err) if isinstance(err, OSError) else "a symlink loop"
        raise RailplanError(field, f"cannot write {show_path(path)}: {problem}") from None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise RailplanError(field, f"{show_path(path)} is a directory; give a file name")
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise RailplanError(field, f"{show_path(path)} is not a regular file; give a file name")
    if not parent_ok:
        raise RailplanError(field, f"directory {show_path(path.parent)} does not exist")
    # the temporary file's name is the longest one written: check it, not just the target's
    temp_bytes = len(os.fsencode(_temp_prefix(path) + "XXXXXXXX" + path.suffix))
    if temp_bytes > name_max:
        longest = name_max - (temp_bytes - len(os.fsencode(path.name)))
        raise RailplanError(
            field,
            f"cannot write {show_path(path)}: file name too long for the file system "
            f"(at most {longest} bytes here)",
        )
    # and that the folder takes a new file at all (read-only mounts, /proc, no permission):
    # the temporary file atomic_write will make, made and removed now
    try:
        fd, probe = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=path.suffix, dir=path.parent)
    except OSError as err:
        raise RailplanError(
            field, f"cannot write in {show_path(path.parent)}: {_os_problem(err)}"
        ) from None
    os.close(fd)
    os.unlink(probe)
    return path


def _temp_prefix(path: Path) -> str:
    return f".{path.name}.railplan-{os.getpid()}-"


_TEMP_RE = r"\.{name}\.railplan-(\d+)-[A-Za-z0-9_]{{8}}{suffix}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: Path) -> list[Path]:
    """Remove the temporary files of writes to `path` whose writer is dead; return them."""
    pattern = re.compile(_TEMP_RE.format(name=re.escape(path.name), suffix=re.escape(path.suffix)))
    removed = []
    try:
        entries = list(os.scandir(path.parent))
    except OSError:
        return []
    for entry in entries:
        m = pattern.fullmatch(entry.name)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        try:
            os.unlink(entry.path)
            removed.append(Path(entry.path))
        except OSError:
            pass  # another writer removed it first, or no permission: leave it
    return removed


def atomic_write(path: Path, write: Callable[[Path], None], field: str = "output") -> Path:
    """Run `write(tmp)` on a temporary file next to `path`, then rename it onto `path`."""
    path = check_target(path, field)
    remove_stale_temps(path)
    try:
        fd, tmp_name = tempfile.mkstemp(
            prefix=_temp_prefix(path), suffix=path.suffix, dir=path.parent
        )
    except OSError as err:
        raise RailplanError(
            field, f"cannot write in {show_path(path.parent)}: {_os_problem(err)}"
        ) from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except OSError as err:
        raise RailplanError(field, f"cannot write {show_path(path)}: {_os_problem(err)}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
