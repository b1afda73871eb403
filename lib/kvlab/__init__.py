"""kvlab: the shared library of the LLM serving workbook.

Modules: formulas (sympy), calc (numbers), units, models, hardware, assumptions, glue; the
simulators and measuring code live in their own modules and are imported on demand.
"""

from . import assumptions, calc, formulas, glue, hardware, models, units

__all__ = ["assumptions", "calc", "formulas", "glue", "hardware", "models", "units"]
__version__ = "0.1.0"


def __getattr__(name):
    # Heavier modules load on first use: ``from kvlab import fleet`` still works.
    import importlib

    if name in {
        "cache",
        "workload",
        "traces",
        "routing",
        "fleet",
        "queueing",
        "disagg",
        "plots",
        "widgets",
        "measure",
        "seeds",
        "selfcheck",
    }:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'kvlab' has no attribute {name!r}")
