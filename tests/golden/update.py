"""Regenerate the golden outputs: `python tests/golden/update.py` (from the repository root)
writes tests/golden/<case>.json for every case in tests/golden/cases.py. Run it only when a change
of the model's numbers is intended, and review the diff it makes."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `tests.golden` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.golden.cases import CASES, path_of, render


def main() -> int:
    for name, args in CASES.items():
        path_of(name).write_text(render(args), encoding="utf-8")
        print(f"wrote {path_of(name).name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
