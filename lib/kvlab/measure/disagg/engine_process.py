"""One Lab 3 engine in its own process, seen from the parent: :class:`Engine`.

:class:`Engine` starts :mod:`kvlab.measure.disagg.pd_worker` by file path with the given Python,
hands it the ``vllm.LLM`` arguments, then sends one JSON request per call (generate, metrics, quit)
and waits for the answer. ``_WorkDir`` is the folder the engines' logs and the file connector's
store live in.

Rules: every engine is started through :class:`kvlab.measure.serving.procs.Children` (its own
session, loopback only, stopped by pid when the run ends, also when it fails); every wait ends at
the run's deadline; the engine's log goes to a file, never to the pipe the answers come on; a
temporary work folder is removed on exit, a given one is kept.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path

from ..serving import procs as pd_procs

WORKER = Path(__file__).with_name("pd_worker.py")


class Engine:
    """A running engine process: send a request, wait for its answer."""

    def __init__(
        self,
        kids: pd_procs.Children,
        name: str,
        kwargs: dict,
        env: dict,
        log: Path,
        python: str,
        deadline: float,
    ):
        self.name, self.log, self.deadline = name, log, deadline
        with open(log, "w") as err:
            self.proc = kids.start([python, str(WORKER)], env=env, stderr=err)
        self.lines = pd_procs.JsonLines(self.proc, f"{name} engine", log)
        pd_procs.send_json(self.proc, {"engine": kwargs})
        self.ready = self.lines.get(deadline)
        self.pid = self.ready["pid"]

    def call(self, **req) -> dict:
        pd_procs.send_json(self.proc, req)
        return self.lines.get(self.deadline)

    def generate(self, prompts, max_tokens: int = 16, kv_transfer_params=None) -> list[dict]:
        return self.call(
            cmd="generate",
            prompts=prompts,
            max_tokens=max_tokens,
            kv_transfer_params=kv_transfer_params,
        )["outputs"]

    def metrics(self) -> list[dict]:
        return self.call(cmd="metrics")["metrics"]

    def quit(self) -> int:
        """Stop the engine; return its peak resident memory in bytes."""
        done = self.call(cmd="quit")
        self.proc.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        return int(done["peak_rss_bytes"])

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


class _WorkDir:
    """``workdir`` as a Path, or a temporary folder that is removed on exit."""

    def __init__(self, workdir):
        self.workdir, self._tmp = workdir, None

    def __enter__(self) -> Path:
        if self.workdir is not None:
            p = Path(self.workdir)
            p.mkdir(parents=True, exist_ok=True)
            return p
        self._tmp = tempfile.mkdtemp(prefix="kvlab-pd-")
        return Path(self._tmp)

    def __exit__(self, *exc):
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
        return False
