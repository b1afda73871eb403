"""Reading prefix-cache counters from Prometheus text (a server's ``/metrics``) and hit rates.

vLLM names (checked against vLLM's metrics documentation):

- V1 engine (vLLM >= 0.8, the default since): counters ``vllm:prefix_cache_queries`` and
  ``vllm:prefix_cache_hits``, in *tokens* (prompt tokens looked up, prompt tokens found); in the
  text format a counter's sample carries the ``_total`` suffix. Some releases also exported the
  same counters as ``vllm:gpu_prefix_cache_queries`` / ``vllm:gpu_prefix_cache_hits``.
- V0 engine (older releases): only a gauge, ``vllm:gpu_prefix_cache_hit_rate`` (block hit rate).

Counters only ever grow while the server lives, so a hit rate *for an experiment* is the ratio of
the two counters' increases between a reading before and one after it:
``(hits_after - hits_before) / (queries_after - queries_before)``.

The CPU path of the labs exports the same counters from :class:`kvlab.measure.prefix.pytorch_engine.PrefixKVStore`
under the ``kvlab:`` prefix, so both paths go through this parser.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

#: (queries, hits) counter names, most recent first, without the ``_total`` suffix.
COUNTER_NAMES = (
    ("vllm:prefix_cache_queries", "vllm:prefix_cache_hits"),
    ("vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits"),
    ("kvlab:prefix_cache_queries", "kvlab:prefix_cache_hits"),
)
#: The V0 engine's gauge (a block hit rate, 0..1).
GAUGE_NAME = "vllm:gpu_prefix_cache_hit_rate"

_LINE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def _parse_fallback(text: str):
    """A minimal Prometheus text parser, used only when prometheus_client is absent."""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _LINE.match(line)
        if not m:
            raise ValueError(f"text is not Prometheus exposition format: {raw!r}")
        labels = dict(_LABEL.findall(m.group("labels") or ""))
        yield m.group("name"), labels, float(m.group("value"))


def parse_samples(text: str) -> list[tuple[str, dict, float]]:
    """Every sample in Prometheus text as ``(sample_name, labels, value)``.

    Uses ``prometheus_client.parser.text_string_to_metric_families`` when installed (sample names
    keep their ``_total`` / ``_bucket`` suffixes), else a small built-in parser.
    """
    if not isinstance(text, str):
        raise ValueError(
            f"text must be a str of Prometheus exposition format, got {type(text).__name__}"
        )
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        return list(_parse_fallback(text))
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.append((s.name, dict(s.labels), float(s.value)))
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """Sample name -> value, summed over label sets (engines, model names).

    Summing is right for counters (the fleet's total); do not read a gauge this way when there
    are several label sets.
    """
    out: dict[str, float] = {}
    for name, _labels, value in parse_samples(text):
        out[name] = out.get(name, 0.0) + value
    return out


def flatten_vllm_metrics(metrics) -> dict[str, float]:
    """``LLM.get_metrics()`` objects (vLLM's Counter, Gauge, Histogram, Vector) as the same
    name -> value dict :func:`parse_metrics` returns (counters gain their ``_total`` suffix)."""
    out: dict[str, float] = {}
    for m in metrics:
        kind = type(m).__name__
        if kind == "Counter":
            name, value = m.name + "_total", float(m.value)
        elif kind == "Gauge":
            name, value = m.name, float(m.value)
        elif kind == "Histogram":
            out[m.name + "_count"] = out.get(m.name + "_count", 0.0) + float(m.count)
            name, value = m.name + "_sum", float(m.sum)
        else:
            continue
        out[name] = out.get(name, 0.0) + value
    return out


@dataclass(frozen=True)
class PrefixCounters:
    """Prefix-cache counters read at one moment (tokens), or the V0 gauge when that is all."""

    queries: float | None
    hits: float | None
    source: str
    gauge_hit_rate: float | None = None

    @property
    def hit_rate(self) -> float | None:
        """Lifetime hit rate (hits / queries), or the gauge; None when nothing was queried."""
        if self.queries:
            if self.hits is None:
                raise ValueError(f"{self.source}: queries counted but no hits counter")
            return self.hits / self.queries
        return self.gauge_hit_rate


def prefix_cache_counters(metrics: dict[str, float] | str) -> PrefixCounters:
    """Find the prefix-cache counters in parsed metrics (or raw text).

    Raises ``ValueError`` listing what it looked for when no known name is present.
    """
    if isinstance(metrics, str):
        metrics = parse_metrics(metrics)
    for q, h in COUNTER_NAMES:
        for suffix in ("_total", ""):
            if q + suffix in metrics and h + suffix in metrics:
                return PrefixCounters(metrics[q + suffix], metrics[h + suffix], q + suffix)
    if GAUGE_NAME in metrics:
        return PrefixCounters(None, None, GAUGE_NAME, gauge_hit_rate=metrics[GAUGE_NAME])
    wanted = [q + "_total" for q, _ in COUNTER_NAMES] + [GAUGE_NAME]
    raise ValueError(f"metrics hold no prefix-cache counter; looked for {wanted}")


def counter_delta(before: float, after: float) -> float:
    """Increase of a counter between two readings. A drop means the counter was reset (a
    restart), and Prometheus then counts the new value as the increase."""
    for name, v in (("before", before), ("after", after)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite counter value >= 0, got {v!r}")
    return after - before if after >= before else after


def hit_rate_from_deltas(before: PrefixCounters, after: PrefixCounters) -> float | None:
    """Token hit rate of what happened between two readings; None when nothing was queried or
    the server only exports the V0 gauge (which cannot be differenced)."""
    if before.queries is None or after.queries is None:
        return None
    dq = counter_delta(before.queries, after.queries)
    if before.hits is None or after.hits is None:
        raise ValueError("readings hold a queries counter but no hits counter")
    dh = counter_delta(before.hits, after.hits)
    if dq == 0:
        return None
    if dh > dq:
        raise ValueError(
            f"hits grew by {dh:g}, more than queries ({dq:g}): readings are inconsistent"
        )
    return dh / dq


def metrics_text(queries_tokens: float, hits_tokens: float, prefix: str = "kvlab") -> str:
    """Prometheus exposition text for two prefix-cache counters (the CPU path's /metrics)."""
    return (
        f"# HELP {prefix}:prefix_cache_queries Prompt tokens looked up in the prefix cache.\n"
        f"# TYPE {prefix}:prefix_cache_queries counter\n"
        f"{prefix}:prefix_cache_queries_total {float(queries_tokens)}\n"
        f"# HELP {prefix}:prefix_cache_hits Prompt tokens found in the prefix cache.\n"
        f"# TYPE {prefix}:prefix_cache_hits counter\n"
        f"{prefix}:prefix_cache_hits_total {float(hits_tokens)}\n"
    )
