"""A session's heavy work (the recommender's search) in a worker process, under a CPU-time and a memory limit.

Streamlit serves every session from one process, its reruns in threads: Python code holds the interpreter's
lock, so one session's long search slows every other session's rerun. In a worker process it holds its own.
Workers come from a fork server that has imported the planner, and stay for further tasks (their caches warm).
A task that runs past TASK_CPU_S of CPU is interrupted by the process's CPU timer; a worker may use at most
TASK_MEMORY_BYTES beyond what it held when it started (an allocation past that fails in the task, not in the
server). At most all cores but one work at once (the server's own thread keeps one); further tasks wait.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, TimeoutError
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import streamlit as st

# The recommender's own budget is 10 s (ui/tabs.py); past 3 × that of CPU the task is interrupted.
TASK_CPU_S = 30
# The largest search (DeepSeek-V3 over the whole catalog) grows a worker by ~50 MiB; 1 GiB more is a ceiling no
# plan reaches and no input may pass.
TASK_MEMORY_BYTES = 1 << 30
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


def _bounded(cpu_s: float, fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) in a worker, interrupted past `cpu_s` of CPU."""
    signal.setitimer(signal.ITIMER_PROF, cpu_s)
    try:
        return fn(*args)
    except _OverTime:
        raise WorkerFailed(f"the search used {cpu_s:g} s of CPU and was stopped") from None
    except MemoryError:
        raise WorkerFailed(f"the search needed over {TASK_MEMORY_BYTES >> 20:,} MiB and was stopped") from None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)


@st.cache_resource
def _pool() -> ProcessPoolExecutor:
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(["planner.recommend"])
    return ProcessPoolExecutor(max_workers=max(1, (os.cpu_count() or 2) - 1), mp_context=context, initializer=_start)


def run(fn: Callable[..., T], *args: Any, wait_s: float, cpu_s: float = TASK_CPU_S) -> T:
    """fn(*args) in a worker; WorkerFailed when it outlasts `wait_s`, runs past `cpu_s` of CPU or its memory
    ceiling, or its process dies."""
    try:
        return _pool().submit(_bounded, cpu_s, fn, *args).result(timeout=wait_s)
    except TimeoutError:
        raise WorkerFailed(f"the search took longer than {wait_s:g} s") from None
    except BrokenProcessPool:  # a dead worker breaks the pool: the next task starts a new one
        _pool().shutdown(wait=False, cancel_futures=True)
        _pool.clear()
        raise WorkerFailed("the search's worker process died") from None
