"""A session's heavy work in worker processes, under a CPU-time and a memory limit: the recommender's search, and
the reading of a stranger's text (a pasted or uploaded config, log, config.json, plan or catalog).

Streamlit serves every session from one process, its reruns in threads: Python code holds the interpreter's
lock, so one session's long search slows every other session's rerun. In a worker process it holds its own.
Workers come from a fork server that has imported the planner, and stay for further tasks (their caches warm).
A task that runs past TASK_CPU_S of CPU is interrupted by the process's CPU timer; a worker may use at most
TASK_MEMORY_BYTES beyond what it held when it started (an allocation past that fails in the task, not in the
server). Searches and reads have a pool each, so a paste is read while another session's search runs; each
pool runs at most all cores but one at once (the server's own thread keeps one); further tasks wait.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
import sys
import threading
import types
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, TimeoutError
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any, Literal, TypeVar

from planner.errors import PlanError

# The recommender's own budget is 10 s (ui/tabs.py); past 3 × that of CPU the task is interrupted.
TASK_CPU_S = 30
# The largest search (DeepSeek-V3 over the whole catalog) grows a worker by ~50 MiB; 1 GiB more is a ceiling no
# plan reaches and no input may pass.
TASK_MEMORY_BYTES = 1 << 30
# Every reader is linear in its input and capped in size (planner/loader.py): the slowest of bench/fuzz.py's
# hostile shapes takes 1.6 s at 1 MB under tracemalloc. A read past 5 s of CPU is stopped as a runaway.
READ_CPU_S = 5
READ_WAIT_S = 30  # queued behind other sessions' reads, and a fresh pool's start
Pool = Literal["search", "read"]
T = TypeVar("T")


class WorkerFailed(Exception):
    """A task ran past its limits (or its process died): what the page says instead of an answer."""


class _OverTime(Exception):
    """Raised in a worker by its CPU timer."""


def _over_time(signum: int, frame: Any) -> None:
    raise _OverTime


def _start() -> None:
    """In each new worker: its memory ceiling over what it holds now, and the CPU timer's handler."""
    ceiling = _address_space() + TASK_MEMORY_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, ceiling))
    signal.signal(signal.SIGPROF, _over_time)


def _address_space() -> int:
    """The worker's virtual memory now (what RLIMIT_AS counts), from /proc."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _bounded(what: str, cpu_s: float, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs) in a worker, interrupted past `cpu_s` of CPU."""
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    try:
        return fn(*args, **kwargs)
    except _OverTime:
        raise WorkerFailed(f"{what} used {cpu_s:g} s of CPU and was stopped") from None
    except MemoryError:
        raise WorkerFailed(f"{what} needed over {TASK_MEMORY_BYTES >> 20:,} MiB and was stopped") from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


_POOLS: dict[Pool, ProcessPoolExecutor] = {}  # the server's, shared by its sessions
_POOLS_LOCK = threading.Lock()


def _pool(kind: Pool) -> ProcessPoolExecutor:
    with _POOLS_LOCK:
        if kind not in _POOLS:
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload(["planner.search.recommend", "planner.formats", "planner.formats.vllm_log"])
            _POOLS[kind] = ProcessPoolExecutor(
                max_workers=max(1, (os.cpu_count() or 2) - 1), mp_context=context, initializer=_start
            )
        return _POOLS[kind]


def _replace(kind: Pool, broken: ProcessPoolExecutor) -> None:
    """Drop a broken pool (once, whichever session saw it first): the next task starts a new one."""
    with _POOLS_LOCK:
        if _POOLS.get(kind) is broken:
            del _POOLS[kind]
    broken.shutdown(wait=False, cancel_futures=True)


@contextmanager
def _no_main_module() -> Iterator[None]:
    """While a submit starts worker processes: no `__main__` for them to run again. A new worker re-runs the
    parent's main module by its path (multiprocessing.spawn's preparation), and in a Streamlit script run that
    module is the page itself: each worker would run the app. A module without a file or spec is skipped."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def run(
    fn: Callable[..., T],
    *args: Any,
    wait_s: float,
    cpu_s: float = TASK_CPU_S,
    pool: Pool = "search",
    what: str = "the search",
    **kwargs: Any,
) -> T:
    """fn(*args, **kwargs) in a worker of `pool`; WorkerFailed naming `what` when it outlasts `wait_s`, runs past
    `cpu_s` of CPU or its memory ceiling, or its process dies. What fn raises is raised here."""
    executor = _pool(pool)
    try:
        with _POOLS_LOCK, _no_main_module():
            future = executor.submit(_bounded, what, cpu_s, fn, *args, **kwargs)
        return future.result(timeout=wait_s)
    except TimeoutError:
        raise WorkerFailed(f"{what} took longer than {wait_s:g} s") from None
    except BrokenProcessPool:  # a dead worker breaks the pool
        _replace(pool, executor)
        raise WorkerFailed(f"{what}'s worker process died") from None


def read(field: str, fn: Callable[..., T], text: str, **kwargs: Any) -> T:
    """fn(text, **kwargs), a reader of a stranger's text, in a read worker; its PlanError comes back as it is,
    and a runaway as a PlanError on `field` (what the page already shows for a bad input)."""
    try:
        return run(fn, text, wait_s=READ_WAIT_S, cpu_s=READ_CPU_S, pool="read", what="reading it", **kwargs)
    except WorkerFailed as exc:
        raise PlanError(field, str(exc)) from None
