"""Sphinx extension: the launch and repository buttons only for a repository that exists.

``repository.url`` in ``_config.yml`` ships pointing at a placeholder. Until ``kvlab_publish:
true`` is set (under ``sphinx: config:``), the build leaves out the buttons that lead there (the
repository button and every launch button, Colab's included) and says how to turn them on. The
download button, which needs nothing but the site, stays on every notebook page.

``kvlab_publish: true`` with ``repository.url`` still at the placeholder is a warning (so the strict
build fails): the buttons would lead readers to a repository that does not exist.
"""

from __future__ import annotations

from sphinx.util import logging

logger = logging.getLogger(__name__)

HOW = (
    "kvlab_publish is false: the launch (Colab) and repository buttons are left out. To show them, "
    "point repository.url in _config.yml at your repository and set kvlab_publish: true under "
    "sphinx: config: (README, 'Publish your copy')."
)


#: The repository URL _config.yml ships with: no repository lives there.
PLACEHOLDER_URL = "https://github.com/kvlab-workbook/llm-serving-workbook"


def repository_url(config) -> str:
    """The repository URL Jupyter Book passed on from ``repository.url`` (empty when none)."""
    opts = config.html_theme_options or {}
    return str(opts.get("repository_url") or "").rstrip("/")


def placeholder_warning(publish: bool, url: str) -> str | None:
    """What the build warns when the buttons are on but lead to no repository, else None."""
    url = url.rstrip("/")
    if not publish or url not in ("", PLACEHOLDER_URL):
        return None
    return (
        f"kvlab_publish is true but repository.url in _config.yml is {url or 'not set'}, a "
        "placeholder: the launch and repository buttons would lead nowhere. Point it at your "
        "repository and run python tools/colab_cell.py (README, 'Publish your copy')."
    )


def _config_inited(app, config):
    opts = dict(config.html_theme_options or {})
    warning = placeholder_warning(bool(config.kvlab_publish), repository_url(config))
    if warning:
        logger.warning(warning)
    opts["use_download_button"] = True
    if not config.kvlab_publish:
        opts["use_repository_button"] = False
        opts["use_issues_button"] = False
        opts["use_edit_page_button"] = False
        opts["use_source_button"] = False
        opts["launch_buttons"] = {}
        logger.info(HOW)
    config.html_theme_options = opts


def setup(app):
    app.add_config_value("kvlab_publish", False, "html", [bool])
    app.connect("config-inited", _config_inited, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
