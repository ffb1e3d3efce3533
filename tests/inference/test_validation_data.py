"""The data sets behind the inference validation rows."""

from __future__ import annotations

import numpy as np
import pytest

from railplan.inference.validation import data_set_lengths


def test_mlperf_data_set_lengths() -> None:
    # 24,576 samples, mean prompt 222.3 tokens (the file's header, from its source); answers
    # scaled to a mean of 290 tokens (rounding moves the mean by < 0.5 token)
    prompts, outputs = data_set_lengths("mlperf_llama2_openorca_lengths.csv", 290)
    assert prompts.size == outputs.size == 24_576
    assert float(prompts.mean()) == pytest.approx(222.33, abs=0.01)
    assert float(outputs.mean()) == pytest.approx(290.0, abs=0.5)
    assert int(outputs.min()) >= 1 and np.issubdtype(outputs.dtype, np.integer)


def test_server_step_premium_by_hand() -> None:
    # NVIDIA's DGX-H100 (tp 2, 4 replicas): Server 74.42 samples/s, mean latency 44.955 s, TPOT
    # 154.96 ms, 21,605.79 tokens/s; Offline 24,524.9 tokens/s at batch 896.
    # N = 74.42 · 44.955 / 4 = 836.4; T_off = 896 · 4 / 24,524.9 = 146.14 ms;
    # premium in [154.96 / 146.14 − 1, 154.96 · 896 / (146.14 · 836.4) − 1] = [+6.0, +13.6] %
    from railplan.inference.validation import server_offline_rows

    row = next(
        r
        for r in server_offline_rows()
        if r["submitter"] == "NVIDIA" and r["system"].startswith("DGX-H100")
    )
    assert row["sequences"] == pytest.approx(836.4, abs=0.1)
    assert row["offline_step_s"] == pytest.approx(0.14614, abs=1e-5)
    low, high = row["premium_pct"]
    assert low == pytest.approx(6.04, abs=0.02) and high == pytest.approx(13.60, abs=0.02)


def test_server_rows_run_at_the_scheduled_rate() -> None:
    # loadgen's scheduled rate (queries ÷ the schedule's span) is what arrived; the completed
    # tokens/s ÷ output tokens divides by the time to the last completion, drain included, so
    # it is lower, by under 1 % on these 40-minute runs (H100: 75.10 vs 74.50 /s)
    from railplan.reproduce.validation import read_rows

    server = [r for r in read_rows("inference_mlperf.csv") if r["scenario"] == "server"]
    assert len(server) == 2
    for r in server:
        completed = float(r["tokens_per_s_per_gpu"]) * int(r["gpus"]) / int(r["output_tokens"])
        assert completed < float(r["arrival_per_s"]) < 1.01 * completed
        assert int(r["queries"]) % 24_576 == 0  # whole passes over the 24,576-sample set
        assert r["dispatch"] == "least-busy"
