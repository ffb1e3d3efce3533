"""Worker processes for sweeps and reports: a process pool that stops at once.

`worker_pool` yields a `ProcessPoolExecutor` (a worker that dies, e.g. killed for memory, fails
its task with `BrokenProcessPool` instead of hanging, as `multiprocessing.Pool` would). Its
workers ignore ^C, which the caller handles, and exit as soon as the caller is gone (kill -9).
Leaving the block by an exception (^C included) cancels what has not started and terminates
the workers at once, instead of waiting for their current tasks, whose results nobody would
read.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, suppress

PARENT_POLL_S = 0.5
"""How often a worker process checks that the process that started it is still alive."""

#: descriptors a forked worker must close at start (the sweep's output locks: a worker must
#: not keep them held once the sweep is gone)
INHERITED_FDS: set[int] = set()


def watch_parent(parent_pid: int) -> None:
    """Worker initializer: ignore ^C (the parent stops the pool), drop inherited lock
    descriptors (`INHERITED_FDS`), and exit as soon as the parent is gone, instead of waiting
    forever on a queue."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's handler is for the CLI only
    for fd in list(INHERITED_FDS):
        with suppress(OSError):
            os.close(fd)
    INHERITED_FDS.clear()

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            threading.Event().wait(PARENT_POLL_S)

    threading.Thread(target=watch, name="railplan-parent-watch", daemon=True).start()


@contextmanager
def worker_pool(workers: int, start_method: str | None = None) -> Iterator[ProcessPoolExecutor]:
    """`workers` processes (0: one per core) started by `start_method` (None: the platform's
    default); see the module docstring for how they stop."""
    before = set(multiprocessing.active_children())
    ctx = multiprocessing.get_context(start_method)
    pool = ProcessPoolExecutor(
        max_workers=workers or None,
        mp_context=ctx,
        initializer=watch_parent,
        initargs=(os.getpid(),),
    )
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        for p in set(multiprocessing.active_children()) - before:
            p.terminate()
            p.join()
        raise
    else:
        pool.shutdown(cancel_futures=True)
