"""Claims: sentences of the book whose truth a notebook computes, checked like glued numbers.

A claim is a named sentence and a verdict. The notebook that holds the evidence decides it::

    claim("p08_sticky_shortest_tail_roomy",
          p95["sticky"].mean < p95["guard_live"].mean and p95["sticky"].differs_from(p95["guard_live"]),
          f"Hashing the session keeps a TTFT p95 of {units.fmt_seconds(p95['sticky'].mean)} ...")

``claim`` glues the sentence under ``key`` and the verdict (``"true"`` or ``"false"``) under
``key + "__holds"`` (:func:`holds_key`), and prints one stable line, ``claim KEY: holds`` or
``claim KEY: FALSE``, so a cell tagged ``nbval-check-output`` fails nbval when a verdict flips.
A prose page writes ``{claim}`key``` (``_ext/claims.py``): the build renders the sentence with a
link to the deciding notebook and the strict build fails when the verdict is false or missing.

Like :func:`kvlab.glue.glue`, this works without myst-nb (Colab): it then only prints.
"""

from __future__ import annotations

import math
import os
import re
from typing import TYPE_CHECKING, NamedTuple

from .glue import glue

if TYPE_CHECKING:
    from .assumptions import CostModel

    CostModelLike = CostModel | str

__all__ = [
    "HOLDS_SUFFIX",
    "KEY_PATTERN",
    "Claim",
    "claim",
    "decide",
    "holds_key",
    "p08_card_claims",
    "p22_card_claims",
    "verdict_text",
]

#: Suffix of the companion key that carries a claim's verdict.
HOLDS_SUFFIX = "__holds"
#: What a claim key may look like (the same alphabet as glue keys).
KEY_PATTERN = re.compile(r"[A-Za-z0-9_]+")


def holds_key(key: str) -> str:
    """The glue key of ``key``'s verdict."""
    return key + HOLDS_SUFFIX


def verdict_text(holds: bool) -> str:
    """How a verdict is glued: ``"true"`` or ``"false"``."""
    return "true" if holds else "false"


def claim(key: str, holds: object, text: str) -> None:
    """Record the sentence ``text`` under ``key`` with its verdict ``holds`` (returns nothing, so a
    cell ending with it shows only the printed verdict line; nbval runs cells without the history
    a trailing ``;`` needs).

    ``holds`` must be a bool (numpy bools are accepted): compute it from the best evidence, e.g.
    ``a.mean < b.mean and a.differs_from(b)`` for two :class:`kvlab.seeds.Spread`.
    """
    if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key) or key.endswith(HOLDS_SUFFIX):
        raise ValueError(
            f"key must be letters, digits and underscores, not ending in {HOLDS_SUFFIX!r}, got {key!r}"
        )
    if not hasattr(holds, "__bool__") or type(holds).__name__ not in ("bool", "bool_"):
        raise ValueError(f"holds must be a bool (a computed verdict), got {type(holds).__name__}")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text must be a non-empty sentence, got {text!r}")
    if "`" in text:
        raise ValueError(f"text must not contain backticks (it is glued into MyST prose): {text!r}")
    verdict = bool(holds)
    glue(key, text.strip())
    glue(holds_key(key), verdict_text(verdict))
    print(f"claim {key}: {'holds' if verdict else 'FALSE'}")


# --- the Problem 22 card's claims that need no simulation -------------------------------------------


class Claim(NamedTuple):
    """One claim before it is glued: its key, its verdict and its sentence."""

    key: str
    holds: bool
    text: str


def decide(found: list[Claim]) -> None:
    """Glue and print every claim of ``found`` (:func:`claim` for each)."""
    for c in found:
        claim(c.key, c.holds, c.text)


def _pools(
    cost: CostModelLike, max_batch_cap: int = 256, max_busy: float = 0.9, hit_rate: float = 0.0
) -> tuple[float, float, int, int]:
    """Problem 22's pools under ``cost``: (prefill work, decode work, deployed P, deployed D), by
    the one sizing rule :func:`kvlab.pool_sizing.deployed_pools` (headroom on both pools)."""
    from . import pool_sizing
    from .assumptions import P22_POOLS as pools

    p = pool_sizing.deployed_pools(
        cost, pools.rate_rps, pools.prompt_tokens, pools.output_tokens, pools.tpot_s,
        hit_rate=hit_rate, max_busy=max_busy, max_batch_cap=max_batch_cap,
    )  # fmt: skip
    return p.prefill_work, p.decode_work, p.prefill, p.decode


