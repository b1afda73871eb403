"""The prompts of Lab 1 and the hit rate they predict.

The experiment (content.md, Part 3): many requests share one long system prompt and each adds a
short, different question. With prefix caching every request after the first finds the system
prompt's KV in the cache. Then a timestamp is put at the very start of the system prompt: every
prompt now differs from the first few tokens on, and the cache finds (almost) nothing.

The prediction uses vLLM's rule: KV is cached in full blocks of ``block_size`` tokens, each block
keyed by a hash chained from its parent's; a request's hit is the run of leading blocks already
cached, and at least one prompt token is always computed (so the hit is capped at
``floor((len - 1) / block_size)`` blocks). With no eviction, the cache holds every earlier prompt.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import numpy as np

from ..._validate import check_int
from ...cache import block_keys

_WORDS = (
    "account answer assistant billing cancel clear concise customer data delivery detail escalate "
    "example explain fact follow friendly help invoice keep language limit order policy polite "
    "privacy product refund reply request safety short source step summary support tone topic "
    "update user warranty"
).split()

_TOPICS = (
    "a refund",
    "my invoice",
    "a late delivery",
    "the warranty",
    "my password",
    "a discount",
    "my address",
    "the privacy policy",
    "an order",
    "a broken item",
)
_ASKS = (
    "How do I ask about",
    "What is the rule for",
    "Who handles",
    "Can you explain",
    "What should I know about",
    "Where can I read about",
    "How long does it take to sort out",
    "Is there a fee for",
    "What happens with",
    "Why was I charged for",
)

#: The base time of the deterministic timestamps (the lab uses the real clock on a GPU).
BASE_TIME = datetime(2026, 1, 1, 9, 0, 0)


def system_prompt_text(words: int = 1500, seed: int = 0) -> str:
    """A deterministic support-policy system prompt of ``words`` words (about 1.3 tokens each
    for English BPE tokenizers; the vLLM runner trims it to an exact token count)."""
    words = check_int("words", words, lo=1)
    rng = np.random.default_rng(seed)
    picked = rng.choice(len(_WORDS), size=words)
    sentences, out = 0, []
    for i, w in enumerate(picked):
        out.append(_WORDS[w])
        if i % 12 == 11:
            sentences += 1
            out[-1] += "."
            out.append(f"\nRule {sentences + 1}:")
    return "You are a support assistant. Follow these rules.\nRule 1: " + " ".join(out)


def questions(requests: int) -> list[str]:
    """``requests`` short questions, all different (up to 100; numbered beyond that)."""
    requests = check_int("requests", requests, lo=1)
    out = []
    for i in range(requests):
        q = f"{_ASKS[i % len(_ASKS)]} {_TOPICS[(i // len(_ASKS)) % len(_TOPICS)]}?"
        if i >= len(_ASKS) * len(_TOPICS):
            q = f"{q} (case {i})"
        out.append(q)
    return out


def timestamp_text(i: int, base: datetime = BASE_TIME) -> str:
    """The timestamp line the second experiment puts first (request ``i``, 1.25 s apart)."""
    t = base + timedelta(seconds=1.25 * i)
    return f"Current date and time: {t.isoformat(sep=' ', timespec='milliseconds')}\n"


def build_lab1_prompts(
    requests: int = 100,
    system_words: int = 1500,
    timestamp: bool = False,
    timestamps: list[str] | None = None,
    seed: int = 0,
) -> list[dict]:
    """Chat requests for the vLLM lab: ``[{"system": ..., "user": ...}, ...]``.

    With ``timestamp`` each system prompt starts with :func:`timestamp_text` (or the given
    ``timestamps``, one per request, e.g. the real clock).
    """
    requests = check_int("requests", requests, lo=1)
    system = system_prompt_text(system_words, seed)
    qs = questions(requests)
    if timestamps is not None and len(timestamps) != requests:
        raise ValueError(
            f"timestamps must hold one entry per request ({requests}), got {len(timestamps)}"
        )
    out = []
    for i, q in enumerate(qs):
        s = system
        if timestamp or timestamps is not None:
            s = (timestamps[i] if timestamps is not None else timestamp_text(i)) + system
        out.append({"system": s, "user": q})
    return out


def build_lab1_token_prompts(
    requests: int = 16,
    system_tokens: int = 2000,
    vocab: int = 1024,
    question_tokens: tuple[int, int] = (8, 24),
    timestamp: bool = False,
    seed: int = 0,
) -> list[np.ndarray]:
    """The same experiment as token ids, for the CPU model (no tokenizer needed).

    The system prompt is ``system_tokens`` seeded random ids; each question 8 to 24 ids; with
    ``timestamp`` the prompt starts with the characters of :func:`timestamp_text` mapped to ids.
    """
    requests = check_int("requests", requests, lo=1)
    system_tokens = check_int("system_tokens", system_tokens, lo=1)
    vocab = check_int("vocab", vocab, lo=128)
    lo = check_int("question_tokens[0]", question_tokens[0], lo=1)
    hi = check_int("question_tokens[1]", question_tokens[1], lo=lo)
    rng = np.random.default_rng(seed)
    system = rng.integers(128, vocab, size=system_tokens)
    out = []
    for i in range(requests):
        q = rng.integers(128, vocab, size=int(rng.integers(lo, hi + 1)))
        parts = [system, q]
        if timestamp:
            stamp = np.frombuffer(timestamp_text(i).encode("ascii"), dtype=np.uint8).astype(
                np.int64
            )
            parts.insert(0, stamp)
        out.append(np.concatenate(parts).astype(np.int64))
    return out


def block_hashes(tokens, block_size: int = 16) -> list[str]:
    """Chained keys of the full blocks of ``tokens`` (vLLM's scheme, from :func:`kvlab.cache.block_keys`):
    block i's key hashes the key of block i-1 and its own tokens. A trailing partial block has no key."""
    block_size = check_int("block_size", block_size, lo=1)
    return block_keys(np.asarray(tokens, dtype=np.int64), block_size)


def predicted_cached_tokens(token_lists, block_size: int = 16) -> list[int]:
    """Cached tokens each request should get, in order, with every earlier prompt in the cache."""
    block_size = check_int("block_size", block_size, lo=1)
    seen: set[str] = set()
    out = []
    for tokens in token_lists:
        n = len(tokens)
        if n == 0:
            raise ValueError("token_lists must not contain an empty prompt")
        hashes = block_hashes(tokens, block_size)
        cap = (n - 1) // block_size
        hit = 0
        for hsh in hashes[:cap]:
            if hsh not in seen:
                break
            hit += 1
        out.append(hit * block_size)
        seen.update(hashes)
    return out


def predicted_hit_rate(token_lists, block_size: int = 16) -> float:
    """Token hit rate the prompts predict: cached tokens / prompt tokens, over all requests."""
    cached = predicted_cached_tokens(token_lists, block_size)
    total = sum(len(t) for t in token_lists)
    return sum(cached) / total
