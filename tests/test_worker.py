"""The app's worker processes: an answer comes back; a task past its CPU time or its memory ceiling fails with a
sentence, not a dead server; the pool recovers from a worker that died."""

import os
import signal
import sys
import time
import types

import pytest

from planner.errors import PlanError
from planner.formats import read_config
from ui import worker


def _spin() -> None:
    while True:
        pass


def _hoard() -> bytearray:
    return bytearray(worker.TASK_MEMORY_BYTES + (1 << 30))


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def test_an_answer_comes_back_from_a_worker_process():
    assert worker.run(os.getpid, wait_s=60) != os.getpid()
    assert worker.run(divmod, 7, 2, wait_s=60) == (3, 1)


def test_a_task_past_its_cpu_time_is_stopped_and_the_worker_serves_on():
    with pytest.raises(worker.WorkerFailed) as err:
        worker.run(_spin, wait_s=60, cpu_s=0.5)
    assert str(err.value) == "the search used 0.5 s of CPU and was stopped"
    assert worker.run(divmod, 9, 4, wait_s=60) == (2, 1)


def test_a_task_past_its_memory_ceiling_fails_in_the_worker_not_the_server():
    with pytest.raises(worker.WorkerFailed) as err:
        worker.run(_hoard, wait_s=60)
    assert str(err.value) == "the search needed over 1,024 MiB and was stopped"


def test_a_dead_worker_is_replaced():
    with pytest.raises(worker.WorkerFailed, match="^the search's worker process died$"):
        worker.run(_die, wait_s=60)
    assert worker.run(divmod, 5, 5, wait_s=60) == (1, 0)


def _spin_on(text: str) -> None:
    _spin()


def test_a_readers_error_comes_back_with_its_fields():
    with pytest.raises(PlanError) as err:
        worker.read("config", read_config, "--num-layers x --seq-length 8")
    assert (err.value.field, err.value.value, err.value.rule) == ("--num-layers", "x", "must be an integer ≥ 1")


def test_a_runaway_read_is_an_error_on_its_field(monkeypatch):
    monkeypatch.setattr(worker, "READ_CPU_S", 0.5)
    with pytest.raises(PlanError) as err:
        worker.read("log", _spin_on, "text")
    assert str(err.value) == "log: reading it used 0.5 s of CPU and was stopped"


def _wait_for(path: str) -> None:
    """Hold a worker, without using its CPU, until `path` exists."""
    for _ in range(1200):
        if os.path.exists(path):
            return
        time.sleep(0.05)


def test_a_read_is_answered_while_searches_hold_their_pool(tmp_path):
    done = tmp_path / "done"
    searches = [worker._pool("search").submit(_wait_for, str(done)) for _ in range(os.cpu_count() or 2)]
    try:
        assert worker.read("config", read_config, "vllm serve org/m --tensor-parallel-size 2").format == "vllm"
        assert not any(search.done() for search in searches)
    finally:
        done.touch()


def test_a_new_worker_does_not_run_the_page_that_started_it(tmp_path, monkeypatch):
    """In a Streamlit run `__main__` is the page: a worker that re-ran it (multiprocessing's spawn preparation
    runs the parent's main module by its path) would run the whole app."""
    marker = tmp_path / "ran"
    page = tmp_path / "page.py"
    page.write_text(f"open({str(marker)!r}, 'w').close()\n")
    main = types.ModuleType("__main__")
    main.__file__ = str(page)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(worker, "_POOLS", {})  # a pool of its own, started from this "page"
    try:
        assert worker.run(divmod, 7, 3, wait_s=60, pool="read") == (2, 1)
    finally:
        worker._POOLS["read"].shutdown()
    assert not marker.exists() and sys.modules["__main__"] is main
