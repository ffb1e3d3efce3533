"""The report opened in a real headless Chromium (Playwright): every chart drawn, no request
leaves the machine, a screenshot saved."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
LOCAL_SCHEMES = ("file://", "data:")


def _skip_reason() -> str | None:
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (Debian packages chromium and chromium-driver)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright Python package is missing (pip install playwright)"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))


def test_report_renders_in_chromium(report_file: Path, tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    requests: list[str] = []
    errors: list[str] = []
    profile = tmp_path / "profile"
    with sync_playwright() as pw:
        ctx = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 900},
        )
        try:
            page = ctx.new_page()
            page.on("request", lambda r: requests.append(r.url))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report_file.as_uri(), wait_until="load")
            page.wait_for_function(
                "() => [...document.querySelectorAll('div.plotly-graph-div')]"
                ".every(d => d.querySelector('svg.main-svg'))",
                timeout=30_000,
            )
            charts: list[dict[str, Any]] = page.evaluate(
                "() => [...document.querySelectorAll('div.plotly-graph-div')].map(d => ({"
                "id: d.id, svgs: d.querySelectorAll('svg.main-svg').length,"
                "traces: d.querySelectorAll('g.trace, g.hm, image').length}))"
            )
            shot = tmp_path / "report.png"
            page.screenshot(path=str(shot), full_page=True)
        finally:
            ctx.close()
    ids = {c["id"] for c in charts}
    assert {"fig-breakdown", "fig-cost", "fig-heatmap", "fig-k", "fig-failures"} <= ids
    assert len(charts) == 9
    for c in charts:
        assert c["svgs"] >= 1, c
        assert c["traces"] >= 1, c
    assert not errors, errors
    assert requests, "the page itself was not requested"
    outside = [u for u in requests if not u.startswith(LOCAL_SCHEMES)]
    assert not outside, outside
    assert shot.stat().st_size > 50_000
