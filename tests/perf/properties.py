"""The iteration model's network properties, checked for one strategy at a time by the
hypothesis tests of each feature: more bandwidth is never slower, and ideal ≤ rail-optimized ≤
rail-only."""

from hypothesis import strategies as st

from railplan.perf.iteration import Iteration, iteration
from railplan.specs import Model, Network, Strategy, System
from railplan.specs.arrays import from_strategies

BANDWIDTH_FIELDS = st.sampled_from(["hb_tbps", "nic_gbps", "nics_per_gpu"])
FACTORS = st.floats(1.01, 8.0)
ARCHS = st.sampled_from(["rail-optimized", "rail-only"])
NETWORKS = ("ideal", "rail-optimized", "rail-only")
TOLERANCE = 1 + 1e-12


def check_more_bandwidth_never_slower(
    model: Model, system: System, strategy: Strategy, field: str, factor: float, arch: str
) -> None:
    """`field` of `system` × `factor` never makes `strategy` slower on `arch`."""
    s, net = from_strategies(strategy), Network(architecture=arch)
    faster = System.parse(system.model_dump() | {field: getattr(system, field) * factor}, "system")
    slow = float(iteration(model, system, net, s).iteration_s)
    fast = float(iteration(model, faster, net, s).iteration_s)
    assert fast <= slow * TOLERANCE


def check_network_order(model: Model, system: System, strategy: Strategy) -> dict[str, Iteration]:
    """ideal ≤ rail-optimized ≤ rail-only for `strategy`; the three iterations, by network."""
    s = from_strategies(strategy)
    its = {a: iteration(model, system, Network(architecture=a), s) for a in NETWORKS}
    t = {a: float(it.iteration_s) for a, it in its.items()}
    assert t["ideal"] <= t["rail-optimized"] * TOLERANCE
    assert t["rail-optimized"] <= t["rail-only"] * TOLERANCE
    return its
