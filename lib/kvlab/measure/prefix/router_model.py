"""kvlab's reading of a measured router run (:mod:`kvlab.measure.prefix.router_runs`): in which
order the router chose, and what it had in flight when it did.

The router picks a worker as a request arrives and counts it as load until its answer has gone
back through it. The record holds, per request, when the client sent it (``sent_s``), when it
reached its server through the shim (``shim_in_s``), when the server answered (``shim_out_s``) and
when the client had the answer (``answered_s``); the router's choice lies somewhere between the
first two. :func:`summarize` replays the rule in the clients' sending order, with in-flight counts
over [sent, answered], and the servers' pools in the order the requests reached them. Where two
clients' windows overlap, the record cannot say what the router saw, however small the overlap:
on a busy machine a request sent first can reach the router second (the failing run that taught
this: two clients' requests swapped by more than 50 ms). Those requests are the close calls
(:func:`close_calls`), where a disagreement with the model is not evidence against it.
"""

from __future__ import annotations

from ... import routing
from . import router_runs

#: Slack added to both ends of every window in :func:`close_calls`, in seconds: the record's
#: times are taken by threads of one process (the clients, the shims), a few milliseconds from
#: the events they stand for on a busy machine.
SLACK_S = 0.005


#: The branches of SGLang's rule that read the in-flight counts: the others (a match, a tie
#: among matches broken by the tree) do not, as long as no two workers' counts can be more than
#: ``balance_abs`` (64) apart, which fewer clients than that can never bring about.
LOAD_BRANCHES = ("low_match", "imbalanced")


def close_calls(
    run: dict, branches: list[str] | None = None, slack_s: float = SLACK_S
) -> list[int]:
    """Requests of a measured record whose situation at the router the record cannot pin down.

    The router chose request ``i`` at some instant between its client's sending it (``sent_s``)
    and its reaching a server (``shim_in_s``): its *choice window*. It stopped counting request
    ``j`` as load once the answer had passed back through it, between the server's answer
    (``shim_out_s``) and the client's (``answered_s``): ``j``'s *release window*. Request ``i``
    is a close call when another client's choice window overlaps its own (the record cannot say
    which one the router saw first) or another client's release window does (nor whether ``j``
    was still in flight) and the choice read the in-flight counts: not for round-robin, and for
    the cache-aware rule only on a branch in :data:`LOAD_BRANCHES` (``branches``: the branch of
    each request in the replay; ``None`` counts every overlap). A client's own previous request was
    answered before it sent this one.
    (:func:`router_runs.close_calls` is the cruder test on arrival times alone, for records
    without sending times.)"""
    t_in, t_done, client = run["shim_in_s"], run["answered_s"], run["client"]
    sent, out_at = run["sent_s"], run["shim_out_s"]
    n = len(t_in)
    choose = [(min(sent[i], t_in[i]) - slack_s, t_in[i] + slack_s) for i in range(n)]
    release = [(min(out_at[j], t_done[j]) - slack_s, t_done[j] + slack_s) for j in range(n)]

    if run["policy"] == "round_robin":
        reads_load = [False] * n
    elif branches is None or int(run.get("clients", 2)) > routing.SGLangRouter(2).balance_abs:
        reads_load = [True] * n
    else:
        reads_load = [b in LOAD_BRANCHES for b in branches]

    def overlap(a: tuple[float, float], b: tuple[float, float]) -> bool:
        return a[0] <= b[1] and b[0] <= a[1]

    return [
        i
        for i in range(n)
        if any(
            client[j] != client[i]
            and (
                overlap(choose[i], choose[j]) or (reads_load[i] and overlap(choose[i], release[j]))
            )
            for j in range(n)
        )
    ]


def load_choices(summary: dict) -> tuple[list[int], list[int]]:
    """The requests of a :func:`summarize` result whose choice read the load (a branch in
    :data:`LOAD_BRANCHES` in the replay), and those of them the record pins down (not close
    calls). With a few clients these few choices decide the split: each places a new prefix."""
    close = set(summary["close_calls"])
    low = [i for i, b in enumerate(summary["branch"]) if b in LOAD_BRANCHES]
    return low, [i for i in low if i not in close]


def choice_view(run: dict) -> dict:
    """The record as the router's choices saw it: each request's arrival is its sending time."""
    return dict(run, shim_in_s=list(run["sent_s"]))


def summarize(run: dict, ids, num_blocks: int, block_size: int) -> dict:
    """:func:`router_runs.summarize` with the rule replayed in the clients' sending order; the close
    calls come from the full record (:func:`close_calls`: overlapping choice windows, and release
    windows where the branch taken reads the load), and the pools still serve each server's requests in the order they reached
    it."""
    out = router_runs.summarize(run, ids, num_blocks, block_size)
    n = int(run["requests"])
    view = choice_view(run)
    rep = router_runs.replay_router(view, ids=list(ids[:n]))
    rep["close_calls"] = close_calls(run, rep["branch"])
    out.update(rep)
    return out
