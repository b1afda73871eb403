"""Sphinx extension: serve the explorers' JavaScript and data from the site itself.

After a successful HTML build it writes, under ``_static/``:

- ``kvlab-vega.js``: Vega, Vega-Lite and vega-embed in one file, bundled by vl-convert-python
  (``vl_convert.javascript_bundle()``, no download: the libraries ship inside the wheel). Every
  explorer page loads this one copy as a module script; it sets ``window.vegaEmbed``.
- ``kvlab-vega.LICENSE.txt``: the licences of what the bundle holds.
- ``explorer/*.csv``: the explorers' tables, written by ``kvlab.explorer`` and
  ``kvlab.explorer_p22`` from their cached grids (``data/explorer/``, kept fresh by the notebooks
  that show the explorers, which run earlier in the same build).

No page asks another host for anything the explorers need.
"""

from __future__ import annotations

import importlib
from pathlib import Path

VEGA_LICENCE = """\
kvlab-vega.js bundles Vega {vega}, Vega-Lite {vegalite} and vega-embed {embed} (with their
dependencies, among them d3 modules under the ISC licence), as assembled by vl-convert-python
{vlc} (vl_convert.javascript_bundle). Vega, Vega-Lite and vega-embed are
Copyright (c) 2015-2024, University of Washington Interactive Data Lab, and are distributed
under the BSD 3-Clause licence:

Redistribution and use in source and binary forms, with or without modification, are permitted
provided that the following conditions are met:

1. Redistributions of source code must retain the above copyright notice, this list of
   conditions and the following disclaimer.
2. Redistributions in binary form must reproduce the above copyright notice, this list of
   conditions and the following disclaimer in the documentation and/or other materials provided
   with the distribution.
3. Neither the name of the copyright holder nor the names of its contributors may be used to
   endorse or promote products derived from this software without specific prior written
   permission.

THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR
IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND
FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDER OR
CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR
CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY
THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR
OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
POSSIBILITY OF SUCH DAMAGE.

vl-convert-python's own licence (BSD 3-Clause) follows.

"""


def _vl_convert_licence() -> str:
    from importlib import metadata

    dist = metadata.distribution("vl-convert-python")
    for f in dist.files or []:
        if f.name.upper().startswith("LICENSE"):
            return Path(dist.locate_file(f)).read_text(encoding="utf-8")
    return "(licence file not found in the installed vl-convert-python)\n"


def write_bundle(static: Path) -> Path:
    """Write kvlab-vega.js and its licence into ``static``; return the bundle's path."""
    from importlib import metadata

    import vl_convert as vlc

    static.mkdir(parents=True, exist_ok=True)
    versions = dict(
        vega=vlc.get_vega_version(),
        vegalite=vlc.get_vegalite_versions()[-1],
        embed=vlc.get_vega_embed_version(),
        vlc=metadata.version("vl-convert-python"),
    )
    head = (
        "/*! Vega {vega}, Vega-Lite {vegalite}, vega-embed {embed}; bundled by vl-convert-python "
        "{vlc}. BSD-3-Clause: see kvlab-vega.LICENSE.txt */\n"
    ).format(**versions)
    out = static / "kvlab-vega.js"
    out.write_text(head + vlc.javascript_bundle(), encoding="utf-8")
    (static / "kvlab-vega.LICENSE.txt").write_text(
        VEGA_LICENCE.format(**versions) + _vl_convert_licence(), encoding="utf-8"
    )
    return out


def _build_finished(app, exc):
    if exc is not None or app.builder.format != "html":
        return
    static = Path(app.outdir) / "_static"
    write_bundle(static)
    for name in ("kvlab.explorer", "kvlab.explorer_p22"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        module.write_page_data(static)


def setup(app):
    app.connect("build-finished", _build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