def p22_card_claims(book: CostModelLike, measured: CostModelLike) -> list[Claim]:
    """The Problem 22 card's claims that the cost model decides without simulating queues, under the
    two calibrations ``book`` and ``measured`` (:class:`kvlab.costs.Costs`). A test passes a changed
    ``book`` to show that a card sentence turns false when a constant moves."""
    from . import calc, costs, disagg, hardware, units
    from .assumptions import MODEL, NIC_BYTES_PER_S, P22_POOLS, P22_TRANSFER

    X, pools = P22_TRANSFER, P22_POOLS
    cal = {"book": costs.as_costs(book), "measured": costs.as_costs(measured)}
    beta = calc.model_kv_bytes_per_token(MODEL, 2)
    kv = calc.kv_bytes(X.prompt_tokens, beta)
    per_gpu = calc.per_gpu_bytes(kv, X.tp, MODEL.kv_heads)
    t_each = calc.transfer_seconds(per_gpu, NIC_BYTES_PER_S)
    t_one = calc.transfer_seconds(kv, NIC_BYTES_PER_S)
    pre = {n: costs.prefill_cost_s(c, X.prompt_tokens) for n, c in cal.items()}
    share_each = {n: disagg.transfer_share_of_ttft(t_each, p) for n, p in pre.items()}
    share_one = {n: disagg.transfer_share_of_ttft(t_one, p) for n, p in pre.items()}
    # the bytes go as one message per KV block per layer, each at a fixed cost (assumed)
    per_layer = math.ceil(X.prompt_tokens / X.block_tokens)
    msgs = per_layer * MODEL.layers
    t_msgs = costs.transfer_s(
        per_gpu, NIC_BYTES_PER_S, messages=msgs, per_message_s=X.per_message_s
    )
    share_msgs = {n: disagg.transfer_share_of_ttft(t_msgs, p) for n, p in pre.items()}
    exposed_msgs = {
        n: disagg.exposed_transfer_seconds(p, t_each, MODEL.layers, per_layer * X.per_message_s)
        for n, p in pre.items()
    }
    ridge = hardware.H100_SXM.ridge_flops_per_byte
    ctx = pools.prompt_tokens + pools.output_tokens / 2
    i_pre = disagg.prefill_intensity(MODEL, pools.prompt_tokens)
    i_dec = disagg.decode_intensity(MODEL, 100, ctx)
    chunk, batch50 = 512, 50
    mixed = {
        n: (
            costs.mixed_step_s(chunk, batch50, ctx, calibration=n)
            if n == "measured"
            else calc.evaluate(
                "mixed_step_seconds_model",
                a=c.decode_base_s,
                k=c.decode_per_request_s,
                c_kv=c.decode_per_context_token_s,
                n_b=batch50,
                n_ctx=ctx,
                tau=c.prefill_s_per_token,
                t_pair=c.prefill_s_per_pair,
                n_tok=chunk,
                c=0,
            ),
            costs.decode_cost_s(c, batch50, ctx),
        )
        for n, c in cal.items()
    }
    pool = {n: _pools(c) for n, c in cal.items()}
    pool_hit = {n: _pools(c, hit_rate=pools.hit_rate_with_caching) for n, c in cal.items()}
    lever = {
        n: costs.lever_ratio(c, pools.prompt_tokens, pools.output_tokens, pools.tpot_s)
        for n, c in cal.items()
    }
    nvlink_bidir = hardware.H100_SXM.nvlink_bidir_bytes_per_s
    if nvlink_bidir is None:
        raise ValueError("kvlab.hardware.H100_SXM must state its NVLink bandwidth")
    hgx = hardware.NVLINK_DOMAIN_GPUS["HGX H100 / H200 server"]
    mha = MODEL.with_(kv_heads=MODEL.q_heads)
    mha_factor = calc.model_kv_bytes_per_token(mha) / beta
    fp8_factor = calc.model_kv_bytes_per_token(MODEL, 1) / beta
    pb, pm = pool["book"], pool["measured"]
    hb, hm = pool_hit["book"], pool_hit["measured"]
    pct, sec = units.fmt_pct, units.fmt_seconds
    tok = units.fmt_int(X.prompt_tokens)
    eb, em = exposed_msgs["book"], exposed_msgs["measured"]
    # the per-message cost below which a layer's send keeps up with a layer's measured prefill
    keeps_up = (pre["measured"] - t_each) / MODEL.layers / per_layer
    return [
        Claim(
            "p22_claim_why_split",
            bool(
                i_pre > ridge > i_dec
                and all(m > s for m, s in mixed.values())
                and mixed["book"][0] > pools.tpot_s
            ),
            "Prefill is compute-bound and sets TTFT; decode is bandwidth-bound and sets TPOT; "
            "colocated, every prefill chunk stretches the decode steps it rides with, and one "
            "parallelism layout must serve both phases.",
        ),
        Claim(
            "p22_claim_transfer_cheap",
            bool(t_each < 0.01 and t_msgs - t_each > t_each and max(eb, em) < t_each),
            "The KV goes GPU to GPU over RDMA, pulled after prefill (vLLM's default) or pushed "
            "layer by layer to hide it; with GQA its bytes take milliseconds, so I'd count the "
            "messages too and pack small blocks.",
        ),
        Claim(
            "p22_claim_messages",
            bool(
                t_msgs > 5 * t_each and share_msgs["book"] > 5 * share_each["book"] and em < t_each
            ),
            f"That is {sec(t_each)} at line rate, but {units.fmt_int(msgs)} messages add "
            f"{sec(t_msgs - t_each)}: pulled after prefill, the transfer takes "
            f"{pct(share_msgs['book'])} of TTFT (book; {pct(share_msgs['measured'])} measured), "
            f"not {pct(share_each['book'])}; sent layer by layer, {sec(em)} stays exposed.",
        ),
        Claim(
            "p22_claim_overlap",
            bool(max(eb, em) < t_msgs / 10),
            "Pulled after prefill, as vLLM's NIXL connector does, all of it adds to TTFT; sent "
            "layer by layer while prefill runs, almost none of it does.",
        ),
        Claim(
            "p22_claim_nvlink",
            bool(2 * X.tp > hgx),
            "NVLink needs both sides in one NVLink domain, which an HGX server cannot give two "
            "pools that each span a whole server, so across servers it is RDMA.",
        ),
        Claim(
            "p22_claim_pools",
            bool(pb[2] > pb[3] and pm[2] > pm[3] and pm[2] < pb[2] and pm[3] < pb[3]),
            f"The same rule gives {pm[2]} : {pm[3]} on measured costs ({pb[2]} : {pb[3]} on the "
            "book's): more prefill than decode replicas either way.",
        ),
        Claim(
            "p22_claim_pools_rule",
            bool(pb[2] > math.ceil(pb[0] - 1e-9) and (pb[2], pb[3]) != (hb[2], hb[3])),
            "I'd size prefill from prompt tokens per second and decode from Little's law over the "
            "largest batch that meets TPOT, with headroom in both pools.",
        ),
        Claim(
            "p22_claim_hits_flip",
            bool(hb[0] < hb[1] and hm[0] < hm[1] and hb[1] == pb[1]),
            "Prefix caching flips the work: at "
            f"{pct(pools.hit_rate_with_caching)} hits, prefill work falls below decode work, "
            "which does not shrink, so I'd keep the ratio adjustable.",
        ),
        # the calibrations disagree on how large the lever is
        Claim(
            "p22_claim_calibrations_disagree",
            bool(lever["book"] > 1.5 and lever["measured"] < 1.35),
            f"On averages the book's round numbers promise the split {lever['book']:.1f}x "
            f"colocation's capacity, the measured fit {lever['measured']:.1f}x.",
        ),
        Claim(
            "p22_claim_tpot_colocated",
            bool(all(m > s for m, s in mixed.values()) and mixed["book"][0] > pools.tpot_s),
            f"A {chunk}-token chunk stretches a {batch50}-request decode step from "
            f"{sec(mixed['book'][1])} to {sec(mixed['book'][0])} (book; the target is "
            f"{sec(pools.tpot_s)}), {sec(mixed['measured'][1])} to {sec(mixed['measured'][0])} "
            "measured.",
        ),
        Claim(
            "p22_claim_tpot_split",
            bool(
                costs.decode_cost_s(
                    cal["book"],
                    calc.max_decode_batch(
                        pools.tpot_s, cal["book"].decode_base_s, cal["book"].decode_per_request_s
                    ),
                    ctx,
                )
                <= pools.tpot_s + 1e-12
            ),
            "Decode steps carry no prefill, so a decode pool held to its largest batch meets "
            "the TPOT target on every step.",
        ),
        Claim(
            "p22_claim_ttft_split",
            bool(share_each["book"] < 0.02 and eb / (pre["book"] + eb) < 0.01),
            f"Prefill runs alone; a pull adds {pct(share_each['book'])} of TTFT at line rate, "
            f"{pct(share_msgs['book'])} with messages (book); a layer-wise push "
            f"{pct(eb / (pre['book'] + eb), 2)}.",
        ),
        Claim(
            "p22_claim_mistake_free",
            bool(
                max(share_each.values()) < 0.02 and t_one / t_each == X.nics and t_msgs > 5 * t_each
            ),
            f"For the {tok}-token request: {sec(t_each)} with a NIC per GPU ({sec(t_msgs)} with "
            f"its messages) and {sec(t_one)} through one NIC at line rate, against "
            f"{sec(pre['book'])} of prefill (book) or {sec(pre['measured'])} (measured).",
        ),
        Claim(
            "p22_claim_mistake_gqa",
            bool(mha_factor == MODEL.q_heads / MODEL.kv_heads and fp8_factor == 0.5),
            f"The same 70B shape with multi-head attention moves {mha_factor:.0f}x more; fp8 KV "
            "halves it.",
        ),
        Claim(
            "p22_claim_mistake_one_way",
            bool(
                calc.one_way_bandwidth(nvlink_bidir) == nvlink_bidir / 2
                and NIC_BYTES_PER_S == 400e9 / 8
            ),
            f"An H100's NVLink {units.fmt_rate_bytes(nvlink_bidir)} counts both directions, so a "
            f"transfer gets {units.fmt_rate_bytes(calc.one_way_bandwidth(nvlink_bidir))}; a "
            f"400 Gb/s NIC's {units.fmt_rate_bytes(NIC_BYTES_PER_S)} is already one way.",
        ),
        Claim(
            "p22_claim_mistake_one_nic",
            bool(t_one / t_each == X.nics and share_one["measured"] > 2 * share_one["book"]),
            f"Eight GPUs sharing one NIC take eight times longer at line rate: {sec(t_one)}, "
            f"{pct(share_one['book'])} of TTFT with the book's prefill but "
            f"{pct(share_one['measured'])} with the faster measured one.",
        ),
        Claim(
            "p22_claim_mistake_hidden",
            bool(max(eb, em) < t_msgs / 10 and X.per_message_s < keeps_up),
            f"Sent layer by layer, only the last layer's send stays exposed, {sec(em)} of the "
            f"{sec(t_msgs)}, while a message costs under {sec(keeps_up)} (measured prefill); a "
            "pull after prefill (vLLM's default, DistServe) exposes all of it.",
        ),
        Claim(
            "p22_claim_mistake_heads",
            bool(
                calc.per_gpu_bytes(kv, 2 * MODEL.kv_heads, MODEL.kv_heads)
                == calc.per_gpu_bytes(kv, MODEL.kv_heads, MODEL.kv_heads)
            ),
            f"With {MODEL.kv_heads} KV heads, TP {2 * MODEL.kv_heads} gives each GPU one whole "
            f"(replicated) head, {units.fmt_bytes(per_gpu)} as at TP {MODEL.kv_heads}: per-GPU "
            "bytes stop shrinking at TP = KV heads.",
        ),
        Claim(
            "p22_claim_mistake_fixed",
            bool((pb[2], pb[3]) != (hb[2], hb[3]) and (pb[2], pb[3]) != (pm[2], pm[3])),
            f"The deployed split moves with traffic and costs: {pb[2]} : {pb[3]} (book), "
            f"{hb[2]} : {hb[3]} with {pct(pools.hit_rate_with_caching)} hits, {pm[2]} : {pm[3]} "
            "measured.",
        ),
    ]


