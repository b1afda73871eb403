"""The real serving engine, whatever a lab runs on it.

- :mod:`.engine`: where the engine runs (in-process where ``vllm`` imports, else the engine
  environment ``.venv-engine``), the environment its processes get, its errors, the engine lock.
- :mod:`.procs`: child processes started in their own session, watched, checked for sockets
  beyond loopback, and always stopped by their pids; JSON lines over pipes.
- :mod:`.server`: ``vllm serve`` on 127.0.0.1, its ``/metrics`` and the ``openai`` client.
- :mod:`.vllm_cli`: the ``vllm`` command line for vLLM's CPU build.
- :mod:`.prom`: Prometheus text, counter deltas and hit rates.

Rules: no lab's code here, and no import of another ``kvlab.measure`` package (the labs build on
this one). Servers bind 127.0.0.1 only; every process started here is stopped by its pid.
"""
