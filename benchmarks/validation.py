"""Accuracy goals: the 2021-22 Megatron-LM runs (mean |error| ≤ 3 %, no row > 8 %) and the
2023-24 modern runs (mean ≤ 5 %, max ≤ 12 %, leave-one-source-out mean ≤ 7 % for the one fitted
constant, the H100's sustained tensor fraction). Last, held out (never fitted):
dgxc-benchmarking's 2025 Llama 3.1 and Nemotron-4 runs on H100 and GB200 (NeMo 2 recipes;
railplan.reproduce.modern_validation.heldout_summary), DeepEP's published normal-kernel
bandwidths against the training all-to-all (railplan.reproduce.deepep_validation) and published
MoE training runs (railplan.reproduce.moe_training_validation).

Run: python benchmarks/validation.py   (prints each row and the measured figure beside the goal)
"""

from __future__ import annotations

from typing import Any

from railplan.reproduce.deepep_validation import rows as deepep_rows
from railplan.reproduce.modern_validation import cross_validation
from railplan.reproduce.moe_training_validation import rows as moe_rows
from railplan.reproduce.validation import validate


def modern(v: dict) -> None:  # type: ignore[type-arg]
    m = v["modern_runs"]
    for r in m["rows"]:
        print(
            f"{r['source']:7s} {r['id']:28s} measured {r['measured_s']:8.2f} s "
            f"predicted {r['predicted_s']:8.2f} s error {r['error_pct']:+6.1f} %"
        )
    goal = m["goal"]
    for key, s in [*m["by_source"].items(), ("all", m["all"])]:
        ok = s["mean_abs_pct"] <= goal["mean_abs_pct"] and s["max_abs_pct"] <= goal["max_abs_pct"]
        print(
            f"modern {key:7s} mean {s['mean_abs_pct']:5.2f} % (goal ≤ {goal['mean_abs_pct']:g}), "
            f"max {s['max_abs_pct']:5.2f} % (goal ≤ {goal['max_abs_pct']:g})  "
            f"{'MET' if ok else 'NOT MET'}"
        )
    cv = cross_validation()
    print(
        f"fitted H100 sustained_tensor_fraction on all sources: {cv['fitted_all']:.3f} "
        "(catalog h100-sxm: the value railplan uses)"
    )
    for src, c in cv["by_source"].items():
        print(
            f"  leave out {src:7s} fit on the others {c['fitted_on_others']:.3f}: its H100 rows "
            f"mean {c['mean_abs_pct_left_out']:5.2f} % left out, "
            f"{c['mean_abs_pct_in_sample']:5.2f} % in sample, "
            f"{c['mean_abs_pct_unfitted']:5.2f} % unfitted (1.0)"
        )
    ok = cv["loso_mean_abs_pct"] <= goal["loso_mean_abs_pct"]
    print(
        f"leave-one-source-out mean {cv['loso_mean_abs_pct']:.2f} % "
        f"(goal ≤ {goal['loso_mean_abs_pct']:g})  {'MET' if ok else 'NOT MET'}"
    )


def main() -> None:
    v = validate()
    for r in v["rows"]:
        print(
            f"{r['source']:16s} {r['label']:36s} measured {r['measured']:8.2f} "
            f"predicted {r['predicted']:8.2f} error {r['error_pct']:+6.1f} %"
        )
    goal = v["goal"]
    for key in ("korthikanti2022", "narayanan2021", "all"):
        s = v[key]
        ok = s["mean_abs_pct"] <= goal["mean_abs_pct"] and s["max_abs_pct"] <= goal["max_abs_pct"]
        print(
            f"{key:16s} mean {s['mean_abs_pct']:.2f} % (goal ≤ {goal['mean_abs_pct']:g}), "
            f"max {s['max_abs_pct']:.2f} % (goal ≤ {goal['max_abs_pct']:g})  "
            f"{'MET' if ok else 'NOT MET'}"
        )
    c = v["calculon_korthikanti"]
    print(
        f"Calculon (best peer) on the Korthikanti rows: mean {c['mean_abs_pct']} %, "
        f"max {c['max_abs_pct']} %"
    )
    modern(v)
    heldout(v)
    deepep()
    moe_training()


def heldout(v: dict[str, Any]) -> None:
    """dgxc-benchmarking's 2025 runs (NeMo 2 recipes), held out: never fitted."""
    h = v["heldout_runs"]
    print(
        "dgxc-benchmarking 2025 (Llama 3.1, NeMo 25.02.01 on H100, 25.04.01 on GB200; "
        "Nemotron-4, 25.04.00):"
    )
    for r in h["rows"]:
        print(
            f"{r['id']:43s} measured {r['measured_s']:6.2f} s predicted {r['predicted_s']:6.2f} s "
            f"error {r['error_pct']:+6.1f} %  held out"
        )
    for key, s in [*h["by_group"].items(), ("all", h["all"])]:
        print(
            f"dgxc 2025 {key:13s} mean {s['mean_abs_pct']:5.2f} %, max {s['max_abs_pct']:5.2f} % "
            f"over {s['rows']:2d} rows  held out"
        )


def deepep() -> None:
    """DeepEP's normal-kernel bandwidths against the training all-to-all, held out."""
    print("DeepEP normal kernels (H800, 400 Gb/s NIC, 4,096 tokens per rank, FP8 dispatch, BF16")
    print("combine) against the training all-to-all (--ep-dispatch deepep --fp8-dispatch):")
    errors = []
    for r in deepep_rows():
        errors.append(abs(r["error_pct"]))
        print(
            f"ep {r['ep']:3d} {r['pass']:8s} {r['link']:6s} published {r['published_gbps']:5.1f} "
            f"GB/s ({1e6 * r['measured_s']:6.0f} us) predicted {r['predicted_gbps']:5.1f} GB/s "
            f"({1e6 * r['predicted_s']:6.0f} us) time error {r['error_pct']:+6.1f} %  held out"
        )
    print(f"mean |error| {sum(errors) / len(errors):.1f} %, max {max(errors):.1f} %  held out")


def moe_training() -> None:
    """Published MoE training runs against the iteration model, held out."""
    print(
        "MoE training (dgxc DeepSeek-V3 BF16 on H100 and GB200, NeMo 25.04.01; every setting "
        "stated):"
    )
    for r in moe_rows():
        print(
            f"{r.id:26s} measured {r.measured_s:7.2f} s predicted {r.estimate.iteration_s:7.2f} s "
            f"error {r.error_pct:+6.1f} %  held out"
        )


if __name__ == "__main__":
    main()
