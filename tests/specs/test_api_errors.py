"""The library's entry points fail as the CLI does: a one-line RailplanError naming the field,
not pydantic's report or an AttributeError deep inside."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from railplan import Network, Strategy, estimate, load_model, load_system
from railplan.errors import RailplanError

CASES: list[tuple[Callable[[], object], str]] = [
    (lambda: Strategy.parse({"tp": 0, "global_batch": 8}), "strategy.tp"),
    (lambda: Strategy.parse({"tpp": 2, "global_batch": 8}), "strategy.tpp"),
    (lambda: Network.parse({"architecture": "foo"}), "network.architecture"),
    # constructors as parse: Strategy(tp=0) was pydantic's multi-line ValidationError
    (lambda: Strategy(tp=0, global_batch=8), "strategy.tp"),
    (lambda: Strategy(tpp=2, global_batch=8), "strategy.tpp"),  # type: ignore[call-arg]
    (lambda: Network(architecture="foo"), "network.architecture"),  # type: ignore[arg-type]
    (lambda: load_model(None), "model"),  # type: ignore[arg-type]
    (lambda: load_system(3.5), "system"),  # type: ignore[arg-type]
    (lambda: estimate("gpt-22b", "dgx-a100", None), "strategy"),  # type: ignore[arg-type]
    (
        lambda: estimate("gpt-22b", "dgx-a100", Strategy(global_batch=8), network=3),  # type: ignore[arg-type]
        "network",
    ),
]


def test_estimate_takes_a_mapping_and_an_architecture_name() -> None:
    by_objects = estimate(
        "gpt-22b", "dgx-a100", Strategy(tp=8, global_batch=8), Network(architecture="rail-only")
    )
    by_plain = estimate("gpt-22b", "dgx-a100", {"tp": 8, "global_batch": 8}, "rail-only")
    assert by_plain.iteration_s == by_objects.iteration_s


MORE_CASES: list[tuple[Callable[[], object], str]] = [
    # a misspelled architecture is pydantic's error in one line, wherever a network is named
    (
        lambda: estimate("gpt-22b", "dgx-a100", {"global_batch": 8}, "rail_only"),
        "network.architecture",
    ),
    (lambda: estimate("gpt-22b", "dgx-a100", {"tp": 8, "global_batch": 8}, gpus="8"), "gpus"),  # type: ignore[arg-type]
    (lambda: _job(network="rail_only"), "network.architecture"),
    (lambda: _job(model=None), "model"),
    (lambda: _deployment(system=None), "system"),
    (lambda: _deployment(network=3), "network"),
    (lambda: _serving_search(networks=("rail_only",)), "network.architecture"),
    (lambda: _space(tp=2.5), "tp"),
    (lambda: _space(zero=object()), "zero"),
    (lambda: _placement("8"), "tp"),
    (lambda: _placement(8.5), "tp"),
    (lambda: _traffic().dense(16, "TP"), "kind"),
    (lambda: _traffic().dense(-5), "first_gpus"),
    (lambda: _tile("16"), "jobs"),
    (lambda: _from_strategies(3), "strategies"),
    (lambda: _names("model"), "kind"),
]


def _job(**change: object) -> object:
    from railplan.specs import Job

    args: dict[str, object] = {
        "model": "gpt-22b",
        "system": "dgx-h100",
        "network": "rail-only",
        "gpus": 64,
        "global_batch": 64,
    }
    return Job(**(args | change))  # type: ignore[arg-type]


def _deployment(**change: object) -> object:
    from railplan.inference.engine import Deployment

    args: dict[str, object] = {"model": "llama-2-70b", "system": "dgx-h100", "network": None}
    return Deployment(**(args | change), gpus=8, tp=2)  # type: ignore[arg-type]


def _serving_search(**change: object) -> object:
    from railplan.inference.search import search

    return search("llama-2-70b", "dgx-h100", 8, "fp8", 1024, 256, 6.0, 0.175, **change)  # type: ignore[arg-type]


def _space(**change: object) -> object:
    from railplan.explore.search import SearchSpace

    return SearchSpace(**change)  # type: ignore[arg-type]


def _placement(tp: object) -> object:
    from railplan.traffic.placement import build_placement

    return build_placement("megatron", tp, 4, 4, 8)  # type: ignore[arg-type]


def _traffic() -> object:
    from railplan.traffic.matrix import Traffic, traffic
    from railplan.traffic.placement import build_placement

    t: Traffic = traffic(
        "gpt-22b",
        {"tp": 8, "pp": 4, "dp": 4, "global_batch": 64},
        build_placement("megatron", 8, 4, 4, 8),
    )
    return t


def _tile(jobs: object) -> object:
    from railplan.network.tiling import tile

    return tile(64, 8, jobs)  # type: ignore[arg-type]


def _from_strategies(x: object) -> object:
    from railplan.specs.arrays import from_strategies

    return from_strategies(x)  # type: ignore[arg-type]


def _names(kind: str) -> object:
    from railplan.specs import names

    return names(kind)


@pytest.mark.parametrize(("call", "field"), CASES + MORE_CASES)
def test_bad_arguments_are_one_line_errors_naming_the_field(
    call: Callable[[], object], field: str
) -> None:
    with pytest.raises(RailplanError) as err:
        call()
    assert err.value.field == field
    assert "\n" not in str(err.value)


def test_numpy_integers_are_counts_like_ints() -> None:
    # a loop over np.arange or a pandas column gives numpy integers: every entry point takes
    # them and the results hold Python ints (JSON-serializable)
    import json

    import numpy as np

    from railplan.explore.search import SearchSpace, search
    from railplan.inference.engine import Deployment
    from railplan.inference.estimate import infer
    from railplan.network.topology import Cluster
    from railplan.specs import Job

    job = Job(load_model("gpt-22b"), load_system("dgx-h100"), Network(), np.int64(64), 64)
    assert type(job.gpus) is int
    by_numpy = search(job, SearchSpace(tp=np.array([4, 8]), zero=np.int64(1)), top=np.int64(2))
    by_int = search(
        Job("gpt-22b", "dgx-h100", "rail-optimized", 64, 64),
        SearchSpace(tp=(4, 8), zero=(1,)),
        top=2,
    )
    assert by_numpy.best is not None and by_int.best is not None
    assert by_numpy.best.iteration_s == by_int.best.iteration_s
    dep = Deployment("llama-2-70b", "dgx-h100", "rail-only", gpus=np.int64(8), tp=np.int64(2))
    r = infer(dep, np.int64(8), np.int64(1024), np.int32(256))
    json.dumps(r.to_dict())
    assert r.batch == 8
    from railplan.network.cost import compare

    cluster = Cluster(np.int64(1024), np.int64(8), 64)  # type: ignore[arg-type]
    assert type(cluster.gpus) is int and type(cluster.hb_domain) is int
    json.dumps(compare(cluster).to_dict())
    from railplan.network.tiling import tile

    json.dumps(tile(np.int64(1024), np.int64(8), [np.int64(512)]).to_dict())  # type: ignore[arg-type]


def test_paths_and_gpu_objects_load() -> None:
    from pathlib import Path

    from railplan.data.validation import __file__ as data_init

    yaml = Path(data_init).parent / "models" / "modern" / "gpt-119b-s4096.yaml"
    assert load_model(yaml) == load_model(str(yaml))
    sy = load_system("dgx-h100")
    assert load_system({**sy.model_dump(), "gpu": sy.gpu}) == sy


def test_plots_leave_the_users_matplotlib_backend_alone(tmp_path: object) -> None:
    import matplotlib

    from railplan.traffic.plots import heatmap

    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a user's choice (non-interactive, so safe here); it used to be reset
    try:
        heatmap(_traffic(), f"{tmp_path}/h.png", 16, "title", "bytes")  # type: ignore[arg-type]
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)


def test_dir_lists_the_lazy_names() -> None:
    import railplan

    assert {"estimate", "load_model", "load_network", "Strategy"} <= set(dir(railplan))


def test_the_pp_hint_gives_every_pp_that_works() -> None:
    # pipelines need not divide the layers: the hint listed only the divisors of 96
    with pytest.raises(RailplanError) as err:
        estimate("gpt-3-175b", "dgx-a100", {"tp": 8, "pp": 97, "global_batch": 8})
    assert "pp values that work: 1 to 96" in str(err.value)
    assert estimate("gpt-3-175b", "dgx-a100", {"tp": 8, "pp": 7, "global_batch": 8}).iteration_s > 0


def test_reprs_stay_short() -> None:
    from railplan.explore.search import search
    from railplan.specs import Job

    r = search(Job("gpt-22b", "dgx-h100", "rail-only", 64, 64))
    assert len(repr(r)) < 3000 and "evaluated" in repr(r)  # was 113,391 characters
    e = estimate("gpt-22b", "dgx-h100", {"tp": 8, "global_batch": 8})
    assert "attention_curves" not in repr(e) and "iteration_s" in repr(e)
