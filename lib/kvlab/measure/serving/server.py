"""vLLM's OpenAI-compatible server on loopback: started, checked, read and always stopped.

:class:`VllmServer` starts ``vllm serve`` (as ``PYTHON -m kvlab.measure.serving.vllm_cli serve``, vLLM's CLI) on
127.0.0.1 in its own process group, waits for ``/health``, and stops the whole group by its own
process id, also when something fails (use it as a context manager). Every way it can fail says
why: the engine is missing, the port is taken, the model folder is missing, or the server died
or never became ready (with the tail of its log).

Reading it: :meth:`VllmServer.metrics` parses ``/metrics`` with ``prometheus_client``'s parser
(:mod:`kvlab.measure.serving.prom`), so a hit rate is the ratio of the two counters' increases between two
scrapes. Requests go through the ``openai`` client (:func:`complete`), which the engine
environment has.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from . import prom
from .engine import (
    EngineError,
    check_model_dir,
    engine_env,
    is_local_model,
    kill_group,
    kill_groups,
    log_tail,
)


def _die_with_parent() -> None:
    """In the server's process, before vLLM starts: ask Linux to send it SIGTERM when the process
    that started it dies, so a server never outlives a job that was killed outright. vLLM shuts
    its engine processes down on SIGTERM. (Elsewhere than Linux this does nothing.)"""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """True when nothing listens on ``host:port`` and it can be bound."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A port the system says is free now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def serve_args(engine_kwargs: dict) -> list[str]:
    """``vllm serve`` flags for the keyword arguments :func:`kvlab.measure.prefix.vllm_lab.engine_kwargs`
    gives ``vllm.LLM`` (the model itself is the positional argument)."""
    args: list[str] = []
    for k, v in engine_kwargs.items():
        if k == "model":
            continue
        flag = "--" + k.replace("_", "-")
        if k == "disable_log_stats":
            if v:
                args.append(flag)
            continue
        if isinstance(v, bool):
            args.append(flag if v else "--no-" + k.replace("_", "-"))
        else:
            args += [flag, str(v)]
    return args


class VllmServer:
    """One ``vllm serve`` process on ``host:port``.

    ``python``: the interpreter that has vLLM (default: this one). ``engine_kwargs``: as for
    ``vllm.LLM`` (see :func:`kvlab.measure.prefix.vllm_lab.engine_kwargs`), turned into flags.
    ``cpu_cores``: pin the CPU engine's threads to these cores (``VLLM_CPU_OMP_THREADS_BIND``),
    so that two engines on a small machine do not fight over the same cores.
    """

    def __init__(
        self,
        engine_kwargs: dict,
        port: int = 8000,
        host: str = "127.0.0.1",
        python: str | Path | None = None,
        log_path: str | Path | None = None,
        ready_timeout_s: float = 300,
        cpu_cores: str | None = None,
        extra_env: dict | None = None,
    ):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"host must be a loopback address, got {host!r}")
        self.engine_kwargs = dict(engine_kwargs)
        self.port = int(port)
        self.host = host
        self.python = str(python or sys.executable)
        self.log_path = Path(log_path or f"/tmp/kvlab-vllm-{self.port}.log")
        self.ready_timeout_s = float(ready_timeout_s)
        self.extra_env = dict(extra_env or {})
        # the server's /reset_prefix_cache endpoint exists in its development mode only
        self.extra_env.setdefault("VLLM_SERVER_DEV_MODE", "1")
        if cpu_cores is not None:
            self.extra_env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpu_cores)
        self.proc: subprocess.Popen | None = None
        self.start_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def model(self) -> str:
        return str(self.engine_kwargs["model"])

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [
            self.python,
            "-m",
            "kvlab.measure.serving.vllm_cli",  # vLLM's own CLI (see that module for why)
            "serve",
            self.model,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--enable-prompt-tokens-details",
            *serve_args(self.engine_kwargs),
        ]

    # -- life cycle -----------------------------------------------------------------------------

    def _fail(self, why: str) -> EngineError:
        return EngineError(
            f"vllm serve on {self.base_url} {why}; log {self.log_path}, last lines:\n"
            f"{log_tail(self.log_path)}"
        )

    def launch(self) -> VllmServer:
        """Start the process (do not wait). Checks the interpreter, the port and the model."""
        if self.proc is not None:
            raise RuntimeError("this server was already started")
        if not Path(self.python).exists():
            raise EngineError(
                f"no vLLM engine: the interpreter {self.python} does not exist (run `make engine`)"
            )
        if not port_is_free(self.port, self.host):
            raise EngineError(
                f"port {self.port} on {self.host} is busy: another process listens there; stop "
                f"it or choose another port"
            )
        model = self.model
        if is_local_model(model):
            check_model_dir(model)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._t0 = time.perf_counter()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=engine_env(self.extra_env, model=model),
                start_new_session=True,  # its own process group: stopped as one
                preexec_fn=_die_with_parent,
            )
        return self

    def wait_ready(self) -> VllmServer:
        """Wait for ``/health`` to answer 200; stop the server and raise if it exits first or
        takes longer than ``ready_timeout_s``."""
        assert self.proc is not None, "launch() first"
        deadline = self._t0 + self.ready_timeout_s
        while True:
            rc = self.proc.poll()
            if rc is not None:
                self.stop()
                raise self._fail(f"exited with code {rc} before it was ready")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as r:
                    if r.status == 200:
                        self.start_s = time.perf_counter() - self._t0
                        return self
            except (urllib.error.URLError, OSError):
                pass
            if time.perf_counter() > deadline:
                self.stop()
                raise self._fail(f"was not ready after {self.ready_timeout_s:g} s and was stopped")
            time.sleep(0.5)

    def start(self) -> VllmServer:
        """:meth:`launch`, then :meth:`wait_ready`."""
        self.launch()
        try:
            return self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        """End the server and every process it started (its process group), by its pid."""
        if self.proc is None:
            return
        kill_group(self.proc.pid)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL was sent
            pass

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- reading it -------------------------------------------------------------------------------

    def _get(self, path: str, timeout_s: float = 30) -> str:
        if not self.alive():
            raise self._fail("is not running (it died or was stopped)")
        try:
            with urllib.request.urlopen(self.base_url + path, timeout=timeout_s) as r:
                return r.read().decode()
        except (urllib.error.URLError, OSError) as exc:
            if not self.alive():
                raise self._fail(f"died while serving {path}") from exc
            raise

    def metrics_text(self) -> str:
        """The ``/metrics`` text."""
        return self._get("/metrics")

    def metrics(self) -> dict[str, float]:
        """``/metrics`` parsed by prometheus_client (sample name -> value)."""
        return prom.parse_metrics(self.metrics_text())

    def counters(self) -> prom.PrefixCounters:
        """The prefix-cache counters now."""
        return prom.prefix_cache_counters(self.metrics())

    def reset_prefix_cache(self) -> None:
        """Empty the server's prefix cache (POST /reset_prefix_cache, development mode)."""
        req = urllib.request.Request(self.base_url + "/reset_prefix_cache", method="POST", data=b"")
        with urllib.request.urlopen(req, timeout=30) as r:
            if r.status != 200:
                raise self._fail(f"refused to reset its prefix cache ({r.status})")


