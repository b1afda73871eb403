"""`vllm serve` on loopback: every way it can fail names the cause, and nothing outlives a stop.

One test starts a real server (the tiny model, about 30-60 s on two cores); the others fail before
an engine starts.
"""

from __future__ import annotations

import socket
import threading
import time

import psutil
import pytest

from kvlab.measure.prefix import runs, vllm_lab
from kvlab.measure.serving import engine
from kvlab.measure.serving.server import VllmServer, free_port, port_is_free


def tiny_kwargs(**over):
    kw = vllm_lab.engine_kwargs(
        str(engine.TINY_MODEL_DIR), block_size=32, num_blocks=64, max_model_len=1024
    )
    kw.update(over)
    return kw


def group_alive(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in process group ``pgid``."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and psutil.os.getpgid(p.pid) == pgid:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def test_busy_port_names_the_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert not port_is_free(port)
        srv = VllmServer(tiny_kwargs(), port=port, python=engine.engine_python())
        with pytest.raises(engine.EngineError, match=f"port {port} on 127.0.0.1 is busy"):
            srv.launch()
        assert srv.proc is None


def test_missing_engine_names_the_fix(tmp_path):
    srv = VllmServer(tiny_kwargs(), port=free_port(), python=tmp_path / "bin" / "python")
    with pytest.raises(engine.EngineError, match="make engine"):
        srv.launch()


def test_missing_model_folder_names_the_folder(tmp_path):
    kw = tiny_kwargs(model=str(tmp_path / "no-model"))
    srv = VllmServer(kw, port=free_port(), python=engine.engine_python())
    with pytest.raises(engine.EngineError, match="model folder .*no-model"):
        srv.launch()


def test_only_loopback():
    with pytest.raises(ValueError, match="loopback"):
        VllmServer(tiny_kwargs(), host="0.0.0.0")


def test_server_that_dies_shows_its_log():
    """A server that exits before it is ready (here: a flag vLLM rejects) raises with its exit
    code and the tail of its log, which names the bad flag."""
    srv = VllmServer(
        tiny_kwargs(max_model_len="many"), port=free_port(), python=engine.engine_python()
    )
    with pytest.raises(engine.EngineError, match="(?s)exited with code.*max.model.len"):
        srv.start()
    assert not srv.alive() and group_alive(srv.pid) == []


def test_job_past_its_time_is_stopped():
    with pytest.raises(engine.EngineError, match="ran past 2 s"):
        runs.run_job("probe", in_process=False, timeout_s=2)


def test_stop_mid_run_leaves_nothing_running():
    """Start a real server, send requests from a thread, stop it in the middle: the server, its
    engine processes and nothing else of its process group is left."""
    srv = VllmServer(tiny_kwargs(), port=free_port(), python=engine.engine_python())
    with engine.engine_lock():
        srv.start()
        try:
            pid = srv.pid
            children = psutil.Process(pid).children(recursive=True)
            assert children, "vLLM runs its engine in child processes"
            before = srv.counters()
            assert before.source == "vllm:prefix_cache_queries_total"
            results, errors = [], []

            def client():
                from urllib.request import Request, urlopen

                body = b'{"model": "%s", "prompt": [20, 21, 22, 23], "max_tokens": 1}' % (
                    srv.model.encode()
                )
                for _ in range(10_000):
                    try:
                        req = Request(
                            srv.base_url + "/v1/completions",
                            data=body,
                            headers={"Content-Type": "application/json"},
                        )
                        with urlopen(req, timeout=30) as r:
                            results.append(r.status)
                    except OSError as exc:
                        errors.append(exc)
                        return

            t = threading.Thread(target=client, daemon=True)
            t.start()
            deadline = time.monotonic() + 120
            while not results and time.monotonic() < deadline:
                time.sleep(0.2)
            assert results, "the server answered no request"
        finally:
            srv.stop()
        t.join(timeout=60)
    assert not t.is_alive() and errors, "requests after the stop must fail"
    assert not srv.alive()
    assert group_alive(pid) == []
    assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
    with pytest.raises(engine.EngineError, match="is not running"):
        srv.counters()


def test_job_stopped_while_its_servers_start_leaves_no_server():
    """A serving job stopped from outside (its time ran out) while its servers start: the job's
    SIGTERM handler stops them, and had it been killed outright, the servers' parent-death signal
    would; either way no server of that job is left."""
    base = free_port()
    with pytest.raises(engine.EngineError, match="ran past"):
        runs.run_job(
            "serving",
            {"num_blocks": 64, "max_model_len": 1024, "base_port": base, "fleet_workload": None},
            in_process=False,
            timeout_s=25,
        )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if any(f"--port {base + r}" in " ".join(p.info["cmdline"] or []) for r in (0, 1))
        ]
        if not left:
            break
        time.sleep(1)
    assert left == []
