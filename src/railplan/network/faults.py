"""Failure impact and a Monte Carlo of a long training job on rail-optimized vs rail-only.

Recovery policies (Rail-only, HOTI 2024 §IV-C; SYSTEM.md claim 9):

* link / rail-switch failure: the GPUs behind the failed link or switch lose the NIC domain in
  both designs ("rendering the two topologies identical"); rail-only has fewer switches, so fewer
  failure points. A spine failure cuts no GPU off (other spines carry the traffic) but removes
  capacity; rail-only with one tier per rail has no spine.
* server / HB-domain failure: the job moves to a healthy server (K GPUs move) in both designs.
* single GPU with an idle GPU in the same HB domain: rail-optimized swaps it in directly;
  rail-only needs a small optical circuit switch (OCS) between GPUs and rail switches to re-wire
  the rail. Without the OCS the domain's job part must move (K GPUs).
* single GPU in a fully used domain: small domains (K ≤ ``small_domain_max``) migrate whole;
  large ones (e.g. K = 256) swap a group of ``swap_group`` GPUs through optical switches (with
  OCS); without them the whole domain moves.

The failure-rate defaults come from Meta's Llama 3 report (Dubey et al. 2024, "The Llama 3 Herd
of Models", arXiv 2407.21783, Table 5: 419 unexpected interruptions in 54 days of pre-training on
16,384 H100 GPUs, by root cause). See docs/network.md for the mapping of causes to components.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from railplan.errors import RailplanError
from railplan.limits import check_int
from railplan.network.topology import Cluster, NetworkCounts, rail_only, rail_optimized
from railplan.records import Record

COMPONENTS: tuple[str, ...] = ("gpu_leaf_link", "leaf_switch", "spine_switch", "gpu", "server")
VARIANTS: tuple[str, ...] = ("rail-optimized", "rail-only", "rail-only+ocs")

# Llama 3 (arXiv 2407.21783) Table 5, unexpected interruptions in a 54-day snapshot, 16,384 H100.
LLAMA3_DAYS = 54.0
LLAMA3_GPUS = 16384
LLAMA3_GPUS_PER_SERVER = 8
LLAMA3_INTERRUPTIONS: dict[str, int] = {
    "faulty_gpu": 148,
    "gpu_hbm3": 72,
    "software_bug": 54,
    "network_switch_cable": 35,
    "host_maintenance": 32,
    "gpu_sram": 19,
    "gpu_system_processor": 17,
    "nic": 7,
    "nccl_watchdog_timeouts": 7,
    "silent_data_corruption": 6,
    "gpu_thermal_interface_sensor": 6,
    "ssd": 3,
    "power_supply": 3,
    "server_chassis": 2,
    "io_expansion_board": 2,
    "dependency": 2,
    "cpu": 2,
    "system_memory": 2,
}
GPU_CAUSES = (
    "faulty_gpu",
    "gpu_hbm3",
    "gpu_sram",
    "gpu_system_processor",
    "silent_data_corruption",
    "gpu_thermal_interface_sensor",
)
SERVER_CAUSES = (
    "host_maintenance",
    "ssd",
    "power_supply",
    "server_chassis",
    "io_expansion_board",
    "cpu",
    "system_memory",
)
SOFTWARE_CAUSES = ("software_bug", "nccl_watchdog_timeouts", "dependency")
# Meta's Llama 3 fabric is a three-layer RoCE Clos (Llama 3 report §3.3.1); we spread its
# switch-and-cable failures uniformly over the switches and links of the paper-model
# rail-optimized Clos of the same size (radix 64, K = 8): see docs/network.md.
LLAMA3_MODEL_RADIX = 64


def _llama3_network_elements() -> int:
    c = rail_optimized(Cluster(LLAMA3_GPUS, LLAMA3_GPUS_PER_SERVER, LLAMA3_MODEL_RADIX))
    return c.switches + c.links


@dataclass(frozen=True)
class FailureRates:
    """Failure rates per component-hour (GPU, server, NIC link, switch/link element) and the
    rate of job interruptions with no hardware cause (software), per job-hour."""

    gpu_per_h: float
    server_per_h: float
    nic_link_per_h: float
    network_element_per_h: float
    software_per_job_h: float
    source: str = ""

    @staticmethod
    def llama3() -> FailureRates:
        """Defaults derived from Llama 3 Table 5 (see module doc)."""
        hours = LLAMA3_DAYS * 24
        n = LLAMA3_INTERRUPTIONS
        servers = LLAMA3_GPUS // LLAMA3_GPUS_PER_SERVER
        return FailureRates(
            gpu_per_h=sum(n[c] for c in GPU_CAUSES) / (LLAMA3_GPUS * hours),
            server_per_h=sum(n[c] for c in SERVER_CAUSES) / (servers * hours),
            nic_link_per_h=n["nic"] / (LLAMA3_GPUS * hours),
            network_element_per_h=n["network_switch_cable"] / (_llama3_network_elements() * hours),
            software_per_job_h=sum(n[c] for c in SOFTWARE_CAUSES) / hours,
            source="Llama 3 (arXiv 2407.21783) Table 5: 419 interruptions, 54 days, 16,384 H100",
        )


@dataclass(frozen=True)
class Policy:
    """Recovery options: idle GPUs per HB domain, OCS present, domain-size threshold, swap group."""

    spare_per_domain: int = 0
    ocs: bool = False
    small_domain_max: int = 8
    swap_group: int = 8


@dataclass(frozen=True)
class Impact:
    """What one failure costs: GPUs cut off from the NIC domain, GPUs whose work must move,
    per-direction NIC-domain capacity lost (Gbps) and its fraction of that tier."""

    component: str
    arch: str
    applicable: bool
    gpus_cut_off: int
    gpus_moved: int
    bandwidth_lost_gbps: float
    bandwidth_lost_fraction: float
    note: str


def gpus_moved_per_domain(variant: str, failed_in_domain: int, k: int, policy: Policy) -> int:
    """GPUs whose work moves when ``failed_in_domain`` GPUs of one K-domain are lost."""
    f = min(failed_in_domain, k)
    rewire_ok = variant == "rail-optimized" or policy.ocs or variant == "rail-only+ocs"
    if f <= policy.spare_per_domain and rewire_ok:
        return f
    if k <= policy.small_domain_max or not rewire_ok:
        return k
    return min(k, math.ceil(f / policy.swap_group) * policy.swap_group)


def _leaf_attach(c: NetworkCounts) -> int:
    """NIC ports behind one leaf (rail) switch."""
    g = max(c.groups, key=lambda g: g.count)
    t = g.clos.tiers[0]
    return min(t.down_ports, g.clos.endpoints) if g.clos.num_tiers > 1 else g.clos.endpoints


def _spine_impact(c: NetworkCounts, variant: str, nic: float) -> Impact:
    """A spine switch: no GPU cut off; its share of the upper tier's capacity is lost."""
    if c.tiers < 2:
        return Impact("spine_switch", variant, False, 0, 0, 0.0, 0.0, "one-tier rails: no spine")
    return Impact(
        "spine_switch",
        variant,
        True,
        0,
        0,
        c.radix * nic / 2 if c.tiers > 2 else c.radix * nic,
        1.0 / c.switches_per_tier[1],
        "no GPU cut off; ECMP spreads over the remaining spines",
    )


