"""kvlab.sweep: one interface over executors; the same numbers on a process pool, in-process and
on a Dask cluster."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kvlab import fleet
from kvlab.sweep import sweep

SMALL = dict(conversations=20, requests=400, system_tokens=64, history_max=2_000)
SIM = dict(replicas=3, cache_tokens=3_000, warmup=50)


def _square(x: int) -> int:
    return x * x


def _fails(x: int) -> int:
    if x == 3:
        raise RuntimeError("setting 3 fails")
    return x


def test_order_kept_on_every_executor():
    want = [x * x for x in range(12)]
    assert sweep(_square, range(12), processes=1, progress=False) == want
    assert sweep(_square, range(12), processes=2, progress=False) == want
    with ThreadPoolExecutor(3) as ex:
        assert sweep(_square, range(12), executor=ex, progress=False) == want
    assert sweep(_square, [], progress=False) == []


def test_errors_and_bad_arguments():
    with pytest.raises(RuntimeError, match="setting 3"):
        sweep(_fails, range(6), processes=2, progress=False)
    with pytest.raises(ValueError, match="processes"):
        sweep(_square, range(3), processes=0, progress=False)
    with ThreadPoolExecutor(1) as ex, pytest.raises(ValueError, match="executor or processes"):
        sweep(_square, range(3), executor=ex, processes=2, progress=False)


def _seed_sweep(**kw):
    return fleet.sweep_over_seeds(
        "cache_tokens", [1_000, 3_000], seeds=[0, 1, 2], workload_kwargs=SMALL, **kw,
        replicas=3, warmup=50,
    )  # fmt: skip


def test_sweep_over_seeds_same_on_pool_and_threads():
    local = _seed_sweep(processes=2)
    assert local == _seed_sweep(processes=1)
    with ThreadPoolExecutor(2) as ex:
        assert _seed_sweep(executor=ex) == local


def test_fixed_workload_travels_to_an_executor():
    from kvlab import workload

    w = workload.ChatWorkload(**SMALL)
    local = fleet.over_seeds(seeds=[0, 1], w=w, processes=2, **SIM)
    with ThreadPoolExecutor(2) as ex:
        assert fleet.over_seeds(seeds=[0, 1], w=w, executor=ex, **SIM) == local


def test_dask_local_cluster_gives_the_local_numbers():
    distributed = pytest.importorskip("distributed", reason="dask.distributed is not installed")
    local = _seed_sweep(processes=2)
    # worker processes, as on a real cluster: the jobs and their results are pickled both ways
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:  # fmt: skip
        got = _seed_sweep(executor=client.get_executor())
    assert got == local
