"""kvlab.interference: a mixed step costs the chunk plus the decode step, and the step log of a
pdsim run gives token-weighted inter-token gaps (mean hides the stalls the tail shows)."""

from __future__ import annotations

import numpy as np
import pytest

from kvlab import interference, pdsim
from kvlab.assumptions import COST


def test_a_mixed_step_adds_the_chunk():
    assert interference.mixed_step_seconds(50, 0) == pytest.approx(0.030)
    assert interference.mixed_step_seconds(50, 512) == pytest.approx(0.030 + 0.0512)
    assert interference.mixed_step_slowdown(50, 512) == pytest.approx(0.0812 / 0.030)
    with pytest.raises(ValueError, match="chunk_tokens"):
        interference.mixed_step_seconds(50, -1)


def test_gap_percentiles_are_weighted_by_tokens():
    g = interference.Gaps(np.array([0.02, 0.08]), np.array([99.0, 1.0]), np.array([False, True]))
    assert g.percentile(50) == 0.02 and g.percentile(99.5) == 0.08
    assert g.mean() == pytest.approx(0.0206)
    assert g.share_over(0.04) == pytest.approx(0.01) and g.share_mixed() == pytest.approx(0.01)


def test_colocated_stalls_show_in_the_tail_not_the_mean():
    traffic = pdsim.Traffic(rate_rps=12.0, requests=600, seed=3)
    colo = interference.gaps(interference.decode_steps(pdsim.Colocated(10), traffic))
    split = interference.gaps(interference.decode_steps(pdsim.Disaggregated(7, 3), traffic))
    assert colo.share_mixed() > 0.1 and split.share_mixed() == 0
    assert colo.percentile(99) > 0.04 > colo.mean()  # the mean meets 40 ms, the tail does not
    assert split.percentile(99) < 0.04
    # the replay leaves pdsim as it was
    assert pdsim.Replica.__name__ == "Replica"
    # every logged step is one of the cost model's step times: decode alone, or decode plus chunk
    log = interference.decode_steps(pdsim.Colocated(10), traffic)
    pure = COST.decode_base_s + COST.decode_per_request_s * log.batch
    extra = log.seconds - pure
    assert np.all(extra > -1e-9) and np.all(extra[~log.mixed] < 1e-9)
