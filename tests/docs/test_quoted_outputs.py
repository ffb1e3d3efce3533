"""Rerun the commands quoted in docs/ and README.md and compare the quoted figures.

A quoted console block is `$ railplan ...` lines (continued with `\\`) followed by the output
the docs show, abridged with `…`. For every quoted output line that holds numbers, the real
output must hold the same numbers in the same order (so 6.380 s vs 6.379 s fails).
Commands that take minutes are skipped with the reason; set RAILPLAN_DOCS_SLOW=1 to run them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.cli.fuzz_cases import run_in_process

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: quoted commands that run for minutes on 2 cores (search over many K, a full report), or
#: about one (a wide-EP search under load)
SLOW = (
    "reproduce fig8",
    "report ",
    "infer-search --model deepseek-v3 --system hgx-h800 --gpus 32 --precision fp8 --under-load",
)
NUMBER = re.compile(r"(?<![\w.])[-+]?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Quote:
    where: str
    args: tuple[str, ...]
    lines: tuple[str, ...]


def quotes() -> list[Quote]:
    found: list[Quote] = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
            cmd: list[str] = []
            out: list[str] = []
            pending = ""
            for line in block.splitlines():
                if pending or line.startswith("$ railplan "):
                    pending += line.removeprefix("$ ").rstrip("\\").strip() + " "
                    if not line.endswith("\\"):
                        if cmd:
                            found.append(_quote(doc, block, cmd, out))
                        cmd, out, pending = pending.split()[1:], [], ""
                elif line.startswith("$ "):
                    cmd = []
                elif cmd:
                    out.append(line)
            if cmd:
                found.append(_quote(doc, block, cmd, out))
    return found


def _quote(doc: Path, block: str, cmd: list[str], out: list[str]) -> Quote:
    line = text_line(doc, block)
    return Quote(f"{doc.name}:{line} railplan {' '.join(cmd)}", tuple(cmd), tuple(out))


def text_line(doc: Path, block: str) -> int:
    return doc.read_text(encoding="utf-8")[: doc.read_text(encoding="utf-8").find(block)].count(
        "\n"
    )


def numbers(line: str) -> list[str]:
    return NUMBER.findall(line.replace("…", " "))


def _contains(seq: list[str], sub: list[str]) -> bool:
    return any(seq[i : i + len(sub)] == sub for i in range(len(seq) - len(sub) + 1))


QUOTES = quotes()


def test_docs_quote_commands() -> None:
    assert len(QUOTES) >= 10


@pytest.mark.parametrize("quote", QUOTES, ids=[q.where for q in QUOTES])
def test_quoted_figures_match(
    quote: Quote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    command = " ".join(quote.args)
    if any(command.startswith(s) for s in SLOW) and not os.environ.get("RAILPLAN_DOCS_SLOW"):
        pytest.skip("runs for minutes; RAILPLAN_DOCS_SLOW=1 runs it")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "240")
    o = run_in_process(list(quote.args), timeout_s=600)
    assert o.code == 0 and o.traceback is None, (o.stderr, o.traceback)
    actual = numbers(o.stdout + "\n" + o.stderr)  # titles may wrap: one stream of numbers
    missing = [
        line for line in quote.lines if numbers(line) and not _contains(actual, numbers(line))
    ]
    assert not missing, f"{quote.where}: quoted lines not in the output:\n" + "\n".join(missing)
