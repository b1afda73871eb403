"""The benchmark spec: ``cluster``, ``workload`` (an inference-perf config, verbatim) and
``schedulers`` (name -> ``EndpointPickerConfig``, verbatim), checked key by key."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml  # type: ignore[import-untyped]

from ..engine_model import covered
from .epp import parse_picker_config
from .fleet import Cluster
from .workload import Workload, parse_workload

TOP_KEYS = ("cluster", "workload", "schedulers")
OPTIONAL_TOP = ("source", "notes")
CLUSTER_KEYS = ("model", "gpu", "tp", "pods", "kv_tokens_per_pod")
CLUSTER_OPTIONAL = ("precision", "block_size", "max_num_batched_tokens", "max_num_seqs")


@dataclass(frozen=True)
class Spec:
    cluster: Cluster
    workload: Workload
    schedulers: dict


def parse_spec(doc) -> Spec:
    """A :class:`Spec` from the parsed YAML; a ``ValueError`` names the first bad key."""
    if not isinstance(doc, dict):
        raise ValueError(f"the spec must be a mapping with keys {list(TOP_KEYS)}, got {doc!r}")
    for k in TOP_KEYS:
        if k not in doc:
            raise ValueError(f"spec key {k!r} is missing (the spec needs {list(TOP_KEYS)})")
    for k in doc:
        if k not in TOP_KEYS + OPTIONAL_TOP:
            raise ValueError(
                f"spec key {k!r} is unknown (allowed: {list(TOP_KEYS + OPTIONAL_TOP)})"
            )
    c = doc["cluster"]
    if not isinstance(c, dict):
        raise ValueError(f"cluster must be a mapping, got {c!r}")
    for k in CLUSTER_KEYS:
        if k not in c:
            raise ValueError(f"cluster.{k} is missing (cluster needs {list(CLUSTER_KEYS)})")
    for k in c:
        if k not in CLUSTER_KEYS + CLUSTER_OPTIONAL:
            raise ValueError(
                f"cluster.{k} is unknown (allowed: {list(CLUSTER_KEYS + CLUSTER_OPTIONAL)})"
            )
    cluster = Cluster(**c)
    combo = (cluster.model, cluster.gpu, cluster.tp, cluster.precision)
    if combo not in covered():
        raise ValueError(
            f"cluster (model, gpu, tp, precision) = {combo} has no step costs; covered: {covered()}"
        )
    workload = parse_workload(doc["workload"])
    scheds = doc["schedulers"]
    if not isinstance(scheds, dict) or not scheds:
        raise ValueError("schedulers must map a name to an EndpointPickerConfig, got "
                         f"{scheds!r}")  # fmt: skip
    for name, cfg in scheds.items():
        parse_picker_config(str(name), cfg, engine_block_size=cluster.block_size)
    return Spec(cluster, workload, dict(scheds))


def load_spec(path: str | Path) -> Spec:
    """Read and check a spec file."""
    p = Path(path)
    if not p.exists():
        raise ValueError(f"spec file {str(p)!r} does not exist")
    return parse_spec(yaml.safe_load(p.read_text()))
