"""The golden outputs (issue 14): every case in cases.py prints exactly the committed JSON. A
refactor must not change a byte; an intended model change regenerates them with
`python tests/golden/update.py`."""

from __future__ import annotations

import pytest

from tests.golden.cases import CASES, path_of, render


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_is_byte_identical_to_golden(name: str) -> None:
    expected = path_of(name).read_text(encoding="utf-8")
    assert render(CASES[name]) == expected, (
        f"railplan {' '.join(CASES[name])} differs from tests/golden/{name}.json; if the change "
        "is intended, run `python tests/golden/update.py` and review the diff"
    )


def test_every_golden_file_has_a_case() -> None:
    files = {p.stem for p in path_of("x").parent.glob("*.json")}
    assert files == set(CASES)