def openai_client(server: VllmServer, timeout_s: float = 120):
    """An ``openai.OpenAI`` client for the server (no API key is checked on loopback)."""
    from openai import OpenAI

    return OpenAI(base_url=server.base_url + "/v1", api_key="EMPTY", timeout=timeout_s)


def complete(client, model: str, prompt_ids: list[int], stream: bool = True) -> dict:
    """One completion of ``prompt_ids`` with ``max_tokens=1``: wall-clock TTFT (to the first
    streamed chunk; the whole call when ``stream`` is False), cached tokens
    (``usage.prompt_tokens_details.cached_tokens``), prompt tokens."""
    t0 = time.perf_counter()
    if not stream:
        resp = client.completions.create(
            model=model, prompt=[int(t) for t in prompt_ids], max_tokens=1, temperature=0.0
        )
        details = getattr(resp.usage, "prompt_tokens_details", None)
        return {
            "ttft_s": time.perf_counter() - t0,
            "cached_tokens": int(getattr(details, "cached_tokens", 0) or 0),
            "prompt_tokens": int(resp.usage.prompt_tokens),
        }
    chunks = client.completions.create(
        model=model,
        prompt=[int(t) for t in prompt_ids],
        max_tokens=1,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    out = _read_stream(chunks, t0)
    if out["prompt_tokens"] is None:
        out["prompt_tokens"] = len(prompt_ids)
    return out


def _read_stream(chunks, t0: float) -> dict:
    """Drain a streamed completion started at ``t0`` (``time.perf_counter``): TTFT to the first
    chunk with a choice, and the cached and prompt tokens of the final usage chunk (prompt tokens
    None when the server sent no usage)."""
    ttft, usage = None, None
    for chunk in chunks:
        if ttft is None and chunk.choices:
            ttft = time.perf_counter() - t0
        if chunk.usage is not None:
            usage = chunk.usage
    details = getattr(usage, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details is not None else None
    return {
        "ttft_s": ttft,
        "cached_tokens": int(cached or 0),
        "prompt_tokens": int(usage.prompt_tokens) if usage is not None else None,
    }


def chat(client, model: str, system: str, user: str) -> dict:
    """One streamed chat completion (``max_tokens=1``): TTFT, cached and prompt tokens."""
    t0 = time.perf_counter()
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        max_tokens=1,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    return _read_stream(stream, t0)


def stop_all(servers: list[VllmServer]) -> None:
    """Stop every server of ``servers`` at once (:func:`kvlab.measure.serving.engine.kill_groups`),
    then reap each: one grace time for all of them, not one each."""
    kill_groups([s.proc.pid for s in servers if s.proc is not None])
    for s in servers:
        s.stop()  # its group has ended: this only reaps the server's process
