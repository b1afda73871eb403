"""Record the labs' GPU measurements into results/ (one command, a few minutes on a GPU).

Usage (from the repository root, on a machine with a CUDA GPU and requirements-gpu.txt):

    python tools/record_gpu.py            # writes results/lab1-<gpu>-<date>.json, lab2-, lab3-
    python tools/record_gpu.py --quick    # fewer repeats and lengths (a smoke run)
    python tools/record_gpu.py --labs lab3  # one lab only
    python tools/record_gpu.py --dry-run  # every job on the CPU (the engine environment): checks
                                          # the code path, writes to a temporary folder

Lab 2: every copy path this machine has (host<->GPU pinned and pageable, same-GPU copy, GPU to
GPU when there are two) for one request's KV at Llama 3 8B shape, 1K to 64K tokens; send/recv
between two processes (NCCL with two GPUs, gloo always); prefill of a PyTorch model at Llama 3 8B
shape with random weights, 1K to 32K tokens. Lab 1: the same model with real prefix reuse (a
2,000-token shared prompt); vLLM's offline engine (the notebook's ``lab1`` job: the engine is shut
down and its GPU memory seen back before anything else starts); then vLLM's servers (the
``serving`` job, started one after the other). Lab 3: the live prefill/decode split with vLLM's
``NixlConnector`` (:func:`kvlab.measure.disagg.pd_split.run_nixl_split` with ``device="cuda"``): two
engines on the one GPU, each with its share of GPU memory, the decode engine pulling each request's
KV from the prefill engine's GPU memory; the bytes against the formula, the output against the
colocated run, the control (prompt i decoded with prompt i+1's KV). Each part is tried on its own:
a part that fails is recorded with its reason and the parts before it are kept. Nothing is invented.

Every file's ``machine`` block names the GPU, driver, CUDA, torch, vLLM and transformers versions,
the commit, the model and its revision, the date and the command.

``--dry-run`` runs the same jobs on the CPU: the copies and the prefill with small sizes, gloo, and
vLLM's CPU build in the engine environment with the tiny model (Lab 3: both engines on the CPU,
NIXL through host memory, under the engine lock, ``KVLAB_ENGINE_LOCK``). Its files say ``dry_run: true`` and
carry ``dry-run`` in their names; the lab pages never show them as GPU results.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))


def _python_problem() -> str | None:
    """tools/python_check.py's verdict on this Python (standard library only: it runs before
    kvlab's imports, which a Python too old for the GPU set may not have)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("python_check", ROOT / "tools/python_check.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.problem()


if __name__ == "__main__" and (_why := _python_problem()):  # a bare Python 3.10 box: why, stop
    print(_why, file=sys.stderr)
    sys.exit(1)

from kvlab import calc, models  # noqa: E402  (after the sys.path line above)
from kvlab.measure import discover  # noqa: E402
from kvlab.measure.disagg import pd_split  # noqa: E402
from kvlab.measure.prefix import runs  # noqa: E402
from kvlab.measure.prefix.engine_jobs import LAB1_FLEET, LAB1_REPLAY  # noqa: E402
from kvlab.measure.recording import results  # noqa: E402
from kvlab.measure.serving import engine  # noqa: E402
from kvlab.measure.serving.deadline import TimeLimit, time_limit  # noqa: E402
from kvlab.measure.transfer import copies  # noqa: E402
from kvlab.measure.transfer import distributed as transfer  # noqa: E402

#: PyPI's torch 2.13.0 (requirements-gpu.txt) is a CUDA 13 build: CUDA 13.x runs on drivers from
#: 580 on (NVIDIA's CUDA minor-version compatibility table).
MIN_DRIVER_CUDA13 = 580


def driver_version() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), or None without one."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            check=False,
            capture_output=True,
            text=True,
            timeout=20,
        )
        return (
            out.stdout.strip().splitlines()[0]
            if out.returncode == 0 and out.stdout.strip()
            else None
        )
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def driver_problem(driver: str | None, torch_cuda: str | None) -> str | None:
    """Why torch cannot use the GPU with this driver, or None: a CUDA 13 build of torch needs a
    driver of :data:`MIN_DRIVER_CUDA13` or newer."""
    if driver is None or not torch_cuda or not torch_cuda.startswith("13"):
        return None
    try:
        major = int(driver.split(".")[0])
    except ValueError:
        return None
    if major >= MIN_DRIVER_CUDA13:
        return None
    return (
        f"NVIDIA driver {driver} is older than {MIN_DRIVER_CUDA13}, which torch's CUDA "
        f"{torch_cuda} build needs: update the driver, or use a machine with a newer one"
    )


