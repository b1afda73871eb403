"""Lab 3's comparison of a split run with the colocated run (``token_match.compare_greedy``, the
code both the CPU and the GPU path judge with): a greedy token flipped by a near tie within the
tolerance passes, a wrong KV fails (different tokens without a tie, or the same tokens with moved
log-probabilities), and the split's verdict (``NixlSplit.used_pulled_kv``) follows it."""

from __future__ import annotations

import dataclasses

import pytest

from kvlab.measure.disagg import pd_split, token_match

TOL = token_match.LOGPROB_TOL["cuda"]

# The colocated run: 4 greedy tokens, with the two best candidates at each position.
REF_TOKENS = [11, 12, 13, 14]
REF_LP = [-0.40, -1.10, -0.6930, -0.30]
REF_TOP = [
    [[11, -0.40], [50, -2.0]],
    [[12, -1.10], [51, -1.9]],
    [[13, -0.6930], [77, -0.6950]],  # a near tie: 13 and 77 are 0.002 nats apart
    [[14, -0.30], [52, -2.5]],
]


def test_identical_runs_pass_exactly():
    v = token_match.compare_greedy(REF_TOKENS, REF_LP, REF_TOKENS, REF_LP, TOL, REF_TOP, REF_TOP)
    assert v.ok and v.exact and v.tie_at is None and v.compared == 4 and v.max_gap == 0.0


def test_a_tie_flipped_within_the_tolerance_passes():
    # The split's kernels moved the two tied candidates by 1e-3: 77 now leads by 0.0001, so
    # greedy decoding takes 77 at position 2, and the text continues differently from there.
    tokens = [11, 12, 77, 99]
    lp = [-0.4004, -1.1003, -0.6940, -1.5]
    top = [
        [[11, -0.4004], [50, -2.0]],
        [[12, -1.1003], [51, -1.9]],
        [[77, -0.6940], [13, -0.6941]],
        [[99, -1.5], [14, -1.6]],
    ]
    v = token_match.compare_greedy(tokens, lp, REF_TOKENS, REF_LP, TOL, top, REF_TOP)
    assert v.ok and not v.exact and v.tie_at == 2 and v.compared == 3
    assert v.tie_gap == pytest.approx(0.002) and "tied within" in v.reason
    # the same flip with a gap beyond the tolerance is no tie
    wide = [row[:] for row in REF_TOP]
    wide[2] = [[13, -0.60], [77, -0.65]]
    v = token_match.compare_greedy(tokens, lp, REF_TOKENS, REF_LP, TOL, top, wide)
    assert not v.ok and "not a near tie" in v.reason


def test_a_wrong_kv_fails():
    # Another prompt's KV: another distribution from the first token on, no tie anywhere.
    tokens = [35, 677, 162, 1230]
    lp = [-0.9, -0.8, -1.2, -0.7]
    top = [
        [[35, -0.9], [36, -1.4]],
        [[677, -0.8], [5, -1.3]],
        [[162, -1.2], [7, -1.3]],
        [[1230, -0.7], [8, -2.0]],
    ]
    v = token_match.compare_greedy(tokens, lp, REF_TOKENS, REF_LP, TOL, top, REF_TOP)
    assert not v.ok and v.compared == 1 and "no near tie" in v.reason
    # The same tokens but moved log-probabilities (a wrong KV that has not changed a token yet).
    moved = [x - 0.05 for x in REF_LP]
    v = token_match.compare_greedy(REF_TOKENS, moved, REF_TOKENS, REF_LP, TOL, REF_TOP, REF_TOP)
    assert not v.ok and "log-probabilities 0.05 apart" in v.reason
    # A flip between the right candidates whose log-probabilities moved beyond the tolerance.
    shifted = [[[t, x - 0.2] for t, x in row] for row in REF_TOP]
    shifted[2] = [[77, -0.8930], [13, -0.8931]]
    v = token_match.compare_greedy(
        [11, 12, 77, 1], [-0.6, -1.3, -0.8930, -1.0], REF_TOKENS, REF_LP, TOL, shifted, REF_TOP
    )
    assert not v.ok


def test_a_differing_token_without_recorded_candidates_fails():
    v = token_match.compare_greedy([11, 77], [-0.4, -1.1], [11, 12], [-0.4, -1.1], TOL)
    assert not v.ok and "not recorded" in v.reason


