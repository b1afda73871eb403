"""kvlab's reading of a measured router run (:mod:`kvlab.measure.prefix.router_runs`): in which
order the router chose, and what it had in flight when it did.

The router picks a worker as a request arrives and counts it as load until its answer has gone
out. The record holds, per request, when the client sent it (``sent_s``), when it reached its
server through the shim (``shim_in_s``) and when the client had the answer (``answered_s``). The
router's choices follow the clients' sending order: a request reaches the router within a
millisecond of being sent, but can take far longer to reach its server (a new connection to the
shim, a busy machine), so two requests sent close together can reach their servers in the other
order. :func:`summarize` therefore replays the rule in sending order, with in-flight counts over
[sent, answered], and replays the servers' pools in the order the requests reached them.
"""

from __future__ import annotations

from . import router_runs

#: The window within which two events cannot be ordered from the record (see
#: :func:`router_runs.close_calls`): a client's sending time is a few milliseconds from the
#: router's choice, more on a busy machine.
CLOSE_CALL_S = 0.05


def choice_view(run: dict) -> dict:
    """The record as the router's choices saw it: each request's arrival is its sending time."""
    return dict(run, shim_in_s=list(run["sent_s"]))


def summarize(run: dict, ids, num_blocks: int, block_size: int) -> dict:
    """:func:`router_runs.summarize` with the rule replayed in the clients' sending order and the
    close calls taken within :data:`CLOSE_CALL_S`; the pools still serve each server's requests in
    the order they reached it."""
    out = router_runs.summarize(run, ids, num_blocks, block_size)
    n = int(run["requests"])
    view = choice_view(run)
    rep = router_runs.replay_router(view, ids=list(ids[:n]))
    rep["close_calls"] = router_runs.close_calls(view, within_s=CLOSE_CALL_S)
    out.update(rep)
    return out