# --- the Problem 8 card's worked scenario: the pool, the working set, random routing ---------------


def p08_card_claims(p8=None) -> list[Claim]:
    """The Problem 8 card's claims about its worked scenario that the assumptions decide without
    simulating: the pool, the working set against it, which assumptions decide that verdict, and
    random routing on the worked prompt. A test passes a changed ``p8`` (users back within a
    minute) to show that the card's verdict turns false when an assumption moves."""
    from . import calc, units
    from .assumptions import P8
    from .workingset import P8_EARLIER_MEMORY_SHARE, p08_pool, p08_working_set

    p8 = P8 if p8 is None else p8
    pool = p08_pool(p8)
    fp8 = p08_pool(p8, kv_bytes_per_value=1)
    ws, ws8 = p08_working_set(pool.tokens, p8=p8), p08_working_set(fp8.tokens, p8=p8)
    pct, tok = units.fmt_pct, units.fmt_tokens
    s, hist, u, n = p8.system_tokens, p8.history_tokens, p8.new_tokens, p8.replicas
    bound = calc.hit_fraction(calc.cached_tokens_random(s, hist, n), s, hist, u)
    k_lo, k_hi = math.floor(p8.earlier_turns), math.ceil(p8.earlier_turns)
    nested = {
        k: calc.hit_fraction(calc.cached_tokens_random_nested(s, hist, n, k), s, hist, u)
        for k in (k_lo, k_hi)
    }
    aware = calc.hit_fraction(calc.cached_tokens_cache_aware(s, hist), s, hist, u)
    minutes = p8.return_s / 60
    return [
        Claim(
            "p08_claim_pool",
            bool(
                abs(fp8.tokens - 2 * pool.tokens) <= 32
                and pool.tokens > p8.cache_tokens_per_replica
            ),
            f"At vLLM 0.32's default {pct(pool.gpu_memory_utilization)} of memory "
            f"({pct(P8_EARLIER_MEMORY_SHARE)} before), less {units.fmt_bytes(pool.weight_bytes)} "
            f"of bf16 weights and {units.fmt_bytes(pool.non_kv_bytes / p8.tp, digits=2)} per GPU of "
            f"activations, eight H100s at TP {p8.tp} keep a free KV pool of "
            f"{units.fmt_bytes(pool.kv_bytes)}: {tok(pool.tokens)} at bf16, twice that at fp8.",
        ),
        Claim(
            "p08_claim_working_set",
            bool(ws.share < 0.5),
            f"Then I'd size the working set: users back about {minutes:.0f} minutes after an "
            f"answer keep {units.fmt_int(ws.live)} chats live (Little's law); the free KV pools "
            f"hold {pct(ws.share)} of them, so most returning turns miss.",
        ),
        Claim(
            "p08_claim_verdict_depends",
            bool(ws.share < ws8.share < 1 and ws.all_fit_within_s < p8.return_s),
            f"That verdict rests on two assumptions: fp8 KV doubles the share to "
            f"{pct(ws8.share)}, and the pools hold every live conversation only if users come "
            f"back within about {ws.all_fit_within_s / 60:.1f} minutes "
            f"({ws8.all_fit_within_s / 60:.1f} with fp8).",
        ),
        Claim(
            "p08_claim_random_short",
            bool(bound < nested[k_lo] < nested[k_hi] < aware and nested[k_hi] - bound < 0.1),
            f"This prompt's history is {k_lo} to {k_hi} earlier turns, so a router that ignores "
            f"caches finds {pct(nested[k_lo])} to {pct(nested[k_hi])} of it cached even with "
            f"unlimited caches: nesting lifts the one-in-{n} bound's {pct(bound)} only a little.",
        ),
    ]


