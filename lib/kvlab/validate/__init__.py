"""How far to trust the simulators: predictions of measured runs of real engines.

* :mod:`.silicon`: one vLLM replica under a closed-loop benchmark, against the measured rows of
  NVIDIA aiconfigurator's silicon sample (``kvlab.validate.silicon.predict(row)``).
"""
