"""Sweeps through one interface: run a function over many settings on any executor.

``sweep(fn, settings)`` returns ``[fn(s) for s in settings]``, in order, computed on

- the local machine's cores by default (a process pool started by ``fork`` where the platform has
  it, so workers inherit what the parent loaded; one process, no pool, when ``processes=1``), or
- any :class:`concurrent.futures.Executor` given as ``executor=``: a
  ``ProcessPoolExecutor`` / ``ThreadPoolExecutor`` you manage, or a Dask cluster's
  ``distributed.Client(...).get_executor()`` (see the book page "Sweeps on a cluster").

``fn`` and each setting must be picklable for a process pool or a cluster (a module-level
function and tuples or dicts of numbers); results come back in the order of ``settings`` whatever
order the workers finish in, so a sweep gives the same numbers on every executor.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, as_completed
from typing import Any, TypeVar

from ._validate import check_int

__all__ = ["default_processes", "sweep"]

T = TypeVar("T")
R = TypeVar("R")


def default_processes() -> int:
    """Worker processes of the local pool when none are named: every core of this machine."""
    return os.cpu_count() or 1


def _local_executor(processes: int) -> Executor | None:
    """A fork-started process pool of ``processes`` workers, or None where fork is missing."""
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor

    if "fork" not in mp.get_all_start_methods():
        return None
    return ProcessPoolExecutor(max_workers=processes, mp_context=mp.get_context("fork"))


def sweep(
    fn: Callable[[T], R],
    settings: Iterable[T],
    *,
    executor: Executor | None = None,
    processes: int | None = None,
    progress: bool = True,
    desc: str = "sweep",
) -> list[R]:
    """``[fn(s) for s in settings]`` computed on ``executor`` (default: a local process pool of
    ``processes`` workers, all cores when None). ``progress`` shows a tqdm bar of finished
    settings. An exception raised by ``fn`` is raised here (the other settings are cancelled)."""
    todo = list(settings)
    if executor is not None and processes is not None:
        raise ValueError("give either an executor or processes, not both")
    if processes is not None:
        processes = check_int("processes", processes, lo=1, hi=4096)
    bar = None
    if progress and todo:
        from tqdm.auto import tqdm

        bar = tqdm(total=len(todo), desc=desc, leave=False)
    try:
        own = None
        if executor is None:
            n = min(processes or default_processes(), len(todo))
            if n > 1:
                own = executor = _local_executor(n)
        if executor is None:  # one process: no pool, nothing pickled
            out: list[Any] = []
            for s in todo:
                out.append(fn(s))
                if bar is not None:
                    bar.update(1)
            return out
        try:
            futures: dict[Future, int] = {executor.submit(fn, s): i for i, s in enumerate(todo)}
            results: list[Any] = [None] * len(todo)
            try:
                for fut in as_completed(futures):
                    results[futures[fut]] = fut.result()
                    if bar is not None:
                        bar.update(1)
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
            return results
        finally:
            if own is not None:
                own.shutdown(wait=True, cancel_futures=True)
    finally:
        if bar is not None:
            bar.close()
