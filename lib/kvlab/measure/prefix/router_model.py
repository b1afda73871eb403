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

:func:`check_run` holds Lab 1's checks of a router run: only what a busy machine cannot change (the
model agrees with every choice the record pins down, the pools replay exactly every request whose
server had served everything up to it one request at a time, the router's sockets, counts and
clean-up); :func:`load_report` gives what it can change (the share of close calls, the
requests vLLM batched and what they leave), for the page to print, never to assert.
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
    clean = one_at_a_time(run)
    out["one_at_a_time"] = len(clean)
    out["pool_exact_one_at_a_time"] = sum(
        int(out["pool_cached"][i] == run["cached_tokens"][i]) for i in clean
    )
    return out


def one_at_a_time(run: dict) -> list[int]:
    """Requests whose server had served everything up to and including them one request at a
    time: neither they nor any request that reached the same server before them ran beside
    another there (:func:`router_runs.overlapped`). Their server's cache went through exactly the
    states the one-at-a-time pool replay goes through, however slow the machine was. A request
    that ran alone after a batch is not one of them: vLLM computed the batch's blocks side by side
    and freed them in its own order, so the cache it found may differ from the replay's (a loaded
    machine showed it: exact on 3 of 4 such requests)."""
    batched = set(router_runs.overlapped(run))
    server, t_in = run["server"], run["shim_in_s"]
    out = []
    for r in sorted(set(server)):
        for i in sorted((i for i in range(len(server)) if server[i] == r), key=lambda i: t_in[i]):
            if i in batched:
                break
            out.append(i)
    return sorted(out)


def check_run(run: dict, summary: dict) -> list[str]:
    """Lab 1's checks of one measured router run (``run``: a record of
    :func:`router_runs.measure_router`; ``summary``: its :func:`summarize`): the claims that do not
    depend on how busy the machine was, each broken one as a line (an empty list: all hold).

    - The router listened on loopback only (both ports), is gone after its stop, and its own
      count per worker is the proxies' count; the servers' counters add up to the requests' own
      figures.
    - kvlab's model makes the router's choice on every request the record pins down: a
      disagreement may only fall on a close call (:func:`close_calls`). Load widens the windows and
      makes more close calls; it cannot make a pinned choice go elsewhere.
    - Every request whose server had served everything up to it one request at a time
      (:func:`one_at_a_time`) gets exactly the cached tokens the pools predict: the replay serves
      one request at a time, which is what these requests and all before them got, however slow
      the machine. (Requests that ran alone after a batch are only reported: the batch may have
      left another cache than the replay's.)
    - One client: nothing is in flight when the router chooses, so the model agrees everywhere and
      every request goes to the router's first worker.
    - Cache-aware with several clients: a pinned low-match choice that went to the idle server
      leaves both servers working (each holds one system prompt's conversations: at least a fifth
      of the requests each, a share the stream decides, not the timing).

    What load does change is not checked here (:func:`load_report`): how many close calls there
    are (two thirds of the requests was once the limit; one run in the labs environment had 93 of
    100), which requests vLLM batched, and the pools' agreement on the requests after a batch."""
    n = int(summary["requests"])
    policy = run["policy"]
    bad: list[str] = []

    def need(ok: bool, what: str) -> None:
        if not ok:
            bad.append(f"{policy}, {run['clients']} client(s): {what}")

    replicas = len(run["router_order"])
    need(
        run["router_non_loopback"] == [] and len(run["router_sockets"]) >= 2,
        f"router sockets {run['router_sockets']}, beyond loopback {run['router_non_loopback']}",
    )
    need(
        bool(run["router_gone"]) and not run["router_alive_after_stop"],
        "the router's processes outlived its stop",
    )
    shims = [run["server"].count(r) for r in range(replicas)]
    need(run["router_counts"] == shims, f"router counts {run['router_counts']}, proxies {shims}")
    hits = sum(c["hits"] for c in run["counters"])
    queries = sum(c["queries"] for c in run["counters"])
    need(
        hits == sum(run["cached_tokens"]) and queries == sum(run["prompt_tokens"]),
        f"server counters {queries} queried / {hits} hit, requests "
        f"{sum(run['prompt_tokens'])} / {sum(run['cached_tokens'])}",
    )
    close = set(summary["close_calls"])
    pinned_wrong = sorted(set(summary["disagree_at"]) - close)
    need(
        not pinned_wrong,
        f"the model disagrees with the router on pinned-down requests {pinned_wrong}",
    )
    need(
        summary["pool_exact_one_at_a_time"] == summary["one_at_a_time"],
        f"pool replay exact on {summary['pool_exact_one_at_a_time']} of "
        f"{summary['one_at_a_time']} requests whose server had served everything before them one "
        "at a time",
    )
    if int(run["clients"]) == 1:
        first = summary["first_worker"]
        need(
            summary["agree"] == n and summary["pool_exact"] == n,
            f"one client: model agrees on {summary['agree']}, pools exact on "
            f"{summary['pool_exact']} of {n}",
        )
        need(summary["split"][first] == n, f"one client: split {summary['split']}")
    if policy == "cache_aware" and int(run["clients"]) > 1:
        low, pinned = load_choices(summary)
        need(set(pinned) <= set(low), f"pinned {pinned} not among low-match choices {low}")
        if pinned and any(run["server"][i] != run["server"][low[0]] for i in pinned):
            need(
                min(summary["split"]) >= n // 5,
                f"a new prefix went to the idle server, yet the split is {summary['split']}",
            )
    return bad


def assert_run(run: dict, summary: dict) -> None:
    """:func:`check_run`, raising an ``AssertionError`` that lists every broken claim."""
    bad = check_run(run, summary)
    if bad:
        raise AssertionError("; ".join(bad))


def load_report(run: dict, summary: dict) -> str:
    """What a busy machine changes in a router run, as one line to print (never to assert): the
    close calls (their share of the requests), the low-match choices and how many of them the
    record pins down, the requests vLLM batched, the pools' agreement on the requests that ran
    alone after a batch, and the pools' hit-rate gap."""
    n = int(summary["requests"])
    low, pinned = load_choices(summary)
    close = len(summary["close_calls"])
    gap = abs(summary["pool_hit_rate"] - summary["hit_rate"]) * 100
    after = summary["alone"] - summary["one_at_a_time"]
    exact_after = summary["pool_exact_alone"] - summary["pool_exact_one_at_a_time"]
    how = "one client" if int(run["clients"]) == 1 else f"{run['clients']} clients"
    return (
        f"{run['policy'].replace('_', '-')}, {how}: close calls {close} of {n} "
        f"({100 * close / n:.0f} %); low-match choices {len(low)}, pinned down {len(pinned)}; "
        f"batched {n - summary['alone']}; one at a time {summary['one_at_a_time']} (pools exact "
        f"on all, checked); alone after a batch {after} (pools exact on {exact_after}); pool "
        f"hit-rate gap {gap:.2f} points"
    )
