"""Random `railplan` command lines for the CLI fuzz (the test and `benchmarks/fuzz.py`).

Every command of the typer app, its options drawn from plausible values (catalog names, small
GPU counts), edge values (0, -1, int64 limits and beyond, inf, nan) and hostile files (deep
nesting, binary, UTF-16, NUL bytes, an alias bomb, a directory, odd and over-long names, and,
in the subprocess benchmark only, a FIFO and /dev/zero), plus unknown and repeated flags.
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import signal
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer.main

from railplan.cli import app
from railplan.specs.strategy import CODED_FIELDS

MODELS = [
    "gpt-3.6b",
    "gpt-1.7b",
    "gpt-22b",
    "gpt-175b",
    "gpt-1t",
    "moe-1.3b",
    "llama-3-8b",
    "mixtral-8x7b",
    "deepseek-v3",
    "gpt-nope",
]
SYSTEMS = ["dgx-a100", "dgx-h100", "dgx-gh200", "gb200-nvl72", "mi300x", "dgx-nope"]
PRICE_BOOKS = ["rail-only-hoti2024", "rail-only-hotnets23", "public-web-estimates", "nope"]
ARCHS = ["rail-optimized", "rail-only", "ideal", "oversubscribed", "multi-plane", "ring"]
WORDS = ["none", "selective", "full", "allreduce", "alltoall", "local", "ray", "models", "x", ""]
INTS = [1, 2, 3, 7, 8, 16, 64, 72, 100, 256, 1024, 4096, 0, -1, 2**31, 2**63 - 1, 2**64 + 3]
BIG_INTS = [10**30, -(2**63) - 1, 2**63]
FLOATS = ["0.5", "1", "2.5", "400", "0", "-1", "inf", "nan", "1e308", "1e-308", "-inf"]
SMALL_GPUS = [8, 16, 32, 64, 128, 256, 1024]
VARY = [
    "hb_domain=8,72",
    "gpus=16,0",
    "nic_gbps=400,nan",
    "bogus=1",
    "hb_domain=",
    "model=gpt-1.7b",
    "sharp=true,maybe",
    "nvls=on,off",
]
#: options whose value is a file the command writes (given paths in the scratch directory)
OUTPUTS = {"out", "output", "export", "plot", "heatmap", "figures", "csv", "bars"}
#: options whose value is a spec, price book or sweep file the command reads
INPUTS = {"model", "system", "price_book", "spec"}
#: in-process runs skip these: each is a valid run of minutes (the benchmark runs them)
SLOW = {("reproduce", "fig8"), ("reproduce", "fig9"), ("reproduce", "fig10"), ("validate",)}


@dataclass(frozen=True)
class Command:
    path: tuple[str, ...]
    params: tuple[Any, ...]


def commands() -> list[Command]:
    """Every leaf command of the app with its parameters (help excluded)."""
    out: list[Command] = []

    def walk(group: Any, prefix: tuple[str, ...]) -> None:
        for name, cmd in sorted(group.commands.items()):
            if hasattr(cmd, "commands"):
                walk(cmd, (*prefix, name))
            else:
                params = tuple(p for p in cmd.params if p.name != "help")
                out.append(Command((*prefix, name), params))

    walk(typer.main.get_command(app), ())
    return out


def hostile_files(root: Path, subprocess_only: bool) -> list[str]:
    """Spec-like files no command should choke on; created under `root`."""
    root.mkdir(parents=True, exist_ok=True)
    files: dict[str, bytes] = {
        "deep.yaml": b"a: " + b"[" * 100_000 + b"]" * 100_000 + b"\n",
        "deepmap.yaml": b"".join(b"  " * i + b"k:\n" for i in range(3000)),
        "binary.yaml": bytes(range(256)) * 64,
        "utf16.yaml": "name: x\nhidden: 4096\n".encode("utf-16"),
        "nul.yaml": b"name: x\x00\nlayers: 2\n",
        "bomb.yaml": b"a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + b"".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [".encode()
            + b", ".join([f"*{chr(97 + i)}".encode()] * 10)
            + b"]\n"
            for i in range(8)
        ),
        "list.yaml": b"- 1\n- 2\n",
        "huge.yaml": b"hidden: 1" + b"0" * 400 + b"\nlayers: 1e400\nheads: .nan\n",
        "empty.yaml": b"",
        "prices.yaml": b"name: p\nswitch_usd: .inf\ntransceiver_usd: .nan\n",
    }
    paths = []
    for name, data in files.items():
        p = root / name
        if not p.exists():
            p.write_bytes(data)
        paths.append(str(p))
    (root / "adir.yaml").mkdir(exist_ok=True)
    paths += [str(root / "adir.yaml"), str(root / "missing.yaml"), "x" * 300 + ".yaml", ""]
    if subprocess_only:
        fifo = root / "fifo.yaml"
        if not fifo.exists():
            os.mkfifo(fifo)
        paths += [str(fifo), "/dev/zero", "/dev/urandom"]
    return paths


def output_paths(root: Path, rng: random.Random) -> str:
    suffix = rng.choice([".html", ".png", ".svg", ".csv", ".graphml", ".json", ".parquet", ""])
    loop = root / "loop"
    if not loop.is_symlink():
        loop.symlink_to(loop)
    return rng.choice(
        [
            str(root / f"out{rng.randrange(10**6)}{suffix}"),
            str(root / ("n" * 300 + suffix)),
            str(root / "no-such-dir" / f"x{suffix}"),
            str(root / "adir.yaml"),
            str(loop),
            str(root / f"caf\udce9{suffix}"),
            "/dev/null",
        ]
    )


def _value(param: Any, rng: random.Random, files: list[str], root: Path) -> str:
    name = param.name
    if name in OUTPUTS:
        return output_paths(root, rng)
    if rng.random() < 0.08:
        return rng.choice(files)
    if name == "model":
        return rng.choice(MODELS)
    if name == "system":
        return rng.choice(SYSTEMS)
    if name == "price_book":
        return rng.choice(PRICE_BOOKS)
    if name in ("network", "arch"):
        return rng.choice(ARCHS)
    if name == "spec":
        return rng.choice(files)
    if name == "vary":
        return rng.choice(VARY)
    if name in CODED_FIELDS and rng.random() < 0.7:  # the strategy's allowed words, mostly
        return rng.choice(list(CODED_FIELDS[name]))
    if name in ("zero", "radices", "first_gpus") and rng.random() < 0.5:
        return rng.choice(["0,1", "64", "x", "1,2,3", "", "32,64"])
    if name == "gpus" and rng.random() < 0.7:
        return str(rng.choice(SMALL_GPUS))
    default = param.default
    r = rng.random()
    if r < 0.05:
        return str(rng.choice(BIG_INTS))
    if r < 0.1:
        return rng.choice([*WORDS, "abc", "1.5", "-", "--json"])
    if isinstance(default, float) or (default is None and r < 0.4):
        return rng.choice(FLOATS)
    if isinstance(default, int) or default is None:
        return str(rng.choice(INTS))
    return rng.choice(WORDS)


def argv(rng: random.Random, root: Path, *, subprocess_only: bool = False) -> list[str]:
    """One random command line (without the program name)."""
    files = hostile_files(root, subprocess_only)
    cmds = commands()
    if not subprocess_only:
        cmds = [c for c in cmds if c.path not in SLOW]
    r = rng.random()
    if r < 0.02:
        return rng.choice([[], ["reproduce"], ["--version"], ["--help"], ["estimat"], ["-x"]])
    cmd = rng.choice(cmds)
    out = list(cmd.path)
    for p in cmd.params:
        if p.param_type_name == "argument":
            if rng.random() < 0.8:
                out.append(rng.choice(["models", "gpus", "systems", "nope"]))
            continue
        if getattr(p, "is_flag", False):
            if rng.random() < 0.3:
                out.append(rng.choice([*p.opts, *p.secondary_opts]))
            continue
        if rng.random() < (0.93 if p.required else 0.25):
            out += [p.opts[0], _value(p, rng, files, root)]
    if rng.random() < 0.04:
        out.append(rng.choice(["--gpu", "--cp", "--bogus", "--tp=abc"]))
    if rng.random() < 0.03 and len(out) > 2:
        flags = [a for a in out if a.startswith("--")]
        if flags:
            out += [rng.choice(flags), "8"]
    return out


def non_finite_json(text: str) -> bool:
    """True if `text` holds Infinity/NaN (which strict JSON cannot)."""
    import json

    def bad(token: str) -> float:
        raise ValueError(token)

    try:
        json.loads(text, parse_constant=bad)
    except ValueError as err:
        return str(err) in ("Infinity", "-Infinity", "NaN")
    return False


def mentions_non_finite(text: str) -> bool:
    """Printed numbers that are inf or nan, as Python formats them (word-bounded, so
    'information' does not count; "Infinity" is JSON's, checked by `non_finite_json`, and in
    text a word: AMD's "Infinity Fabric" in a catalog source)."""
    import re

    return re.search(r"(?<![A-Za-z])(inf|nan|NaN)(?![A-Za-z])", text) is not None


def iter_argvs(seed: int, n: int, root: Path, subprocess_only: bool) -> Iterator[list[str]]:
    rng = random.Random(seed)
    for _ in range(n):
        yield argv(rng, root, subprocess_only=subprocess_only)


@dataclass
class Outcome:
    """What one in-process run did."""

    args: list[str]
    code: int | None
    stdout: str
    stderr: str
    traceback: str | None  # an exception that escaped the CLI, formatted
    elapsed_s: float
    timed_out: bool = False

    def findings(self) -> list[str]:
        """The ways this run broke the rules (empty if none)."""
        found = []
        if self.traceback is not None:
            found.append("traceback")
        if self.timed_out:
            found.append("timeout")
        if self.code not in (None, 0) and not self.stderr.strip():
            found.append("silent exit")
        if self.code == 0 and (
            non_finite_json(self.stdout)
            if "--json" in self.args
            else mentions_non_finite(self.stdout)
        ):
            found.append("non-finite output")
        return found


class _Timeout(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def run_in_process(args: list[str], timeout_s: int) -> Outcome:
    """Run the CLI on `args` here, as the console script would, under a SIGALRM timeout."""
    from railplan.cli import run

    out, err = io.StringIO(), io.StringIO()
    tb: str | None = None
    code: int | None = None
    timed_out = False
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout_s)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(args)
    except _Timeout:
        timed_out = True
    except SystemExit as ex:  # a library sys.exit would bypass the one-line rule
        code = ex.code if isinstance(ex.code, int) else 1
    except BaseException:  # the fuzz records whatever escapes
        tb = traceback.format_exc()
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return Outcome(
        args, code, out.getvalue(), err.getvalue(), tb, time.perf_counter() - t0, timed_out
    )


__all__ = ["Outcome", "argv", "commands", "iter_argvs", "run_in_process"]
