"""networkx graphs of the architectures in ``topology`` and their GraphML / JSON export.

Node names (stable; a flow-level simulator may rely on them):

* ``gpu:{domain}:{local}`` – GPU ``local`` (= its rail) of HB domain ``domain``;
* ``{role}:{fabric}:{i}`` – switch ``i`` of tier ``role`` (``leaf``, ``spine``, ``core``,
  ``tier4`` …) of fabric ``fabric``: the rail index for rail-only (the first rail of the group
  when several rails share a switch), the plane index for multi-plane, 0 otherwise.

Node attributes: ``role`` (gpu/leaf/spine/core/tierN), ``fabric``, ``tier`` (0 for GPUs),
``domain``/``local``/``rail`` for GPUs, ``rails`` (comma-separated rails served) for switches.
Edge attributes: ``capacity_gbps`` (per direction, summed over parallel links), ``links`` (number
of parallel physical links), ``kind`` (``nic`` or ``fabric``), ``rail`` on NIC edges (-1 if none),
``fabric``. HB-domain (NVLink) connectivity is not drawn as edges; GPUs of one domain share the
``domain`` attribute.

Wiring of tier i to tier i+1: uplink g (counting the ports of tier i switch by switch) goes to
tier-(i+1) switch g mod s_{i+1}; in a 2-tier Clos every leaf meets every spine, and for 3+ tiers
this stripes each pod over all upper switches (connected, full bisection for the paper's sizes).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import networkx as nx

from railplan.errors import RailplanError
from railplan.fileio import atomic_write, check_target
from railplan.network.topology import Clos, Cluster, NetworkCounts, build_counts

MAX_GRAPH_GPUS = 65_536
MAX_GRAPH_ELEMENTS = 300_000
"""Most nodes + physical links a graph may have (from the counts, before it is built):
exporting 70,656 nodes + 196,608 links (65,536 GPUs, radix 64) peaks at 1.07 GB (measured)."""


def _add_link(g: nx.Graph, a: str, b: str, gbps: float, **attrs: Any) -> None:
    if g.has_edge(a, b):
        g[a][b]["capacity_gbps"] += gbps
        g[a][b]["links"] += 1
    else:
        g.add_edge(a, b, capacity_gbps=gbps, links=1, **attrs)


def _wire_clos(
    g: nx.Graph, clos: Clos, endpoints: list[tuple[str, int]], fabric: int, gbps: float
) -> None:
    """Add the switches of one Clos and its links; ``endpoints`` = (gpu node, rail) per port."""
    names: list[list[str]] = []
    for t in clos.tiers:
        names.append([f"{t.name}:{fabric}:{i}" for i in range(t.switches)])
    for t, tier_names in zip(clos.tiers, names, strict=True):
        for n in tier_names:
            g.add_node(n, role=t.name, fabric=fabric, tier=t.index, rails="")
    # NIC links: leaf j takes endpoints [j*d, (j+1)*d)
    leaf = clos.tiers[0]
    per_leaf = leaf.down_ports if clos.num_tiers > 1 else clos.radix
    leaf_rails: dict[str, set[int]] = {}
    for e, (gpu, rail) in enumerate(endpoints):
        sw = names[0][e // per_leaf]
        _add_link(g, gpu, sw, gbps, kind="nic", rail=rail, fabric=fabric)
        leaf_rails.setdefault(sw, set()).add(rail)
    # tier i -> i+1 striping
    for i in range(clos.num_tiers - 1):
        low, high = clos.tiers[i], clos.tiers[i + 1]
        total_up = high.links_in
        for gidx in range(total_up):
            a = names[i][min(gidx // low.up_ports, low.switches - 1)]
            b = names[i + 1][gidx % high.switches]
            _add_link(g, a, b, gbps, kind="fabric", rail=-1, fabric=fabric)
    for sw, rails in leaf_rails.items():
        g.nodes[sw]["rails"] = ",".join(str(r) for r in sorted(rails))


def check_graph_size(counts: NetworkCounts) -> None:
    """Refuse, before building, a graph past `MAX_GRAPH_GPUS` or `MAX_GRAPH_ELEMENTS`."""
    if counts.gpus > MAX_GRAPH_GPUS:
        raise RailplanError(
            "gpus", f"graph export supports up to {MAX_GRAPH_GPUS:,} GPUs; got {counts.gpus:,}"
        )
    elements = counts.gpus + counts.switches + counts.links
    if elements > MAX_GRAPH_ELEMENTS:
        raise RailplanError(
            "gpus",
            f"the graph would have {elements:,} nodes and links, over the budget of "
            f"{MAX_GRAPH_ELEMENTS:,}; use fewer GPUs or NICs, or a larger radix",
        )


def build_graph(counts: NetworkCounts) -> nx.Graph:
    """The graph of ``counts`` (rail-optimized, rail-only, oversubscribed, multi-plane, ideal)."""
    check_graph_size(counts)
    g = nx.Graph(
        arch=counts.arch,
        gpus=counts.gpus,
        hb_domain=counts.hb_domain,
        radix=counts.radix,
        nic_gbps=counts.nic_gbps,
        nics_per_gpu=counts.nics_per_gpu,
    )
    k, domains = counts.hb_domain, counts.domains
    for d in range(domains):
        for loc in range(k):
            g.add_node(
                f"gpu:{d}:{loc}", role="gpu", fabric=-1, tier=0, domain=d, local=loc, rail=loc
            )
    gbps = float(counts.nic_gbps)
    nics = counts.nics_per_gpu
    if counts.arch == "rail-only":
        rail = 0
        for grp in counts.groups:
            for _ in range(grp.count):
                rails = range(rail, rail + grp.rails_per_fabric)
                eps = [
                    (f"gpu:{d}:{r}", r) for r in rails for d in range(domains) for _ in range(nics)
                ]
                _wire_clos(g, grp.clos, eps, rail, gbps)
                rail += grp.rails_per_fabric
    elif counts.arch == "multi-plane":
        for plane in range(counts.groups[0].count if counts.groups else 0):
            eps = [(f"gpu:{d}:{r}", r) for r in range(k) for d in range(domains)]
            _wire_clos(g, counts.groups[0].clos, eps, plane, gbps)
    elif counts.groups:  # rail-optimized / oversubscribed: endpoints rail by rail
        eps = [(f"gpu:{d}:{r}", r) for r in range(k) for d in range(domains) for _ in range(nics)]
        _wire_clos(g, counts.groups[0].clos, eps, 0, gbps)
    return g


def graph_for(
    arch: str, gpus: int, hb_domain: int, radix: int, nic_gbps: int = 400, **kw: Any
) -> nx.Graph:
    """Counts then graph in one call (``nics_per_gpu`` as in ``topology.Cluster``, the other
    keyword options as in ``topology.build_counts``)."""
    nics_per_gpu = kw.pop("nics_per_gpu", 1)
    c = Cluster(gpus, hb_domain, radix, nic_gbps, nics_per_gpu)
    return build_graph(build_counts(arch, c, **kw))


def check_export(path: str | Path) -> Path:
    """Check an export path before any graph is built: a .graphml or .json name we can write."""
    p = Path(path)
    if p.suffix not in (".graphml", ".json"):
        raise RailplanError("export", f"{p.name!r}: use a .graphml or .json file name")
    check_target(p, "export")
    return p


def export_graph(g: nx.Graph, path: str | Path) -> Path:
    """Write ``g`` as GraphML (``.graphml``) or node-link JSON (``.json``), all or nothing;
    a missing directory or another OS error is a one-line error naming the path."""
    p = check_export(path)
    if p.suffix == ".graphml":

        def write(tmp: Path) -> None:
            nx.write_graphml(g, tmp)

    elif p.suffix == ".json":

        def write(tmp: Path) -> None:
            tmp.write_text(json.dumps(nx.node_link_data(g, edges="links")), encoding="utf-8")

    else:  # check_export allows only the two
        raise AssertionError(p.suffix)
    return atomic_write(p, write, field="export")


def graph_summary(g: nx.Graph) -> dict[str, Any]:
    """Node counts per role, physical links, and connected components."""
    roles: dict[str, int] = {}
    for _, r in g.nodes(data="role"):
        roles[str(r)] = roles.get(str(r), 0) + 1
    return {
        "nodes": g.number_of_nodes(),
        "edges": g.number_of_edges(),
        "links": int(sum(l for _, _, l in g.edges(data="links"))),
        "roles": roles,
        "components": nx.number_connected_components(g) if g.number_of_nodes() else 0,
    }
