"""The toy decoder's cache reuse is exact on every BLAS kernel set (``make test-kernels``).

A prompt that shares its first ``p`` tokens with an earlier one, computed with the earlier
prompt's K/V for those positions, must give bit-for-bit the hidden states and K/V of computing it
from scratch: the toy multiplies row by row and masks attention over the whole sequence, so a
position runs the same operations on arrays of the same shapes either way. ``make test`` runs
this module under OPENBLAS_CORETYPE = Prescott, Nehalem, Sandybridge, Haswell and Zen.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.toymodel import TinyDecoder


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 200),
    share=st.floats(0.0, 1.0),
    seed=st.integers(0, 5),
    adapter=st.sampled_from([None, "a"]),
)
def test_reuse_is_bit_exact(n, share, seed, adapter):
    model = TinyDecoder(seed=seed, adapters=["a"])
    rng = np.random.default_rng(seed + 1000 * n)
    first = [int(t) for t in rng.integers(0, 32, n)]
    p = min(n - 1, max(1, int(share * n)))  # shared prefix length, 1..n-1
    second = list(first)
    second[p] = (second[p] + 1) % 32
    _, kv_first = model.forward(first, adapter=adapter)
    h_full, kv_full = model.forward(second, adapter=adapter)
    past = [(k[:p], v[:p]) for k, v in kv_first]
    h_reuse, kv_reuse = model.forward(second, adapter=adapter, past=past)
    assert h_reuse.shape == (n - p, model.d)
    assert np.array_equal(h_full[p:], h_reuse)
    for (kf, vf), (kr, vr) in zip(kv_full, kv_reuse, strict=True):
        assert np.array_equal(kf, kr) and np.array_equal(vf, vr)


def test_a_changed_token_changes_later_keys_only():
    model = TinyDecoder(seed=3)
    a, b = list(range(10)), list(range(10))
    b[6] = 31
    _, ka = model.forward(a)
    _, kb = model.forward(b)
    for (k1, _), (k2, _) in zip(ka, kb, strict=True):
        assert np.array_equal(k1[:6], k2[:6])
        assert not np.array_equal(k1[6:], k2[6:])