#: Environment variable naming the commit a recording was made from where the copy of the
#: repository has no ``.git`` (a tarball, a copied working tree).
COMMIT_ENV = "KVLAB_COMMIT"


def git_commit() -> str | None:
    """This checkout's commit (short), with ``-dirty`` when files differ from it; without a
    ``.git`` (or a ``git`` that answers), ``$KVLAB_COMMIT``; None when neither says."""
    from_git = _git_commit() if (ROOT / ".git").exists() else None
    return from_git or os.environ.get(COMMIT_ENV, "").strip() or None


def commit_source() -> str | None:
    """Where :func:`git_commit`'s answer comes from: ``git``, ``$KVLAB_COMMIT``, or None."""
    if (ROOT / ".git").exists() and _git_commit():
        return "git"
    return f"${COMMIT_ENV}" if os.environ.get(COMMIT_ENV, "").strip() else None


def _git_commit() -> str | None:
    try:
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (head + ("-dirty" if dirty else "")) or None


def _version(dist: str) -> str | None:
    import importlib.metadata as md

    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def machine_block(d, command: str, dry_run: bool = False) -> dict:
    """Where, when and with what the recording was made (``d``: :func:`discover`'s answer)."""
    import torch

    block = {
        "gpu": d.gpu_name if not dry_run else f"none (dry run on {platform.machine()} CPU)",
        "gpus": d.gpus,
        "gpu_count": d.gpu_count,
        "peer_access": d.peer_access,
        "driver": driver_version(),
        "cuda": d.cuda_version,
        "torch": d.torch,
        "vllm": d.vllm or d.vllm_line(),
        "transformers": _version("transformers"),
        "nvidia_ml_py": _version("nvidia-ml-py"),
        "python": platform.python_version(),
        "colab": d.colab,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "commit": git_commit(),
        "commit_from": commit_source(),
        "date": dt.date.today().isoformat(),
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "kvlab_measure": "kvlab.measure (this repository)",
    }
    if dry_run:
        block["dry_run"] = True
    return block


def _sync(torch) -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _timed(fn, repeats):
    import torch

    times = []
    for _ in range(repeats):
        _sync(torch)
        t0 = time.perf_counter()
        fn()
        _sync(torch)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def prefill_sweep(model, tokens_list, repeats):
    import torch

    gen = torch.Generator().manual_seed(0)
    vocab = model.shape["vocab"]
    rows = []
    for t in tokens_list:
        ids = torch.randint(0, vocab, (t,), generator=gen)
        try:
            # a warm-up at each length: the kernels (and their workspaces) differ by shape, and
            # the first call at a new length pays for choosing and loading them
            _timed(lambda ids=ids: model(ids), 1)
            s, times = _timed(lambda ids=ids: model(ids), repeats)
        except torch.cuda.OutOfMemoryError as exc:
            rows.append({"tokens": t, "skipped": f"out of memory: {exc}".splitlines()[0]})
            torch.cuda.empty_cache()
            continue
        rows.append({"tokens": t, "seconds": s, "times_s": times})
    return rows


def prefix_reuse(model, shape_name, repeats, system_tokens=2000):
    import torch

    from kvlab.measure.prefix import prompts
    from kvlab.measure.prefix.pytorch_engine import (
        PrefixKVStore,
        PrefixReuseEngine,
        predicted_saving_s,
    )

    vocab = model.shape["vocab"]
    ps = prompts.build_lab1_token_prompts(
        requests=1 + repeats, system_tokens=system_tokens, vocab=vocab
    )
    store = PrefixKVStore(16)
    eng = PrefixReuseEngine(model, store)
    eng.prefill(prompts.build_lab1_token_prompts(1, 64, vocab=vocab, seed=9)[0])
    store.reset()
    warm = [eng.prefill(p, keep_logits=True) for p in ps]
    cold_engine = PrefixReuseEngine(model)
    cold = [cold_engine.prefill(p, keep_logits=True) for p in ps[1:]]
    match = all(c.first_token == w.first_token for c, w in zip(cold, warm[1:], strict=True))
    max_diff = max(
        float((c.logits - w.logits).abs().max()) for c, w in zip(cold, warm[1:], strict=True)
    )
    cold_s = statistics.median(c.seconds for c in cold)
    warm_s = statistics.median(w.seconds for w in warm[1:])
    P, c = len(ps[1]), warm[1].cached_tokens
    return {
        "shape": shape_name,
        "dtype": str(model.head.weight.dtype),
        "prompt_tokens": P,
        "cached_tokens": c,
        "cold_s": cold_s,
        "warm_s": warm_s,
        "saved_s": cold_s - warm_s,
        "predicted_saving_linear_s": predicted_saving_s(cold_s, P, c),
        "first_tokens_match": match,
        "max_abs_logit_diff": max_diff,
        "cached_per_request": [w.cached_tokens for w in warm],
        "torch_version": torch.__version__,
    }


