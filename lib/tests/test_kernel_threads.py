"""The simulators' compiled loops can be first asked for from several threads at once (a Dask
worker with several threads, a thread pool): one thread wraps them with numba, the others wait
for it, and all get the same functions. Before the lock, a second thread re-wrapped the helpers
that the first had already wrapped and numba raised ``TypeError: A jit decorator was called on an
already jitted function``."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import threading
    from kvlab import fleet
    from kvlab.pdsim import kernel as pd_kernel
    from kvlab.queueing import kernel as q_kernel

    getters = {"fleet": fleet._kernels, "pdsim": pd_kernel._kernel, "queueing": q_kernel.kernel}
    n = 8
    start = threading.Barrier(n * len(getters))
    got = {name: [] for name in getters}
    errors = []

    def ask(name):
        start.wait()
        try:
            got[name].append(getters[name]())
        except Exception as e:
            errors.append(f"{name}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=ask, args=(name,)) for name in getters for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for name, results in got.items():
        assert len(results) == n and all(r is results[0] for r in results), name
    assert fleet._unlink is not None
    print("ok")
    """
)


def test_first_calls_from_many_threads_get_one_set_of_kernels():
    # a fresh interpreter: in this one the kernels may already have been made
    run = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr[-3000:]
