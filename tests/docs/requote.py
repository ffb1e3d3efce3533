"""Rewrite the quoted outputs in docs/ and README.md from a fresh run of their commands.

    python tests/docs/requote.py [--slow] [DOC ...]

Every console block's command is rerun (as tests/docs/test_quoted_outputs.py does); each
quoted output line whose numbers the output no longer holds is matched, in order, to the most
similar output line (numbers masked) and replaced by it, or, where the docs abridge the line
(`…`, or columns dropped), only its numbers are replaced, position by position. Prose that
cites the numbers is not touched: the script prints each replaced line so that you can fix the
prose around it. `--slow` also reruns the commands test_quoted_outputs.py skips for taking
minutes.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.cli.fuzz_cases import run_in_process  # noqa: E402
from tests.docs.test_quoted_outputs import (  # noqa: E402
    DOCS,
    NUMBER,
    SLOW,
    _contains,
    numbers,
    quotes,
)


def _mask(line: str) -> str:
    return " ".join(NUMBER.sub("#", line.replace("…", "")).split())


def _score(quoted: str, candidate: str) -> float:
    """Shape similarity (numbers masked, spaces folded), then, among equal shapes, how many
    numbers agree position by position (the row's keys: model size, GPU count, K)."""
    shape = difflib.SequenceMatcher(None, _mask(quoted), _mask(candidate)).ratio()
    same = sum(a == b for a, b in zip(numbers(quoted), numbers(candidate), strict=False))
    return shape + 0.001 * same


def _renumber(quoted: str, actual: str) -> str:
    """`quoted` with its numbers replaced, in order, by `actual`'s."""
    new = iter(NUMBER.findall(actual))
    return NUMBER.sub(lambda m: next(new, m.group(0)), quoted)


def fresh_lines(quoted: tuple[str, ...], output: list[str]) -> dict[str, str]:
    """Old quoted line -> its replacement, for the lines whose numbers the output no longer
    holds, matching quoted lines to output lines in order."""
    out: dict[str, str] = {}
    stream = numbers("\n".join(output))
    at = 0
    for line in quoted:
        if not numbers(line) or _contains(stream, numbers(line)):
            continue  # what the test accepts stays as written
        best, best_i = 0.0, -1
        for i in range(at, len(output)):
            r = _score(line, output[i][: len(line)])  # the docs may drop trailing columns
            if r > best + 1e-9:
                best, best_i = r, i
        if best_i < 0 or best < 0.7:
            print(f"  no match for: {line}", file=sys.stderr)
            continue
        at = best_i + 1
        actual = output[best_i].rstrip()
        abridged = "…" in line or actual.count("│") > line.count("│")
        repl = _renumber(line, actual) if abridged else actual
        if repl != line:
            out[line] = repl
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("docs", nargs="*", help="file names to rewrite (default: all)")
    ap.add_argument("--slow", action="store_true", help="also rerun the slow commands")
    a = ap.parse_args()
    os.environ["COLUMNS"] = "240"
    os.chdir(tempfile.mkdtemp())
    edits: dict[Path, list[tuple[str, str]]] = {}
    for q in quotes():
        doc_name = q.where.split(":")[0]
        if a.docs and doc_name not in a.docs:
            continue
        command = " ".join(q.args)
        if any(command.startswith(s) for s in SLOW) and not a.slow:
            continue
        o = run_in_process(list(q.args), timeout_s=900)
        output = (o.stdout + "\n" + o.stderr).splitlines()
        doc = next(d for d in DOCS if d.name == doc_name)
        for old, new in fresh_lines(q.lines, output).items():
            edits.setdefault(doc, []).append((old, new))
            print(f"{q.where}\n  - {old}\n  + {new}")
    for doc, pairs in edits.items():
        text = doc.read_text(encoding="utf-8")
        for old, new in pairs:
            text = text.replace(old, new, 1)
        doc.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
