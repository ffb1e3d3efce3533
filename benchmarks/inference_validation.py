"""Inference accuracy goal (issue 15): offline tokens/s per GPU within 10 % of MLPerf Inference
v4.1 (Llama 2 70B on 8x H100 and 8x H200), TTFT mean within 15 % of the H100 server run; the
TensorRT-LLM rows are held out (reported, no goal), and so is the highest rate each server
run's simulation keeps within MLPerf's limits against the rate the run passed at. Then, without
the model, what MLPerf v4.1's Server and Offline runs of the same systems say about a server
step (Little's law; see
railplan.inference.validation.server_offline_rows). Last, DeepEP's published low-latency
dispatch and combine latencies (H800, DeepSeek-V3's shape) against the decode step's MoE
all-to-all, held out (railplan.inference.validation.deepep_rows). Last, TensorRT-LLM's published
offline throughput (trtllm-bench, v1.0 page: Llama 3.1 8B, Llama 3.3 70B, Llama 3.1 405B on H100,
H200, B200 and GB200) against the steady state of `infer`, held out
(railplan.inference.validation.trtllm_rows).

Run: python benchmarks/inference_validation.py
"""

from __future__ import annotations

from typing import Any

from railplan.inference.validation import (
    deepep_rows,
    rows,
    server_offline_rows,
    server_rate_rows,
    trtllm_rows,
)

HOPPER = ("dgx-h100", "dgx-h200")


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
    print()
    print("MLPerf v4.1 Llama 2 70B Server: the highest Poisson rate whose simulation (the row's")
    print("batch, budget, dispatch, lengths and queries) keeps up with TTFT p99 ≤ 2 s and TPOT")
    print("p99 ≤ 200 ms, against the rate loadgen issued in the run, which passed them")
    for r in server_rate_rows():
        print(
            f"{r['id']:30s} {r['quantity']:18s} measured {r['measured']:9.3f} "
            f"predicted {r['predicted']:9.3f} error {r['error_pct']:+7.1f} %  held out "
            f"(TTFT p99 {r['ttft_p99_s']:.3f} s, TPOT p99 {1e3 * r['tpot_p99_s']:.1f} ms there; "
            f"steady-state capacity {r['capacity']:.2f} req/s)"
        )
    print()
    print("MLPerf v4.1 Llama 2 70B, Server vs Offline, per replica: N sequences held (Little's")
    print("law), server step (TPOT) / offline step at its batch B, server ÷ offline tokens/s, and")
    print("the server step's premium over an offline step of N sequences (bounds for a step time")
    print("linear in the batch)")
    for p in server_offline_rows():
        low, high = p["premium_pct"]
        print(
            f"{p['submitter'][:14]:14s} {p['system'][:34]:34s} N {p['sequences']:5.0f} "
            f"B {p['offline_batch']:4d} step {1e3 * p['server_step_s']:5.1f} / "
            f"{1e3 * p['offline_step_s']:5.1f} ms  load {p['load']:5.3f}  "
            f"premium {low:+6.1f} .. {high:+5.1f} %"
        )
    print()
    print("DeepEP low-latency kernels (H800, 400 Gb/s NIC, 128 tokens per rank, DeepSeek-V3 shape,")
    print("FP8 dispatch, BF16 combine) against one MoE layer's decode all-to-all, rail-optimized:")
    errors = []
    for r in deepep_rows():
        errors.append(abs(r["error_pct"]))
        print(
            f"ep {r['ep']:4d} {r['pass']:8s} measured {1e6 * r['measured_s']:6.1f} us "
            f"predicted {1e6 * r['predicted_s']:6.1f} us error {r['error_pct']:+6.1f} %  held out"
        )
    print(f"mean |error| {sum(errors) / len(errors):.1f} %, max {max(errors):.1f} %  held out")
    print()
    print("TensorRT-LLM 1.0 offline throughput (trtllm-bench, PyTorch backend; output tokens/s of")
    print("one instance, every request queued at once; predicted: the run simulated step by step;")
    print("steady: infer's steady state at the same batch, without the run's fill and drain):")
    found = trtllm_rows()
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in found:
        groups.setdefault((str(r["model"]), str(r["system"])), []).append(r)
        print(
            f"{r['id']:32s} tp {r['tp']} {r['precision']} batch {r['batch']:5d} "
            f"measured {r['measured']:8.0f} predicted {r['predicted']:8.0f} "
            f"error {r['error_pct']:+6.1f} % (steady {r['steady_error_pct']:+6.1f} %)  held out"
        )
    for (model, system), rs in groups.items():
        e = [abs(float(r["error_pct"])) for r in rs]
        signed = sum(float(r["error_pct"]) for r in rs) / len(rs)
        print(
            f"{model} on {system} (tp {rs[0]['tp']}, {rs[0]['precision']}): mean |error| "
            f"{sum(e) / len(e):5.1f} %, max {max(e):5.1f} %, mean error {signed:+5.1f} %  held out"
        )
    for name, keep in (("Hopper (fp8)", True), ("Blackwell (fp4)", False)):
        rs = [r for r in found if (r["system"] in HOPPER) == keep]
        e = [abs(float(r["error_pct"])) for r in rs]
        steady = [abs(float(r["steady_error_pct"])) for r in rs]
        print(
            f"{name}: {len(e)} rows, mean |error| {sum(e) / len(e):.1f} %, max {max(e):.1f} % "
            f"(steady state: {sum(steady) / len(steady):.1f} %, {max(steady):.1f} %)  held out"
        )


if __name__ == "__main__":
    main()
