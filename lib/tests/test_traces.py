"""The Mooncake trace loader."""

import json

import numpy as np
import pytest

from kvlab import fleet, traces


@pytest.fixture(scope="module")
def trace():
    return traces.load_mooncake()


def test_loads_whole_trace(trace):
    assert len(trace) == 12_031
    assert trace.arrival_s[0] == 0.0 and np.all(np.diff(trace.arrival_s) >= 0)
    assert trace.arrival_s[-1] == pytest.approx(3536.999)
    assert trace.prompt_tokens.mean() == pytest.approx(12035.06, abs=0.01)
    assert traces.default_path().name == "conversation_trace.jsonl"


def test_limit_and_tokens():
    t = traces.load_mooncake(limit=5)
    assert len(t) == 5
    p0, o0 = t.tokens(0)
    p1, _ = t.tokens(1)
    assert len(p0) == 6758 and len(o0) == 500
    assert np.array_equal(p0[:512], p1[:512])  # both start with hash id 0
    assert not np.array_equal(p0[512:1024], p1[512:1024])


def _leading_reuse(hash_lists):
    seen, hit, total = set(), 0, 0
    for h in hash_lists:
        m = 0
        for x in h.tolist():
            if x not in seen:
                break
            m += 1
        hit += m
        total += len(h)
        seen.update(h.tolist())
    return hit / total


def test_unlimited_single_replica_reuse(trace):
    # block-level, as the README counts it: leading hash ids seen before / all hash ids
    assert _leading_reuse(trace.hash_ids) == pytest.approx(0.366, abs=0.001)
    # token-level through the simulator (one replica, unlimited cache, nothing discarded):
    # 512-token blocks and 16-token blocks, last prompt token always computed
    for bs in (512, 16):
        r = fleet.simulate(
            trace, policy="round_robin", replicas=1, cache_tokens=None, warmup=0, block_size=bs
        )
        assert r.hit_rate == pytest.approx(0.37, abs=0.01), (bs, r.hit_rate)


def _write(tmp_path, lines):
    p = tmp_path / "t.jsonl"
    p.write_text("\n".join(lines) + "\n")
    return p


GOOD = json.dumps({"timestamp": 5, "input_length": 600, "output_length": 3, "hash_ids": [1, 2]})


@pytest.mark.parametrize(
    "bad,match",
    [
        ("{not json", "line 2: not valid JSON"),
        (json.dumps({"timestamp": 1, "input_length": 10, "output_length": 1}), "line 2: missing"),
        (
            json.dumps({"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": []}),
            "line 2: input_length",
        ),
        (
            json.dumps(
                {"timestamp": 1, "input_length": 1025, "output_length": 1, "hash_ids": [1, 2]}
            ),
            "line 2: 2 hash_ids for input_length 1025",
        ),
        (
            json.dumps({"timestamp": 1, "input_length": 10, "output_length": -1, "hash_ids": [1]}),
            "line 2: output_length",
        ),
        (
            json.dumps({"timestamp": 1, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}),
            "line 2: hash_ids",
        ),
        ("", "line 2: empty"),
    ],
)
def test_malformed_lines_raise_with_line_number(tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        traces.load_mooncake(_write(tmp_path, [GOOD, bad, GOOD]))


def test_good_file_and_bad_arguments(tmp_path):
    t = traces.load_mooncake(_write(tmp_path, [GOOD, GOOD]))
    assert len(t) == 2 and t.arrival_s[0] == 0.005
    with pytest.raises(ValueError, match="limit"):
        traces.load_mooncake(limit=0)
    with pytest.raises(ValueError, match="path"):
        traces.load_mooncake(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="block_size"):
        t.paths(24)


def test_leading_block_reuse_matches_the_trace_readme():
    from kvlab import traces

    t = traces.load_mooncake()
    # data/mooncake/README.md: leading-id matches against everything seen before give ~36.6 %
    assert abs(t.leading_block_reuse() - 0.366) < 0.001
    small = traces.Trace([0, 1, 2], [1024, 1024, 1024], [1, 1, 1], [[1, 2], [1, 3], [4, 2]])
    # request 2 shares block 1 (ids 1 then 3 differ from 2); request 3 starts with a new id
    assert small.leading_block_reuse() == 1 / 6
    assert small.duration_s == 2.0
