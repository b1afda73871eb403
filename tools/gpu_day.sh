#!/usr/bin/env bash
# The day a GPU is lent: record Labs 1, 2 and 3 on one H100/H200 in under 10 minutes.
#
# Usage, from the repository root, on the GPU machine:
#   bash tools/gpu_day.sh            # records into results/, then lists what it wrote
#   bash tools/gpu_day.sh --quick    # the smoke-sized run (about 3 minutes)
#   PYTHON=/path/to/python bash tools/gpu_day.sh
#
# Needs: an NVIDIA driver >= 580 (requirements-gpu.txt's torch is a CUDA 13 build), a Python with
# lib/ importable and requirements-gpu.txt installed (`pip install -r requirements-gpu.txt`; without
# vLLM, Lab 1's vLLM parts are recorded as not run, with the reason), and the Lab 1 model in the hub
# cache or the network (Qwen/Qwen2.5-0.5B-Instruct; --vllm-model DIR takes a local folder).
# Every step has its own time limit; a step that fails is reported and the next one still runs.
# The output names the commit, the driver, the versions and the model revision (results/*.json).
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
echo "commit $(git rev-parse --short HEAD)$(git status --porcelain --untracked-files=no | grep -q . && echo -dirty)"
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

echo "== Labs 1 and 2 (tools/record_gpu.py $QUICK) [$(elapsed)]"
timeout 420 "$PY" tools/record_gpu.py $QUICK --out "$OUT" "${EXTRA[@]}" || {
  echo "record_gpu.py failed or ran past 7 minutes (exit $?): see above" >&2
  status=1
}

echo "== Lab 3 [$(elapsed)]"
if [ -f tools/record_lab3_gpu.py ]; then
  timeout 150 "$PY" tools/record_lab3_gpu.py --out "$OUT" || {
    echo "tools/record_lab3_gpu.py failed or ran past 2.5 minutes (exit $?)" >&2
    status=1
  }
else
  echo "Lab 3's GPU path is pending: no GPU function exists yet (kvlab.measure.disagg.pd_split runs"
  echo "vLLM's CPU build only; tools/record_lab3_gpu.py is where it will go). Labs 1-2 recorded."
fi

echo "== written [$(elapsed)]"
git status --short -- "$OUT"
exit $status