# --- reading times, from word counts ----------------------------------------------------------------

#: Reading speed behind every reading time the book states (words per minute of technical prose).
WORDS_PER_MINUTE = 200
_ROLE = re.compile(r"\{(claim|num)\}`([A-Za-z0-9_]+)`")
_LABELLED = re.compile(r"\{(term|doc|ref|numref)\}`([^`<]*?)\s*(?:<[^`]*>)?`")
_DROP = re.compile(r"\{(cite|eq)\}`[^`]*`")
_GLUE = re.compile(r"\{glue:text\}`[^`]*`")
_LINK = re.compile(r"\[([^\]]*)\]\([^)]*\)")
_DIRECTIVE = re.compile(r"^\s*(```+|:::+)\S*.*$|^\s*:[a-z-]+:.*$|^\(\S+\)=\s*$", re.M)


def stored_glue(root: str | os.PathLike) -> dict[str, str]:
    """Every value the committed notebooks under ``root`` (``notebooks/``, ``solutions/``) glue as
    text: key -> the string a page shows."""
    import ast
    import json
    from pathlib import Path

    values: dict[str, str] = {}
    for folder in ("notebooks", "solutions"):
        for path in sorted(Path(root, folder).rglob("*.ipynb")):
            if ".ipynb_checkpoints" in path.parts:
                continue
            nb = json.loads(path.read_text(encoding="utf-8"))
            for cell in nb.get("cells", []):
                for out in cell.get("outputs", []) or []:
                    meta = (out.get("metadata") or {}).get("scrapbook") or {}
                    raw = (out.get("data") or {}).get(meta.get("mime_prefix", "") + "text/plain")
                    if "name" not in meta or raw is None:
                        continue
                    raw = "".join(raw) if isinstance(raw, list) else raw
                    try:
                        value = ast.literal_eval(raw)
                    except (ValueError, SyntaxError):
                        value = raw
                    values[meta["name"]] = value if isinstance(value, str) else str(value)
    return values


