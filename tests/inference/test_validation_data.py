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
