"""Recorded GPU results: ``results/<lab>-<gpu>-<date>.json`` in the repository root.

``tools/record_gpu.py`` writes them on a GPU machine; the lab notebooks read them so a reader
without a GPU sees real figures next to the live CPU cells. Each file holds a ``machine`` block
(GPU, driver, versions, date, the command that produced it) and the lab's measurements.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from .._validate import check_choice

LABS = ("lab1", "lab2")
RESULTS_DIR = Path(__file__).resolve().parents[3] / "results"


def slug(text: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s or "unknown"


def result_path(lab: str, gpu_name: str, date: str, directory: Path | None = None) -> Path:
    check_choice("lab", lab, LABS)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ValueError(f"date must be YYYY-MM-DD, got {date!r}")
    return Path(directory or RESULTS_DIR) / f"{lab}-{slug(gpu_name)}-{date}.json"


def save_results(
    lab: str, payload: dict, gpu_name: str, date: str, directory: Path | None = None
) -> Path:
    """Write ``payload`` (JSON-serialisable) to ``results/<lab>-<gpu>-<date>.json``."""
    path = result_path(lab, gpu_name, date, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=True, default=float) + "\n")
    return path


def find_results(lab: str, directory: Path | None = None) -> list[Path]:
    """Recorded result files of ``lab``, sorted by name (GPU, then date)."""
    check_choice("lab", lab, LABS)
    d = Path(directory or RESULTS_DIR)
    return sorted(d.glob(f"{lab}-*.json")) if d.is_dir() else []


def load_results(lab: str, directory: Path | None = None) -> list[dict]:
    """Every recorded result of ``lab`` (each dict gains ``_file``, its file name)."""
    out = []
    for p in find_results(lab, directory):
        d = json.loads(p.read_text())
        d["_file"] = p.name
        out.append(d)
    return out
