"""Lab 3's own set-up cell (each Colab notebook is its own runtime: Lab 1's install does not carry
over): it imports nothing but the standard library before pip, installs requirements-gpu.txt on a
Colab GPU runtime where vLLM or NIXL is missing, names an old driver before installing anything,
says what the install costs, and does nothing without a GPU. Run with a fake ``nvidia-smi`` and a
fake pip; nothing is installed."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAB3 = ROOT / "notebooks" / "labs" / "lab3-disaggregated-prefill.ipynb"


def _setup_cell() -> str:
    nb = json.loads(LAB3.read_text())
    found = [
        "".join(c["source"])
        for c in nb["cells"]
        if c["cell_type"] == "code"
        and "requirements-gpu.txt" in "".join(c["source"])
        and "subprocess.run([sys.executable" in "".join(c["source"])
    ]
    assert len(found) == 1, found
    return found[0]


def test_the_setup_cell_comes_before_any_import_of_kvlab_or_torch():
    nb = json.loads(LAB3.read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    at = code.index(_setup_cell())
    assert at == 1  # after the first cell (Colab's clone-and-install) only
    # in Colab the first cell clones and installs, importing neither kvlab nor torch (its other
    # branch, outside Colab, may import kvlab to see whether a downloaded notebook needs it)
    first = ast.parse(code[0])
    colab = next(
        n for n in first.body if isinstance(n, ast.If) and "google.colab" in ast.unparse(n.test)
    )
    for node in ast.walk(ast.Module(body=colab.body, type_ignores=[])):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            assert not any((n or "").split(".")[0] in ("kvlab", "torch") for n in names), names
    for node in ast.walk(ast.parse(_setup_cell())):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                assert (name or "").split(".")[0] in sys.stdlib_module_names, name


def _run(monkeypatch, tmp_path, driver, missing=("vllm", "nixl"), colab=True, preloaded=()):
    calls: list = []
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if driver is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text(f"#!/bin/sh\necho {driver}\n")
        smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    if colab:
        monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    import importlib.util

    real_run = subprocess.run

    def fake_run(cmd, *a, **k):
        if "pip" in cmd:
            calls.append(cmd)
            return subprocess.CompletedProcess(cmd, 0)
        return real_run(cmd, *a, **k)

    monkeypatch.setattr(subprocess, "run", fake_run)
    real_find = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n, *a: (
            (None if n in missing else types.SimpleNamespace(name=n))
            if n in ("vllm", "nixl")
            else real_find(n, *a)
        ),
    )
    for m in ("numpy", "torch", "transformers", "huggingface_hub"):
        monkeypatch.delitem(sys.modules, m, raising=False)
    for m in preloaded:
        monkeypatch.setitem(sys.modules, m, types.ModuleType(m))
    error = None
    try:
        exec(compile(_setup_cell(), "lab3-setup", "exec"), {"__name__": "__main__"})
    except SystemExit as exc:
        error = str(exc)
    return calls, error


def test_colab_gpu_runtime_installs_the_gpu_set(monkeypatch, tmp_path, capsys):
    calls, error = _run(monkeypatch, tmp_path, "580.82.07")
    assert len(calls) == 1 and calls[0][-2:] == ["-r", "../../requirements-gpu.txt"]
    assert error is None
    out = capsys.readouterr().out
    assert "no vllm or nixl: installing requirements-gpu.txt (about 1 GB of wheels" in out
    assert "a few minutes" in out


def test_nixl_alone_missing_is_installed_too(monkeypatch, tmp_path, capsys):
    calls, error = _run(monkeypatch, tmp_path, "580.82.07", missing=("nixl",))
    assert len(calls) == 1 and error is None
    assert "no nixl: installing" in capsys.readouterr().out


def test_a_restart_is_asked_for_when_needed(monkeypatch, tmp_path):
    calls, error = _run(monkeypatch, tmp_path, "580.82.07", preloaded=("torch",))
    assert len(calls) == 1 and error and "Restart the session" in error


def test_old_driver_is_named_before_installing(monkeypatch, tmp_path, capsys):
    calls, _ = _run(monkeypatch, tmp_path, "535.104.05")
    assert calls == []
    out = capsys.readouterr().out
    assert "535.104.05" in out and "580" in out


def test_nothing_happens_without_a_gpu_or_when_all_is_there(monkeypatch, tmp_path, capsys):
    calls, error = _run(monkeypatch, tmp_path, None)
    assert calls == [] and error is None and capsys.readouterr().out == ""


def test_a_gpu_machine_outside_colab_is_told_how_and_what_it_costs(monkeypatch, tmp_path, capsys):
    calls, _ = _run(monkeypatch, tmp_path, "580.82.07", colab=False)
    assert calls == []
    out = " ".join(capsys.readouterr().out.split())
    assert "without vllm and nixl in this Python: `pip install -r requirements-gpu.txt`" in out
    assert "about 1 GB of wheels" in out


def test_all_present_installs_nothing(monkeypatch, tmp_path, capsys):
    calls, error = _run(monkeypatch, tmp_path, "580.82.07", missing=())
    assert calls == [] and error is None and capsys.readouterr().out == ""
