"""Accuracy goal: predict published Megatron-LM runs (mean |error| ≤ 3 %, no row > 8 %).

Run: python benchmarks/validation.py   (prints each row and the measured figure beside the goal)
"""

from __future__ import annotations

from railplan.validation import validate


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


if __name__ == "__main__":
    main()
