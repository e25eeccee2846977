"""Every validation rule of api.md ("Errors"): the exception type and a message that starts with
``<function>: <argument>:`` and says what was expected and what was given."""

import numpy as np
import pytest

import oracle

B, T, V, D = 2, 3, 4, 2
MASK = np.array([[0, 1, 1], [0, 1, 0]], dtype=bool)
TOK = np.zeros((B, T))
SEQ = np.zeros(B)
LOGITS = np.zeros((B, T, V))
IDS = np.zeros((B, T), dtype=np.int64)
HIDDEN = np.zeros((B, T, D))
WEIGHT = np.zeros((V, D))


def nan_at_valid():
    x = TOK.copy()
    x[0, 1] = np.nan
    return x


def with_value(arr, idx, value):
    x = np.array(arr, copy=True)
    x[idx] = value
    return x


# Each row: (id, call, exception, regex). Regexes are anchored at the start of the message.
CASES = [
    # ---- ranks and shapes ------------------------------------------------------------------
    ("rank-rewards", lambda: oracle.grpo_advantages(np.zeros((2, 3)), 1), ValueError,
     r"^grpo_advantages: rewards: expected 1-D \[B\], got shape \(2, 3\)"),
    ("rank-mask", lambda: oracle.pg_token_loss(TOK, SEQ, np.zeros(3, dtype=bool)), ValueError,
     r"^pg_token_loss: mask: expected 2-D \[B, T\], got shape \(3,\)"),
    ("rank-logits", lambda: oracle.token_logprobs(TOK, IDS, MASK), ValueError,
     r"^token_logprobs: logits: expected 3-D \[B, T, V\], got shape \(2, 3\)"),
    ("shape-old_logp", lambda: oracle.ppo_token_loss(TOK, np.zeros((2, 4)), SEQ, MASK), ValueError,
     r"^ppo_token_loss: old_logp: expected shape \(2, 3\).*got \(2, 4\)"),
    ("shape-logits", lambda: oracle.token_entropy(np.zeros((2, 4, V)), MASK), ValueError,
     r"^token_entropy: logits: expected leading dims \(2, 3\)"),
    ("shape-input_ids", lambda: oracle.token_logprobs(LOGITS, np.zeros((3, 3), dtype=int), MASK), ValueError,
     r"^token_logprobs: input_ids: expected shape \(2, 3\)"),
    ("shape-advantages-B", lambda: oracle.pg_token_loss(TOK, np.zeros(3), MASK), ValueError,
     r"^pg_token_loss: advantages: expected shape \(2,\)"),
    ("rank-advantages", lambda: oracle.cispo_token_loss(TOK, TOK, np.zeros((2, 3, 1)), MASK), ValueError,
     r"^cispo_token_loss: advantages: expected 1-D \[B\] or 2-D \[B, T\]"),
    ("shape-scores", lambda: oracle.rlhf_token_rewards(np.zeros(3), TOK, TOK, MASK, kl_coef=0.1), ValueError,
     r"^rlhf_token_rewards: scores: expected shape \(2,\)"),
    ("shape-weight-D", lambda: oracle.token_logprobs_from_hidden(HIDDEN, np.zeros((V, 3)), IDS, MASK), ValueError,
     r"^token_logprobs_from_hidden: weight: expected shape \(V, 2\)"),
    ("shape-hidden", lambda: oracle.token_entropy_from_hidden(np.zeros((B, 4, D)), WEIGHT, MASK), ValueError,
     r"^token_entropy_from_hidden: hidden: expected leading dims \(2, 3\)"),
    ("shape-upstream", lambda: oracle.kl_penalty_grad(TOK, TOK, MASK, np.zeros((2, 2))), ValueError,
     r"^kl_penalty_grad: upstream: expected shape \(2, 3\)"),
    ("shape-values", lambda: oracle.gae(TOK, np.zeros((2, 2)), MASK), ValueError,
     r"^gae: values: expected shape \(2, 3\)"),
    ("ragged-list", lambda: oracle.reinforce_advantages([[1.0], [1.0, 2.0]]), ValueError,
     r"^reinforce_advantages: rewards: expected a rectangular array"),
    # ---- dtypes ----------------------------------------------------------------------------
    ("int-logits", lambda: oracle.token_logprobs(np.zeros((B, T, V), dtype=int), IDS, MASK), TypeError,
     r"^token_logprobs: logits: expected a float array \[B, T, V\], got dtype int"),
    ("float-input_ids", lambda: oracle.token_logprobs(LOGITS, IDS.astype(float), MASK), TypeError,
     r"^token_logprobs: input_ids: expected an integer array \[B, T\], got dtype float64"),
    ("bool-input_ids", lambda: oracle.token_logprobs(LOGITS, IDS.astype(bool), MASK), TypeError,
     r"^token_logprobs: input_ids: expected an integer array"),
    ("int-rewards", lambda: oracle.rloo_advantages([1, 0, 0, 0], 4), TypeError,
     r"^rloo_advantages: rewards: expected a float array \[B\], got dtype int"),
    ("bool-rewards", lambda: oracle.reinforce_advantages(np.array([True, False])), TypeError,
     r"^reinforce_advantages: rewards: expected a float array \[B\], got dtype bool"),
    ("int-logp", lambda: oracle.kl_penalty(TOK.astype(int), TOK, MASK), TypeError,
     r"^kl_penalty: logp: expected a float array \[B, T\]"),
    ("int-advantages", lambda: oracle.pg_token_loss(TOK, np.zeros(2, dtype=int), MASK), TypeError,
     r"^pg_token_loss: advantages: expected a float array"),
    ("int-hidden", lambda: oracle.token_logprobs_from_hidden(HIDDEN.astype(int), WEIGHT, IDS, MASK), TypeError,
     r"^token_logprobs_from_hidden: hidden: expected a float array"),
    ("str-mask", lambda: oracle.whiten(TOK, np.full((B, T), "a")), TypeError,
     r"^whiten: mask: expected a bool"),
    ("none-array", lambda: oracle.aggregate(None, MASK, mode="token_sum"), TypeError,
     r"^aggregate: token_loss: expected an array, got NoneType"),
    ("str-temperature", lambda: oracle.token_entropy(LOGITS, MASK, temperature="1"), TypeError,
     r"^token_entropy: temperature: expected a real number, got str"),
    ("bool-kl_coef", lambda: oracle.rlhf_token_rewards(SEQ, TOK, TOK, MASK, kl_coef=True), TypeError,
     r"^rlhf_token_rewards: kl_coef: expected a real number, got bool"),
    ("float-group_size", lambda: oracle.grpo_advantages(np.zeros(4), 2.0), TypeError,
     r"^grpo_advantages: group_size: expected an int, got float"),
    ("float-std_ddof", lambda: oracle.whiten(TOK, MASK, std_ddof=1.0), TypeError,
     r"^whiten: std_ddof: expected an int, got float"),
    ("int-shift_mean", lambda: oracle.whiten(TOK, MASK, shift_mean=1), TypeError,
     r"^whiten: shift_mean: expected a bool, got int"),
    ("int-upstream", lambda: oracle.pg_token_loss_grad(TOK, SEQ, MASK, np.zeros((B, T), dtype=int)), TypeError,
     r"^pg_token_loss_grad: upstream: expected a float array"),
    ("nonstr-mode", lambda: oracle.aggregate(TOK, MASK, mode=None), TypeError,
     r"^aggregate: mode: expected one of"),
    # ---- masks -----------------------------------------------------------------------------
    ("mask-nonbinary-int", lambda: oracle.pg_token_loss(TOK, SEQ, np.array([[0, 2, 1], [0, 1, 0]])), ValueError,
     r"^pg_token_loss: mask: expected a binary mask .* got non-binary value 2 at \(0, 1\)"),
    ("mask-nonbinary-float", lambda: oracle.kl_penalty(TOK, TOK, np.array([[0, 0.5, 1], [0, 1, 0]])), ValueError,
     r"^kl_penalty: mask: .*non-binary"),
    ("mask-nan", lambda: oracle.gae(TOK, TOK, np.array([[0, np.nan, 1], [0, 1, 0]])), ValueError,
     r"^gae: mask: .*non-binary"),
    ("mask-first-column", lambda: oracle.token_logprobs(LOGITS, IDS, np.array([[1, 1, 0], [0, 1, 0]])), ValueError,
     r"^token_logprobs: mask: expected mask\[:, 0\] False .*got True in row\(s\) \[0\]"),
    ("mask-first-column-agg", lambda: oracle.aggregate(TOK, np.array([[0, 1, 0], [1, 0, 0]], dtype=bool),
                                                       mode="token_mean"), ValueError,
     r"^aggregate: mask: expected mask\[:, 0\] False"),
    # ---- groups ----------------------------------------------------------------------------
    ("group-not-dividing", lambda: oracle.rloo_advantages(np.zeros(6), 4), ValueError,
     r"^rloo_advantages: group_size: expected a divisor of B=6 .*got 4"),
    ("group-zero", lambda: oracle.grpo_advantages(np.zeros(4), 0), ValueError,
     r"^grpo_advantages: group_size: expected an int >= 1, got 0"),
    ("group-negative", lambda: oracle.rloo_advantages(np.zeros(4), -2), ValueError,
     r"^rloo_advantages: group_size: expected an int >= 1, got -2"),
    # ---- scalars ---------------------------------------------------------------------------
    ("temperature-zero", lambda: oracle.token_logprobs(LOGITS, IDS, MASK, temperature=0.0), ValueError,
     r"^token_logprobs: temperature: expected a number > 0.0, got 0.0"),
    ("temperature-negative", lambda: oracle.token_entropy_from_hidden(HIDDEN, WEIGHT, MASK, temperature=-1),
     ValueError, r"^token_entropy_from_hidden: temperature: expected a number > 0.0, got -1.0"),
    ("temperature-nan", lambda: oracle.token_entropy(LOGITS, MASK, temperature=float("nan")), ValueError,
     r"^token_entropy: temperature: expected a finite number"),
    ("grpo-eps-negative", lambda: oracle.grpo_advantages(np.zeros(4), 2, eps=-1e-6), ValueError,
     r"^grpo_advantages: eps: expected a number >= 0.0, got -1e-06"),
    ("whiten-eps-negative", lambda: oracle.whiten(TOK, MASK, eps=-1.0), ValueError,
     r"^whiten: eps: expected a number >= 0.0"),
    ("std_ddof-negative", lambda: oracle.grpo_advantages(np.zeros(4), 2, std_ddof=-1), ValueError,
     r"^grpo_advantages: std_ddof: expected an int >= 0, got -1"),
    ("gamma-above-one", lambda: oracle.gae(TOK, TOK, MASK, gamma=1.5), ValueError,
     r"^gae: gamma: expected a number <= 1.0, got 1.5"),
    ("lam-negative", lambda: oracle.gae(TOK, TOK, MASK, lam=-0.1), ValueError,
     r"^gae: lam: expected a number >= 0.0"),
    ("kl_coef-inf", lambda: oracle.rlhf_token_rewards(SEQ, TOK, TOK, MASK, kl_coef=float("inf")), ValueError,
     r"^rlhf_token_rewards: kl_coef: expected a finite number"),
    # ---- non-finite values where they are read ---------------------------------------------
    ("nan-logp-valid", lambda: oracle.pg_token_loss(nan_at_valid(), SEQ, MASK), ValueError,
     r"^pg_token_loss: logp: expected finite values at valid \(mask=True\) positions, got nan at \(0, 1\)"),
    ("inf-values-valid", lambda: oracle.value_token_loss(TOK, with_value(TOK, (1, 1), np.inf), TOK, MASK),
     ValueError, r"^value_token_loss: old_values: expected finite values at valid"),
    ("nan-rewards-anywhere", lambda: oracle.grpo_advantages(np.array([0.0, np.nan]), 2), ValueError,
     r"^grpo_advantages: rewards: expected finite values everywhere in a \[B\] array, got nan at \(1,\)"),
    ("inf-scores", lambda: oracle.rlhf_token_rewards(np.array([np.inf, 0.0]), TOK, TOK, MASK, kl_coef=0.1),
     ValueError, r"^rlhf_token_rewards: scores: expected finite values everywhere"),
    ("nan-seq-advantages", lambda: oracle.ppo_token_loss(TOK, TOK, np.array([0.0, np.nan]), MASK), ValueError,
     r"^ppo_token_loss: advantages: expected finite values everywhere"),
    ("nan-token-advantages", lambda: oracle.gspo_token_loss(TOK, TOK, nan_at_valid(), MASK), ValueError,
     r"^gspo_token_loss: advantages: expected finite values at valid"),
    ("inf-logits-read-row", lambda: oracle.token_logprobs(with_value(LOGITS, (1, 0, 2), -np.inf), IDS, MASK),
     ValueError, r"^token_logprobs: logits: expected finite values at positions t-1 that predict a valid token"),
    ("nan-hidden-read-row", lambda: oracle.token_logprobs_from_hidden(with_value(HIDDEN, (0, 1, 0), np.nan),
                                                                      WEIGHT, IDS, MASK),
     ValueError, r"^token_logprobs_from_hidden: hidden: expected finite values"),
    ("nan-weight", lambda: oracle.token_entropy_from_hidden(HIDDEN, with_value(WEIGHT, (3, 1), np.nan), MASK),
     ValueError, r"^token_entropy_from_hidden: weight: expected finite values everywhere"),
    ("nan-upstream-valid", lambda: oracle.aggregate_grad(TOK, MASK, float("nan"), mode="token_sum"), ValueError,
     r"^aggregate_grad: upstream: expected a finite number"),
    ("nan-token-upstream", lambda: oracle.value_token_loss_grad(TOK, TOK, TOK, MASK, nan_at_valid()), ValueError,
     r"^value_token_loss_grad: upstream: expected finite values at valid"),
    ("nan-token_loss", lambda: oracle.aggregate(nan_at_valid(), MASK, mode="token_mean"), ValueError,
     r"^aggregate: token_loss: expected finite values at valid"),
    # ---- token ids -------------------------------------------------------------------------
    ("ids-too-large", lambda: oracle.token_logprobs(LOGITS, with_value(IDS, (0, 2), V), MASK), ValueError,
     r"^token_logprobs: input_ids: expected token ids in \[0, V=4\) at valid positions, got 4 at \(0, 2\)"),
    ("ids-negative", lambda: oracle.token_logprobs_from_hidden(HIDDEN, WEIGHT, with_value(IDS, (1, 1), -1), MASK),
     ValueError, r"^token_logprobs_from_hidden: input_ids: expected token ids in \[0, V=4\)"),
    # ---- names -----------------------------------------------------------------------------
    ("unknown-mode", lambda: oracle.aggregate(TOK, MASK, mode="seq-mean-token-mean"), ValueError,
     r"^aggregate: mode: expected one of \(.*\), got 'seq-mean-token-mean'"),
    ("unknown-estimator", lambda: oracle.kl_penalty(TOK, TOK, MASK, estimator="k4"), ValueError,
     r"^kl_penalty: estimator: expected one of \('k1', 'k2', 'k3'\), got 'k4'"),
    ("unknown-estimator-rlhf", lambda: oracle.rlhf_token_rewards(SEQ, TOK, TOK, MASK, kl_coef=0.1, estimator="low_var_kl"),
     ValueError, r"^rlhf_token_rewards: estimator: expected one of"),
    ("unknown-scale", lambda: oracle.grpo_advantages(np.zeros(4), 2, scale="global"), ValueError,
     r"^grpo_advantages: scale: expected one of \('group', 'batch', 'none'\), got 'global'"),
    ("unknown-singleton", lambda: oracle.grpo_advantages(np.zeros(4), 2, singleton="nan"), ValueError,
     r"^grpo_advantages: singleton: expected one of"),
    ("unknown-baseline", lambda: oracle.reinforce_advantages(SEQ, baseline="mean"), ValueError,
     r"^reinforce_advantages: baseline: expected one of \('none', 'batch_mean'\), got 'mean'"),
    ("unknown-form", lambda: oracle.gspo_token_loss(TOK, TOK, SEQ, MASK, form="token"), ValueError,
     r"^gspo_token_loss: form: expected one of \('sequence', 'token_sg'\), got 'token'"),
    ("unknown-bound", lambda: oracle.cispo_token_loss(TOK, TOK, SEQ, MASK, bound="abs"), ValueError,
     r"^cispo_token_loss: bound: expected one of \('relative', 'absolute'\), got 'abs'"),
    # ---- clip parameters -------------------------------------------------------------------
    ("ppo-eps_low-negative", lambda: oracle.ppo_token_loss(TOK, TOK, SEQ, MASK, eps_low=-0.1), ValueError,
     r"^ppo_token_loss: eps_low: expected a number >= 0.0, got -0.1"),
    ("ppo-eps_high-negative", lambda: oracle.ppo_token_loss(TOK, TOK, SEQ, MASK, eps_high=-0.2), ValueError,
     r"^ppo_token_loss: eps_high: expected a number >= 0.0"),
    ("ppo-dual_clip-one", lambda: oracle.ppo_token_loss(TOK, TOK, SEQ, MASK, dual_clip=1.0), ValueError,
     r"^ppo_token_loss: dual_clip: expected a number > 1.0, got 1.0"),
    ("ppo-dual_clip-below-one", lambda: oracle.ppo_token_loss_grad(TOK, TOK, SEQ, MASK, TOK, dual_clip=0.5),
     ValueError, r"^ppo_token_loss_grad: dual_clip: expected a number > 1.0, got 0.5"),
    ("ppo-log_ratio_clamp-zero", lambda: oracle.ppo_token_loss(TOK, TOK, SEQ, MASK, log_ratio_clamp=0.0),
     ValueError, r"^ppo_token_loss: log_ratio_clamp: expected a number > 0.0"),
    ("gspo-eps_low-negative", lambda: oracle.gspo_token_loss(TOK, TOK, SEQ, MASK, eps_low=-1e-4), ValueError,
     r"^gspo_token_loss: eps_low: expected a number >= 0.0"),
    ("cispo-eps_high-negative", lambda: oracle.cispo_token_loss(TOK, TOK, SEQ, MASK, eps_high=-0.28), ValueError,
     r"^cispo_token_loss: eps_high: expected a number >= 0.0"),
    ("cispo-eps_low-negative", lambda: oracle.cispo_token_loss(TOK, TOK, SEQ, MASK, eps_low=-0.2), ValueError,
     r"^cispo_token_loss: eps_low: expected a number >= 0.0"),
    ("cispo-absolute-below-lower", lambda: oracle.cispo_token_loss(TOK, TOK, SEQ, MASK, eps_low=0.2, eps_high=0.5,
                                                                   bound="absolute"), ValueError,
     r"^cispo_token_loss: eps_high: expected an upper bound >= the lower bound"),
    ("value-clip-zero", lambda: oracle.value_token_loss(TOK, TOK, TOK, MASK, clip=0.0), ValueError,
     r"^value_token_loss: clip: expected a number > 0.0, got 0.0"),
    ("value-clip-negative", lambda: oracle.value_token_loss_grad(TOK, TOK, TOK, MASK, TOK, clip=-0.2), ValueError,
     r"^value_token_loss_grad: clip: expected a number > 0.0"),
    ("kl-clamp-zero", lambda: oracle.kl_penalty(TOK, TOK, MASK, clamp=0.0), ValueError,
     r"^kl_penalty: clamp: expected a number > 0.0"),
    ("kl-log_ratio_clamp-negative", lambda: oracle.kl_penalty_grad(TOK, TOK, MASK, TOK, log_ratio_clamp=-20.0),
     ValueError, r"^kl_penalty_grad: log_ratio_clamp: expected a number > 0.0"),
    # ---- aggregation -----------------------------------------------------------------------
    ("norm-missing", lambda: oracle.aggregate(TOK, MASK, mode="seq_mean_token_sum_norm"), ValueError,
     r"^aggregate: norm_length: expected a number > 0 for mode='seq_mean_token_sum_norm'.*got None"),
    ("norm-zero", lambda: oracle.aggregate_grad(TOK, MASK, 1.0, mode="seq_mean_token_sum_norm", norm_length=0),
     ValueError, r"^aggregate_grad: norm_length: expected a number > 0.0, got 0.0"),
    ("num_tokens-negative", lambda: oracle.aggregate(TOK, MASK, mode="token_mean", num_tokens=-1), ValueError,
     r"^aggregate: num_tokens: expected a number >= 0.0, got -1.0"),
    ("num_seqs-str", lambda: oracle.aggregate(TOK, MASK, mode="token_mean", num_seqs="2"), TypeError,
     r"^aggregate: num_seqs: expected a real number, got str"),
]


