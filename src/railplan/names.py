"""Names the library and the command line share, importable without pydantic or numpy.

The CLI's help text needs them before any command runs; keeping them here lets
`import railplan.cli` stay fast (the heavy modules load inside the command functions).
"""

from __future__ import annotations

#: NIC-domain architectures of the performance model (`railplan.specs.Network`).
ARCHITECTURES: tuple[str, ...] = ("rail-optimized", "rail-only", "ideal", "oversubscribed")


#: The evaluation reproductions (`railplan.reproduce.evaluation.FIGURES`, same keys) and the
#: one-line help of their `railplan reproduce NAME` commands.
REPRODUCE_FIGURES: dict[str, str] = {
    "fig7": "Fig 7: HFU of the model vs Korthikanti et al.'s measured runs.",
    "fig8": "Fig 8: best iteration time vs HB-domain size K, rail-only vs ideal.",
    "fig9": "Fig 9: GPT-1T iteration time vs HB and NIC bandwidth at K = 8 and 256.",
    "fig10": "Fig 10: GPT-1T on 32,768 GPUs, iteration time and performance relative to ideal "
    "vs global batch.",
    "nic-count": "An operator's experiment (SK Telecom's TITAN talk): GPT-175B on DGX A100 with "
    "8/4/2/1 NICs per node, relative iteration time.",
}


def price_book_names() -> list[str]:
    """Names of the price books shipped in railplan/catalog/pricebooks (no YAML parsed)."""
    from importlib import resources

    root = resources.files("railplan.catalog") / "pricebooks"
    return sorted(p.name.removesuffix(".yaml") for p in root.iterdir() if p.name.endswith(".yaml"))
