"""The worker pool of sweeps and reports stops at once: leaving its block by an exception
terminates the workers mid-task, and a normal exit waits for nothing left."""

import multiprocessing
import time

import pytest

from railplan.explore.pool import worker_pool


def _sleep(s: float) -> float:
    time.sleep(s)
    return s


def _square(x: int) -> int:
    return x * x


def _children_settle(before: set[multiprocessing.process.BaseProcess]) -> bool:
    """No child process beyond `before` within 5 s: the pool's manager thread may reap a
    terminated worker before this process's record of it is updated (a bookkeeping lag, not a
    process left behind; the worker is gone either way)."""
    for _ in range(100):
        if set(multiprocessing.active_children()) <= before:
            return True
        time.sleep(0.05)
    return False


def test_normal_exit_returns_every_result() -> None:
    before = set(multiprocessing.active_children())
    with worker_pool(2) as pool:
        assert [f.result() for f in [pool.submit(_square, i) for i in range(5)]] == [
            0,
            1,
            4,
            9,
            16,
        ]
    assert set(multiprocessing.active_children()) <= before


def test_an_exception_terminates_the_workers_mid_task() -> None:
    """Two 60 s tasks running and more queued: the block's exception returns at once and no
    worker is left."""
    before = set(multiprocessing.active_children())
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt), worker_pool(2) as pool:
        futures = [pool.submit(_sleep, 60.0) for _ in range(4)]
        time.sleep(1.0)  # both workers are inside a task
        assert not any(f.done() for f in futures)
        raise KeyboardInterrupt
    assert time.monotonic() - t0 < 30.0
    assert _children_settle(before)
