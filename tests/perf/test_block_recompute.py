"""Block recompute (`recompute_num_layers` N with recompute full: Megatron's `--recompute-method
block --recompute-num-layers N`): the first N layers of each model chunk rerun their forward and
keep only their input; the others keep everything and rerun nothing."""

import numpy as np
import pytest

from railplan.perf.iteration import iteration
from railplan.specs import Network, Strategy, load_model, load_system
from railplan.specs.arrays import from_strategies, recomputed_share
from railplan.workload.flops import hardware_flops, model_flops
from railplan.workload.memory import layer_activation_bytes

MODEL = load_model("llama-3.1-8b")  # 32 layers
SYSTEM = load_system("dgx-h100")


def _run(**fields: object):  # type: ignore[no-untyped-def]
    s = from_strategies(Strategy(global_batch=8, dp=8, **fields))  # type: ignore[arg-type]
    return s, iteration(MODEL, SYSTEM, Network(), s)


@pytest.mark.parametrize("n", [1, 4, 8, 31])
def test_share_of_a_single_stage_by_hand(n: int) -> None:
    """pp = v = 1: N of the 32 layers are recomputed. Their forward time is N/32 of full
    recompute's, their activations the layer input, the others' what no recompute keeps, and
    the hardware FLOPs count N/32 of the layers' forward again."""
    s, it = _run(recompute="full", recompute_num_layers=n)
    _, full = _run(recompute="full")
    s_none, _ = _run(recompute="none")
    share = n / 32
    assert float(recomputed_share(MODEL, s)) == pytest.approx(share)
    assert float(it.breakdown_s["recompute"]) == pytest.approx(
        share * float(full.breakdown_s["recompute"])
    )
    per_layer = float(layer_activation_bytes(MODEL, s))
    want = share * float(
        layer_activation_bytes(
            MODEL, from_strategies(Strategy(global_batch=8, dp=8, recompute="full"))
        )
    ) + (1 - share) * float(layer_activation_bytes(MODEL, s_none))
    assert per_layer == pytest.approx(want)
    extra = float(hardware_flops(MODEL, 8, s.recompute, s.recompute_modules, share))
    extra -= float(model_flops(MODEL, 8))
    every = float(hardware_flops(MODEL, 8, s.recompute, s.recompute_modules)) - float(
        model_flops(MODEL, 8)
    )
    assert extra == pytest.approx(share * every)
    assert float(it.hardware_flops) == pytest.approx(float(model_flops(MODEL, 8)) + extra)


def test_more_layers_recomputed_is_less_memory_and_more_time() -> None:
    """Along N = 0 (none), 1 … 32 (= every layer, as N = 0 with full): memory never rises and
    time never falls; N at or above a chunk's layers is full recompute."""
    _, none = _run(recompute="none")
    runs = [_run(recompute="full", recompute_num_layers=n)[1] for n in (1, 2, 4, 8, 16, 32)]
    mems = [float(none.memory.total_bytes)] + [float(r.memory.total_bytes) for r in runs]
    times = [float(none.iteration_s)] + [float(r.iteration_s) for r in runs]
    assert mems == sorted(mems, reverse=True) and times == sorted(times)
    _, full = _run(recompute="full")
    assert float(runs[-1].iteration_s) == float(full.iteration_s)
    assert float(runs[-1].memory.total_bytes) == pytest.approx(float(full.memory.total_bytes))


def test_chunks_of_an_interleaved_pipeline() -> None:
    """pp 4, v 2: chunks of 32/8 = 4 layers; N = 1 recomputes a quarter of each stage."""
    s = from_strategies(
        Strategy(
            global_batch=64, pp=4, dp=2, interleave=2, recompute="full", recompute_num_layers=1
        )
    )
    assert float(recomputed_share(MODEL, s)) == pytest.approx(0.25)
    three = np.asarray(3.0)  # a stage of 3 layers, v 2: chunks of 1.5 layers
    assert float(recomputed_share(MODEL, s, three)) == pytest.approx(1 / 1.5)


def test_cli_flag_and_its_rule(cli) -> None:  # type: ignore[no-untyped-def]
    base = ("estimate", "--model", "llama-3.1-8b", "--system", "dgx-h100", "--gpus", "8")
    base += ("--global-batch", "8")
    full = cli.json(*base, "--recompute", "full")
    block = cli.json(*base, "--recompute", "full", "--recompute-num-layers", "8")
    assert block["strategy"]["recompute_num_layers"] == 8
    assert block["iteration_s"] < full["iteration_s"]
    assert block["memory_gib_per_gpu"] > full["memory_gib_per_gpu"]
    r = cli(*base, "--recompute", "selective", "--recompute-num-layers", "2")
    assert r.exit_code == 2 and str(r.exception).startswith("recompute_num_layers: ")
    r = cli(*base, "--recompute", "full", "--recompute-num-layers", "-1")
    assert r.exit_code == 2 and "recompute_num_layers" in str(r.exception)


def test_search_tries_block_recompute_on_full_candidates_only() -> None:
    from railplan.explore.search import SearchSpace, enumerate_and_evaluate
    from railplan.specs import Job
    from railplan.specs.arrays import FULL

    job = Job(MODEL, SYSTEM, Network(), 8, 64)
    ev = enumerate_and_evaluate(job, SearchSpace(recompute_num_layers=(0, 2)))
    s = ev.strategies
    full = s.recompute == FULL
    assert set(np.unique(s.recompute_num_layers[full]).tolist()) == {0, 2}
    assert np.all(s.recompute_num_layers[~full] == 0)
    plain = enumerate_and_evaluate(job)
    assert len(ev.iteration_s) == len(plain.iteration_s) + int(
        np.sum(plain.strategies.recompute == FULL)
    )
