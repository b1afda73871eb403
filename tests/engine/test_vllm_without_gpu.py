"""Where vLLM's GPU build is installed in the notebook's Python (Lab 1's Colab install) but torch
sees no GPU, the labs say so and what to do, not "run `make engine`" (the CPU engine, which a Colab
runtime does not use)."""

from __future__ import annotations

from kvlab.measure.recording import recorded
from kvlab.measure.serving import engine


def test_vllm_installed_but_no_gpu_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv(recorded.FORCE_NO_ENGINE_ENV, raising=False)
    monkeypatch.setattr(engine, "vllm_here", lambda: True)
    monkeypatch.setattr(engine, "ENGINE_VENV", tmp_path / "no-venv-engine")
    why = recorded.why_not_here(tmp_path / "no-tiny-llama")  # this machine's torch: the CPU build
    assert why is not None and "make engine" not in why
    assert "vLLM is installed in this Python, but torch" in why and "sees no CUDA GPU" in why
    assert "Runtime > Change runtime type" in why and "580" in why


def test_the_cpu_engine_advice_stays_where_it_applies(tmp_path, monkeypatch):
    monkeypatch.delenv(recorded.FORCE_NO_ENGINE_ENV, raising=False)
    monkeypatch.setattr(engine, "ENGINE_VENV", tmp_path / "no-venv-engine")
    monkeypatch.setattr(engine, "vllm_here", lambda: False)  # no vLLM at all: build the engine
    assert "run `make engine`" in recorded.why_not_here(tmp_path / "no-tiny-llama")
    assert recorded.vllm_without_gpu() is None