@pytest.mark.parametrize("call,exc,pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_validation_rule(call, exc, pattern):
    with pytest.raises(exc, match=pattern):
        call()


# The same checks guard every gradient, under the gradient's own name.
GRAD_CASES = [
    ("token_logprobs_grad", lambda m: oracle.token_logprobs_grad(LOGITS, IDS, m, TOK)),
    ("token_entropy_grad", lambda m: oracle.token_entropy_grad(LOGITS, m, TOK)),
    ("token_logprobs_from_hidden_grad", lambda m: oracle.token_logprobs_from_hidden_grad(HIDDEN, WEIGHT, IDS, m, TOK)),
    ("token_entropy_from_hidden_grad", lambda m: oracle.token_entropy_from_hidden_grad(HIDDEN, WEIGHT, m, TOK)),
    ("kl_penalty_grad", lambda m: oracle.kl_penalty_grad(TOK, TOK, m, TOK)),
    ("pg_token_loss_grad", lambda m: oracle.pg_token_loss_grad(TOK, SEQ, m, TOK)),
    ("ppo_token_loss_grad", lambda m: oracle.ppo_token_loss_grad(TOK, TOK, SEQ, m, TOK)),
    ("gspo_token_loss_grad", lambda m: oracle.gspo_token_loss_grad(TOK, TOK, SEQ, m, TOK)),
    ("cispo_token_loss_grad", lambda m: oracle.cispo_token_loss_grad(TOK, TOK, SEQ, m, TOK)),
    ("value_token_loss_grad", lambda m: oracle.value_token_loss_grad(TOK, TOK, TOK, m, TOK)),
    ("aggregate_grad", lambda m: oracle.aggregate_grad(TOK, m, 1.0, mode="token_mean")),
]


@pytest.mark.parametrize("name,call", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_grad_functions_validate_under_their_own_name(name, call):
    bad_mask = np.array([[1, 1, 0], [0, 1, 0]], dtype=bool)
    with pytest.raises(ValueError, match=rf"^{name}: mask: expected mask\[:, 0\] False"):
        call(bad_mask)
    # valid inputs pass and give float64
    out = call(MASK)
    for arr in out if isinstance(out, tuple) else (out,):
        assert arr.dtype == np.float64


def test_masked_values_are_not_validated():
    # NaN/inf at masked positions, and out-of-range ids at masked positions, are accepted
    logp = np.where(MASK, -1.0, np.nan)
    ids = np.where(MASK, 1, -100)
    logits = np.zeros((B, T, V))
    logits[:, -1] = np.inf  # the last row predicts nothing
    logits[1, 1] = np.nan  # predicts position 2 of row 1, which is masked
    assert np.all(np.isfinite(oracle.token_logprobs(logits, ids, MASK)))
    assert np.all(np.isfinite(oracle.ppo_token_loss(logp, logp, np.where(MASK, 1.0, np.inf), MASK)))


def test_accepted_mask_and_float_dtypes():
    logp = np.full((B, T), -1.0)
    expected = oracle.pg_token_loss(logp, np.ones(B), MASK)
    for mask in (MASK.astype(np.int8), MASK.astype(np.float32), MASK.astype(np.uint8), MASK.tolist()):
        assert np.array_equal(oracle.pg_token_loss(logp, np.ones(B), mask), expected)
    for dtype in (np.float16, np.float32, np.float64):
        out = oracle.pg_token_loss(logp.astype(dtype), np.ones(B, dtype=dtype), MASK)
        assert out.dtype == np.float64 and np.array_equal(out, expected)
    assert np.array_equal(oracle.pg_token_loss(logp.tolist(), [1.0, 1.0], MASK), expected)


def test_inputs_are_not_modified():
    logp = np.where(MASK, -1.0, np.nan).astype(np.float32)
    before = logp.copy()
    oracle.ppo_token_loss_grad(logp, logp, np.ones(B), MASK, np.ones((B, T)))
    assert np.array_equal(logp, before, equal_nan=True) and logp.dtype == np.float32
