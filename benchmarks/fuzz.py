"""Fuzz the `railplan` command line: ≥ 10,000 random invocations over every command.

Each invocation runs in a forked child (the parent has imported railplan once, so a child starts
in milliseconds) under a virtual-memory limit, is killed after `--timeout` seconds, and has its
peak resident memory read from wait4. The command lines come from `tests/cli/fuzz_cases.py`
(also used by the in-suite fuzz test), including the cases only a separate process survives: a
FIFO and /dev/zero given as spec files, and the slow `reproduce fig8/9/10` and `validate`.

Prints the number of invocations and, for each kind of finding, the count and the distinct
causes with one minimal command line each: tracebacks, runs over the timeout, peaks over 2 GB,
non-zero exits with no message, and inf/nan printed with exit 0.

    python benchmarks/fuzz.py --n 10000 --jobs 2
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PEAK_LIMIT_KB = 2 * 1024 * 1024  # report peaks over 2 GB
AS_LIMIT_BYTES = 6 * 1024**3  # the child's address space: numpy's reservations plus headroom


def _child(args: list[str], timeout_s: int, w: int) -> None:
    from tests.cli.fuzz_cases import run_in_process

    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT_BYTES, AS_LIMIT_BYTES))
    o = run_in_process(args, timeout_s=timeout_s + 5)
    data = {
        "code": o.code,
        "findings": o.findings(),
        "traceback": o.traceback,
        "stderr": o.stderr[-500:],
    }
    with os.fdopen(w, "w") as f:
        json.dump(data, f)
    os._exit(0)


def run_one(args: list[str], timeout_s: int) -> dict[str, Any]:
    """Fork, run `args` in the child, collect its report, elapsed time and peak memory."""
    r, w = os.pipe()
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(r)
        try:
            _child(args, timeout_s, w)
        finally:
            os._exit(3)
    os.close(w)
    chunks: list[bytes] = []
    deadline = t0 + timeout_s
    killed = False
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            killed = True
            break
        ready, _, _ = select.select([r], [], [], left)
        if ready:
            chunk = os.read(r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    os.close(r)
    _, status, usage = os.wait4(pid, 0)
    elapsed = time.perf_counter() - t0
    rec: dict[str, Any] = {"args": args, "elapsed_s": elapsed, "peak_kb": usage.ru_maxrss}
    if killed:
        rec |= {"code": None, "findings": ["timeout"], "traceback": None}
    elif not chunks:
        rec |= {"code": None, "findings": ["crash"], "traceback": f"child status {status}"}
    else:
        rec |= json.loads(b"".join(chunks))
    if usage.ru_maxrss > PEAK_LIMIT_KB:
        rec["findings"] = [*rec["findings"], "peak over 2 GB"]
    return rec


def _cause(rec: dict[str, Any]) -> str:
    tb = rec.get("traceback") or ""
    lines = tb.strip().splitlines()
    if not lines:
        return rec["args"][0] if rec["args"] else "(no command)"
    where = [ln.strip() for ln in lines if ln.lstrip().startswith("File ")]
    last = where[-1] if where else ""
    exc = lines[-1].split(":")[0]
    return f"{exc} at {last.replace(str(ROOT) + '/', '')}"


def shard(seed: int, n: int, timeout_s: int, root: Path) -> list[dict[str, Any]]:
    import random

    # import the library once, so every forked child starts with it loaded
    from tests.cli.fuzz_cases import argv

    rng = random.Random(seed)
    records = []
    for i in range(n):
        records.append(run_one(argv(rng, root, subprocess_only=True), timeout_s))
        if (i + 1) % 500 == 0:
            print(f"shard {seed}: {i + 1:,} of {n:,}", file=sys.stderr, flush=True)
    return records


def summarize(records: list[dict[str, Any]], timeout_s: int) -> None:
    kinds = {
        "traceback": "tracebacks",
        "crash": "crashed children (no report)",
        "timeout": f"runs over {timeout_s} s (killed)",
        "peak over 2 GB": "peaks over 2 GB",
        "silent exit": "non-zero exits with no message",
        "non-finite output": "inf/nan printed with exit 0",
    }
    codes = Counter(r["code"] for r in records)
    print(f"invocations: {len(records):,}")
    print("exit codes: " + ", ".join(f"{k}: {v:,}" for k, v in sorted(codes.items(), key=str)))
    peak = max(r["peak_kb"] for r in records) / 1024
    slow = max(r["elapsed_s"] for r in records)
    print(f"largest peak: {peak:,.0f} MB; longest run: {slow:.1f} s")
    for key, title in kinds.items():
        hits = [r for r in records if key in r["findings"]]
        print(f"{title}: {len(hits)}")
        causes: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in hits:
            cause = _cause(r) if key in ("traceback", "crash") else " ".join(r["args"][:1])
            causes[cause].append(r)
        for cause, rs in sorted(causes.items(), key=lambda kv: -len(kv[1])):
            shortest = min(rs, key=lambda r: len(" ".join(r["args"])))
            line = " ".join(shortest["args"])
            print(f"  {len(rs):5d} × {cause}\n        e.g. railplan {line[:300]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000, help="invocations in all")
    ap.add_argument("--jobs", type=int, default=1, help="parallel shards")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=int, default=30, help="seconds before a run is killed")
    ap.add_argument("--shard-json", help=argparse.SUPPRESS)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="railplan-fuzz-") as tmp:
        root = Path(tmp)
        os.chdir(root)  # default output files land in the scratch directory
        if a.shard_json:
            records = shard(a.seed, a.n, a.timeout, root / "files")
            Path(a.shard_json).write_text(json.dumps(records))
            return
        t0 = time.perf_counter()
        per = [a.n // a.jobs + (i < a.n % a.jobs) for i in range(a.jobs)]
        procs = []
        for i, n in enumerate(per):
            out = root / f"shard{i}.json"
            cmd = [sys.executable, __file__, "--n", str(n), "--seed", str(a.seed * 1000 + i)]
            cmd += ["--timeout", str(a.timeout), "--shard-json", str(out)]
            procs.append((subprocess.Popen(cmd), out))
        records = []
        for p, out in procs:
            p.wait()
            records += json.loads(out.read_text())
        summarize(records, a.timeout)
        print(f"wall time: {time.perf_counter() - t0:,.0f} s with {a.jobs} shard(s)")


if __name__ == "__main__":
    main()
