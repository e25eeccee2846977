"""oracle.token_logprobs / token_entropy / *_from_hidden: hand values, padding, gradients.

Expected values are derived by hand in the comments; nothing here is computed by the oracle itself
except in the invariance and finite-difference properties (which compare the oracle with itself).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import oracle

GARBAGE = [np.nan, np.inf, -np.inf, 1e30, -1e30]


# --------------------------------------------------------------------------------------------
# hand values
# --------------------------------------------------------------------------------------------


def test_temperature_half_logprob():
    # z = [2, 1, 0], τ = 0.5 -> a = [4, 2, 0]; log p_0 = 4 − log(e^4 + e^2 + 1)
    expected = 4.0 - math.log(math.exp(4) + math.exp(2) + 1)
    assert expected == pytest.approx(-0.142932, abs=1e-6)
    logits = np.array([[[2.0, 1.0, 0.0], [9.0, 9.0, 9.0]]])
    ids = np.array([[7, 0]])  # id at masked position 0 is never read (out of range on purpose)
    mask = np.array([[False, True]])
    lp = oracle.token_logprobs(logits, ids, mask, temperature=0.5)
    assert lp.dtype == np.float64
    assert lp[0, 0] == 0.0
    assert lp[0, 1] == pytest.approx(expected, abs=1e-12)


def test_temperature_one_differs_from_half():
    # the no-temperature mutant: log(e^2/(e^2+e+1)) = −0.4076
    logits = np.array([[[2.0, 1.0, 0.0], [0.0, 0.0, 0.0]]])
    lp = oracle.token_logprobs(logits, np.array([[0, 0]]), np.array([[0, 1]]))
    assert lp[0, 1] == pytest.approx(2 - math.log(math.exp(2) + math.exp(1) + 1), abs=1e-12)
    assert lp[0, 1] == pytest.approx(-0.4076, abs=1e-4)


def _bigram_logits(ids, table):
    """logits[b, s] = table[ids[b, s]] (a bigram LM): the distribution of the next token."""
    return np.stack([np.stack([table[i] for i in row]) for row in ids])


def test_left_and_right_padding_give_the_same_valid_logprobs():
    table = np.array(
        [[0.0, 1.0, -1.0, 0.5], [2.0, 0.0, 0.0, -2.0], [0.3, 0.3, 1.0, 0.0], [1.0, -1.0, 0.0, 0.0]]
    )
    # sequence: prompt [3, 1], completion [2, 0(eos)]; pad id 0 == eos id 0
    right_ids = np.array([[3, 1, 2, 0, 0, 0]])
    right_mask = np.array([[0, 0, 1, 1, 0, 0]], dtype=bool)
    left_ids = np.array([[0, 0, 3, 1, 2, 0]])
    left_mask = np.array([[0, 0, 0, 0, 1, 1]], dtype=bool)
    lp_r = oracle.token_logprobs(_bigram_logits(right_ids, table), right_ids, right_mask)
    lp_l = oracle.token_logprobs(_bigram_logits(left_ids, table), left_ids, left_mask)

    def logp(prev, nxt):  # log softmax(table[prev])[nxt], by hand
        row = table[prev]
        return row[nxt] - math.log(sum(math.exp(v) for v in row))

    expected = [logp(1, 2), logp(2, 0)]  # P(2 | 1), P(eos | 2)
    assert lp_r[0, 2:4] == pytest.approx(expected, abs=1e-12)
    assert lp_l[0, 4:6] == pytest.approx(expected, abs=1e-12)
    assert np.count_nonzero(lp_r) == 2 and np.count_nonzero(lp_l) == 2


def test_pad_equal_eos_keeps_eos_scored():
    # pad = eos = 0; response [5, 7, 0] then pads [0, 0]: the real EOS (position 3) is valid
    # because the mask comes from the generated length, never from token values.
    V = 8
    logits = np.zeros((1, 6, V))
    logits[0, 2, 0] = 3.0  # the distribution that predicts position 3 favours EOS
    ids = np.array([[1, 5, 7, 0, 0, 0]])
    mask = np.array([[0, 1, 1, 1, 0, 0]], dtype=bool)
    lp = oracle.token_logprobs(logits, ids, mask)
    # log p(eos) = 3 − log(e^3 + 7)
    assert lp[0, 3] == pytest.approx(3 - math.log(math.exp(3) + 7), abs=1e-12)
    # uniform rows: log(1/8)
    assert lp[0, 1] == pytest.approx(-math.log(8), abs=1e-12)
    assert lp[0, 4] == 0.0 and lp[0, 5] == 0.0
    grad = oracle.token_logprobs_grad(logits, ids, mask, np.ones((1, 6)))
    assert np.any(grad[0, 2] != 0.0)  # the EOS carries a gradient
    assert np.all(grad[0, 3:] == 0.0)  # rows predicting masked tokens, and the last row, get 0


@pytest.mark.parametrize("V", [1, 2, 5, 50])
def test_entropy_of_uniform_logits_is_log_V(V):
    logits = np.full((1, 3, V), 0.37)
    H = oracle.token_entropy(logits, np.array([[0, 1, 1]]), temperature=0.7)
    assert H[0, 0] == 0.0
    assert H[0, 1:] == pytest.approx([math.log(V)] * 2, abs=1e-12)


def test_entropy_two_point_distribution():
    # z = [log 3, 0] -> p = [3/4, 1/4]; H = −(3/4 log 3/4 + 1/4 log 1/4)
    logits = np.array([[[math.log(3), 0.0], [0.0, 0.0]]])
    H = oracle.token_entropy(logits, np.array([[0, 1]]))
    assert H[0, 1] == pytest.approx(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25)), abs=1e-12)


def test_logprob_grad_by_hand():
    # z = [0, 0], x = 0, τ = 2: p = [1/2, 1/2]; dlp/dz = ([1, 0] − p)/τ = [1/4, −1/4]; upstream 3
    logits = np.zeros((1, 2, 2))
    g = oracle.token_logprobs_grad(logits, np.array([[0, 0]]), np.array([[0, 1]]), np.array([[9.0, 3.0]]),
                                   temperature=2.0)
    assert g[0, 0] == pytest.approx([0.75, -0.75], abs=1e-15)
    assert np.all(g[0, 1] == 0.0)


def test_entropy_grad_at_uniform_is_zero():
    # uniform is the entropy maximum: −p_k(log p_k + H) = −(1/V)(−log V + log V) = 0
    g = oracle.token_entropy_grad(np.zeros((1, 2, 4)), np.array([[0, 1]]), np.ones((1, 2)))
    assert np.allclose(g, 0.0, atol=1e-15)


def test_fused_head_equals_unfused_by_hand():
    # hidden [1, 0] with W = [[1, 0], [0, 1], [2, 0]] gives z = [1, 0, 2]
    hidden = np.array([[[1.0, 0.0], [5.0, 5.0]]])
    W = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]])
    lp = oracle.token_logprobs_from_hidden(hidden, W, np.array([[0, 2]]), np.array([[0, 1]]))
    assert lp[0, 1] == pytest.approx(2 - math.log(math.e + 1 + math.exp(2)), abs=1e-12)
    H = oracle.token_entropy_from_hidden(hidden, W, np.array([[0, 1]]))
    p = np.exp([1.0, 0.0, 2.0]) / np.exp([1.0, 0.0, 2.0]).sum()
    assert H[0, 1] == pytest.approx(-sum(p * np.log(p)), abs=1e-12)


def test_all_masked_row_is_zero_everywhere():
    logits = np.full((2, 3, 4), np.nan)
    logits[1] = 0.0
    mask = np.array([[0, 0, 0], [0, 1, 1]], dtype=bool)
    lp = oracle.token_logprobs(logits, np.array([[0, 0, 0], [0, 1, 2]]), mask)
    assert np.all(lp[0] == 0.0)
    g = oracle.token_logprobs_grad(logits, np.array([[0, 0, 0], [0, 1, 2]]), mask, np.ones((2, 3)))
    assert np.all(g[0] == 0.0)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


@st.composite
def lm_cases(draw, max_B=2, max_T=4, max_V=4, max_D=3):
    B = draw(st.integers(1, max_B))
    T = draw(st.integers(2, max_T))
    V = draw(st.integers(1, max_V))
    D = draw(st.integers(1, max_D))
    elems = st.floats(-4, 4, allow_nan=False, allow_subnormal=False)
    logits = draw(hnp.arrays(np.float64, (B, T, V), elements=elems))
    hidden = draw(hnp.arrays(np.float64, (B, T, D), elements=st.floats(-2, 2, allow_subnormal=False)))
    weight = draw(hnp.arrays(np.float64, (V, D), elements=st.floats(-2, 2, allow_subnormal=False)))
    ids = draw(hnp.arrays(np.int64, (B, T), elements=st.integers(0, V - 1)))
    mask = draw(hnp.arrays(np.bool_, (B, T)))
    mask[:, 0] = False
    upstream = draw(hnp.arrays(np.float64, (B, T), elements=st.floats(-2, 2, allow_subnormal=False)))
    tau = draw(st.sampled_from([0.5, 1.0, 1.7]))
    garbage = draw(st.sampled_from(GARBAGE))
    return logits, hidden, weight, ids, mask, upstream, tau, garbage


def _numeric_vjp(f, x, upstream, h=1e-6):
    """Σ upstream · ∂f/∂x by central differences, one element of x at a time."""
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        g[idx] = np.sum(upstream * (f(xp) - f(xm))) / (2 * h)
    return g


@settings(deadline=None)
@given(lm_cases())
def test_masked_positions_never_matter(case):
    logits, hidden, weight, ids, mask, upstream, tau, garbage = case
    B, T = mask.shape
    read = np.zeros_like(mask)
    read[:, :-1] = mask[:, 1:]  # rows t-1 that predict a valid token
    dirty_logits, dirty_hidden = logits.copy(), hidden.copy()
    dirty_logits[~read] = garbage
    dirty_hidden[~read] = garbage
    dirty_ids = ids.copy()
    dirty_ids[~mask] = -100
    dirty_up = upstream.copy()
    dirty_up[~mask] = garbage
    kw = dict(temperature=tau)
    pairs = [
        (oracle.token_logprobs(logits, ids, mask, **kw), oracle.token_logprobs(dirty_logits, dirty_ids, mask, **kw)),
        (oracle.token_entropy(logits, mask, **kw), oracle.token_entropy(dirty_logits, mask, **kw)),
        (oracle.token_logprobs_grad(logits, ids, mask, upstream, **kw),
         oracle.token_logprobs_grad(dirty_logits, dirty_ids, mask, dirty_up, **kw)),
        (oracle.token_entropy_grad(logits, mask, upstream, **kw),
         oracle.token_entropy_grad(dirty_logits, mask, dirty_up, **kw)),
        (oracle.token_logprobs_from_hidden(hidden, weight, ids, mask, **kw),
         oracle.token_logprobs_from_hidden(dirty_hidden, weight, dirty_ids, mask, **kw)),
        (oracle.token_entropy_from_hidden(hidden, weight, mask, **kw),
         oracle.token_entropy_from_hidden(dirty_hidden, weight, mask, **kw)),
    ]
    pairs += list(zip(oracle.token_logprobs_from_hidden_grad(hidden, weight, ids, mask, upstream, **kw),
                      oracle.token_logprobs_from_hidden_grad(dirty_hidden, weight, dirty_ids, mask, dirty_up, **kw)))
    pairs += list(zip(oracle.token_entropy_from_hidden_grad(hidden, weight, mask, upstream, **kw),
                      oracle.token_entropy_from_hidden_grad(dirty_hidden, weight, mask, dirty_up, **kw)))
    for clean, dirty in pairs:
        assert np.array_equal(clean, dirty)
    for out in pairs[0] + pairs[1]:
        assert np.all(out[~mask] == 0.0)


@settings(deadline=None)
@given(lm_cases())
def test_logits_grads_match_finite_differences(case):
    logits, _, _, ids, mask, upstream, tau, _ = case
    g = oracle.token_logprobs_grad(logits, ids, mask, upstream, temperature=tau)
    num = _numeric_vjp(lambda z: oracle.token_logprobs(z, ids, mask, temperature=tau), logits, upstream)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)
    g = oracle.token_entropy_grad(logits, mask, upstream, temperature=tau)
    num = _numeric_vjp(lambda z: oracle.token_entropy(z, mask, temperature=tau), logits, upstream)
    np.testing.assert_allclose(g, num, rtol=1e-5, atol=1e-6)


@settings(deadline=None)
@given(lm_cases(max_T=3, max_V=3, max_D=2))
def test_fused_head_grads_match_finite_differences(case):
    _, hidden, weight, ids, mask, upstream, tau, _ = case
    kw = dict(temperature=tau)
    d_h, d_w = oracle.token_logprobs_from_hidden_grad(hidden, weight, ids, mask, upstream, **kw)
    num_h = _numeric_vjp(lambda h: oracle.token_logprobs_from_hidden(h, weight, ids, mask, **kw), hidden, upstream)
    num_w = _numeric_vjp(lambda w: oracle.token_logprobs_from_hidden(hidden, w, ids, mask, **kw), weight, upstream)
    np.testing.assert_allclose(d_h, num_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d_w, num_w, rtol=1e-5, atol=1e-6)
    d_h, d_w = oracle.token_entropy_from_hidden_grad(hidden, weight, mask, upstream, **kw)
    num_h = _numeric_vjp(lambda h: oracle.token_entropy_from_hidden(h, weight, mask, **kw), hidden, upstream)
    num_w = _numeric_vjp(lambda w: oracle.token_entropy_from_hidden(hidden, w, mask, **kw), weight, upstream)
    np.testing.assert_allclose(d_h, num_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d_w, num_w, rtol=1e-5, atol=1e-6)


@settings(deadline=None)
@given(lm_cases())
def test_fused_head_equals_unfused_on_materialised_logits(case):
    _, hidden, weight, ids, mask, upstream, tau, _ = case
    z = np.einsum("btd,vd->btv", hidden, weight)
    np.testing.assert_allclose(
        oracle.token_logprobs_from_hidden(hidden, weight, ids, mask, temperature=tau),
        oracle.token_logprobs(z, ids, mask, temperature=tau), rtol=1e-12, atol=1e-12,
    )
    np.testing.assert_allclose(
        oracle.token_entropy_from_hidden(hidden, weight, mask, temperature=tau),
        oracle.token_entropy(z, mask, temperature=tau), rtol=1e-12, atol=1e-12,
    )
    # chain rule: dL/dhidden = G · W, dL/dW = Σ Gᵀ · hidden with G = dL/dz
    G = oracle.token_logprobs_grad(z, ids, mask, upstream, temperature=tau)
    d_h, d_w = oracle.token_logprobs_from_hidden_grad(hidden, weight, ids, mask, upstream, temperature=tau)
    np.testing.assert_allclose(d_h, np.einsum("btv,vd->btd", G, weight), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(d_w, np.einsum("btv,btd->vd", G, hidden), rtol=1e-12, atol=1e-12)


@settings(deadline=None)
@given(lm_cases())
def test_logprobs_are_log_probabilities(case):
    logits, _, _, ids, mask, _, tau, _ = case
    lp = oracle.token_logprobs(logits, ids, mask, temperature=tau)
    H = oracle.token_entropy(logits, mask, temperature=tau)
    assert np.all(lp <= 1e-12)
    V = logits.shape[2]
    assert np.all(H >= -1e-12) and np.all(H <= math.log(V) + 1e-12)
