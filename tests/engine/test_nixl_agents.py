"""NIXL between two agents in two processes (the engine environment): the bytes arrive intact,
no socket listens beyond 127.0.0.1 while the agents run, and no process is left afterwards,
also when a step fails."""

from __future__ import annotations

import pytest

from kvlab.measure.disagg import nixl_sweep
from kvlab.measure.serving import procs as pd_procs
from kvlab.models import TINY_LAB


def test_sweep_moves_verified_bytes_on_loopback_only():
    jobs, _ = nixl_sweep.kv_jobs(TINY_LAB, [1024, 4096])
    jobs += nixl_sweep.kv_jobs(TINY_LAB, [1024], descriptor_tokens=32)[0]
    sweep = nixl_sweep.run_sweep(jobs, repeats=2, warmup=1, timeout_s=180)
    assert sweep.data_ok and len(sweep.transfers) == 3
    assert sweep.transfers[2].descriptors == 1024 // 32 * 2 * TINY_LAB.layers
    assert sweep.sockets, "the agents' UCX listeners should have been seen"
    assert sweep.non_loopback == []
    assert len(sweep.pids) == 2 and sweep.all_gone and pd_procs.gone(sweep.pids)


def test_a_failing_agent_leaves_no_process():
    jobs, _ = nixl_sweep.kv_jobs(TINY_LAB, [1024])
    with pytest.raises(RuntimeError, match="failure injected") as info:
        nixl_sweep.run_sweep(jobs, fail_after_connect=True, timeout_s=180)
    assert len(info.value.pids) == 2 and info.value.all_gone
