"""Engine memory for the engine jobs: the peak resident memory of a job and its engine processes,
and, on a GPU, waiting for memory to come back after an engine stops (one GPU shared by engines
started one after another). Part of Lab 1's measuring code (fingerprinted with it).
"""

from __future__ import annotations

import os
import threading
import time


class MemoryPeak:
    """Peak resident memory of this process and all its children (bytes), sampled every
    ``interval_s`` in a background thread while the ``with`` block runs (needs psutil)."""

    def __init__(self, interval_s: float = 0.25):
        self.interval_s = interval_s
        self.peak_bytes = 0
        self._stop = threading.Event()

    def _sample(self) -> None:
        import psutil

        me = psutil.Process(os.getpid())
        while not self._stop.is_set():
            total = 0
            for p in [me, *me.children(recursive=True)]:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak_bytes = max(self.peak_bytes, total)
            self._stop.wait(self.interval_s)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def gpu_free_bytes() -> tuple[int, int] | None:
    """(free, total) bytes of GPU 0 as the driver sees them (``torch.cuda.mem_get_info``: every
    process's use counts, not only this one's), or None without a CUDA GPU."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info(0)
    return int(free), int(total)


def wait_for_gpu_memory(
    needed_bytes: int, timeout_s: float = 120.0, poll_s: float = 1.0, what: str = "the engine"
) -> dict:
    """Wait until GPU 0 has ``needed_bytes`` free (an engine that just stopped gives its memory
    back when its processes have exited); :class:`~kvlab.measure.serving.engine.EngineError` naming both
    figures when it has not after ``timeout_s``. Returns what was seen (nothing to wait for
    without a GPU)."""
    from ..serving.engine import EngineError

    t0 = time.monotonic()
    seen = gpu_free_bytes()
    if seen is None:
        return {"gpu": False}
    while seen[0] < needed_bytes:
        if time.monotonic() - t0 > timeout_s:
            raise EngineError(
                f"GPU memory: {seen[0] / 2**30:.1f} GiB free of {seen[1] / 2**30:.1f} GiB after "
                f"{timeout_s:g} s, but {what} needs {needed_bytes / 2**30:.1f} GiB; another process "
                f"still holds the rest (see nvidia-smi): stop it, or restart the kernel"
            )
        time.sleep(poll_s)
        seen = gpu_free_bytes() or seen
    return {
        "gpu": True,
        "free_bytes": seen[0],
        "total_bytes": seen[1],
        "needed_bytes": int(needed_bytes),
        "waited_s": time.monotonic() - t0,
    }


def shutdown_engine(llm, free_before: int | None = None, timeout_s: float = 120.0) -> dict:
    """Stop the engine behind ``vllm.LLM`` now, not whenever the garbage collector gets to it:
    vLLM's engine core runs in its own process, which holds the GPU memory until
    ``llm.llm_engine.engine_core.shutdown()`` ends it. On a GPU, then wait until the free memory
    is back to ``free_before`` (less 2 % of the GPU for what this process keeps, its CUDA
    context). Returns what happened, for the record."""
    import gc

    from ..serving.engine import EngineError

    t0 = time.monotonic()
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None and hasattr(core, "shutdown"):
        try:
            core.shutdown(timeout=timeout_s)
        except TypeError:  # a client whose shutdown takes no time-out
            core.shutdown()
    gc.collect()
    out: dict = {"stopped": core is not None, "stop_s": time.monotonic() - t0}
    seen = gpu_free_bytes()
    if seen is not None:
        import torch

        torch.cuda.empty_cache()
        out["gpu_free_before_bytes"] = free_before
        if free_before is not None:
            needed = free_before - int(0.02 * seen[1])
            try:
                wait_for_gpu_memory(needed, timeout_s, what="the next engine")
                out["gpu_memory_back"] = True
            except EngineError as exc:  # recorded; the next engine's own wait says what to do
                out["gpu_memory_back"] = False
                out["error"] = str(exc)
        out["gpu_free_after_bytes"] = (gpu_free_bytes() or seen)[0]
    return out
