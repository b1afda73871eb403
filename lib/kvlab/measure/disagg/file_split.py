"""The file-connector split: :func:`run_file_split`, vLLM's file-based connector on two engines run
one after the other.

The connector is ``ExampleConnector`` (formerly ``SharedStorageConnector``)
{cite}`vllm_disagg_prefill`. A producer engine prefills each prompt and its connector writes the
KV of every layer to a safetensors file; a consumer engine finds the files, loads them into its own
paged KV cache and decodes without computing those tokens. The consumer is run three times over
the same prompts: with the files hidden (it computes everything itself, as a colocated engine
does: the reference output and the cold prefill time), with the files (it injects the producer's
KV), and with every stored value set to zero (the control: if the output still matched, the
consumer would not be using what it received). The files are read by
:mod:`kvlab.measure.disagg.connector_files`.

Rules: the engines run under the machine-wide engine lock, one at a time, pinned to one core; each
is stopped and checked gone when the run ends, also when it fails (the process ids and the verdict
are in the result's :class:`~kvlab.measure.disagg.split_results.Checks`); the store lives in a
temporary folder removed afterwards unless ``workdir`` is given.
"""

from __future__ import annotations

import os
import shutil
import time

from ..._validate import check_int
from ..serving import engine
from ..serving import procs as pd_procs
from .connector_files import layout_errors, read_stored, same_stored, zero_stored
from .engine_config import BLOCK_SIZE, _prompts_ok, engine_env, engine_kwargs
from .engine_process import Engine, _WorkDir
from .split_results import Checks, FileSplit, Run


def run_file_split(
    model: str,
    prompts: list[list[int]],
    max_tokens: int = 16,
    python: str | None = None,
    workdir: str | os.PathLike | None = None,
    timeout_s: float = 400.0,
    core: int | None = None,
) -> FileSplit:
    """Producer then consumer with ``ExampleConnector``; see the module docstring. Engines run
    one after the other (one core each is enough). ``workdir`` keeps the stored files (a temporary
    folder, removed afterwards, when None). ``core``: the CPU the engines are pinned to (default:
    the first this process may use)."""
    prompts = _prompts_ok(prompts)
    if core is None:
        core = engine.allowed_cores()[0]
    check_int("max_tokens", max_tokens, lo=1)
    python = python or str(engine.engine_python())
    deadline = time.monotonic() + timeout_s
    t0 = time.perf_counter()
    checks = Checks()
    with _WorkDir(workdir) as tmp:
        store, hidden, own = tmp / "store", tmp / "store-hidden", tmp / "store-consumer"
        for old in (store, hidden, own):  # a kept workdir from an earlier run
            shutil.rmtree(old, ignore_errors=True)
        store.mkdir()

        def kvc(role):
            return {
                "kv_connector": "ExampleConnector",
                "kv_role": role,
                "kv_connector_extra_config": {"shared_storage_path": str(store)},
            }

        with engine.engine_lock(), pd_procs.Children() as kids:
            try:
                prod = Engine(
                    kids,
                    "producer",
                    engine_kwargs(model, kvc("kv_producer")),
                    engine_env(core),
                    tmp / "producer.log",
                    python,
                    deadline,
                )
                checks.start_s["producer"] = prod.ready["start_s"]
                producer = Run.of("producer", prod.generate(prompts, max_tokens))
                checks.see(kids)
                checks.peak_rss_bytes["producer"] = prod.quit()
                stored = read_stored(store)
                layout = layout_errors(store, model, prompts)

                cons = Engine(
                    kids,
                    "consumer",
                    engine_kwargs(model, kvc("kv_consumer")),
                    engine_env(core),
                    tmp / "consumer.log",
                    python,
                    deadline,
                )
                checks.start_s["consumer"] = cons.ready["start_s"]
                # Hide the producer's files: the consumer then computes every prompt itself, as a
                # colocated engine does. ExampleConnector saves whatever it did not load, so each
                # cold pass leaves the consumer's own copy of the KV, set aside before the next.
                store.rename(hidden)
                store.mkdir()
                cons.generate([prompts[0][: len(prompts[0]) // 2]], 2)  # warm-up
                shutil.rmtree(store)
                store.mkdir()
                cold = Run.of("cold", cons.generate(prompts, max_tokens))
                store.rename(own)
                store.mkdir()
                prefill_cold = [o["seconds"] for o in cons.generate(prompts, 1)]
                shutil.rmtree(store)
                hidden.rename(store)
                same_bytes = same_stored(store, own)
                prefill_inj = [o["seconds"] for o in cons.generate(prompts, 1)]
                injected = Run.of("injected", cons.generate(prompts, max_tokens))
                zero_stored(store)
                zeroed = Run.of("zeroed", cons.generate(prompts, max_tokens))
                checks.see(kids)
                checks.peak_rss_bytes["consumer"] = cons.quit()
            finally:
                kids.stop_all()
                checks.pids = sorted(kids.seen)
                checks.all_gone = pd_procs.gone(kids.seen)
    return FileSplit(
        "ExampleConnector",
        [len(p) for p in prompts],
        BLOCK_SIZE,
        stored,
        producer,
        cold,
        injected,
        zeroed,
        prefill_cold,
        prefill_inj,
        same_bytes,
        layout,
        checks,
        time.perf_counter() - t0,
    )
