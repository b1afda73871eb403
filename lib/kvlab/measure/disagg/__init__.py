"""Lab 3, prefill/decode disaggregation, measured on real engines.

- :mod:`.pd_split`: the file-connector split and the NIXL split (a prefill and a decode engine).
- :mod:`.pd_worker`: one vLLM engine in its own process, the child side of ``pd_split``.
- :mod:`.nixl_sweep`: one request's KV moved between two NIXL agents, timed.
- :mod:`.nixl_worker`: one NIXL agent in its own process, the child side of ``nixl_sweep``.

Rules: the workers are run by file path with the engine environment's Python and import nothing
from kvlab; the parents start them through :mod:`kvlab.measure.serving.procs` (own session,
loopback only, stopped by pid). Imports ``serving``, ``recording`` and the library below the
simulators only.
"""
