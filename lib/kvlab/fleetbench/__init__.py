"""A real benchmark's fleet, simulated: inference-perf's ``shared_prefix`` workload and its load
stages, sent through the Gateway API Inference Extension's endpoint picker (EPP) configured by
its own ``EndpointPickerConfig``, to ``pods`` engines of :mod:`kvlab.engine_model`.

* :mod:`.workload`: the inference-perf config (prompts, groups, stages, sending times);
* :mod:`.epp`: the scorers and pickers, as the EPP's and llm-d's source compute them;
* :mod:`.fleet`: the pods, the loop and the per-stage metrics;
* :mod:`.spec`: the spec file (``cluster``, ``workload``, ``schedulers``);
* :mod:`.compare`: the simulated rows against a measured table.

``python -m kvlab.fleetbench SPEC.yaml [--seeds N] [--out FILE.csv]`` runs every scheduler.
"""

from .epp import (
    ApproxPrefixIndexer,
    ApproxPrefixScorer,
    EndpointPicker,
    KVEventIndex,
    PodView,
    PrecisePrefixScorer,
    PromptInfo,
    kv_cache_scores,
    longest_prefix_scores,
    normalise_indexed,
    parse_picker_config,
    queue_scores,
)
from .fleet import METRICS, Cluster, run_scheduler
from .spec import Spec, load_spec, parse_spec
from .workload import SharedPrefix, Stage, Workload, block_keys, parse_workload

__all__ = [
    "METRICS",
    "ApproxPrefixIndexer",
    "ApproxPrefixScorer",
    "Cluster",
    "EndpointPicker",
    "KVEventIndex",
    "PodView",
    "PrecisePrefixScorer",
    "PromptInfo",
    "SharedPrefix",
    "Spec",
    "Stage",
    "Workload",
    "block_keys",
    "kv_cache_scores",
    "load_spec",
    "longest_prefix_scores",
    "normalise_indexed",
    "parse_picker_config",
    "parse_spec",
    "parse_workload",
    "queue_scores",
    "run_scheduler",
]
