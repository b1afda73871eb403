"""Running the engine jobs of :mod:`kvlab.measure.prefix.engine_jobs`, or their recording.

:func:`run_job` runs one job in this Python where ``vllm`` imports here (Colab, a GPU machine),
else in the engine environment as ``python -m kvlab.measure.prefix.engine_jobs JOB PARAMS OUT``,
and returns its JSON-ready dict; a job that fails or runs out of time raises
:class:`kvlab.measure.serving.engine.EngineError` with the tail of its log, its processes ended.
:func:`run_or_recorded` is what the Lab 1 page calls: the job run here, or, where the engines
cannot run, its CPU recording (:mod:`kvlab.measure.recording.recorded`).

This module sits above both the engine environment and the jobs, so neither imports the other
through it: :mod:`kvlab.measure.serving.engine` knows nothing of any job.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import tempfile
from pathlib import Path

from ..serving.deadline import TimeLimit, sigterm_deferred, sigterm_unwinds, time_limit
from ..serving.engine import (
    ENGINE_VENV,
    ROOT,
    EngineError,
    engine_env,
    engine_lock,
    engine_python,
    kill_group,
    log_tail,
    set_process_env,
    shown,
    vllm_here,
)
from . import engine_jobs

#: How long a job stopped from outside (SIGTERM: its time ran out, the notebook was interrupted)
#: gets to stop its own servers before it is killed: their stop takes up to 10 s + 5 s
#: (:func:`kvlab.measure.serving.server.stop_all`), and a killed job's servers would only get
#: their parent-death SIGTERM, with nothing to follow it up.
JOB_STOP_GRACE_S = 30.0


def run_job(
    job: str,
    params: dict | None = None,
    *,
    timeout_s: float = 900,
    in_process: bool | None = None,
    venv: str | Path = ENGINE_VENV,
) -> dict:
    """Run engine job ``job`` (a name in :data:`kvlab.measure.prefix.engine_jobs.JOBS`) with ``params``
    and return its JSON-ready result.

    ``in_process=None`` picks: in this Python when ``vllm`` imports here, else in the engine
    environment through a subprocess (its log goes to a temporary file whose tail is shown on
    failure). The result gains ``"where"``: "in-process" or the engine Python's path. A job past
    ``timeout_s`` raises :class:`EngineError` either way: the subprocess is stopped, the job in
    this Python is interrupted by an alarm (main thread only; see
    :func:`kvlab.measure.serving.deadline.time_limit`).
    """
    if job not in engine_jobs.JOBS:
        raise ValueError(f"job must be one of {sorted(engine_jobs.JOBS)}, got {job!r}")
    params = dict(params or {})
    if in_process is None:
        in_process = vllm_here()
    if in_process:
        set_process_env(params.get("model"))
        try:
            with engine_lock(), time_limit(timeout_s, f"engine job {job!r}"):
                out = engine_jobs.JOBS[job](**params)
        except TimeLimit as e:  # the job unwound (its engine shut down) when the alarm fired
            raise EngineError(str(e)) from None
        out["where"] = "in-process"
        return out
    py = engine_python(venv)
    with tempfile.TemporaryDirectory(prefix="kvlab-engine-") as tmp:
        pfile, ofile, log = Path(tmp, "params.json"), Path(tmp, "out.json"), Path(tmp, "job.log")
        pfile.write_text(json.dumps(params))
        cmd = [str(py), "-m", "kvlab.measure.prefix.engine_jobs", job, str(pfile), str(ofile)]
        # sigterm_unwinds: a SIGTERM to this process (a recorder stopped from outside) unwinds
        # through the except clause below, which stops the job's process group, instead of ending
        # this process and leaving the job (in its own session) running
        with sigterm_unwinds(), engine_lock(), open(log, "w") as logf:
            proc = None
            try:
                with sigterm_deferred():  # a SIGTERM while it starts is raised once proc is set
                    proc = subprocess.Popen(
                        cmd,
                        stdout=logf,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        env=engine_env(model=params.get("model")),
                        cwd=str(ROOT),
                        start_new_session=True,  # its own process group: ended as one on failure
                    )
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                assert proc is not None
                kill_group(proc.pid, grace_s=JOB_STOP_GRACE_S)
                proc.wait()
                raise EngineError(
                    f"engine job {job!r} ran past {timeout_s:g} s and was stopped; last lines of "
                    f"its log:\n{log_tail(log)}"
                ) from None
            except BaseException:  # interrupted: never leave an engine behind
                if proc is not None:
                    kill_group(proc.pid, grace_s=JOB_STOP_GRACE_S)
                    proc.wait()
                raise
            finally:
                if proc is not None:
                    kill_group(proc.pid, grace_s=2.0)  # stray children of a finished job
        if rc != 0 or not ofile.exists():
            raise EngineError(
                f"engine job {job!r} failed (exit code {rc}); last lines of its log:\n"
                f"{log_tail(log)}"
            )
        out = json.loads(ofile.read_text())
    out["where"] = str(py)
    return out


@dataclasses.dataclass
class JobResult:
    """An engine job's JSON result, in the form :mod:`kvlab.measure.recording.recorded` stores and reloads."""

    result: dict

    def as_dict(self) -> dict:
        return {"result": self.result}


def run_or_recorded(lab: str, name: str, job: str, params: dict, reason: str | None = None):
    """Lab 1's engine runs, strict where the engine exists: with ``reason`` None, run ``job`` here
    (an engine failure raises and fails the page; ``KVLAB_RECORD_LABS=1`` also records the run);
    otherwise (``reason``: why the engines cannot run here, from
    :func:`kvlab.measure.recording.recorded.why_not_here`) the same run's CPU recording. Returns a
    :class:`kvlab.measure.recording.recorded.Measured` of a :class:`JobResult`."""
    from ..recording import recorded  # not at the top: the engine environment has no dacite

    if reason is None:
        value = JobResult(run_job(job, params))
        if os.environ.get(recorded.RECORD_ENV) == "1":  # without this machine's folders
            portable = JobResult(json.loads(shown(json.dumps(value.result))))
            recorded.save(lab, name, portable, params)
        note = f"{name}: measured on this machine just now"
        return recorded.Measured(value, True, note, name=name)

    def cannot_run() -> JobResult:
        raise EngineError(reason)

    return recorded.measure(lab, name, cannot_run, JobResult, params, retry_if_under_s=0)
