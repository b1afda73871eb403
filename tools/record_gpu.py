"""Record both labs' GPU measurements into results/ (one command, a few minutes on a GPU).

Usage (from the repository root, on a machine with a CUDA GPU):

    python tools/record_gpu.py            # writes results/lab1-<gpu>-<date>.json and lab2-...
    python tools/record_gpu.py --quick    # fewer repeats and lengths (a smoke run)

Lab 2: every copy path this machine has (host<->GPU pinned and pageable, same-GPU copy, GPU to
GPU when there are two) for one request's KV at Llama 3 8B shape, 1K to 64K tokens; send/recv
between two processes (NCCL with two GPUs, gloo always); prefill of a PyTorch model at Llama 3 8B
shape with random weights, 1K to 32K tokens. Lab 1: the same model with real prefix reuse (a
2,000-token shared prompt) and, when vLLM is installed, the vLLM prefix-caching experiment;
without vLLM its figures are marked as not recorded. Nothing is invented: a part that cannot run
is recorded with the reason.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shlex
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "lib"))

from kvlab import calc, models  # noqa: E402  (after the sys.path line above)
from kvlab.measure import copies, discover, results, transfer  # noqa: E402
from kvlab.measure.engine_jobs import LAB1_FLEET, LAB1_REPLAY  # noqa: E402


def driver_version() -> str | None:
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


def machine_block(d, command: str) -> dict:
    import torch

    return {
        "gpu": d.gpu_name,
        "gpus": d.gpus,
        "gpu_count": d.gpu_count,
        "peer_access": d.peer_access,
        "driver": driver_version(),
        "cuda": d.cuda_version,
        "torch": d.torch,
        "vllm": d.vllm,
        "python": platform.python_version(),
        "colab": d.colab,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "date": dt.date.today().isoformat(),
        "recorded_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "kvlab_measure": "kvlab.measure (this repository)",
    }


def _timed(fn, repeats):
    import torch

    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), times


def prefill_sweep(model, tokens_list, repeats):
    import torch

    gen = torch.Generator().manual_seed(0)
    vocab = model.shape["vocab"]
    rows = []
    model(torch.randint(0, vocab, (512,), generator=gen))  # warm-up
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


def prefix_reuse(model, shape_name, repeats):
    import torch

    from kvlab.measure import prompts
    from kvlab.measure.model import PrefixKVStore, PrefixReuseEngine, predicted_saving_s

    vocab = model.shape["vocab"]
    ps = prompts.build_lab1_token_prompts(requests=1 + repeats, system_tokens=2000, vocab=vocab)
    store = PrefixKVStore(16)
    engine = PrefixReuseEngine(model, store)
    engine.prefill(prompts.build_lab1_token_prompts(1, 64, vocab=vocab, seed=9)[0])
    store.reset()
    warm = [engine.prefill(p, keep_logits=True) for p in ps]
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repeats and lengths")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: results/)")
    ap.add_argument("--no-vllm", action="store_true", help="skip vLLM even if installed")
    ap.add_argument("--vllm-model", default=None, help="model for the vLLM part")
    args = ap.parse_args(argv)
    command = "python tools/record_gpu.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    d = discover()
    print("\n".join(d.lines()))
    if d.device != "cuda":
        print("No CUDA GPU here: nothing to record (the notebooks' CPU path runs anywhere).")
        return 1
    import torch

    from kvlab.measure.model import make_model

    repeats = 2 if args.quick else 5
    tokens = (
        [1024, 4096, 16384, 65536] if args.quick else [1024, 2048, 4096, 8192, 16384, 32768, 65536]
    )
    machine = machine_block(d, command.strip())
    date = machine["date"]
    shape = models.LLAMA3_8B

    # --- Lab 2 -------------------------------------------------------------------------------
    lab2 = {
        "machine": machine,
        "shape": shape.name,
        "kv_bytes_per_token": calc.model_kv_bytes_per_token(shape),
    }
    t0 = time.time()
    res, skipped = copies.kv_copy_sweep(shape, tokens, repeats=repeats, warmup=2)
    lab2["copies"] = [r.as_dict() for r in res]
    lab2["copies_skipped"] = [{"kind": k, "tokens": t, "reason": why} for k, t, why in skipped]
    print(f"copies: {len(res)} timed in {time.time() - t0:.0f} s")
    xfer_sizes = [int(calc.kv_bytes(t, lab2["kv_bytes_per_token"])) for t in (1024, 8192, 32768)]
    lab2["send_recv"] = []
    for backend in (["nccl"] if d.gpu_count >= 2 else []) + ["gloo"]:
        try:
            rows = transfer.send_recv(xfer_sizes, backend=backend, repeats=repeats, timeout_s=300)
            lab2["send_recv"] += [r.as_dict() for r in rows]
        except Exception as exc:  # noqa: BLE001 - record the failure, keep going
            lab2["send_recv"].append({"backend": backend, "error": f"{type(exc).__name__}: {exc}"})
    if d.gpu_count < 2:
        lab2["nccl"] = {"recorded": False, "reason": "one GPU: NCCL send/recv needs two"}
    dtype = torch.bfloat16 if torch.cuda.get_device_capability(0)[0] >= 8 else torch.float16
    model = None
    free = torch.cuda.mem_get_info(0)[0]
    if free > 30e9:
        model = make_model(shape, vocab=32_000, device="cuda", dtype=dtype, ffn_dim=14336)
        model_shape = shape.name
    else:  # a T4 or L4: the Lab 1 model's shape fits
        model = make_model(
            models.QWEN25_05B, vocab=32_000, device="cuda", dtype=dtype, ffn_dim=4864
        )
        model_shape = models.QWEN25_05B.name
    t0 = time.time()
    prefill_tokens = [1024, 4096, 16384] if args.quick else [1024, 2048, 4096, 8192, 16384, 32768]
    lab2["prefill"] = {
        "shape": model_shape,
        "dtype": str(dtype),
        "params": model.params,
        "kv_bytes_per_token": model.kv_bytes_per_token,
        "rows": prefill_sweep(model, prefill_tokens, max(2, repeats // 2)),
    }
    print(f"prefill sweep in {time.time() - t0:.0f} s")
    p2 = results.save_results("lab2", lab2, d.gpu_name, date, args.out)
    print(f"wrote {p2}")

    # --- Lab 1 -------------------------------------------------------------------------------
    lab1 = {"machine": machine}
    try:
        lab1["torch_prefix_reuse"] = prefix_reuse(model, model_shape, repeats)
    except Exception as exc:  # noqa: BLE001 - record the failure, keep going
        lab1["torch_prefix_reuse"] = {"error": f"{type(exc).__name__}: {exc}"}
    del model
    torch.cuda.empty_cache()
    if args.no_vllm or not d.vllm:
        lab1["vllm"] = {
            "recorded": False,
            "reason": "skipped by --no-vllm" if args.no_vllm else "vllm not installed",
        }
    else:
        from kvlab.measure import engine_jobs, vllm_lab

        model_name = args.vllm_model or vllm_lab.DEFAULT_GPU_MODEL
        blocks = 160 * 32 // vllm_lab.GPU_BLOCK_SIZE  # the notebook's pool: 5,120 tokens of KV
        try:
            # the same jobs the notebook runs on the CPU build, here with a real model on the GPU
            out = engine_jobs.lab1(
                model=model_name,
                num_blocks=blocks,
                requests=20 if args.quick else 100,
                system_tokens=2000,
                replay=None if args.quick else LAB1_REPLAY,
            )
            out["recorded"] = True
            lab1["vllm"] = out
            lab1["vllm_serving"] = engine_jobs.serving(
                model=model_name,
                num_blocks=blocks,
                max_model_len=4096,
                fleet_workload=None if args.quick else LAB1_FLEET,
            )
        except Exception as exc:  # noqa: BLE001 - record the failure, keep going
            lab1["vllm"] = {
                "recorded": False,
                "reason": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-2000:],
            }
    p1 = results.save_results("lab1", lab1, d.gpu_name, date, args.out)
    print(f"wrote {p1}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
