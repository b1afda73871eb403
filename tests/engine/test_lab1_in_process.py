"""Lab 1's in-process path (what a GPU reader's notebook runs: vLLM imported in its own Python),
executed on vLLM's CPU build: the engine environment's Python calls ``runs.run_job(...,
in_process=True)``, the very function the notebook calls, with one small ``lab1`` job (about 30 s
on two cores). The job's engine is stopped before it returns; its processes are gone after (an
engine process that has exited but is not yet reaped by its parent counts as gone: psutil cannot
read a zombie's command line, which once failed this test on a loaded machine)."""

from __future__ import annotations

import json
import subprocess
import textwrap

from kvlab.measure.prefix import prompts
from kvlab.measure.serving import engine

DRIVER = textwrap.dedent(
    """
    import json, sys

    import psutil

    from kvlab.measure.prefix import runs

    if __name__ == "__main__":
        params = json.loads(sys.argv[1])
        out = runs.run_job("lab1", params, in_process=True, timeout_s=300)
        def engine_core(p):  # a live engine process; an exited one not yet reaped is gone
            try:
                if p.status() == psutil.STATUS_ZOMBIE:
                    return False
                return "EngineCor" in " ".join([p.name(), *p.cmdline()])
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                return False

        left = [p.pid for p in psutil.Process().children(recursive=True) if engine_core(p)]
        import os

        env = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
        print("RESULT " + json.dumps({"out": out, "left": left, "env": env}, default=float))
    """
)

PARAMS = dict(
    model=None,
    block_size=32,
    num_blocks=64,
    max_model_len=1024,
    system_tokens=256,
    requests=3,
    fit_lengths=[64, 128],
    fit_repeats=1,
    hit_pairs=1,
    replay=None,
)


def test_lab1_runs_in_process_in_a_python_that_imports_vllm(tmp_path):
    script = tmp_path / "drive.py"
    script.write_text(DRIVER)
    py = engine.engine_python()
    env = engine.engine_env()
    for k in engine.OFFLINE_ENV:  # the job itself must set them for the local tiny model
        env.pop(k, None)
    proc = subprocess.run(
        [str(py), str(script), json.dumps(PARAMS)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=engine.ROOT,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    got = json.loads(lines[-1][len("RESULT ") :])
    out = got["out"]
    assert out["where"] == "in-process"
    assert got["env"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    assert out["shutdown"]["stopped"] is True and got["left"] == []
    run = out["runs"]["shared_system_prompt"]
    assert run["cached_tokens"] == prompts.predicted_cached_tokens(run["prompt_ids"], 32)
    assert out["model_revision"].startswith("folder ")