def page_text(text: str, glued: dict[str, str]) -> str:
    """A MyST page's words as a reader sees them: claims and numbers filled in from ``glued``,
    roles reduced to their visible text, citations, directive fences and option lines dropped."""
    text = _ROLE.sub(lambda m: glued.get(m.group(2), "x"), text)
    text = _LABELLED.sub(lambda m: m.group(2), text)
    text = _GLUE.sub("x", _DROP.sub("", text))
    text = _LINK.sub(lambda m: m.group(1), text)
    return _DIRECTIVE.sub("", text)


def words(text: str) -> int:
    """Words in ``text``: runs of characters between spaces that hold a letter or a digit."""
    return sum(1 for w in text.split() if any(ch.isalnum() for ch in w))


def reading_minutes(n_words: int) -> int:
    """Minutes to read ``n_words`` at :data:`WORDS_PER_MINUTE`, rounded, at least one."""
    if isinstance(n_words, bool) or not isinstance(n_words, int) or n_words < 0:
        raise ValueError(f"n_words must be a non-negative int, got {n_words!r}")
    return max(1, round(n_words / WORDS_PER_MINUTE))


def notebook_prose(path: str | os.PathLike) -> str:
    """The markdown cells of the notebook at ``path``, joined (a reader reads these; code is
    skimmed, so a reading time counts prose only)."""
    import json
    from pathlib import Path

    nb = json.loads(Path(path).read_text(encoding="utf-8"))
    return "\n".join(
        "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
        for c in nb.get("cells", [])
        if c.get("cell_type") == "markdown"
    )


def reading_time(root: str | os.PathLike, pages: list[str]) -> tuple[int, int]:
    """(words, minutes) of ``pages`` (paths relative to ``root``: ``.md`` pages and notebooks)
    with every glued value filled in from the committed notebooks."""
    from pathlib import Path

    glued = stored_glue(root)
    total = 0
    for rel in pages:
        path = Path(root, rel)
        src = notebook_prose(path) if path.suffix == ".ipynb" else path.read_text(encoding="utf-8")
        total += words(page_text(src, glued))
    return total, reading_minutes(total)