def single_failures(c: NetworkCounts, variant: str, policy: Policy) -> list[Impact]:
    """Impact of one failure of each component type on network ``c`` (one NIC per GPU)."""
    k = c.hb_domain
    nic = float(c.nic_gbps)
    out: list[Impact] = []
    if c.tiers == 0:  # no switch, link or NIC port to fail; GPUs and servers still fail
        for comp in COMPONENTS:
            if comp not in ("gpu", "server"):
                out.append(Impact(comp, variant, False, 0, 0, 0.0, 0.0, "no NIC network"))
        return out + _compute_failures(c, variant, policy, nic=0.0)
    per_gpu = c.nics_per_gpu
    # GPU-to-leaf link: one NIC port
    cut = 1 if per_gpu == 1 else 0
    out.append(
        Impact(
            "gpu_leaf_link",
            variant,
            True,
            cut,
            gpus_moved_per_domain(variant, cut, k, policy) if cut else 0,
            nic,
            1.0 / c.nic_ports,
            "GPU loses its NIC port; same in both designs (§IV-C)",
        )
    )
    attach = _leaf_attach(c)
    gpus_behind = attach // per_gpu if per_gpu > 1 else attach
    domains_hit = min(gpus_behind, c.domains)
    per_domain = math.ceil(gpus_behind / max(domains_hit, 1))
    moved = domains_hit * gpus_moved_per_domain(variant, per_domain, k, policy)
    out.append(
        Impact(
            "leaf_switch",
            variant,
            True,
            gpus_behind if per_gpu == 1 else 0,
            moved if per_gpu == 1 else 0,
            attach * nic,
            c.switches_per_tier[0] and 1.0 / c.switches_per_tier[0],
            f"{attach} NIC ports behind one {'rail ' if 'only' in variant else ''}leaf switch",
        )
    )
    out.append(_spine_impact(c, variant, nic))
    return out + _compute_failures(c, variant, policy, nic)


