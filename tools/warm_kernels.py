"""Compile the simulators' numba loops once, during ``make test``'s install phase.

numba compiles ``fleet``'s, ``pdsim``'s and ``queueing``'s loops on their first call and caches the
machine code beside the sources (``cache=True``), so every later process only loads it (under a
second). A fresh clone has no cache: without this step the library lane and the book lane each
paid the compile, about 40 s of CPU, at the same time. Here each loop runs once on a tiny input,
while the other environments are still being installed.

    python tools/warm_kernels.py        # prints the seconds each simulator took
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lib"))

from kvlab import costs, fleet, pdsim, queueing, traces, workload  # noqa: E402


def main() -> int:
    t = time.perf_counter()
    spent = {}
    fleet.simulate_all(workload.ChatWorkload(requests=300), warmup=50)  # the chat loop
    fleet.simulate(traces.load_mooncake(limit=300), warmup=50)  # the general (trace) loop
    spent["fleet"], t = time.perf_counter() - t, time.perf_counter()
    few = pdsim.Traffic(rate_rps=1.0, requests=20, prompt_tokens=500, output_tokens=10)
    pdsim.simulate(pdsim.Colocated(2, chunk_tokens=512), few, costs.BOOK)
    pdsim.simulate(pdsim.Disaggregated(1, 1), few, costs.BOOK)
    spent["pdsim"], t = time.perf_counter() - t, time.perf_counter()
    w = queueing.IndependentRequests(requests=20, prompt_tokens=2_000, seed=3)
    queueing.simulate(w, "round_robin", 1, 1.0, cost=costs.cost_model("measured"))
    spent["queueing"] = time.perf_counter() - t
    print("numba kernels ready: " + ", ".join(f"{k} {s:.1f} s" for k, s in spent.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
