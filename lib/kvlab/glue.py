"""Glue computed values into the book's prose, or just show them where myst-nb is absent (Colab).

``glue(name, value)`` records ``value`` under ``name`` for MyST pages (``{glue:text}`` roles) when
myst-nb is installed; otherwise (Colab, plain Jupyter) it only displays the value, so the same
notebook runs everywhere. Strings are wrapped so that ``{glue:text}`` shows them without quotes.
"""

from __future__ import annotations

import sys


class Text:
    """A string whose repr is itself, so a glued '655 MB' renders as 655 MB, not '655 MB'."""

    def __init__(self, text: str):
        self.text = str(text)

    def __repr__(self) -> str:
        return self.text

    __str__ = __repr__

    def __eq__(self, other) -> bool:
        return str(other) == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules


def has_myst_nb() -> bool:
    try:
        import myst_nb  # noqa: F401
    except ImportError:
        return False
    return True


def glue(name: str, value, display: bool = False):
    """Glue ``value`` under ``name`` (strings become :class:`Text`). Returns the glued object."""
    obj = Text(value) if isinstance(value, str) else value
    try:
        from myst_nb import glue as _glue
    except ImportError:
        if display:
            from IPython.display import display as _display

            _display(obj)
        return obj
    _glue(name, obj, display=display)
    return obj
