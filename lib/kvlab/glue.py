"""Glue computed values into the book's prose, or just show them where myst-nb is absent (Colab).

``glue(name, value)`` records ``value`` under ``name`` for MyST pages when myst-nb is installed;
otherwise (Colab, plain Jupyter) it only displays the value if asked, so the same notebook runs
everywhere. Glue numbers as preformatted strings (``"655 MB"``): ``{glue:text}`` strips the
quotes of a string's repr. Prose pages in book/ write ``{num}`key``` (``_ext/glue_keys.py`` finds
the notebook that glues the key); keys are unique across the book, and a notebook's own markdown
uses ``{glue:text}`key:```.
"""

from __future__ import annotations

import sys


def in_colab() -> bool:
    """True inside Google Colab."""
    return "google.colab" in sys.modules


def has_myst_nb() -> bool:
    """True when myst-nb can be imported (the book build); False in Colab."""
    try:
        import myst_nb  # noqa: F401
    except ImportError:
        return False
    return True


def glue(name: str, value, display: bool = False) -> None:
    """Glue ``value`` under ``name`` for the book's pages (returns nothing, so a glue call ending
    a cell prints nothing)."""
    try:
        from myst_nb import glue as _glue
    except ImportError:
        if display:
            from IPython.display import display as _display

            _display(value)
        return
    _glue(name, value, display=display)