def _compute_failures(c: NetworkCounts, variant: str, policy: Policy, nic: float) -> list[Impact]:
    """A GPU's and a server's failure: the same on every design but for the work that moves
    (a spare swapped in where the design lets it), and the NIC bandwidth they take with them
    (none without a NIC network)."""
    k, per_gpu = c.hb_domain, c.nics_per_gpu
    return [
        Impact(
            "gpu",
            variant,
            True,
            1,
            gpus_moved_per_domain(variant, 1, k, policy),
            per_gpu * nic,
            per_gpu / c.nic_ports if nic else 0.0,
            "idle GPU in the domain swapped in if allowed, else domain migrates or group swaps",
        ),
        Impact(
            "server",
            variant,
            True,
            k,
            k,
            k * per_gpu * nic,
            k / c.gpus,
            "HB domain lost: its job part moves to a healthy domain (§IV-C)",
        ),
    ]


def fault_table(c: Cluster, policy: Policy | None = None) -> dict[str, Any]:
    """Single-failure impact for rail-optimized, rail-only and rail-only with OCS."""
    policy = policy or Policy()
    ro, rl = rail_optimized(c), rail_only(c)
    rows: dict[str, Any] = {}
    for variant, counts in (("rail-optimized", ro), ("rail-only", rl), ("rail-only+ocs", rl)):
        rows[variant] = {
            "switches": counts.switches,
            "links": counts.links,
            "impacts": [asdict(i) for i in single_failures(counts, variant, policy)],
        }
    return {"policy": asdict(policy), "architectures": rows}


# ---------------------------------------------------------------------------------------------
# Monte Carlo


@dataclass(frozen=True)
class MonteCarloResult(Record):
    """Per variant: expected interruptions, time-averaged and peak unusable GPUs, spare GPUs
    needed to keep ``job_gpus`` running with probability ``target_quantile``."""

    job_gpus: int
    days: float
    trials: int
    seed: int
    target_quantile: float
    repair_hours: float
    rates: FailureRates
    policy: Policy
    variants: dict[str, dict[str, float]] = field(default_factory=dict)


def _event_sizes(c: NetworkCounts, variant: str, policy: Policy) -> dict[str, tuple[float, int]]:
    """(count of components in the job's network, GPUs made unusable per failure)."""
    k = c.hb_domain
    impacts = {i.component: i for i in single_failures(c, variant, policy)}
    servers_per_domain_gpus = min(k, LLAMA3_GPUS_PER_SERVER)
    server_unusable = gpus_moved_per_domain(variant, servers_per_domain_gpus, k, policy)
    if servers_per_domain_gpus == k:
        server_unusable = k
    inter_links = max(c.links - c.nic_ports, 0)
    upper_switches = c.switches - (c.switches_per_tier[0] if c.tiers else 0)
    return {
        "gpu": (float(c.gpus), impacts["gpu"].gpus_moved),
        "server": (c.gpus / servers_per_domain_gpus, server_unusable),
        "nic_link": (float(c.nic_ports), impacts["gpu_leaf_link"].gpus_moved),
        "leaf_switch": (
            float(c.switches_per_tier[0]) if c.tiers else 0.0,
            impacts["leaf_switch"].gpus_moved,
        ),
        "upper_element": (float(inter_links + upper_switches), 0),
        # GPU-to-leaf cables are counted in "nic_link" (NIC + cable rate)
    }


MC_CELLS_BUDGET = 25_000_000
"""Most trial-hours (trials × (hours + repair hours)) one Monte Carlo holds: an int64 and a
float32 array of that size, summed in place, peak at 0.33 GB (maximum resident size measured at
the budget, 3650 days)."""
#: log(1 − u/N) of an event that takes every GPU (u = N): exp(−50) ≈ 2e−22, and it cancels when
#: the event ends (−inf would not)
_ALL_OUT = -50.0
MC_EVENTS_BUDGET = 20_000_000
"""Most failure events (expected, summed over trials) one Monte Carlo draws: ~40 bytes each."""


