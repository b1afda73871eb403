"""Results recorded elsewhere, and the choice between measuring here and using them.

- :mod:`.results`: GPU results, ``results/<lab>-<gpu>-<date>.json`` (``tools/record_gpu.py``).
- :mod:`.recorded`: an engine run measured here, or its CPU recording where the engines cannot run
  (``results/<lab>-cpu-recorded.json``), used only with the same parameters, versions and
  measuring code (a fingerprint that ignores where the code lives).

Rules: may import every other ``kvlab.measure`` package; none of them imports this one.
"""
