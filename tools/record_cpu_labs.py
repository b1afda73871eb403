"""Record Lab 3's engine runs on this machine, for pages built where the engines cannot run.

Usage (after `make venv engine`): .venv/bin/python tools/record_cpu_labs.py

Executes notebooks/labs/lab3-disaggregated-prefill.ipynb in a fresh kernel with
KVLAB_RECORD_LABS=1, so every engine run that succeeds (the NIXL sweep, the file-connector split,
the NIXL split) is written with this machine's description to results/lab3-cpu-recorded.json
(see kvlab.measure.recording.recorded), with the pinned versions and the measuring code's fingerprint. The
notebook's own checks run as well: a run they reject is not worth keeping, and the command fails.
The notebook file itself is left unchanged, unless `--write` is given: then the executed notebook
(every run measured here) is written back, so one engine session both records and refreshes it.
Set KVLAB_ENGINE_LOCK to share the machine's engines with other jobs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run_notebooks import execute  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LAB3 = ROOT / "notebooks" / "labs" / "lab3-disaggregated-prefill.ipynb"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--write", action="store_true", help="write the executed notebook back")
    args = parser.parse_args(argv)
    if os.environ.get("KVLAB_FORCE_NO_ENGINE", "") not in ("", "0"):
        print("KVLAB_FORCE_NO_ENGINE is set: there is nothing to record on this machine")
        return 2
    os.environ["KVLAB_RECORD_LABS"] = "1"
    start = time.perf_counter()
    nb = execute(LAB3)
    if args.write:
        import nbformat

        nbformat.write(nb, LAB3)
    out = ROOT / "results" / "lab3-cpu-recorded.json"
    data = json.loads(out.read_text())
    print(
        f"{time.perf_counter() - start:.0f} s; wrote {out.relative_to(ROOT)}: "
        f"{', '.join(sorted(data['runs']))} on {data['machine'].get('cpu')}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
