"""The engine model's data file: ``data/costs/engine_tables.json``, written by
``tools/tabulate_engine_costs.py`` (step-cost tables, model shapes, versions, the command)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

TABLES_PATH = Path(__file__).resolve().parents[3] / "data" / "costs" / "engine_tables.json"


@cache
def tables_doc() -> dict:
    """The contents of ``data/costs/engine_tables.json``."""
    if not TABLES_PATH.exists():
        raise ValueError(
            f"the engine model's step costs need {TABLES_PATH}; make it with "
            "tools/tabulate_engine_costs.py"
        )
    return json.loads(TABLES_PATH.read_text())
