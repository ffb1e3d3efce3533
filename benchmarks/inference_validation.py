"""Inference accuracy goal (issue 15): offline tokens/s per GPU within 10 % of MLPerf Inference
v4.1 (Llama 2 70B on 8x H100 and 8x H200), TTFT mean within 15 % of the H100 server run; the
TensorRT-LLM rows are held out (reported, no goal).

Run: python benchmarks/inference_validation.py
"""

from __future__ import annotations

from railplan.inference.validation import rows


def main() -> None:
    for r in rows():
        goal = r["goal_pct"]
        verdict = (
            "held out"
            if goal is None
            else f"goal ±{goal:g} %: {'MET' if abs(r['error_pct']) <= goal else 'NOT MET'}"
        )
        print(
            f"{r['id']:30s} {r['quantity']:18s} measured {r['measured']:9.3f} "
            f"predicted {r['predicted']:9.3f} error {r['error_pct']:+7.1f} %  {verdict}"
        )


if __name__ == "__main__":
    main()
