"""`import railplan.cli` stays light: the heavy libraries load inside the commands that use them
(issue 11: the CLI's start-up time; a module-level import in a CLI module undoes it silently)."""

from __future__ import annotations

import subprocess
import sys


def test_cli_import_loads_no_numpy_or_pydantic() -> None:
    code = (
        "import sys, railplan.cli; "
        "print(','.join(m for m in ('numpy', 'pydantic', 'scipy', 'matplotlib', 'plotly') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
