"""SGLang's router (sglang-router, pinned in requirements.txt) on loopback, in front of token shims.

The workers here are stand-ins (a few lines of the standard library answering ``/health`` and
``/v1/completions``), so these tests take seconds and need no engine; Lab 1 runs the same router
in front of its two vLLM servers. Checked: both of the router's ports listen on 127.0.0.1 only; a
token-id string reaches the worker as ids; the router takes the first worker of its own list
(``GET /workers``) when nothing matches and nothing is in flight; it is stopped by its own pid,
also when it never became ready, and nothing of it is left.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvlab.measure.prefix import router_model, router_runs
from kvlab.measure.serving import engine, procs
from kvlab.measure.serving import sglang_router as sr
from kvlab.measure.serving.server import free_port

pytestmark = pytest.mark.skipif(
    sr.router_python() is None, reason="sglang-router is not installed (requirements.txt pins it)"
)


class StandIn:
    """A worker that answers ``/health``, ``/v1/models`` and ``/v1/completions`` (saying its own
    name and the type of the prompt it received), after ``delay_s``."""

    def __init__(self, name: str, delay_s: float = 0.0):
        self.name, self.delay_s = name, delay_s
        self.prompts: list = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def _send(self, code: int, obj: dict) -> None:
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.startswith("/health"):
                    self._send(200, {})
                elif self.path.startswith("/v1/models"):
                    self._send(200, {"object": "list", "data": [{"id": "m", "object": "model"}]})
                else:
                    self._send(404, {"error": "not here"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.prompts.append(body.get("prompt"))
                time.sleep(outer.delay_s)
                n = len(body["prompt"]) if isinstance(body["prompt"], list) else 0
                self._send(
                    200,
                    {
                        "object": "text_completion",
                        "model": "m",
                        "choices": [{"index": 0, "text": outer.name, "finish_reason": "length"}],
                        "usage": {
                            "prompt_tokens": n,
                            "completion_tokens": 1,
                            "total_tokens": n + 1,
                            "prompt_tokens_details": {"cached_tokens": 0},
                        },
                    },
                )

        self.httpd = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def two_shimmed_workers():
    workers = [StandIn("w0"), StandIn("w1")]
    shims = [sr.TokenShim(w.url).start() for w in workers]
    yield workers, shims
    for s in shims:
        s.stop()
    for w in workers:
        w.stop()


def test_router_loopback_ids_and_first_worker(two_shimmed_workers):
    workers, shims = two_shimmed_workers
    router = sr.SGLangRouterProcess([s.url for s in shims], "cache_aware")
    with router:
        pid = router.pid
        sockets = procs.listening_sockets([pid])
        ports = {s.port for s in sockets}
        assert {router.port, router.prometheus_port} <= ports, sockets
        assert procs.non_loopback(sockets) == [], sockets
        first = [s.url for s in shims].index(router.workers()[0])
        for k in range(4):  # one at a time: nothing in flight, so the low-match branch's tie
            out = router.complete_text("m", sr.ids_to_text([5, 6, 7, 100 + k]))
            assert out["choices"][0]["text"] == f"w{first}"
        assert "smg_worker_selection_total" in router.metrics_text()
    assert workers[first].prompts == [[5, 6, 7, 100 + k] for k in range(4)]  # ids, not text
    assert workers[1 - first].prompts == []
    assert [e["prompt"] for e in shims[first].log] == [
        sr.ids_to_text([5, 6, 7, 100 + k]) for k in range(4)
    ]
    assert not router.alive() and procs.gone([pid])


def test_router_rejects_token_id_prompts(two_shimmed_workers):
    """Why the shims exist: sglang-router 0.3.2 answers a list of token ids with HTTP 422."""
    _, shims = two_shimmed_workers
    import urllib.error
    import urllib.request

    with sr.SGLangRouterProcess([s.url for s in shims], "round_robin") as router:
        body = json.dumps({"model": "m", "prompt": [5, 6, 7], "max_tokens": 1}).encode()
        req = urllib.request.Request(
            router.base_url + "/v1/completions",
            data=body,
            headers={"Content-Type": "application/json"},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 422


def test_router_that_never_gets_ready_is_stopped(tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there: never healthy
    router = sr.SGLangRouterProcess(
        [dead], "round_robin", ready_timeout_s=4, log_path=tmp_path / "router.log"
    )
    with pytest.raises(engine.EngineError, match="not ready after 4 s"):
        router.start()
    assert router.pid is not None and procs.gone([router.pid])


def test_busy_port_is_refused_before_starting():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        router = sr.SGLangRouterProcess(["http://127.0.0.1:1"], port=s.getsockname()[1])
        with pytest.raises(engine.EngineError, match="is busy"):
            router.start()
        assert router.proc is None


def test_measure_router_concurrent_record(two_shimmed_workers, monkeypatch):
    """The record :func:`measure_router` builds, with two clients and slow stand-ins: every
    request reached one server, the in-flight counts the model is fed come from the shims'
    times, and the model of the rule agrees with the router on every request whose situation
    the record pins down. The choices are replayed in sending order with Lab 1's close calls
    (:mod:`kvlab.measure.prefix.router_model`), which a busy machine cannot fool: a request
    sent first can reach the router second, by more than the old 10 ms test on arrival times."""
    workers, shims = two_shimmed_workers
    for w in workers:
        w.delay_s = 0.15

    class Server:  # what measure_router needs of a VllmServer
        def __init__(self, url):
            self.base_url = url

        def reset_prefix_cache(self):
            pass

        def counters(self):
            from kvlab.measure.serving.prom import PrefixCounters

            return PrefixCounters(0.0, 0.0, "none")

    ids = [[7] * 50 + [100 + i] * 10 for i in range(8)] + [[9] * 60 for _ in range(1)]
    run = router_runs.measure_router(
        [Server(w.url) for w in workers], "m", ids, "cache_aware", 2, 9
    )
    assert -1 not in run["server"]
    assert run["router_non_loopback"] == [] and run["router_gone"]
    # the router's own count per worker (its metrics) is the shims' count
    assert run["router_counts"] == [run["server"].count(r) for r in range(2)]
    rep = router_runs.replay_router(router_model.choice_view(run), ids=ids)
    close = router_model.close_calls(run, rep["branch"])
    assert set(rep["disagree_at"]) <= set(close), (rep, close)
