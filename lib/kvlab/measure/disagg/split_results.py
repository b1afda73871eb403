"""What Lab 3's two splits return: plain dataclasses that the lab notebook prints and checks and
that the recordings keep.

- :class:`Run`: one pass of prompts through an engine (output ids, log-probabilities, tokens not
  computed, seconds), compared with another pass token by token.
- :class:`Checks`: what the loopback and clean-up checks saw, for either split.
- :class:`FileSplit`: the file-connector split
  (:func:`kvlab.measure.disagg.file_split.run_file_split`).
- :class:`NixlRequest` and :class:`NixlSplit`: the live split
  (:func:`kvlab.measure.disagg.nixl_split.run_nixl_split`), with
  :meth:`NixlSplit.used_pulled_kv`, the verdict on whether the decode engine used what it pulled.

Rules: the fields hold plain values only (numbers, strings, lists, dicts), so a result goes to JSON
and back; a recording (``results/lab3-cpu-recorded.json``) is loaded back into these classes by
name and field (:func:`kvlab.measure.recording.recorded.load`), so renaming or removing a field
makes the committed recording unreadable. Nothing here starts a process.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..serving import procs as pd_procs
from .connector_files import StoredTensor
from .token_match import Verdict, compare_greedy, tolerance_for


@dataclass
class Run:
    """One pass of prompts through an engine: per prompt the output ids, the chosen tokens'
    log-probabilities, the tokens the engine did not compute, the wall seconds and, per output
    position, the two most likely candidates as (token, log-probability) pairs (``top``; empty in
    a run recorded before they were kept)."""

    label: str
    token_ids: list[list[int]]
    logprobs: list[list[float]]
    cached_tokens: list[int]
    seconds: list[float]
    top: list[list[list[tuple[int, float]]]] = field(default_factory=list)

    @classmethod
    def of(cls, label: str, outputs: list[dict]) -> Run:
        return cls(
            label,
            [o["token_ids"] for o in outputs],
            [o["logprobs"] for o in outputs],
            [o["num_cached_tokens"] for o in outputs],
            [o["seconds"] for o in outputs],
            [[[tuple(c) for c in step] for step in o.get("top", [])] for o in outputs],
        )

    def _top(self, i: int) -> list | None:
        return self.top[i] if i < len(self.top) else None

    def match(self, other: Run, tol: float) -> list[Verdict]:
        """Per prompt: this run against ``other`` (the reference) by
        :func:`kvlab.measure.disagg.token_match.compare_greedy`: equal token by token with
        log-probabilities within ``tol``, or equal up to a near tie within ``tol``."""
        if len(self.token_ids) != len(other.token_ids):
            raise ValueError(
                f"other must hold the same prompts ({len(self.token_ids)}), got "
                f"{len(other.token_ids)}"
            )
        return [
            compare_greedy(
                self.token_ids[i],
                self.logprobs[i],
                other.token_ids[i],
                other.logprobs[i],
                tol,
                self._top(i),
                other._top(i),
            )
            for i in range(len(self.token_ids))
        ]

    def same_tokens(self, other: Run) -> list[bool]:
        """Per prompt: are the generated token ids identical?"""
        return [a == b for a, b in zip(self.token_ids, other.token_ids, strict=True)]

    def matching_tokens(self, other: Run) -> list[int]:
        """Per prompt: how many output positions hold the same token id."""
        return [
            sum(x == y for x, y in zip(a, b, strict=False))
            for a, b in zip(self.token_ids, other.token_ids, strict=True)
        ]

    def first_logprob_gap(self, other: Run) -> list[float]:
        """Per prompt: |difference| of the first output token's log-probability (the step that
        reads the prompt's KV and nothing generated since)."""
        return [abs(a[0] - b[0]) for a, b in zip(self.logprobs, other.logprobs, strict=True)]

    def max_logprob_gap(self, other: Run) -> float:
        """Largest |difference| of chosen-token log-probabilities over prompts whose tokens match."""
        gaps = [
            abs(x - y)
            for a, b, la, lb in zip(
                self.token_ids, other.token_ids, self.logprobs, other.logprobs, strict=True
            )
            if a == b
            for x, y in zip(la, lb, strict=True)
        ]
        return max(gaps, default=0.0)


@dataclass
class Checks:
    """What the loopback and clean-up checks saw."""

    sockets: list[str] = field(default_factory=list)
    non_loopback: list[str] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    all_gone: bool = False
    peak_rss_bytes: dict[str, int] = field(default_factory=dict)
    start_s: dict[str, float] = field(default_factory=dict)

    def see(self, kids: pd_procs.Children) -> None:
        socks = pd_procs.listening_sockets(kids.snapshot())
        self.sockets = sorted(set(self.sockets) | {str(s) for s in socks})
        bad = {str(s) for s in pd_procs.non_loopback(socks)}
        self.non_loopback = sorted(set(self.non_loopback) | bad)


