"""Results recorded elsewhere, and the choice between measuring here and using them.

- :mod:`.results`: GPU results, ``results/<lab>-<gpu>-<date>.json`` (``tools/record_gpu.py``).
- :mod:`.recorded`: an engine run measured here, or its CPU recording where the engines cannot run
  (``results/<lab>-cpu-recorded.json``), used only with the same parameters, versions and
  measuring code (a fingerprint that ignores where the code lives).

Rules: imports :mod:`kvlab.measure.serving` only; the labs' packages build on it.
"""
