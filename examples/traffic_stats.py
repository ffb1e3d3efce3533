"""Bytes every GPU pair exchanges in one iteration: shares by kind, HB vs NIC, cross-rail bytes.

python examples/traffic_stats.py
"""

from __future__ import annotations

from railplan import Strategy, load_model
from railplan.traffic.placement import build_placement
from railplan.traffic.matrix import stats, traffic


def main() -> None:
    model = load_model("gpt-1t")
    strategy = Strategy(
        tp=8,
        pp=64,
        dp=6,
        global_batch=3072,
        micro_batch=1,
        recompute="selective",
        sequence_parallel=True,
    )
    # 384 DGX A100 (K = 8), placed so that every NIC-domain byte stays in its rail
    p = build_placement("rail-aligned", strategy.tp, strategy.pp, strategy.dp, 8)
    st = stats(traffic(model, strategy, p))
    print(f"{st.gpus:,} GPUs, {st.total_bytes / 1e12:.1f} TB per iteration")
    for kind, share in st.share_by_kind.items():
        print(
            f"  {kind.upper():3s} {share:6.1%} of bytes  "
            f"(HB {st.hb_bytes_by_kind[kind] / 1e9:10,.0f} GB, "
            f"NIC {st.nic_bytes_by_kind[kind] / 1e9:8,.0f} GB)"
        )
    print(f"GPU pairs with traffic: {st.pairs_with_traffic_fraction:.3%}")
    print(f"NIC bytes crossing rails: {st.nic_cross_rail_bytes:.0f}")
    print(
        f"mean bytes per HB-domain pair {st.mean_pair_bytes_hb / 1e9:.1f} GB, "
        f"per NIC pair {st.mean_pair_bytes_nic / 1e9:.1f} GB"
    )


if __name__ == "__main__":
    main()