def _error(exc: BaseException) -> dict:
    """A failed part as the recording keeps it."""
    return {
        "recorded": False,
        "reason": f"{type(exc).__name__}: {exc}",
        "traceback": traceback.format_exc()[-2000:],
    }


#: The parts of a recording, each run on its own and under its own time limit.
PARTS = (
    "lab2.copies",
    "lab2.send_recv",
    "lab2.prefill",
    "lab1.torch_prefix_reuse",
    "lab1.vllm",
    "lab1.vllm_serving",
    "lab3.nixl_split",
)
#: Seconds each part took in the CPU dry run, measured with
#: ``/usr/bin/time -v .venv/bin/python tools/record_gpu.py --dry-run --out DIR`` (Labs 1, 2 and 3
#: in one recorder, 271 s in all, 4 min 38 s with its start) on this project's 2-core build
#: machine while other jobs loaded it, 2026-12-05 (every recording keeps its own in ``part_s``).
DRY_RUN_PART_S = {
    "lab2.copies": 0.4,
    "lab2.send_recv": 9.7,
    "lab2.prefill": 2.3,
    "lab1.torch_prefix_reuse": 1.1,
    "lab1.vllm": 81.9,
    "lab1.vllm_serving": 122.9,
    "lab3.nixl_split": 52.8,
}
#: A GPU part may take this many times its dry run's time ...
LIMIT_MARGIN = 3.0
#: ... plus this much where it starts vLLM: on a GPU the first engine downloads the model (about
#: 1 GB for Qwen2.5-0.5B) and every engine initialises CUDA and profiles the GPU's memory, none of
#: which the CPU dry run does.
ENGINE_ALLOWANCE_S = 180.0
ENGINE_PARTS = ("lab1.vllm", "lab1.vllm_serving", "lab3.nixl_split")
#: No part gets less: the GPU's sizes are far larger than the dry run's (Lab 2 copies up to 64K
#: tokens of Llama 3 8B's KV, 8.6 GB, where the dry run copies 4K tokens of Qwen2.5-0.5B's, 50 MB),
#: which the GPU's speed does not make up for in the copies through pageable host memory.
MIN_LIMIT_S = 120.0


def part_limit_s(part: str) -> float:
    """The time limit of ``part`` on a GPU: :data:`LIMIT_MARGIN` times its dry run's seconds,
    plus :data:`ENGINE_ALLOWANCE_S` where it starts vLLM, at least :data:`MIN_LIMIT_S`."""
    if part not in DRY_RUN_PART_S:
        raise ValueError(f"part must be one of {sorted(DRY_RUN_PART_S)}, got {part!r}")
    extra = ENGINE_ALLOWANCE_S if part in ENGINE_PARTS else 0.0
    return max(MIN_LIMIT_S, math.ceil(LIMIT_MARGIN * DRY_RUN_PART_S[part] + extra))


def limit_text(part: str, limit_s: float) -> str:
    """How ``part``'s limit was set, for the row of a part that ran past it."""
    if part not in DRY_RUN_PART_S or limit_s != part_limit_s(part):
        return f"limit {limit_s:g} s"
    extra = f" + {ENGINE_ALLOWANCE_S:g} s to start vLLM" if part in ENGINE_PARTS else ""
    return (
        f"limit {limit_s:g} s: {LIMIT_MARGIN:g} x the CPU dry run's "
        f"{DRY_RUN_PART_S[part]:g} s{extra}, at least {MIN_LIMIT_S:g} s"
    )


def gpu_limits(labs: list[str]) -> dict[str, float]:
    """Every part's limit for the labs in ``labs`` (:func:`part_limit_s`)."""
    return {p: part_limit_s(p) for p in PARTS if p.split(".")[0] in labs}


