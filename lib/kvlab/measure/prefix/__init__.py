"""Lab 1, prefix caching, measured: on a real vLLM engine and on a hand-made PyTorch engine.

- :mod:`.prompts`: the lab's prompts and the hit rate vLLM's block rule predicts for them.
- :mod:`.tinymodel`: the tiny random-weight Llama the CPU labs serve (tokenizer trained on the
  prompts' text); ``python -m kvlab.measure.prefix.tinymodel OUT`` builds it.
- :mod:`.vllm_lab`: the lab's engine settings and requests on ``vllm.LLM``.
- :mod:`.engine_cache`: the engine's per-request cache hits predicted with kvlab's caches.
- :mod:`.engine_jobs`: the engine jobs (one engine start each) and their command line.
- :mod:`.runs`: a job run here or in the engine environment (``run_job``), or its recording
  where the engines cannot run (``run_or_recorded``).
- :mod:`.pytorch_engine`: the teaching model: a small PyTorch transformer, a block-hash KV store
  and a prefill engine with real prefix reuse (needs torch; loaded on first use).

Rules: imports :mod:`kvlab.measure.serving`, :mod:`kvlab.measure.recording` and the library
below the simulators (caches, routing, workloads), never ``disagg`` or ``transfer``.
"""
