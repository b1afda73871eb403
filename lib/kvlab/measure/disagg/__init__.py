"""Lab 3, prefill/decode disaggregation, measured on real engines.

- :mod:`.pd_split`: the names the lab uses, re-exported from the modules below (no code of its own).
- :mod:`.engine_config`: what the engines are started with (model, prompts, arguments, environment).
- :mod:`.engine_process`: one engine in its own process, seen from the parent.
- :mod:`.connector_files`: the files vLLM's file connector writes, read without vLLM.
- :mod:`.split_results`: the dataclasses both splits return and the recordings keep.
- :mod:`.token_match`: a split's output against the colocated run, with a log-probability tolerance.
- :mod:`.file_split`: the file-connector split (producer, then consumer).
- :mod:`.nixl_split`: the live split, KV pulled over NIXL (on the CPU or one GPU).
- :mod:`.pd_worker`: one vLLM engine in its own process, the child side of ``engine_process``.
- :mod:`.nixl_sweep`: one request's KV moved between two NIXL agents, timed.
- :mod:`.nixl_worker`: one NIXL agent in its own process, the child side of ``nixl_sweep``.

Rules: the workers are run by file path with the engine environment's Python and import nothing
from kvlab; the parents start them through :mod:`kvlab.measure.serving.procs` (own session,
loopback only, stopped by pid). Imports ``serving``, ``recording`` and the library below the
simulators only. Every module here but the facade ``pd_split`` is fingerprinted for Lab 3's
recording (:data:`kvlab.measure.recording.recorded.MEASURING_CODE`).
"""