#: Seconds a recorder process needs beyond its parts' limits (imports, the model's set-up,
#: writing the files): ``gpu_day.sh`` stops a recorder only after the parts' limits and this.
START_AND_SAVE_S = 120.0


def run_part(
    rec: dict,
    key: str,
    part: str,
    fn: Callable[[], object],
    limit_s: float | None,
    save: Callable[[dict], object] | None = None,
    as_row: Callable[[dict], object] | None = None,
) -> object:
    """``rec[key] = fn()``, run under ``limit_s`` seconds (None: no limit), the part's seconds in
    ``rec["part_s"][part]``. Before it starts, ``rec[key]`` holds a row saying the part did not
    finish, and ``save(rec)`` writes it: a recorder stopped from outside (``gpu_day.sh``'s
    ``timeout``, a hung call into C that the limit's alarm cannot interrupt) leaves that row and
    its reason. A part past its limit is stopped (:func:`kvlab.measure.serving.deadline.time_limit`)
    and recorded as not run, with the limit and how it was set; a failing part with its error.
    ``as_row`` turns such a row into the part's own shape (a list of rows for Lab 2's copies)."""
    shape = as_row or (lambda row: row)
    rec[key] = shape(
        {
            "recorded": False,
            "reason": f"not finished: the recorder was stopped while this part ran "
            f"({limit_text(part, limit_s) if limit_s else 'no limit'})",
            "killed": True,
        }
    )
    if save is not None:
        save(rec)
    t0 = time.time()
    try:
        with time_limit(limit_s, f"part {part}"):
            value = fn()
    except TimeLimit as exc:
        value = shape(
            {
                "recorded": False,
                "reason": f"{exc} ({limit_text(part, exc.limit_s)})",
                "timed_out": True,
            }
        )
    except Exception as exc:  # noqa: BLE001 - record the failure, keep going
        value = shape(_error(exc))
    elapsed = time.time() - t0
    if isinstance(value, dict):
        value.setdefault("elapsed_s", elapsed)
        if limit_s:
            value["limit_s"] = limit_s
    rec[key] = value
    rec.setdefault("part_s", {})[part] = elapsed
    if save is not None:
        save(rec)
    print(f"{part}: {elapsed:.0f} s" + (f" (limit {limit_s:g} s)" if limit_s else ""))
    return value


def plan(gpu: bool, quick: bool, dry_run: bool) -> dict:
    """Sizes and parameters of every part: the GPU's, or small ones for a dry run on the CPU."""
    if dry_run:
        return {
            "repeats": 2,
            "copy_tokens": [1024, 4096],
            "copy_shape": models.QWEN25_05B,
            "send_tokens": [1024],
            "prefill_tokens": [128, 256],
            "prefill_shape": models.TINY_LAB,
            "reuse_system_tokens": 256,
            "lab1": dict(
                model=None,
                block_size=32,
                num_blocks=160,
                system_tokens=256,
                requests=3,
                fit_lengths=(128, 256),
                fit_repeats=1,
                hit_pairs=1,
                replay=None,
            ),
            "serving": dict(
                model=None,
                block_size=32,
                num_blocks=96,
                system_tokens=256,
                demo_requests=2,
                fleet_workload=dict(LAB1_FLEET, requests=16),
                policies=("random", "cache_aware"),
                warmup=4,
            ),
            "lab3": dict(model=None, device="cpu", prompts=2, prompt_tokens=512, max_tokens=8),
        }
    from kvlab.measure.prefix import vllm_lab

    blocks = 160 * 32 // vllm_lab.GPU_BLOCK_SIZE  # the notebook's pool: 5,120 tokens of KV
    return {
        "repeats": 2 if quick else 5,
        "copy_tokens": [1024, 4096, 16384, 65536]
        if quick
        else [1024, 2048, 4096, 8192, 16384, 32768, 65536],
        "copy_shape": models.LLAMA3_8B,
        "send_tokens": [1024, 8192, 32768],
        "prefill_tokens": [1024, 4096, 16384] if quick else [1024, 2048, 4096, 8192, 16384, 32768],
        "prefill_shape": None,  # chosen by the GPU's free memory
        "reuse_system_tokens": 2000,
        "lab1": dict(
            model=vllm_lab.DEFAULT_GPU_MODEL,
            block_size=vllm_lab.GPU_BLOCK_SIZE,
            num_blocks=blocks,
            system_tokens=2000,
            requests=20 if quick else 100,
            replay=None if quick else LAB1_REPLAY,
        ),
        "serving": dict(
            model=vllm_lab.DEFAULT_GPU_MODEL,
            block_size=vllm_lab.GPU_BLOCK_SIZE,
            num_blocks=blocks,
            system_tokens=1000,
            demo_requests=8,
            fleet_workload=None if quick else LAB1_FLEET,
            warmup=20,
        ),
        # the lab page's own run: 3 prompts of 2,000 tokens, 16 tokens decoded
        "lab3": dict(
            model=pd_split.GPU_MODEL, device="cuda", prompts=3, prompt_tokens=2000, max_tokens=16
        ),
    }


