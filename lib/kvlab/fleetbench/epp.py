"""The endpoint picker (EPP) of the Gateway API Inference Extension, from its
``EndpointPickerConfig``: scorers, their weights and a picker.

Each plugin computes its score as the source of the release the benchmark ran does (the file and
line ranges are those of that release):

* ``queue-scorer`` (gateway-api-inference-extension v0.5.1,
  ``pkg/epp/scheduling/framework/plugins/scorer/queue.go`` L67-97): ``(max - q) / (max - min)``
  over the pods' waiting-queue lengths, 1 for every pod when they are all equal;
* ``kv-cache-scorer`` (same release, ``scorer/kvcache.go`` L65-71): ``1 - KV-cache usage``;
* ``prefix-cache-scorer``, approximate (``multi/prefix/plugin.go`` L168-190 and L239-270,
  ``multi/prefix/indexer.go`` L52-111): the prompt's first ``maxPrefixBlocksToMatch`` blocks of
  ``hashBlockSize`` *characters* (default 64 and 256) are hashed in a chain; a server's match counts
  the leading run of hashes found on any server that it holds, divided by the number of hashes;
  after each pick the chosen server's LRU record (``lruCapacityPerServer`` entries) takes all the
  request's hashes (``PostCycle``, L198-210). Text is modelled as ``chars_per_token`` characters a
  token (4, the plugin's own guess, plugin.go L37-38);
* ``prefix-cache-scorer`` with ``mode: cache_tracking`` (llm-d-inference-scheduler b9c56d3,
  ``pkg/plugins/scorer/prefix_cache.go`` L44-60 and ``prefix_cache_tracking.go`` L113-137, over
  llm-d-kv-cache-manager v0.2.1): the prompt's tokens known to the tokenizer cache (``indexer.go``
  L117-151: a prompt is tokenized asynchronously on first sight, so a first request is scored on
  the prefix it shares with prompts already tokenized), cut into blocks of ``blockSizeTokens``
  whose keys are looked up in an index fed by the engines' KV events (BlockStored,
  BlockRemoved); each pod scores its longest run of consecutive keys from the first
  (``kvblock_scorer.go`` L76-111), then the scores are min-max normalised over the pods that hold
  the first key, the others get 0 (``pkg/plugins/scorer/utils.go`` L13-53). Events reach the index
  when the step that stores or evicts the blocks runs (ZMQ delivery is not modelled);
* ``random-picker`` (``picker/random_picker.go`` L84-100): a uniformly random pod;
  ``max-score-picker`` (``picker/max_score_picker.go`` L86-117): the highest weighted sum, ties
  broken at random (the pods are shuffled before a stable sort);
* the weighted sum (``scheduler_profile.go`` L148-163): each scorer's score times its weight,
  summed.

Queue lengths and KV usage are what the EPP last scraped from the pods' metrics
(``vllm:num_requests_waiting``, ``vllm:gpu_cache_usage_perc``), every ``refresh_s`` seconds
(``--refreshMetricsInterval``, default 50 ms, ``pkg/epp/server/runserver.go`` L71-77).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._validate import check_int, check_number

SCORERS = ("queue-scorer", "kv-cache-scorer", "prefix-cache-scorer")
PICKERS = ("max-score-picker", "random-picker")
HANDLERS = ("single-profile-handler",)


@dataclass
class PodView:
    """What a scorer reads of one pod: the last scraped metrics."""

    waiting: int = 0
    kv_usage: float = 0.0


@dataclass(frozen=True)
class PromptInfo:
    """A request as the EPP sees it: its group and prompt (which decide its text), its length in
    tokens, the system prompt's length, and the engine's block keys."""

    group: int
    prompt: int
    prompt_len: int
    system_len: int


def queue_scores(views: Sequence[PodView]) -> list[float]:
    """queue-scorer: ``(max - q) / (max - min)``, 1 everywhere when all queues are equal."""
    qs = [v.waiting for v in views]
    lo, hi = min(qs), max(qs)
    if hi == lo:
        return [1.0] * len(qs)
    return [(hi - q) / (hi - lo) for q in qs]


def kv_cache_scores(views: Sequence[PodView]) -> list[float]:
    """kv-cache-scorer: ``1 - usage`` (usage a fraction)."""
    return [1.0 - v.kv_usage for v in views]


class ApproxPrefixIndexer:
    """The approximate prefix scorer's record: a hashicorp LRU of hashes per server and a map from
    hash to the servers holding it (indexer.go)."""

    def __init__(self, capacity: int):
        self.capacity = check_int("lruCapacityPerServer", capacity, lo=1)
        self.lru: dict[int, OrderedDict[Hashable, None]] = {}
        self.hash_to_pods: dict[Hashable, set[int]] = {}

    def add(self, hashes: Sequence[Hashable], pod: int) -> None:
        lru = self.lru.setdefault(pod, OrderedDict())
        for h in hashes:  # lru.Add: move to front, evict the oldest past capacity
            if h in lru:
                lru.move_to_end(h)
                continue
            lru[h] = None
            if len(lru) > self.capacity:
                old, _ = lru.popitem(last=False)
                pods = self.hash_to_pods.get(old)
                if pods is not None:
                    pods.discard(pod)
                    if not pods:
                        del self.hash_to_pods[old]
        for h in hashes:  # then every hash points at the pod (even one evicted just now)
            self.hash_to_pods.setdefault(h, set()).add(pod)

    def match(self, hashes: Sequence[Hashable]) -> dict[int, int]:
        """matchLongestPrefix: per server, how many hashes of the leading run (found on any
        server) it holds."""
        res: dict[int, int] = {}
        for h in hashes:
            pods = self.hash_to_pods.get(h)
            if not pods:
                break
            for p in pods:
                res[p] = res.get(p, 0) + 1
        return res


@dataclass
class ApproxPrefixScorer:
    """``prefix-cache-scorer`` in its approximate (estimate) mode."""

    block_chars: int = 64
    max_blocks: int = 256
    lru_capacity: int = 31250
    chars_per_token: float = 4.0
    indexer: ApproxPrefixIndexer = field(init=False)
    _last: tuple = field(init=False, default=())

    def __post_init__(self):
        check_int("blockSize", self.block_chars, lo=1)
        check_int("maxPrefixBlocksToMatch", self.max_blocks, lo=1)
        check_number("chars_per_token", self.chars_per_token, lo=0, lo_open=True)
        self.indexer = ApproxPrefixIndexer(self.lru_capacity)

    def hashes(self, req: PromptInfo) -> list[tuple]:
        """The chained hashes of the prompt's first blocks of characters: a block wholly inside
        the system prompt's text is the group's, any later one the prompt's own."""
        chars = int(req.prompt_len * self.chars_per_token)
        chars = min(chars, self.block_chars * self.max_blocks)
        sys_chars = int(req.system_len * self.chars_per_token)
        out: list[tuple] = []
        for i in range(chars // self.block_chars):
            if (i + 1) * self.block_chars <= sys_chars:
                out.append(("s", req.group, i))
            else:
                out.append(("q", req.group, req.prompt, i))
        return out

    def score(self, req: PromptInfo, n: int) -> list[float]:
        hs = self.hashes(req)
        self._last = (hs,)
        if not hs:
            return [0.0] * n
        m = self.indexer.match(hs)
        return [m.get(p, 0) / len(hs) for p in range(n)]

    def picked(self, req: PromptInfo, pod: int) -> None:
        hs = self._last[0] if self._last else self.hashes(req)
        self.indexer.add(hs, pod)


class KVEventIndex:
    """llm-d-kv-cache's block index as the pods' KV events keep it: key -> pods holding it."""

    def __init__(self):
        self.pods: dict[Hashable, set[int]] = {}

    def stored(self, pod: int, keys: Sequence[Hashable]) -> None:
        for k in keys:
            self.pods.setdefault(k, set()).add(pod)

    def removed(self, pod: int, keys: Sequence[Hashable]) -> None:
        for k in keys:
            s = self.pods.get(k)
            if s is not None:
                s.discard(pod)
                if not s:
                    del self.pods[k]


@dataclass
class PreciseScoringState:
    """What the cache_tracking scorer knows beyond the index: which prompts and groups its
    tokenizer cache has seen."""

    seen_prompts: set = field(default_factory=set)
    seen_groups: set = field(default_factory=set)


@dataclass
class PrecisePrefixScorer:
    """``prefix-cache-scorer`` with ``mode: cache_tracking`` (llm-d)."""

    block_tokens: int
    engine_block_size: int
    index: KVEventIndex = field(default_factory=KVEventIndex)
    state: PreciseScoringState = field(default_factory=PreciseScoringState)
    keys_of: object = None  # callable (PromptInfo, block_size) -> keys, set by the fleet

    def __post_init__(self):
        check_int("blockSizeTokens", self.block_tokens, lo=1)

    def known_tokens(self, req: PromptInfo) -> int:
        """Tokens of the prompt the tokenizer cache can give at once (the whole prompt once seen;
        the shared system prompt once a group-mate was seen; nothing before)."""
        if (req.group, req.prompt) in self.state.seen_prompts:
            return req.prompt_len
        if req.group in self.state.seen_groups:
            return req.system_len
        return 0

    def score(self, req: PromptInfo, n: int) -> list[float]:
        known = self.known_tokens(req)
        self.state.seen_prompts.add((req.group, req.prompt))
        self.state.seen_groups.add(req.group)
        if known < self.block_tokens or self.keys_of is None:
            return [0.0] * n
        if self.block_tokens != self.engine_block_size:
            return [0.0] * n  # the engines' event keys never match the indexer's blocks
        keys = self.keys_of(req, self.block_tokens)[: known // self.block_tokens]  # type: ignore[operator]
        raw = longest_prefix_scores(keys, self.index.pods)
        return normalise_indexed(raw, n)

    def picked(self, req: PromptInfo, pod: int) -> None:
        return None


def longest_prefix_scores(keys: Sequence[Hashable], pods_of: dict) -> dict[int, int]:
    """LongestPrefixScorer: pods holding the first key start at 1; each next key keeps the pods
    that also hold it and adds 1 to each."""
    if not keys:
        return {}
    first = pods_of.get(keys[0])
    if not first:
        return {}
    scores = {p: 1 for p in first}
    active = set(first)
    for k in keys[1:]:
        active &= pods_of.get(k, set())
        if not active:
            break
        for p in active:
            scores[p] += 1
    return scores


def normalise_indexed(raw: dict[int, int], n: int) -> list[float]:
    """indexedScoresToNormalizedScoredPods: min-max over the pods in ``raw`` (1 each when all
    equal), 0 for a pod not in it."""
    if not raw:
        return [0.0] * n
    lo, hi = min(raw.values()), max(raw.values())
    out = []
    for p in range(n):
        if p not in raw:
            out.append(0.0)
        elif hi == lo:
            out.append(1.0)
        else:
            out.append((raw[p] - lo) / (hi - lo))
    return out


@dataclass
class EndpointPicker:
    """One scheduling profile: weighted scorers and a picker."""

    scorers: list  # (name, weight, scorer object or "queue"/"kv")
    picker: str
    precise: PrecisePrefixScorer | None = None

    def pick(self, req: PromptInfo, views: Sequence[PodView], rng: np.random.Generator) -> int:
        n = len(views)
        if self.picker == "random-picker":
            for _, _, s in self.scorers:
                if not isinstance(s, str):
                    s.score(req, n)
            choice = int(rng.integers(n))
        else:
            total = np.zeros(n)
            for _, w, s in self.scorers:
                if s == "queue":
                    sc = queue_scores(views)
                elif s == "kv":
                    sc = kv_cache_scores(views)
                else:
                    sc = s.score(req, n)
                total += w * np.asarray(sc, dtype=float)
            best = np.flatnonzero(total == total.max())
            choice = int(best[rng.integers(len(best))]) if len(best) > 1 else int(best[0])
        for _, _, s in self.scorers:
            if not isinstance(s, str):
                s.picked(req, choice)
        return choice


def parse_picker_config(name: str, cfg: dict, *, engine_block_size: int,
                        chars_per_token: float = 4.0) -> EndpointPicker:  # fmt: skip
    """An :class:`EndpointPicker` from an ``EndpointPickerConfig`` (the parsed YAML)."""
    where = f"schedulers.{name}"
    if not isinstance(cfg, dict):
        raise ValueError(f"{where} must be an EndpointPickerConfig mapping, got {cfg!r}")
    kind = cfg.get("kind")
    if kind != "EndpointPickerConfig":
        raise ValueError(f"{where}.kind must be 'EndpointPickerConfig', got {kind!r}")
    plugins = cfg.get("plugins")
    if not isinstance(plugins, list) or not plugins:
        raise ValueError(f"{where}.plugins is missing (a list of plugins)")
    by_name: dict[str, tuple[str, dict]] = {}
    for i, p in enumerate(plugins):
        if not isinstance(p, dict) or "type" not in p:
            raise ValueError(f"{where}.plugins[{i}].type is missing")
        ptype = p["type"]
        if ptype not in SCORERS + PICKERS + HANDLERS:
            raise ValueError(
                f"{where}.plugins[{i}].type must be one of {list(SCORERS + PICKERS + HANDLERS)}, "
                f"got {ptype!r}"
            )
        by_name[str(p.get("name") or ptype)] = (ptype, p.get("parameters") or {})
    profiles = cfg.get("schedulingProfiles")
    if not isinstance(profiles, list) or len(profiles) != 1:
        raise ValueError(
            f"{where}.schedulingProfiles must hold exactly one profile, got {profiles!r}"
        )
    refs = profiles[0].get("plugins") if isinstance(profiles[0], dict) else None
    if not isinstance(refs, list) or not refs:
        raise ValueError(f"{where}.schedulingProfiles[0].plugins is missing")
    scorers: list = []
    picker = "max-score-picker"  # the profile's default picker when none is named
    precise = None
    for j, ref in enumerate(refs):
        rname = str(ref.get("pluginRef")) if isinstance(ref, dict) else ""
        if rname not in by_name:
            raise ValueError(
                f"{where}.schedulingProfiles[0].plugins[{j}].pluginRef must name a plugin "
                f"({sorted(by_name)}), got {rname!r}"
            )
        ptype, params = by_name[rname]
        if ptype in PICKERS:
            picker = ptype
            n_ep = params.get("maxNumOfEndpoints", 1)
            check_int(f"{where}: maxNumOfEndpoints", n_ep, lo=1)
            continue
        if ptype in HANDLERS:
            continue
        weight = ref.get("weight", 1)
        check_number(f"{where}: weight of {rname}", weight, lo=0)
        if ptype == "queue-scorer":
            scorers.append((rname, float(weight), "queue"))
        elif ptype == "kv-cache-scorer":
            scorers.append((rname, float(weight), "kv"))
        else:
            obj = _prefix_scorer(where, params, engine_block_size, chars_per_token)
            if isinstance(obj, PrecisePrefixScorer):
                precise = obj
            scorers.append((rname, float(weight), obj))
    return EndpointPicker(scorers, picker, precise)


def _prefix_scorer(where: str, params: dict, engine_block_size: int, cpt: float):
    mode = params.get("mode", "estimate")
    if mode == "estimate":
        return ApproxPrefixScorer(
            block_chars=params.get("hashBlockSize", params.get("blockSize", 64)),
            max_blocks=params.get("maxPrefixBlocksToMatch", 256),
            lru_capacity=params.get("lruCapacityPerServer", 31250),
            chars_per_token=cpt,
        )
    if mode == "cache_tracking":
        tpc = params.get("tokenProcessorConfig")
        if tpc is None:  # the older layout: indexerConfig.tokenProcessorConfig.blockSize
            tpc = (params.get("indexerConfig") or {}).get("tokenProcessorConfig") or {}
        bs = tpc.get("blockSizeTokens", tpc.get("blockSize", 16))
        return PrecisePrefixScorer(block_tokens=bs, engine_block_size=engine_block_size)
    raise ValueError(
        f"{where}: prefix-cache-scorer mode must be 'estimate' or 'cache_tracking', got {mode!r}"
    )
