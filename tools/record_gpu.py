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
import platform
import shlex
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

from kvlab import calc, models  # noqa: E402  (after the sys.path line above)
from kvlab.measure import discover  # noqa: E402
from kvlab.measure.disagg import pd_split  # noqa: E402
from kvlab.measure.prefix import runs  # noqa: E402
from kvlab.measure.prefix.engine_jobs import LAB1_FLEET, LAB1_REPLAY  # noqa: E402
from kvlab.measure.recording import results  # noqa: E402
from kvlab.measure.serving import engine  # noqa: E402
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


def git_commit() -> str | None:
    """This checkout's commit (short), with ``-dirty`` when files differ from it."""
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
    model(torch.randint(0, vocab, (min(512, min(tokens_list)),), generator=gen))  # warm-up
    for t in tokens_list:
        ids = torch.randint(0, vocab, (t,), generator=gen)
        try:
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


def record_lab2(d, p: dict, machine: dict, model, model_shape: str, dtype) -> dict:
    """Lab 2's parts, each on its own (a failed part is recorded with its reason)."""
    shape = p["copy_shape"]
    lab2: dict = {
        "machine": machine,
        "shape": shape.name,
        "kv_bytes_per_token": calc.model_kv_bytes_per_token(shape),
    }
    t0 = time.time()
    try:
        res, skipped = copies.kv_copy_sweep(shape, p["copy_tokens"], repeats=p["repeats"], warmup=2)
        lab2["copies"] = [r.as_dict() for r in res]
        lab2["copies_skipped"] = [{"kind": k, "tokens": t, "reason": why} for k, t, why in skipped]
    except Exception as exc:  # noqa: BLE001 - record the failure, keep going
        lab2["copies"] = [{"kind": "all", "error": f"{type(exc).__name__}: {exc}"}]
    print(f"copies: {len(lab2['copies'])} rows in {time.time() - t0:.0f} s")
    per_token = calc.model_kv_bytes_per_token(models.QWEN25_05B if d.device != "cuda" else shape)
    sizes = [int(calc.kv_bytes(t, per_token)) for t in p["send_tokens"]]
    lab2["send_recv"] = []
    for backend in (["nccl"] if d.gpu_count >= 2 else []) + ["gloo"]:
        try:
            rows = transfer.send_recv(sizes, backend=backend, repeats=p["repeats"], timeout_s=300)
            lab2["send_recv"] += [r.as_dict() for r in rows]
        except Exception as exc:  # noqa: BLE001 - record the failure, keep going
            lab2["send_recv"].append({"backend": backend, "error": f"{type(exc).__name__}: {exc}"})
    if d.gpu_count < 2:
        lab2["nccl"] = {"recorded": False, "reason": "one GPU: NCCL send/recv needs two"}
    t0 = time.time()
    try:
        lab2["prefill"] = {
            "shape": model_shape,
            "dtype": str(dtype),
            "params": model.params,
            "kv_bytes_per_token": model.kv_bytes_per_token,
            "rows": prefill_sweep(model, p["prefill_tokens"], max(2, p["repeats"] // 2)),
        }
    except Exception as exc:  # noqa: BLE001
        lab2["prefill"] = _error(exc)
    print(f"prefill sweep in {time.time() - t0:.0f} s")
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
) -> dict:
    """Lab 1's parts, each in its own ``try``: the PyTorch prefix reuse (``torch_part``), the
    offline engine (the ``lab1`` job) and the servers (the ``serving`` job). A failing part is
    recorded with its reason and never takes the figures of another with it. ``skip_vllm``: the
    reason the vLLM parts are not run (None: run them). ``on_part`` is called with the record
    after each part (the recorder saves it, so a run stopped later keeps what was done)."""
    lab1: dict = {"machine": machine}
    if torch_part is not None:
        try:
            lab1["torch_prefix_reuse"] = torch_part()
        except Exception as exc:  # noqa: BLE001 - record the failure, keep going
            lab1["torch_prefix_reuse"] = _error(exc)
    if release is not None:
        release()  # the PyTorch model's GPU memory goes back before vLLM measures what is free
    if skip_vllm:
        lab1["vllm"] = {"recorded": False, "reason": skip_vllm}
        lab1["vllm_serving"] = {"recorded": False, "reason": skip_vllm}
        return lab1
    t0 = time.time()
    try:
        out = run_job("lab1", p["lab1"], in_process=in_process, timeout_s=1800)
        out["recorded"] = True
        lab1["vllm"] = out
        model = out.get("engine_kwargs", {}).get("model")
        machine["model"] = engine.shown(model) if model else None
        machine["model_revision"] = out.get("model_revision")
        machine["vllm"] = out.get("vllm", machine.get("vllm"))
    except Exception as exc:  # noqa: BLE001 - record the failure, keep going
        lab1["vllm"] = _error(exc)
    lab1["vllm"]["elapsed_s"] = time.time() - t0
    if on_part is not None:
        on_part(lab1)
    print(f"vLLM engine: {'recorded' if lab1['vllm'].get('recorded') else 'FAILED'}")
    t0 = time.time()
    try:
        out = run_job("serving", p["serving"], in_process=in_process, timeout_s=1800)
        out["recorded"] = True
        lab1["vllm_serving"] = out
    except Exception as exc:  # noqa: BLE001 - record the failure, the engine's figures stay
        lab1["vllm_serving"] = _error(exc)
    lab1["vllm_serving"]["elapsed_s"] = time.time() - t0
    print(f"vLLM serving: {'recorded' if lab1['vllm_serving'].get('recorded') else 'FAILED'}")
    return lab1


def record_lab3(
    machine: dict,
    p: dict,
    run_split: Callable[..., pd_split.NixlSplit] = pd_split.run_nixl_split,
    config: Callable[[str], dict] = pd_split.model_config,
    skip: str | None = None,
) -> dict:
    """Lab 3's live split (``p["lab3"]``), recorded with the fields the lab page reads
    (:func:`kvlab.measure.disagg.pd_split.split_summary` plus the configuration: device, dtype, memory
    shares, ``kv_transfer_config``); a failure is recorded with its reason."""
    from kvlab.measure.prefix.engine_jobs import model_revision

    q = p["lab3"]
    model = str(q["model"] or engine.TINY_MODEL_DIR)
    lab3: dict = {"machine": machine}
    machine["model"] = engine.shown(model)
    if skip:
        lab3["nixl_split"] = {"recorded": False, "reason": skip}
        return lab3
    t0 = time.time()
    try:
        machine["model_revision"] = model_revision(model)
        cfg = config(model)
        shape = pd_split.shape_from_dict(cfg, Path(model).name)
        beta = calc.kv_bytes_per_token(shape.layers, shape.kv_heads, shape.head_dim, 4)
        prompts = pd_split.random_prompts(int(cfg["vocab_size"]), q["prompts"], q["prompt_tokens"])
        live = run_split(model, prompts, max_tokens=q["max_tokens"], device=q["device"])
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
        lab3["nixl_split"] = summary
    except Exception as exc:  # noqa: BLE001 - record the failure
        lab3["nixl_split"] = _error(exc)
    lab3["nixl_split"]["elapsed_s"] = time.time() - t0
    print(f"Lab 3 NIXL split: {'recorded' if lab3['nixl_split'].get('recorded') else 'FAILED'}")
    return lab3


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
    args = ap.parse_args(argv)
    labs = [x.strip() for x in args.labs.split(",") if x.strip()]
    for lab in labs:
        if lab not in results.LABS:
            ap.error(f"--labs takes {', '.join(results.LABS)}, got {lab!r}")
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
    machine = machine_block(d, command.strip(), dry_run=args.dry_run)
    date = machine["date"]
    gpu_name = d.gpu_name or "cpu"
    start = time.time()
    held: dict = {}  # the PyTorch model of Labs 1 and 2, released before vLLM starts
    model_shape, dtype = None, None
    if "lab1" in labs or "lab2" in labs:
        held["model"], model_shape, dtype = make_prefill_model(d, p)
    written = []
    if "lab2" in labs:
        lab2 = record_lab2(d, p, dict(machine), held["model"], model_shape, dtype)
        lab2["elapsed_s"] = time.time() - start
        written.append(results.save_results("lab2", lab2, gpu_name, date, out_dir))
        print(f"wrote {written[-1]}")
    if "lab1" in labs:
        if args.no_vllm:
            skip = "skipped by --no-vllm"
        elif not args.dry_run and not engine.vllm_here():
            skip = "vllm not installed in this Python (pip install -r requirements-gpu.txt)"
        else:
            skip = None

        def torch_part():
            return prefix_reuse(held["model"], model_shape, p["repeats"], p["reuse_system_tokens"])

        def release():
            held.clear()
            if torch.cuda.is_available():
                torch.cuda.empty_cache()

        def save(lab1: dict) -> object:
            return results.save_results("lab1", lab1, gpu_name, date, out_dir)

        lab1 = record_lab1(
            dict(machine),
            p,
            in_process=not args.dry_run,
            torch_part=torch_part,
            skip_vllm=skip,
            on_part=save,
            release=release,
        )
        written.append(results.save_results("lab1", lab1, gpu_name, date, out_dir))
        print(f"wrote {written[-1]}")
    held.clear()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if "lab3" in labs:
        if args.no_vllm:
            skip3 = "skipped by --no-vllm"
        elif not args.dry_run and not pd_split.gpu_here():
            skip3 = (
                "vllm or nixl not installed in this Python (pip install -r requirements-gpu.txt)"
            )
        else:
            skip3 = None
        lab3 = record_lab3(dict(machine), p, skip=skip3)
        written.append(results.save_results("lab3", lab3, gpu_name, date, out_dir))
        print(f"wrote {written[-1]}")
    print(f"{time.time() - start:.0f} s in all")
    for path in written:
        print(results.describe(path.name.split("-")[0], results.load_results_file(path)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