def make_prefill_model(d, p: dict):
    """The PyTorch model both labs time: Llama 3 8B shape on a GPU with 30 GB free, else the
    Qwen2.5-0.5B shape; the tiny shape on a dry run's CPU. Returns ``(model, shape name,
    dtype)``."""
    import torch

    from kvlab.measure.prefix.pytorch_engine import make_model

    if d.device != "cuda":
        shape = p["prefill_shape"]
        return make_model(shape, vocab=1024, device="cpu"), shape.name, torch.float32
    dtype = torch.bfloat16 if torch.cuda.get_device_capability(0)[0] >= 8 else torch.float16
    if torch.cuda.mem_get_info(0)[0] > 30e9:
        shape, ffn = models.LLAMA3_8B, 14336
    else:  # a T4 or L4: the Lab 1 model's shape fits
        shape, ffn = models.QWEN25_05B, 4864
    model = make_model(shape, vocab=32_000, device="cuda", dtype=dtype, ffn_dim=ffn)
    return model, shape.name, dtype


def record_lab2(
    d,
    p: dict,
    machine: dict,
    model,
    model_shape: str,
    dtype,
    limits: dict | None = None,
    save: Callable[[dict], object] | None = None,
) -> dict:
    """Lab 2's parts, each on its own (:func:`run_part`: a failed part, or one past its limit in
    ``limits``, is recorded with its reason; ``save`` writes the record before and after each)."""
    limits = limits or {}
    shape = p["copy_shape"]
    lab2: dict = {
        "machine": machine,
        "shape": shape.name,
        "kv_bytes_per_token": calc.model_kv_bytes_per_token(shape),
    }

    def copy_part():
        res, skipped = copies.kv_copy_sweep(shape, p["copy_tokens"], repeats=p["repeats"], warmup=2)
        lab2["copies_skipped"] = [{"kind": k, "tokens": t, "reason": why} for k, t, why in skipped]
        return [r.as_dict() for r in res]

    run_part(
        lab2,
        "copies",
        "lab2.copies",
        copy_part,
        limits.get("lab2.copies"),
        save,
        as_row=lambda row: [{"kind": "all", "error": row["reason"]}],
    )
    per_token = calc.model_kv_bytes_per_token(models.QWEN25_05B if d.device != "cuda" else shape)
    sizes = [int(calc.kv_bytes(t, per_token)) for t in p["send_tokens"]]

    def send_part():
        rows: list = []
        for backend in (["nccl"] if d.gpu_count >= 2 else []) + ["gloo"]:
            try:
                got = transfer.send_recv(
                    sizes, backend=backend, repeats=p["repeats"], timeout_s=300
                )
                rows += [r.as_dict() for r in got]
            except TimeLimit:
                raise
            except Exception as exc:  # noqa: BLE001 - record the failure, keep going
                rows.append({"backend": backend, "error": f"{type(exc).__name__}: {exc}"})
        return rows

    run_part(
        lab2,
        "send_recv",
        "lab2.send_recv",
        send_part,
        limits.get("lab2.send_recv"),
        save,
        as_row=lambda row: [{"backend": "all", "error": row["reason"]}],
    )
    if d.gpu_count < 2:
        lab2["nccl"] = {"recorded": False, "reason": "one GPU: NCCL send/recv needs two"}

    def prefill_part():
        return {
            "shape": model_shape,
            "dtype": str(dtype),
            "params": model.params,
            "kv_bytes_per_token": model.kv_bytes_per_token,
            "rows": prefill_sweep(model, p["prefill_tokens"], max(2, p["repeats"] // 2)),
        }

    run_part(lab2, "prefill", "lab2.prefill", prefill_part, limits.get("lab2.prefill"), save)
    return lab2


def record_lab1(
    machine: dict,
    p: dict,
    in_process: bool,
    run_job: Callable[..., dict] = runs.run_job,
    torch_part: Callable[[], dict] | None = None,
    skip_vllm: str | None = None,
    on_part: Callable[[dict], object] | None = None,
    release: Callable[[], object] | None = None,
    limits: dict | None = None,
) -> dict:
    """Lab 1's parts, each on its own (:func:`run_part`): the PyTorch prefix reuse
    (``torch_part``), the offline engine (the ``lab1`` job) and the servers (the ``serving`` job).
    A failing part, or one past its limit in ``limits``, is recorded with its reason and never
    takes the figures of another with it. ``skip_vllm``: the reason the vLLM parts are not run
    (None: run them). ``on_part`` is called with the record before and after each part (the
    recorder saves it, so a run stopped later keeps what was done and says what was not)."""
    limits = limits or {}
    lab1: dict = {"machine": machine}
    if torch_part is not None:
        run_part(
            lab1,
            "torch_prefix_reuse",
            "lab1.torch_prefix_reuse",
            torch_part,
            limits.get("lab1.torch_prefix_reuse"),
            on_part,
        )
    if release is not None:
        release()  # the PyTorch model's GPU memory goes back before vLLM measures what is free
    if skip_vllm:
        lab1["vllm"] = {"recorded": False, "reason": skip_vllm}
        lab1["vllm_serving"] = {"recorded": False, "reason": skip_vllm}
        return lab1

    def job(name: str, part: str) -> Callable[[], dict]:
        def go() -> dict:
            # a subprocess job is stopped at the same limit from outside
            out = run_job(name, p[name], in_process=in_process, timeout_s=limits.get(part) or 1800)
            out["recorded"] = True
            return out

        return go

    out = run_part(
        lab1, "vllm", "lab1.vllm", job("lab1", "lab1.vllm"), limits.get("lab1.vllm"), on_part
    )
    if isinstance(out, dict) and out.get("recorded"):
        model = out.get("engine_kwargs", {}).get("model")
        machine["model"] = engine.shown(model) if model else None
        machine["model_revision"] = out.get("model_revision")
        machine["vllm"] = out.get("vllm", machine.get("vllm"))
    print(f"vLLM engine: {'recorded' if lab1['vllm'].get('recorded') else 'FAILED'}")
    run_part(
        lab1,
        "vllm_serving",
        "lab1.vllm_serving",
        job("serving", "lab1.vllm_serving"),
        limits.get("lab1.vllm_serving"),
        on_part,
    )
    print(f"vLLM serving: {'recorded' if lab1['vllm_serving'].get('recorded') else 'FAILED'}")
    return lab1


def record_lab3(
    machine: dict,
    p: dict,
    run_split: Callable[..., pd_split.NixlSplit] = pd_split.run_nixl_split,
    config: Callable[[str], dict] = pd_split.model_config,
    skip: str | None = None,
    limits: dict | None = None,
    save: Callable[[dict], object] | None = None,
) -> dict:
    """Lab 3's live split (``p["lab3"]``), recorded with the fields the lab page reads
    (:func:`kvlab.measure.disagg.pd_split.split_summary` plus the configuration: device, dtype,
    memory shares, ``kv_transfer_config``, the kernel settings); a failure, or a run past its
    limit in ``limits``, is recorded with its reason (:func:`run_part`)."""
    from kvlab.measure.prefix.engine_jobs import model_revision

    limit = (limits or {}).get("lab3.nixl_split")
    q = p["lab3"]
    model = str(q["model"] or engine.TINY_MODEL_DIR)
    lab3: dict = {"machine": machine}
    machine["model"] = engine.shown(model)
    if skip:
        lab3["nixl_split"] = {"recorded": False, "reason": skip}
        return lab3

    def split_part() -> dict:
        machine["model_revision"] = model_revision(model)
        cfg = config(model)
        shape = pd_split.shape_from_dict(cfg, Path(model).name)
        beta = calc.kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 4)
        prompts = pd_split.random_prompts(int(cfg["vocab_size"]), q["prompts"], q["prompt_tokens"])
        wait = {"timeout_s": limit} if limit else {}  # the engines' own waits end there too
        live = run_split(model, prompts, max_tokens=q["max_tokens"], device=q["device"], **wait)
        summary = pd_split.split_summary(live, beta)
        kwargs, env = pd_split.engine_configs(model, q["device"])["prefill"]
        summary.update(
            kernels={k: env[k] for k in pd_split.GPU_KERNEL_ENV if k in env},
            recorded=True,
            model=engine.shown(model),
            dtype=kwargs["dtype"],
            kv_transfer_config=kwargs["kv_transfer_config"],
            memory_shares=dict(pd_split.GPU_MEMORY_SHARE) if q["device"] == "cuda" else None,
            max_tokens=q["max_tokens"],
            split=live.as_dict(),
        )
        return summary

    run_part(lab3, "nixl_split", "lab3.nixl_split", split_part, limit, save)
    print(f"Lab 3 NIXL split: {'recorded' if lab3['nixl_split'].get('recorded') else 'FAILED'}")
    return lab3


#: Where a hub model comes from when it is not in the Hugging Face cache.
HUB_HOST = ("huggingface.co", 443)


def hub_reachable(timeout_s: float = 5.0) -> bool:
    """Whether huggingface.co answers on port 443 (False with ``HF_HUB_OFFLINE=1``)."""
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        return False
    try:
        with socket.create_connection(HUB_HOST, timeout=timeout_s):
            return True
    except OSError:
        return False


def model_problem(model: str, reachable: Callable[[], bool] = hub_reachable) -> str | None:
    """Why the vLLM parts cannot load ``model`` here (None when they can): a local folder
    without ``config.json``, or a hub id neither in the Hugging Face cache nor downloadable."""
    if engine.is_local_model(model):
        ok = (Path(model) / "config.json").is_file()
        return None if ok else f"model folder {model} has no config.json"
    try:
        from huggingface_hub import try_to_load_from_cache  # type: ignore[import-not-found]

        cached = try_to_load_from_cache(model, "config.json")
    except ImportError:
        cached = None
    if isinstance(cached, str):
        return None
    if reachable():
        return None
    return (
        f"model {model} is not in the Hugging Face cache and huggingface.co cannot be reached "
        "(no network): copy the model to this machine and pass --vllm-model DIR"
    )


def capabilities(
    d,
    p: dict,
    labs: list[str],
    dry_run: bool,
    no_vllm: bool = False,
    vllm_here: Callable[[], bool] = engine.vllm_here,
    nixl_here: Callable[[], bool] | None = None,
    reachable: Callable[[], bool] = hub_reachable,
) -> dict[str, str | None]:
    """For each part of ``labs``: None when this machine can record it, else why not (what the
    recorder says at its start, and records for the parts it skips). Lab 2 and Lab 1's PyTorch
    part need torch only; the vLLM parts need vLLM and the model (in the Hugging Face cache, a
    local folder, or the network); Lab 3 also needs NIXL."""
    import importlib.util

    if nixl_here is None:
        nixl_here = lambda: importlib.util.find_spec("nixl") is not None  # noqa: E731
    out: dict[str, str | None] = {}
    vllm_why: str | None = None
    if no_vllm:
        vllm_why = "skipped by --no-vllm"
    elif dry_run:
        vllm_why = recorded_why_not()
    elif not vllm_here():
        vllm_why = "vLLM is not installed in this Python (pip install -r requirements-gpu.txt)"
    model_why: dict[str, str | None] = {}
    for part in PARTS:
        lab = part.split(".")[0]
        if lab not in labs:
            continue
        if part not in ENGINE_PARTS:
            out[part] = None
            continue
        why = vllm_why
        if why is None and part == "lab3.nixl_split" and not dry_run and not nixl_here():
            why = "NIXL is not installed in this Python (pip install -r requirements-gpu.txt)"
        if why is None and not dry_run:
            model = str((p["lab3"] if lab == "lab3" else p["lab1"])["model"])
            if model not in model_why:
                model_why[model] = model_problem(model, reachable)
            why = model_why[model]
        if why is None and lab == "lab3" and not dry_run and d.device != "cuda":
            why = "no CUDA GPU here"
        out[part] = why
    return out


def recorded_why_not() -> str | None:
    """The dry run's engine parts need the engine environment and the tiny model."""
    from kvlab.measure.recording import recorded

    return recorded.why_not_here()


def capability_lines(can: dict[str, str | None]) -> list[str]:
    """What :func:`capabilities` found, as the lines the recorder prints at its start."""
    lines = ["What this run can record here:"]
    for part, why in can.items():
        lines.append(f"  {part}: " + ("yes" if why is None else f"no: {why}"))
    if any(why for why in can.values()):
        lines.append(
            "  (parts marked no are written as not recorded, with that reason; a machine without"
            " network and without vLLM and NIXL records Lab 2 and Lab 1's PyTorch part only)"
        )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and lengths")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: results/)")
    ap.add_argument("--no-vllm", action="store_true", help="skip vLLM even if installed")
    ap.add_argument("--vllm-model", default=None, help="model for the vLLM part")
    ap.add_argument(
        "--dry-run",
        action="store_true",
        help="run every job on the CPU (engine environment, tiny model); writes to a temporary "
        "folder unless --out is given; the files are marked as a dry run",
    )
    ap.add_argument(
        "--labs", default="lab1,lab2,lab3", help="which labs to record (default: all three)"
    )
    ap.add_argument(
        "--total-limit",
        action="store_true",
        help="print the seconds a recorder of --labs may take (its parts' limits and "
        f"{START_AND_SAVE_S:g} s to start and save; what gpu_day.sh gives it) and exit",
    )
    args = ap.parse_args(argv)
    labs = [x.strip() for x in args.labs.split(",") if x.strip()]
    for lab in labs:
        if lab not in results.LABS:
            ap.error(f"--labs takes {', '.join(results.LABS)}, got {lab!r}")
    if args.total_limit:
        print(math.ceil(sum(gpu_limits(labs).values()) + START_AND_SAVE_S))
        return 0
    command = "python tools/record_gpu.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)
    )
    d = discover()
    print("\n".join(d.lines()))
    if d.device != "cuda" and not args.dry_run:
        why = driver_problem(driver_version(), d.cuda_version)
        print(why or "No CUDA GPU here: nothing to record (--dry-run checks the code on a CPU).")
        return 1
    out_dir = args.out
    if args.dry_run and out_dir is None:
        out_dir = Path(tempfile.mkdtemp(prefix="kvlab-dry-run-"))
    import torch

    p = plan(d.device == "cuda", args.quick, args.dry_run)
    if args.vllm_model:
        p["lab1"]["model"] = p["serving"]["model"] = p["lab3"]["model"] = args.vllm_model
    can = capabilities(d, p, labs, args.dry_run, no_vllm=args.no_vllm)
    print("\n".join(capability_lines(can)))
    # the dry run is where the parts' times are measured: it runs without limits
    limits = None if args.dry_run else gpu_limits(labs)
    if limits:
        print("time limits: " + ", ".join(f"{k} {v:g} s" for k, v in limits.items()))
    machine = machine_block(d, command.strip(), dry_run=args.dry_run)
    date = machine["date"]
    gpu_name = d.gpu_name or "cpu"
    start = time.time()
    held: dict = {}  # the PyTorch model of Labs 1 and 2, released before vLLM starts
    model_shape, dtype = None, None
    if "lab1" in labs or "lab2" in labs:
        held["model"], model_shape, dtype = make_prefill_model(d, p)
    written = []

    def saver(lab: str) -> Callable[[dict], object]:
        return lambda rec: results.save_results(lab, rec, gpu_name, date, out_dir)

    if "lab2" in labs:
        lab2 = record_lab2(
            d, p, dict(machine), held["model"], model_shape, dtype, limits, saver("lab2")
        )
        lab2["elapsed_s"] = time.time() - start
        written.append(results.save_results("lab2", lab2, gpu_name, date, out_dir))
        print(f"wrote {written[-1]}")
    if "lab1" in labs:
        skip = can.get("lab1.vllm") or can.get("lab1.vllm_serving")

        def torch_part():
            return prefix_reuse(held["model"], model_shape, p["repeats"], p["reuse_system_tokens"])

        def release():
            held.clear()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

        lab1 = record_lab1(
            dict(machine),
            p,
            in_process=not args.dry_run,
            torch_part=torch_part,
            skip_vllm=skip,
            on_part=saver("lab1"),
            release=release,
            limits=limits,
        )
        written.append(results.save_results("lab1", lab1, gpu_name, date, out_dir))
        print(f"wrote {written[-1]}")
    held.clear()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if "lab3" in labs:
        lab3 = record_lab3(
            dict(machine), p, skip=can.get("lab3.nixl_split"), limits=limits, save=saver("lab3")
        )
        written.append(results.save_results("lab3", lab3, gpu_name, date, out_dir))
        print(f"wrote {written[-1]}")
    print(f"{time.time() - start:.0f} s in all")
    for path in written:
        print(results.describe(path.name.split("-")[0], results.load_results_file(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
