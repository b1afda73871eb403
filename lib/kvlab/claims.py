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

import re

from .glue import glue

__all__ = ["HOLDS_SUFFIX", "KEY_PATTERN", "claim", "holds_key", "verdict_text"]

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
