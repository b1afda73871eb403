"""SGLang's router (sgl-model-gateway, PyPI ``sglang-router``) in front of vLLM servers, on loopback.

:class:`SGLangRouterProcess` starts ``python -m sglang_router.launch_router`` (the package's own
launcher of the Rust gateway) with the worker URLs, a policy, and 127.0.0.1 for both its HTTP port
and its Prometheus port (both default to every address), in its own process group; waits until
``GET /workers`` lists every worker as healthy (they passed their ``/health`` checks); and stops the whole group by
its own pid, also on failure (use it as a context manager).

:class:`TokenShim` sits between the router and one vLLM server. The router 0.3.2 rejects a
completion whose prompt is a list of token ids (HTTP 422: its ``prompt`` is a string or a list of
strings), so the client sends the ids as one space-separated string; the router routes on that
text, and the shim turns it back into ids before vLLM sees it. Every completion that passes is
logged (arrival and answer times, prompt), which is how the router's decisions are read back.
The router also asks each worker for SGLang-only endpoints (``/model_info``, ``/get_model_info``,
``/get_server_info``) that vLLM does not have: the shim answers those 404 itself, as vLLM would,
without waiting for a busy server.
The shim is a thread of the calling process, bound to 127.0.0.1 on a free port.

:func:`router_python` finds an interpreter that has ``sglang_router``: ``$KVLAB_ROUTER_PYTHON``,
this one, or the book's ``.venv`` (the engine environment, where Lab 1's servers run, has no
router: ``requirements.txt`` pins it for the book's environment).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .engine import ROOT, EngineError, log_tail

#: The router version the lab pins (``requirements.txt``).
ROUTER_VERSION = "0.3.2"
#: Environment variable naming the Python that launches the router.
ROUTER_PYTHON_ENV = "KVLAB_ROUTER_PYTHON"
LOOPBACK = "127.0.0.1"
#: GET paths a shim passes on to vLLM; any other GET it answers 404 itself.
FORWARDED_GET = ("/health", "/v1/", "/metrics", "/version")


def ids_to_text(ids) -> str:
    """Token ids as the one string the client sends through the router: decimal ids, one space
    between two (the router's cache-aware tree matches on these characters)."""
    return " ".join(str(int(t)) for t in ids)


def text_to_ids(text: str) -> list[int]:
    """The inverse of :func:`ids_to_text`; ``ValueError`` naming the prompt if it is not one."""
    words = text.split(" ")
    if not text or not all(w.isdigit() for w in words):
        raise ValueError(f"prompt must be token ids separated by single spaces, got {text[:60]!r}")
    return [int(w) for w in words]


def _has_router(python: str | Path) -> bool:
    if not Path(python).exists():
        return False
    probe = subprocess.run(
        [str(python), "-c", "import sglang_router"],
        capture_output=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    return probe.returncode == 0


def router_python() -> str | None:
    """An interpreter that imports ``sglang_router``: ``$KVLAB_ROUTER_PYTHON``, else this Python,
    else the book's ``.venv/bin/python``; None when none does."""
    env = os.environ.get(ROUTER_PYTHON_ENV)
    if env:
        return env if _has_router(env) else None
    import importlib.util

    if importlib.util.find_spec("sglang_router") is not None:
        return sys.executable
    book = ROOT / ".venv" / "bin" / "python"
    return str(book) if _has_router(book) else None


class SGLangRouterProcess:
    """One sgl-model-gateway process routing to ``worker_urls`` with ``policy``.

    Both ports are chosen free on 127.0.0.1 unless given. ``python``: an interpreter with
    ``sglang_router`` (default :func:`router_python`)."""

    def __init__(
        self,
        worker_urls: list[str],
        policy: str = "cache_aware",
        port: int | None = None,
        prometheus_port: int | None = None,
        python: str | Path | None = None,
        log_path: str | Path | None = None,
        ready_timeout_s: float = 120,
        extra_args: list[str] | None = None,
    ):
        from .server import free_port

        if policy not in ("cache_aware", "round_robin", "random", "power_of_two"):
            raise ValueError(
                f"policy must be cache_aware, round_robin, random or power_of_two, got {policy!r}"
            )
        if not worker_urls:
            raise ValueError("worker_urls must name at least one worker")
        self.worker_urls = list(worker_urls)
        self.policy = policy
        self.port = int(port) if port is not None else free_port()
        self.prometheus_port = int(prometheus_port) if prometheus_port is not None else free_port()
        if self.prometheus_port == self.port:
            raise ValueError("port and prometheus_port must differ")
        self.python = str(python) if python is not None else router_python()
        self.log_path = Path(log_path or f"/tmp/kvlab-sglang-router-{self.port}.log")
        self.ready_timeout_s = float(ready_timeout_s)
        self.extra_args = list(extra_args or [])
        self.proc: subprocess.Popen | None = None
        self.start_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def command(self) -> list[str]:
        """The command line that starts the router (loopback only, for both ports)."""
        if self.python is None:
            raise EngineError(
                f"no Python with sglang-router {ROUTER_VERSION}: install it (`pip install "
                f"sglang-router=={ROUTER_VERSION}`, pinned in requirements.txt) or set "
                f"{ROUTER_PYTHON_ENV}"
            )
        return [
            self.python,
            "-m",
            "sglang_router.launch_router",
            "--worker-urls",
            *self.worker_urls,
            "--policy",
            self.policy,
            "--host",
            LOOPBACK,
            "--port",
            str(self.port),
            "--prometheus-host",
            LOOPBACK,
            "--prometheus-port",
            str(self.prometheus_port),
            "--log-level",
            "info",
            *self.extra_args,
        ]

    def _fail(self, why: str) -> EngineError:
        return EngineError(
            f"sglang router on {self.base_url} {why}; log {self.log_path}, last lines:\n"
            f"{log_tail(self.log_path)}"
        )

    def start(self) -> SGLangRouterProcess:
        """Start the router and wait until ``GET /workers`` lists every worker, healthy (the
        router registers its workers in parallel after it starts listening, and its list's order,
        which is the order its policies scan, is the order they finished registering);
        stop it and raise with the tail of its log if it exits or is not ready in time."""
        from .server import port_is_free

        if self.proc is not None:
            raise RuntimeError("this router was already started")
        cmd = self.command()
        for p in (self.port, self.prometheus_port):
            if not port_is_free(p, LOOPBACK):
                raise EngineError(f"port {p} on {LOOPBACK} is busy: choose another")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group: stopped as one
            )
        try:
            while True:
                rc = self.proc.poll()
                if rc is not None:
                    raise self._fail(f"exited with code {rc} before it was ready")
                try:  # ready once every worker is registered and healthy
                    with urllib.request.urlopen(self.base_url + "/workers", timeout=2) as r:
                        listed = json.loads(r.read()).get("workers", [])
                    if len(listed) == len(self.worker_urls) and all(
                        w.get("is_healthy") for w in listed
                    ):
                        self.start_s = time.perf_counter() - t0
                        return self
                except (urllib.error.URLError, OSError, ValueError):
                    pass
                if time.perf_counter() - t0 > self.ready_timeout_s:
                    raise self._fail(f"was not ready after {self.ready_timeout_s:g} s")
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """End the router's process group, by its pid."""
        if self.proc is None:
            return
        pid = self.proc.pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, sig)
            try:
                self.proc.wait(timeout=5)  # reaps the leader, so the group can empty
            except subprocess.TimeoutExpired:
                continue
            try:
                os.killpg(pid, 0)  # anything left in its group?
            except ProcessLookupError:
                return

    def __enter__(self) -> SGLangRouterProcess:
        return self if self.alive() else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def workers(self) -> list[str]:
        """The worker URLs in the router's own order (``GET /workers``)."""
        with urllib.request.urlopen(self.base_url + "/workers", timeout=10) as r:
            return [w["url"] for w in json.loads(r.read())["workers"]]

    def metrics_text(self) -> str:
        """The router's Prometheus text (its own port)."""
        url = f"http://{LOOPBACK}:{self.prometheus_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    def complete_text(self, model: str, text: str, timeout_s: float = 300) -> dict:
        """POST one completion (``max_tokens=1``, greedy) of ``text`` to the router; its JSON."""
        body = json.dumps(
            {"model": model, "prompt": text, "max_tokens": 1, "temperature": 0.0}
        ).encode()
        req = urllib.request.Request(
            self.base_url + "/v1/completions",
            data=body,
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise self._fail(f"answered HTTP {exc.code} ({detail})") from exc


class TokenShim:
    """A loopback HTTP proxy in front of one vLLM server (``target``, e.g. ``http://127.0.0.1:P``)
    that turns a completion's space-separated id string back into token ids and logs every
    completion: ``log`` holds ``{"t_in", "t_out", "prompt", "status"}`` per request, times from
    ``time.perf_counter``. Everything else passes through unchanged."""

    def __init__(self, target: str, port: int | None = None):
        from .server import free_port

        self.target = target.rstrip("/")
        self.port = int(port) if port is not None else free_port()
        self.log: list[dict] = []
        self._lock = threading.Lock()
        self.httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def clear(self) -> None:
        with self._lock:
            self.log = []

    def _handler(self):
        shim = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wbufsize = 1 << 16  # headers and body leave in one write (no delayed-ACK wait)

            def log_message(self, *args) -> None:  # quiet
                return

            def _forward(self, method: str) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else None
                entry = None
                if method == "POST" and self.path.startswith("/v1/completions") and body:
                    t_in = time.perf_counter()
                    payload = json.loads(body)
                    prompt = payload.get("prompt")
                    if isinstance(prompt, str):
                        try:
                            payload["prompt"] = text_to_ids(prompt)
                        except ValueError:
                            pass  # a text prompt: vLLM tokenizes it itself
                    body = json.dumps(payload).encode()
                    entry = {"t_in": t_in, "prompt": prompt}
                req = urllib.request.Request(shim.target + self.path, data=body, method=method)
                for k in ("Content-Type", "Accept"):
                    if self.headers.get(k):
                        req.add_header(k, self.headers[k])
                try:
                    with urllib.request.urlopen(req, timeout=600) as r:
                        status, data, ctype = r.status, r.read(), r.headers.get("Content-Type")
                except urllib.error.HTTPError as exc:
                    status, data, ctype = exc.code, exc.read(), exc.headers.get("Content-Type")
                except (urllib.error.URLError, OSError) as exc:
                    status, data, ctype = 502, str(exc).encode(), "text/plain"
                if entry is not None:
                    entry["status"] = status
                    entry["t_out"] = time.perf_counter()
                    with shim._lock:
                        shim.log.append(entry)
                self.send_response(status)
                self.send_header("Content-Type", ctype or "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if not self.path.startswith(FORWARDED_GET):
                    # the router's SGLang-only discovery endpoints (/model_info, /get_model_info,
                    # /get_server_info), which vLLM answers 404 as well: at once, even when the
                    # server is slow (the router gives each discovery step 10 s)
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    data = b'{"detail":"Not Found"}'
                    self.send_response(404)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._forward("GET")

            def do_POST(self) -> None:
                self._forward("POST")

        return Handler

    def start(self) -> TokenShim:
        self.httpd = ThreadingHTTPServer((LOOPBACK, self.port), self._handler())
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.httpd = None

    def __enter__(self) -> TokenShim:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
