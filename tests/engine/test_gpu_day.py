"""tools/gpu_day.sh, the script for the day a GPU is lent, refuses clearly where it cannot record
(no GPU, a driver too old for torch's CUDA 13 build), before it starts anything."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_day(tmp_path, driver: str | None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    if driver is None:
        smi.write_text("#!/bin/sh\nexit 9\n")
    else:
        smi.write_text(
            f'#!/bin/sh\ncase "$*" in *name*) echo "NVIDIA H200, {driver}, 143771 MiB";;'
            f" *) echo {driver};; esac\n"
        )
    smi.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}", OUT=str(tmp_path))
    return subprocess.run(
        ["bash", str(ROOT / "tools" / "gpu_day.sh")],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


def test_no_gpu_records_nothing(tmp_path):
    out = run_day(tmp_path, None)
    assert out.returncode == 1 and "no NVIDIA GPU" in out.stderr
    assert not list(tmp_path.glob("*.json"))


def test_old_driver_is_named(tmp_path):
    out = run_day(tmp_path, "535.104.05")
    assert out.returncode == 1
    assert "535.104.05 is older than 580" in out.stderr and "CUDA 13" in out.stderr
    assert not list(tmp_path.glob("*.json"))