def check_budget(trials: int, hours: int, events_per_trial: float) -> None:
    """Refuse, before any array is made, a Monte Carlo past `MC_CELLS_BUDGET` trial-hours or
    `MC_EVENTS_BUDGET` expected failure events; the error says how many trials fit."""
    cells = trials * hours
    if cells > MC_CELLS_BUDGET:
        raise RailplanError(
            "trials",
            f"{trials:,} trials × {hours:,} hours = {cells:,} trial-hours is over the budget of "
            f"{MC_CELLS_BUDGET:,}; use at most {max(1, MC_CELLS_BUDGET // hours):,} trials "
            "or fewer days",
        )
    events = trials * events_per_trial
    if events > MC_EVENTS_BUDGET:
        fit = int(MC_EVENTS_BUDGET // max(events_per_trial, 1e-300))
        raise RailplanError(
            "trials",
            f"{trials:,} trials × {events_per_trial:,.0f} expected failures each = {events:,.0f} "
            f"events is over the budget of {MC_EVENTS_BUDGET:,}; use "
            + (f"at most {fit:,} trials" if fit >= 1 else "fewer GPUs")
            + " or fewer days",
        )


def _check_monte_carlo(
    job_gpus: int, trials: int, seed: int, days: float, repair_hours: float, quantile: float
) -> None:
    """One-line errors for `monte_carlo`'s inputs out of range."""
    check_int("job_gpus", job_gpus)
    check_int("trials", trials, 1, 100_000)
    check_int("seed", seed, 0, 2**64 - 1)
    if not 1 / 24 <= days <= 3650:  # the simulation steps by the hour
        raise RailplanError("days", f"must be in [1/24 (one hour), 3650]; got {days!r}")
    if not 0 < repair_hours <= 24 * 365:
        raise RailplanError("repair_hours", f"must be in (0, 8760]; got {repair_hours!r}")
    if not 0 < quantile < 1:
        raise RailplanError("quantile", f"must be in (0, 1); got {quantile!r}")


def _per_hour(rates: FailureRates) -> dict[str, float]:
    """Failures per component-hour of each event class."""
    return {
        "gpu": rates.gpu_per_h,
        "server": rates.server_per_h,
        # a GPU-to-leaf cable is also a network element (switch/cable failures of Llama 3)
        "nic_link": rates.nic_link_per_h + rates.network_element_per_h,
        "leaf_switch": rates.network_element_per_h,
        "upper_element": rates.network_element_per_h,
    }


def check_monte_carlo(
    cluster: Cluster,
    days: float = 54.0,
    trials: int = 2000,
    seed: int = 0,
    rates: FailureRates | None = None,
    policy: Policy | None = None,
    repair_hours: float = 24.0,
    target_quantile: float = 0.99,
) -> _Setup:
    """The one-line errors `monte_carlo` would raise on these inputs (out of range, or past
    the budgets), without running it: callers check before longer work. Returns what the
    simulation runs on (`monte_carlo` goes on with it)."""
    _check_monte_carlo(cluster.gpus, trials, seed, days, repair_hours, target_quantile)
    s = _Setup.of(cluster, days, rates, policy, repair_hours)
    events_per_trial = max(
        sum(s.per_h[cls] * n * s.hours for cls, (n, _) in _event_sizes(c, v, s.policy).items())
        for v, c in s.variants
    )
    check_budget(trials, s.hours + s.rep + 1, events_per_trial)
    return s


@dataclass(frozen=True)
class _Setup:
    """What a Monte Carlo of `cluster` runs on: rates and policy (defaults filled in), hours,
    repair hours, failures per component-hour and the three variants' counts."""

    rates: FailureRates
    policy: Policy
    hours: int
    rep: int
    per_h: dict[str, float]
    variants: tuple[tuple[str, NetworkCounts], ...]

    @staticmethod
    def of(
        cluster: Cluster,
        days: float,
        rates: FailureRates | None,
        policy: Policy | None,
        repair_hours: float,
    ) -> _Setup:
        rates = rates or FailureRates.llama3()
        ro, rl = rail_optimized(cluster), rail_only(cluster)
        return _Setup(
            rates=rates,
            policy=policy or Policy(),
            hours=max(1, math.ceil(days * 24)),
            rep=max(1, math.ceil(repair_hours)),
            per_h=_per_hour(rates),
            variants=(("rail-optimized", ro), ("rail-only", rl), ("rail-only+ocs", rl)),
        )


def monte_carlo(
    cluster: Cluster,
    days: float = 54.0,
    trials: int = 2000,
    seed: int = 0,
    rates: FailureRates | None = None,
    policy: Policy | None = None,
    repair_hours: float = 24.0,
    target_quantile: float = 0.99,
) -> MonteCarloResult:
    """Seeded, vectorized Monte Carlo of a ``days``-long job on all the GPUs of ``cluster``.

    Failures of every component class arrive as Poisson processes (rates per component-hour);
    each one makes some GPUs unusable for ``repair_hours`` (policy-dependent, see
    ``gpus_moved_per_domain``) and interrupts the job unless it only degrades bandwidth (spine,
    inter-switch links). Time is binned hourly; per trial we track unusable GPUs over time.
    ``repair_hours`` is an assumption (not in the Llama 3 report) and scales the idle-GPU numbers.

    Outages that overlap in time overlap in GPUs too: an event making u of the N GPUs unusable
    (whole HB domains, or the GPUs it moves) takes a share u/N of them, placed at random, so the
    idle GPUs while events u_1 … u_m are out average N·(1 − Π(1 − u_i/N)), the expected union
    (at most N; the plain sum when the events are few or small): the expected idle GPUs and
    GPU-hours. The peak and the spares needed at `target_quantile` are the sum capped at N, in
    whole outages: an upper bound (a domain hit twice within a repair time counts twice), where
    the expected union's maximum would sit below any real outage's. Summing without the cap put
    19,456 of 16,384 GPUs out at the 99th percentile at K = 256.
    """
    s = check_monte_carlo(cluster, days, trials, seed, rates, policy, repair_hours, target_quantile)
    rates, policy, hours, rep, per_h = s.rates, s.policy, s.hours, s.rep, s.per_h
    out: dict[str, dict[str, float]] = {}
    for variant, counts in s.variants:
        sizes = _event_sizes(counts, variant, policy)
        # common random numbers: every variant replays the same seed (GPU/server/NIC draws first)
        rng = np.random.default_rng(seed)
        n = cluster.gpus
        # per hour: the GPUs the events out would make unusable summed (`diff`, whole outage
        # units), and the sum of log(1 − u/N) of the same events (`log_ok`: their expected
        # union; an event taking every GPU adds a large negative number, exp → 0)
        diff = np.zeros((trials, hours + rep + 1), dtype=np.int64)
        log_ok = np.zeros((trials, hours + rep + 1), dtype=np.float32)
        interruptions = rng.poisson(rates.software_per_job_h * hours, size=trials).astype(float)
        failures = np.zeros(trials)
        for cls, (n_comp, unusable) in sizes.items():
            lam = per_h[cls] * n_comp * hours
            n_ev = rng.poisson(lam, size=trials)
            failures += n_ev
            interruptions += n_ev  # Llama 3 counts every switch/cable failure as an interruption
            total = int(n_ev.sum())
            if total == 0 or unusable == 0:
                continue
            trial_idx = np.repeat(np.arange(trials), n_ev)
            start = rng.integers(0, hours, size=total)
            np.add.at(diff, (trial_idx, start), unusable)
            np.add.at(diff, (trial_idx, start + rep), -unusable)
            term = math.log1p(-unusable / n) if unusable < n else _ALL_OUT
            np.add.at(log_ok, (trial_idx, start), term)
            np.add.at(log_ok, (trial_idx, start + rep), -term)
        # the share of GPUs still usable, hour by hour, in place (the arrays are the budget)
        np.cumsum(log_ok, axis=1, out=log_ok)
        np.minimum(log_ok, 0.0, out=log_ok)
        np.exp(log_ok, out=log_ok)
        ok_hours = log_ok[:, :hours].sum(axis=1, dtype=np.float64)  # per trial
        del log_ok
        idle_gpu_hours = n * (hours - ok_hours)  # the expected union, summed over the hours
        np.cumsum(diff, axis=1, out=diff)
        # peak and spares: the sum capped at N, whole outages (an upper bound: the expected
        # union's maximum over the hours would sit below any real outage's)
        peak = np.minimum(diff[:, :hours].max(axis=1), n)
        del diff
        out[variant] = {
            "switches": float(counts.switches),
            "expected_failures": float(failures.mean()),
            "expected_interruptions": float(interruptions.mean()),
            "expected_idle_gpus": float(idle_gpu_hours.mean() / hours),
            "expected_idle_gpu_hours": float(idle_gpu_hours.mean()),
            "expected_peak_unusable_gpus": float(peak.mean()),
            "spare_gpus_needed": float(np.quantile(peak, target_quantile, method="higher")),
        }
    return MonteCarloResult(
        cluster.gpus, days, trials, seed, target_quantile, repair_hours, rates, policy, out
    )
