"""Flow-level simulator: max-min fair sharing of link capacities on the network graphs.

A collective runs as a sequence of **steps**; a step is a set of (src GPU, dst GPU, bytes) flows
that start together and the step ends when its last flow finishes. Between events (a flow
finishing) every flow runs at its **max-min fair rate** (Bertsekas & Gallager, *Data Networks*,
§6.5.2, progressive filling), recomputed whenever a flow finishes.

Network (``flow_network``): every undirected edge of ``railplan.network.graph`` becomes two
directed links of ``capacity_gbps`` each (per direction). The graph has no HB (NVLink/NVSwitch)
edges, so each HB domain is added as one non-blocking switch node ``hb:{domain}`` with one link of
C_F per GPU and direction. Switches are non-blocking; links are the only shared resources.

Routing (documented choice): a flow between two GPUs of one HB domain goes over the HB switch
(GPU → ``hb:d`` → GPU); any other flow goes over the NIC network on **all shortest paths, split
evenly per physical path** (ECMP with fixed fractions: a link carries the share of the flow equal
to the share of the shortest paths, counted with parallel links, that cross it). A flow is one
rate (fractions fixed), not one rate per path. Rail-only has no path between rails: a direct flow
there raises ``RailplanError``; the all-to-all uses forwarding (SYSTEM.md claim 3).

Progressive filling is vectorized: a step's flows × links incidence is a ``scipy.sparse`` CSR
matrix (entry = fraction of the flow on the link) and every filling round is one sparse product
(no Python loop over flows).

**Aggregation** (``aggregate_matrix``): flows with the same (source leaf, destination leaf) — or
the same HB domain for HB flows — form one class when the class is *symmetric*: all its flows have
the same bytes, every GPU on the source leaf sends the same number of the class's flows and every
GPU on the destination leaf receives the same number. Then by uniqueness of the max-min
allocation all flows of a class get the same rate, all NIC links of one leaf carry the same load,
and a class row with averaged NIC fractions (fabric fractions are identical in a class) gives the
exact per-flow rates; a class of m flows counts m times in the link loads. The check is exact
(counts and bytes compared per GPU); a non-symmetric matrix (e.g. Zipf-skewed MoE traffic) is
simulated flow by flow. Tests compare both on small clusters.

Sources: Wang, Ghobadi et al., "Rail-only", HOTI 2024 / arXiv 2307.12169 (formulas 2 and 3 of
SYSTEM.md, which ``railplan.perf.collectives`` implements); max-min fairness and progressive
filling: Bertsekas & Gallager 1992, §6.5.
"""

from railplan.network.flowsim.check import (
    COLLECTIVES,
    DEFAULT_OVERSUBSCRIPTION,
    MAX_ALLTOALL_GPUS,
    SCHEDULES,
    SIM_ARCHS,
    FlowsimReport,
    closed_form_s,
    measure,
    oversubscribed_alltoall_bound_s,
    parse_skew,
    run,
)
from railplan.network.flowsim.fabric import (
    KIND_FABRIC,
    KIND_HB_DOWN,
    KIND_HB_UP,
    KIND_NAMES,
    KIND_NIC_DOWN,
    KIND_NIC_UP,
    MAX_INCIDENCE_NNZ,
    FlowNetwork,
    check_incidence,
    flow_network,
    network_for,
    switch_routes,
)
from railplan.network.flowsim.flows import (
    MAX_PAIR_FLOWS,
    FlowSet,
    aggregate_matrix,
    flows_from_matrix,
    route_pairs,
)
from railplan.network.flowsim.maxmin import (
    REL_TOL,
    SimResult,
    Step,
    StepResult,
    max_min_rates,
    simulate,
    simulate_flowset,
)
from railplan.network.flowsim.schedules import (
    alltoall_direct_steps,
    alltoall_forwarding_steps,
    hierarchical_allreduce_steps,
    ring_allreduce_steps,
    uniform_pair_bytes,
    zipf_pair_bytes,
)

__all__ = [
    "COLLECTIVES",
    "DEFAULT_OVERSUBSCRIPTION",
    "KIND_FABRIC",
    "KIND_HB_DOWN",
    "KIND_HB_UP",
    "KIND_NAMES",
    "KIND_NIC_DOWN",
    "KIND_NIC_UP",
    "MAX_ALLTOALL_GPUS",
    "MAX_INCIDENCE_NNZ",
    "MAX_PAIR_FLOWS",
    "REL_TOL",
    "SCHEDULES",
    "SIM_ARCHS",
    "FlowNetwork",
    "FlowSet",
    "FlowsimReport",
    "SimResult",
    "Step",
    "StepResult",
    "aggregate_matrix",
    "alltoall_direct_steps",
    "alltoall_forwarding_steps",
    "check_incidence",
    "closed_form_s",
    "flow_network",
    "flows_from_matrix",
    "hierarchical_allreduce_steps",
    "max_min_rates",
    "measure",
    "network_for",
    "oversubscribed_alltoall_bound_s",
    "parse_skew",
    "ring_allreduce_steps",
    "route_pairs",
    "run",
    "simulate",
    "simulate_flowset",
    "switch_routes",
    "uniform_pair_bytes",
    "zipf_pair_bytes",
]