@dataclass
class FileSplit:
    """The file-connector split (see :func:`run_file_split`)."""

    connector: str
    prompt_tokens: list[int]
    block_size: int
    stored: list[StoredTensor]
    producer: Run
    cold: Run  # the consumer with the files hidden: computes everything (colocated reference)
    injected: Run  # the consumer loading the producer's KV
    zeroed: Run  # the consumer loading KV whose values were set to zero (control)
    prefill_cold_s: list[float]  # max_tokens=1 timings with the files hidden
    prefill_injected_s: list[float]  # ... and with the files there
    same_bytes_as_consumer: bool  # the producer's files equal those the consumer wrote itself
    layout_errors: list[tuple[float, float]]  # per prompt (V, K); last: a wrong prompt's values
    checks: Checks
    wall_s: float = 0.0

    def bytes_per_request(self) -> list[int]:
        """Stored tensor bytes per request (summed over the layer files of its folder)."""
        per: dict[str, int] = {}
        for t in self.stored:
            key = str(Path(t.path).parent)
            per[key] = per.get(key, 0) + t.data_bytes
        return list(per.values())

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class NixlRequest:
    """One request's KV pull, from the decode engine's NIXL metrics (deltas around it)."""

    prompt_tokens: int
    blocks: int  # KV blocks the prefill engine offered
    transfers: int
    bytes: int
    descriptors: int
    xfer_s: float  # NIXL telemetry: post to completion seen by vLLM's poll
    post_s: float  # NIXL telemetry: time to post the transfer
    decode_wall_s: float  # the decode engine's generate() call, handshake included on the first
    failed: int = 0  # transfers vLLM counted as failed (vllm:nixl_num_failed_transfers)
    local_tokens: int = -1  # prompt tokens the decode engine computed (-1: not recorded)
    external_tokens: int = -1  # prompt tokens whose KV it received from the prefill engine
    prefill_s: float = -1.0  # its prefill time for the request (first token minus scheduled)
    num_cached_tokens: int = -1  # what vLLM's RequestOutput reports (see NixlSplit)

    @classmethod
    def of(cls, ids, blocks: int, delta: dict[str, float], out: dict) -> NixlRequest:
        return cls(
            len(ids),
            blocks,
            int(delta.get("transfers", 0)),
            int(delta.get("bytes", 0)),
            int(delta.get("descriptors", 0)),
            delta.get("xfer_s", 0.0),
            delta.get("post_s", 0.0),
            out["seconds"],
            int(delta.get("failed", 0)),
            int(round(delta.get("local_tokens", -1))),
            int(round(delta.get("external_tokens", -1))),
            delta.get("prefill_s", -1.0),
            int(out.get("num_cached_tokens", -1)),
        )


@dataclass
class NixlSplit:
    """The live prefill/decode split with ``NixlConnector`` (see :func:`run_nixl_split`)."""

    connector: str
    block_size: int
    reference: Run  # the prefill engine decoding by itself (colocated)
    prefill: Run  # max_tokens=1 on the prefill engine, KV kept for the decode engine
    decode: Run  # the decode engine, KV pulled over NIXL
    requests: list[NixlRequest]
    checks: Checks
    cores: dict[str, int]
    wall_s: float = 0.0
    # The control: the decode engine gets prompt i with the KV the prefill engine computed for
    # prompt i+1 (same length, same block count). An engine that used what it pulled decodes
    # from the wrong context and its output changes; one that recomputed the prompt would not.
    control: Run | None = None
    control_requests: list[NixlRequest] = field(default_factory=list)
    # The decode engine prefilling each prompt itself (max_tokens=1, no transfer): its own
    # counters and prefill time for the same prompts, to set against the pulled requests'.
    decode_cold: list[NixlRequest] = field(default_factory=list)
    device: str = "cpu"  # where both engines ran: vLLM's CPU build, or one CUDA GPU

    @property
    def tolerance(self) -> float:
        """The log-probability tolerance of the device the split ran on
        (:data:`kvlab.measure.disagg.token_match.LOGPROB_TOL`)."""
        return tolerance_for(self.device)

    def decode_match(self) -> list[Verdict]:
        """Per prompt: the decode engine's output against the colocated run, within
        :attr:`tolerance` (:meth:`Run.match`)."""
        return self.decode.match(self.reference, self.tolerance)

    def control_match(self) -> list[Verdict]:
        """Per prompt: the control's output against the colocated run, by the same comparison
        (it must be rejected: another prompt's KV)."""
        return self.control.match(self.reference, self.tolerance) if self.control else []

    def used_pulled_kv(self) -> list[str]:
        """What says the decode engine did not use the KV it pulled ([] when nothing): output
        that the comparison with the colocated run rejects (:meth:`decode_match`), a control that
        it accepts, prompt tokens computed on the decode side beyond the last one, or no control
        at all."""
        problems = []
        for i, v in enumerate(self.decode_match()):
            if not v.ok:
                problems.append(
                    f"decode output of prompt {i} differs from colocated beyond the tolerance: "
                    f"{v.reason}"
                )
        if self.control is None or len(self.control_requests) != len(self.requests):
            return [*problems, "no control run (another prompt's KV) was made"]
        accepted = [v.ok for v in self.control_match()]
        if any(accepted):
            problems.append(
                f"with another prompt's KV the output still matches colocated on "
                f"{sum(accepted)} of {len(accepted)} prompts: the decode engine ignored what it "
                "pulled"
            )
        for label, reqs in (("pulled", self.requests), ("control", self.control_requests)):
            for i, r in enumerate(reqs):
                if r.local_tokens < 0 or r.external_tokens < 0:
                    problems.append(f"{label} request {i}: vLLM's token counters not recorded")
                elif r.local_tokens > self.block_size or r.external_tokens < r.prompt_tokens - 1:
                    problems.append(
                        f"{label} request {i}: the decode engine computed {r.local_tokens} prompt "
                        f"tokens and received {r.external_tokens} of {r.prompt_tokens}"
                    )
        return problems

    def as_dict(self) -> dict:
        return asdict(self)
