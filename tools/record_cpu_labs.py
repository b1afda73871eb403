"""Record Lab 3's engine runs on this machine, for pages built where the engines cannot run.

Usage (after `make venv engine`): .venv/bin/python tools/record_cpu_labs.py

Executes notebooks/labs/lab3-disaggregated-prefill.ipynb in a fresh kernel with
KVLAB_RECORD_LABS=1, so every engine run that succeeds (the NIXL sweep, the file-connector split,
the NIXL split) is written with this machine's description to results/lab3-cpu-recorded.json
(see kvlab.measure.recorded). The notebook's own checks run as well: a run they reject is not
worth keeping, and the command fails. The notebook file itself is left unchanged.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_notebooks import execute  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LAB3 = ROOT / "notebooks" / "labs" / "lab3-disaggregated-prefill.ipynb"


def main() -> int:
    os.environ["KVLAB_RECORD_LABS"] = "1"
    start = time.perf_counter()
    execute(LAB3)
    out = ROOT / "results" / "lab3-cpu-recorded.json"
    data = json.loads(out.read_text())
    print(
        f"{time.perf_counter() - start:.0f} s; wrote {out.relative_to(ROOT)}: "
        f"{', '.join(sorted(data['runs']))} on {data['machine'].get('cpu')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
