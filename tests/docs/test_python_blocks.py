"""The Python blocks of README.md and docs/ run as quoted (the API they show cannot drift)."""

from __future__ import annotations

import re

import pytest

from tests.docs.test_quoted_outputs import DOCS

BLOCK = re.compile(r"```python\n(.*?)```", re.S)
BLOCKS = [
    pytest.param(code, id=f"{doc.name}:{doc.read_text()[: m.start()].count(chr(10)) + 1}")
    for doc in DOCS
    for m in BLOCK.finditer(doc.read_text())
    for code in [m.group(1)]
]


@pytest.mark.parametrize("code", BLOCKS)
def test_python_block_runs(code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, "<doc block>", "exec"), {"__name__": "__doc_block__"})
    assert capsys.readouterr().out.strip()  # every block shows something


def test_blocks_were_found() -> None:
    readme = [b for b in BLOCKS if str(b.id).startswith("README.md:")]
    assert len(readme) >= 2  # the library and the serving examples
