"""The report's serving section is `infer-search` unchanged, and the page shows it."""

from __future__ import annotations

from railplan.inference import search as inf
from railplan.report import html as report_html
from railplan.report.sections import serving
from tests.report.conftest import small_inputs


def test_serving_section_is_the_search() -> None:
    inp = small_inputs()
    got = serving(inp)
    want = inf.search(
        inp.model,
        inp.system,
        inp.gpus,
        got["precision"],
        inf.EXAMPLE_INPUT_TOKENS,
        inf.EXAMPLE_OUTPUT_TOKENS,
        inf.MLPERF_SERVER_TTFT_S,
        inf.MLPERF_SERVER_TPOT_S,
    )
    assert got["by_network"] == want["by_network"] and got["verdict"] == want["verdict"]
    page = report_html.serving_section({"serving": got, "inputs": inp.describe()})
    assert want["verdict"] in page
    for net in ("rail-optimized", "rail-only", "ideal"):
        assert net in page