def test_a_run_that_stops_early_fails():
    v = token_match.compare_greedy(REF_TOKENS[:3], REF_LP[:3], REF_TOKENS, REF_LP, TOL)
    assert not v.ok and "stops" in v.reason


def test_bad_arguments_name_the_parameter_and_range():
    with pytest.raises(ValueError, match=r"tol must be in \(0, 1\]"):
        token_match.compare_greedy([1], [-1.0], [1], [-1.0], 0)
    with pytest.raises(ValueError, match="a_logprobs must hold one value per token"):
        token_match.compare_greedy([1, 2], [-1.0], [1], [-1.0], TOL)
    with pytest.raises(ValueError, match="device must be one of"):
        token_match.tolerance_for("tpu")
    with pytest.raises(ValueError, match="a_top: each top candidate"):
        token_match.compare_greedy([2], [-1.0], [1], [-1.0], TOL, [[[2, -1.0, 0]]], [[[1, -1.0]]])


def test_the_cpu_tolerance_is_tighter_than_the_gpu_one():
    # The CPU path: 4.8e-7 between the two kernels (recorded run); a 2e-3 tie is no tie there.
    assert token_match.tolerance_for("cpu") == 1e-5 < token_match.tolerance_for("cuda") == 1e-2
    flipped = [11, 12, 77, 99]
    top = [REF_TOP[0], REF_TOP[1], [[77, -0.6930], [13, -0.6950]], [[99, -1.0], [1, -2.0]]]
    v = token_match.compare_greedy(
        flipped, [-0.40, -1.10, -0.6930, -1.0], REF_TOKENS, REF_LP, 1e-5, top, REF_TOP
    )
    assert not v.ok


def _run(label, tokens, lps, top):
    return pd_split.Run(label, tokens, lps, [0] * len(tokens), [0.1] * len(tokens), top)


def _req(local: int, external: int) -> pd_split.NixlRequest:
    return pd_split.NixlRequest(2000, 125, 1, 1, 48, 0.01, 0.001, 0.2, 0, local, external)


def _split(decode: pd_split.Run, control: pd_split.Run) -> pd_split.NixlSplit:
    ref = _run("reference", [REF_TOKENS], [REF_LP], [REF_TOP])
    return pd_split.NixlSplit(
        "NixlConnector",
        16,
        ref,
        _run("prefill", [[11]], [[-0.4]], []),
        decode,
        [_req(0, 2000)],
        pd_split.Checks(),
        {"prefill": 0, "decode": 0},
        control=control,
        control_requests=[_req(0, 2000)],
        device="cuda",
    )


def test_the_split_verdict_uses_the_comparison():
    flipped = _run(
        "decode",
        [[11, 12, 77, 99]],
        [[-0.4, -1.1, -0.6940, -1.5]],
        [[REF_TOP[0], REF_TOP[1], [[77, -0.6940], [13, -0.6941]], [[99, -1.5], [14, -1.6]]]],
    )
    wrong = _run("control", [[35, 677, 162, 1230]], [[-0.9] * 4], [[[[35, -0.9], [36, -1.4]]] * 4])
    split = _split(flipped, wrong)
    assert split.used_pulled_kv() == []
    summary = pd_split.split_summary(split, 24576)
    assert summary["matches_colocated"] == [True] and summary["equal_to_colocated"] == [False]
    assert summary["match"][0]["tie_at"] == 2 and summary["logprob_tolerance"] == TOL
    assert summary["control_differs"] == [True]
    # the control accepted (the decode engine decoding as if it had the right KV) is a failure
    bad = dataclasses.replace(split, control=flipped)
    assert any("ignored what it pulled" in p for p in bad.used_pulled_kv())
    # a decode output the comparison rejects is a failure, with the reason
    broken = dataclasses.replace(split, decode=wrong)
    assert "no near tie" in broken.used_pulled_kv()[0]
    # recorded and read back (the lab's recordings): the candidates come back as pairs
    from kvlab.measure.recording import recorded

    again = recorded.dacite.from_dict(
        pd_split.NixlSplit, split.as_dict(), config=recorded.dacite.Config(cast=[tuple])
    )
    assert again.used_pulled_kv() == [] and again.decode_match()[0].tie_at == 2
