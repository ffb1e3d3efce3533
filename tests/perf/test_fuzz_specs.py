"""Thousands of random specs, valid and invalid: a clear error or a sane answer, never a
traceback, NaN or negative time (8 GPUs and 1B parameters up to 1M GPUs and 10T parameters)."""

import math
import re

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from railplan.errors import RailplanError
from railplan.network.topology import ARCHITECTURES
from railplan.perf.estimate import estimate
from railplan.perf.iteration import iteration
from railplan.specs import Model, Network, Strategy, load_system
from railplan.specs.arrays import from_strategies, valid_mask

SYSTEMS = ["dgx-a100", "dgx-h100", "dgx-gh200", "gb200-nvl72", "mi300x"]
pow2 = st.integers(0, 10).map(lambda e: 2**e)


@st.composite
def models(draw: st.DrawFn) -> dict[str, int]:
    heads = draw(st.sampled_from([8, 16, 32, 64, 96, 128, 160, 256]))
    head_dim = draw(st.sampled_from([64, 128, 256]))
    layers = draw(st.integers(4, 256))
    # 1B .. 10T parameters ≈ 12·l·h²
    hidden = heads * head_dim
    return {
        "hidden": hidden,
        "heads": heads,
        "layers": layers,
        "kv_heads": draw(st.sampled_from([heads, max(heads // 8, 1)])),
        "seq": draw(st.sampled_from([512, 2048, 4096, 8192])),
        "vocab": draw(st.sampled_from([32000, 51200, 128256])),
    }


@st.composite
def strategies_(draw: st.DrawFn) -> dict[str, object]:
    return {
        "tp": draw(pow2.filter(lambda x: x <= 64)),
        "pp": draw(st.integers(1, 128)),
        "dp": draw(st.integers(1, 4096)),
        "interleave": draw(st.integers(1, 4)),
        "micro_batch": draw(st.integers(1, 16)),
        "global_batch": draw(st.integers(1, 1 << 20)),
        "recompute": draw(st.sampled_from(["none", "selective", "full"])),
        "sequence_parallel": draw(st.booleans()),
        "zero": draw(st.integers(0, 3)),
    }


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    models(),
    strategies_(),
    st.sampled_from(SYSTEMS),
    st.sampled_from(["rail-optimized", "rail-only", "ideal"]),
)
def test_api_never_tracebacks(
    model: dict[str, int], strat: dict[str, object], system: str, arch: str
) -> None:
    try:
        m = Model.parse(model, "model")
        e = estimate(m, system, Strategy.parse(strat, "strategy"), Network(architecture=arch))
    except RailplanError as err:
        assert "\n" not in str(err) and ":" in str(err)
        return
    assert math.isfinite(e.iteration_s) and e.iteration_s > 0
    assert 0 < e.mfu <= e.hfu <= 1.0 + 1e-9
    assert math.isfinite(e.memory_gib_per_gpu) and e.memory_gib_per_gpu > 0
    assert all(v >= 0 and math.isfinite(v) for v in e.breakdown_s.values())


#: values for any flag: words, integers, and floats that must never leak into an answer
VALUES = ["a", "b", "-1", "0", "8", "2048", "1e3", "yes"]
FLOATS = ["nan", "inf", "-inf", "1e-9", "1e308", "-0.0", "0.001", "2.5"]


def _flags(values: list[str], flags: list[str]) -> st.SearchStrategy[list[tuple[str, str]]]:
    return st.lists(st.tuples(st.sampled_from(values), st.sampled_from(flags)), max_size=6)


def _check_cli(cli, args: list[str]) -> None:  # type: ignore[no-untyped-def]
    """Exit 0 with no nan/inf in the output, or exit 2 with a one-line error: never a traceback."""
    import click

    r = cli(*args)
    if r.exit_code == 0:
        assert not re.search(r"\b(nan|inf|infinity)\b", r.stdout, re.I), (args, r.stdout)
        return
    assert r.exit_code == 2, (args, r.output, r.exception)
    exc = r.exception
    assert exc is None or isinstance(
        exc, RailplanError | click.exceptions.ClickException | SystemExit
    ), repr(exc)
    if isinstance(exc, RailplanError):
        assert "\n" not in str(exc) and ": " in str(exc)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    _flags(
        [*VALUES, *FLOATS],
        [
            "--tp",
            "--pp",
            "--dp",
            "--gpus",
            "--global-batch",
            "--micro-batch",
            "--interleave",
            "--zero",
            "--hb-domain",
            "--hb-tbps",
            "--nic-gbps",
            "--nics-per-gpu",
            "--oversubscription",
            "--recompute",
            "--network",
            "--model",
            "--system",
        ],
    )
)
def test_cli_never_tracebacks(cli, pairs: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    args = ["estimate", "--model", "gpt-22b", "--gpus", "8", "--global-batch", "8", "--tp", "8"]
    for value, flag in pairs:
        args += [flag, value]
    _check_cli(cli, args)


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    _flags(
        [*VALUES, *FLOATS],
        ["--bytes-per-pair", "--hb-tbps", "--nic-gbps", "--hb-domain", "--gpus", "--system"],
    )
)
def test_alltoall_cli_never_tracebacks(cli, pairs: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    args = ["alltoall", "--json"]
    for value, flag in pairs:
        args += [flag, value]
    _check_cli(cli, args)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(["rail-optimized", "rail-only", "oversubscribed"]),
    _flags(
        [*FLOATS, "1", "3", "1e6", "allreduce-ring"],
        ["--bytes", "--bytes-per-pair", "--oversubscription", "--collective"],
    ),
)
def test_flowsim_cli_never_tracebacks(cli, arch: str, pairs: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    args = ["flowsim", "--system", "dgx-a100", "--gpus", "64", "--radix", "16", "--arch", arch]
    for value, flag in pairs:
        args += [flag, value]
    _check_cli(cli, [*args, "--json"])


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    st.sampled_from(ARCHITECTURES),
    _flags(
        [*VALUES, *FLOATS, "3"],
        ["--oversubscription", "--planes", "--nics-per-gpu", "--oversubscribed-tier"],
    ),
)
def test_topology_cli_never_tracebacks(cli, arch: str, pairs: list[tuple[str, str]]) -> None:  # type: ignore[no-untyped-def]
    args = ["topology", "--arch", arch, "--gpus", "1024", "--hb-domain", "8", "--json"]
    for value, flag in pairs:
        args += [flag, value]
    _check_cli(cli, args)


def test_million_gpus_ten_trillion_parameters_vectorized() -> None:
    # 10T parameters (h=65536, 192 layers) on 1,048,576 GPUs: arrays in, finite times out.
    m = Model(hidden=65536, layers=192, heads=512, seq=4096, vocab=128256)
    assert m.params() > 9.9e12
    s = from_strategies(
        [
            Strategy(
                tp=64,
                pp=64,
                dp=256,
                micro_batch=1,
                global_batch=65536,
                recompute="selective",
                sequence_parallel=True,
                zero=1,
            ),
            Strategy(tp=8, pp=192, dp=682, micro_batch=1, global_batch=682 * 192),
            Strategy(tp=1, pp=1, dp=1, global_batch=1),
        ]
    )
    it = iteration(m, load_system("dgx-gh200"), Network(architecture="rail-only"), s)
    assert np.all(np.isfinite(it.iteration_s)) and np.all(it.iteration_s > 0)
    assert list(valid_mask(m, s)) == [True, True, True]
