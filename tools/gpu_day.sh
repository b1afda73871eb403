#!/usr/bin/env bash
# The day a GPU is lent: record Labs 1, 2 and 3 on one H100/H200 in about 10 minutes (at most
# the recorders' limits: record_gpu.py --total-limit).
#
# Usage, from the repository root, on the GPU machine:
#   bash tools/gpu_day.sh            # records into results/, then lists what it wrote
#   bash tools/gpu_day.sh --quick    # the smoke-sized run (about 3 minutes)
#   PYTHON=/path/to/python bash tools/gpu_day.sh
#
# Needs: an NVIDIA driver >= 580 (requirements-gpu.txt's torch is a CUDA 13 build), a Python with
# lib/ importable and requirements-gpu.txt installed (`pip install -r requirements-gpu.txt`; without
# vLLM, Lab 1's vLLM parts are recorded as not run, with the reason), and the Lab 1 model in the hub
# cache or the network (Qwen/Qwen2.5-0.5B-Instruct, Labs 1 and 3; --vllm-model DIR takes a local
# folder). Lab 3 also needs NIXL (requirements-gpu.txt's nixl).
# Needs Python 3.11 or later (vLLM 0.32.0; Ubuntu 22.04's python3 is 3.10): checked first, with
# what to do (tools/python_check.py).
# Every part of a recording has its own time limit, derived from the CPU dry run with a stated
# margin (tools/record_gpu.py: DRY_RUN_PART_S, LIMIT_MARGIN, ENGINE_ALLOWANCE_S); a part past its
# limit is written as not recorded, with the reason, and the next part still runs. Each recorder
# process gets the sum of its parts' limits and START_AND_SAVE_S (record_gpu.py --total-limit);
# one stopped at that point leaves the part it was in written as not finished, with the reason.
# Without network the model must be in the Hugging Face cache (or --vllm-model DIR): the recorder
# says at its start which parts it can record here and why not the others.
# The output names the commit (git's, or $KVLAB_COMMIT where there is no .git), the driver, the
# versions and the model revision (results/*.json).
set -u
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-results}
QUICK=""
EXTRA=()
for arg in "$@"; do
  case "$arg" in
    --quick) QUICK="--quick" ;;
    *) EXTRA+=("$arg") ;;
  esac
done
START=$(date +%s)
elapsed() { echo "$(( $(date +%s) - START )) s"; }
status=0

echo "== machine"
if ! nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader; then
  echo "nvidia-smi failed: no NVIDIA GPU or driver here, nothing to record." >&2
  exit 1
fi
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n1)
if [ "${DRIVER%%.*}" -lt 580 ]; then
  echo "NVIDIA driver $DRIVER is older than 580: torch 2.13.0's CUDA 13 build cannot use this GPU." >&2
  echo "Update the driver (or use a machine with a newer one), then run this again." >&2
  exit 1
fi
if ! "$PY" tools/python_check.py; then
  exit 1
fi
if [ -e .git ] && command -v git >/dev/null 2>&1; then
  echo "commit $(git rev-parse --short HEAD)$(git status --porcelain --untracked-files=no | grep -q . && echo -dirty)"
elif [ -n "${KVLAB_COMMIT:-}" ]; then
  echo "commit $KVLAB_COMMIT (from KVLAB_COMMIT: no .git here)"
else
  echo "commit unknown: no .git here; set KVLAB_COMMIT=<the commit this copy was made from> so the recordings name it" >&2
fi
PYTHONPATH="lib${PYTHONPATH:+:$PYTHONPATH}" "$PY" - <<'EOF' || status=1
import importlib.metadata as md
import torch

print(f"torch {torch.__version__} (CUDA {torch.version.cuda}), GPU visible: {torch.cuda.is_available()}")
for dist in ("vllm", "transformers", "nvidia-ml-py", "prometheus_client"):
    try:
        print(f"{dist} {md.version(dist)}")
    except md.PackageNotFoundError:
        print(f"{dist}: not installed (pip install -r requirements-gpu.txt)")
if not torch.cuda.is_available():
    raise SystemExit("torch sees no GPU: check the driver and that torch is the CUDA build")
EOF
if [ $status -ne 0 ]; then
  echo "This Python cannot use the GPU: nothing recorded." >&2
  exit 1
fi

# Each recorder gets its parts' limits plus the time to start and save (record_gpu.py says how
# much); its parts stop themselves at their own limits first.
LIMIT12=$("$PY" tools/record_gpu.py --labs lab1,lab2 --total-limit) || exit 1
LIMIT3=$("$PY" tools/record_gpu.py --labs lab3 --total-limit) || exit 1

echo "== Labs 1 and 2 (tools/record_gpu.py --labs lab1,lab2 $QUICK, at most $LIMIT12 s) [$(elapsed)]"
timeout --kill-after=30 "$LIMIT12" "$PY" tools/record_gpu.py --labs lab1,lab2 $QUICK --out "$OUT" "${EXTRA[@]}" || {
  echo "record_gpu.py (Labs 1 and 2) failed or ran past $LIMIT12 s (exit $?): see above and the files' reasons" >&2
  status=1
}

# Lab 3: the live NixlConnector split, both engines on the one GPU (40 % of its memory each), the
# decode engine pulling each request's KV from the prefill engine's GPU memory.
echo "== Lab 3 (tools/record_gpu.py --labs lab3 $QUICK, at most $LIMIT3 s) [$(elapsed)]"
timeout --kill-after=30 "$LIMIT3" "$PY" tools/record_gpu.py --labs lab3 $QUICK --out "$OUT" "${EXTRA[@]}" || {
  echo "record_gpu.py (Lab 3) failed or ran past $LIMIT3 s (exit $?): see above and the file's reason" >&2
  status=1
}

echo "== written [$(elapsed)]"
if [ -e .git ] && command -v git >/dev/null 2>&1; then
  git status --short -- "$OUT"
else
  ls -l "$OUT"
fi
exit $status
