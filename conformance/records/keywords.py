"""The keywords of the spec, each written once: kind, choices, whether None is accepted, the out-of-range
values that must raise a ValueError (on top of the generic NaN / inf / str / bool ones of its kind).

A record takes a keyword with its own canonical default by calling it, ``EPS_LOW(0.2)``; a keyword whose
meaning (and so whose choices) differs between quantities has one entry per meaning (`AGG_MODE`,
`IS_MODE`). The choices are the conformance side's only copy: the oracle and the refimpl keep their own
constants (they import nothing from here), and tests/conformance/test_records.py proves that each accepts
exactly the choices declared here.
"""

from __future__ import annotations

from conformance.records.record import Keyword


def real(name: str, *invalid: float, optional: bool = False, doc: str = "") -> Keyword:
    return Keyword(name, "real", optional=optional, invalid=tuple(invalid), doc=doc)


def integer(name: str, *invalid: int, doc: str = "") -> Keyword:
    return Keyword(name, "int", invalid=tuple(invalid), doc=doc)


def choice(name: str, *choices: str, doc: str = "") -> Keyword:
    return Keyword(name, "choice", choices=tuple(choices), doc=doc)


def flag(name: str, doc: str = "") -> Keyword:
    return Keyword(name, "bool", choices=(False, True), doc=doc)


# --- log-probs ----------------------------------------------------------------------------------------
TEMPERATURE = real("temperature", 0.0, -1.0)
# the engine's truncation of the sampling distribution (logprob.sampling); top_k = 0 is no top-k
TOP_K = integer("top_k", -1)
TOP_P = real("top_p", 0.0, -0.1, 1.5)
MIN_P = real("min_p", -0.1, 1.5)
# metric.mismatch
MISMATCH = choice("metric", "kl", "k3_kl", "chi2_token", "token_mult_prob_error", "logprob_abs_diff")
SEQUENCE_MISMATCH = choice("metric", "log_ppl_diff", "log_ppl_abs_diff", "ppl_ratio", "chi2_seq")
MISMATCH_AGG = choice("agg", "token_mean", "seq_mean_token_mean")

# --- advantages -----------------------------------------------------------------------------------------
BASELINE = choice("baseline", "none", "batch_mean")
SINGLETON = choice("singleton", "zero", "raw", doc="a group of one: advantage 0 or its raw score")
SCALE = choice("scale", "group", "batch", "none")
GPG_ALPHA = choice("alpha", "groups", "nonzero_rewards",
                   doc="what GPG's alpha = B / (B - M) counts in M: members of all-equal groups, or zero rewards")
PASSK_SCALE = choice("scale", "group", "none")
STD_DDOF = integer("std_ddof", -1)
EPS = real("eps", -1e-6)
GAMMA = real("gamma", 1.5, -0.1)
LAM = real("lam", 1.5, -0.1)
SHIFT_MEAN = flag("shift_mean")
GAP = choice("gap", "skip", "reset", "discount")
BASELINE_LEVEL = choice("level", "token", "sequence")
REWARD_WEIGHTS = Keyword("reward_weights", "weights", optional=True)
BATCH_NORMALIZE = flag("batch_normalize")
ALIGN = choice("align", "position", "valid_token")
ZERO_TAIL = flag("zero_tail")
TAIL_LENGTH = choice("tail_length", "extent", "count")

# --- rewards ----------------------------------------------------------------------------------------------
KL_COEF = real("kl_coef")
KL_ESTIMATOR = choice("estimator", "k1", "k2", "k3")
MAX_LENGTH = integer("max_length", 0, -1)
BUFFER = integer("buffer", -1, 10**9)  # 10**9 > every max_length drawn
FACTOR = real("factor", -0.5)
BEYOND = choice("beyond", "floor", "linear")
TRUNCATED_SCALE = real("truncated_scale")
TRUNCATED_VALUE = real("truncated_value", optional=True)
TRUNCATED_SHIFT = real("truncated_shift")
CLIP_LOW = real("clip_low", optional=True)
CLIP_HIGH = real("clip_high", optional=True)

# --- KL -------------------------------------------------------------------------------------------------
LOG_RATIO_CLAMP = real("log_ratio_clamp", 0.0, -1.0, optional=True)
CLAMP = real("clamp", 0.0, -1.0, optional=True)
KL_LOSS_ESTIMATOR = choice("estimator", "k1", "k2", "k3", "abs")
KL_GRADIENT = choice("gradient", "estimator", "straight_through", "unbiased", "bias_corrected")
WEIGHT_CAP = real("weight_cap", 0.0, -1.0, optional=True)

# --- policy losses ----------------------------------------------------------------------------------------
EPS_LOW = real("eps_low", -0.1)
EPS_HIGH = real("eps_high", -0.1)
DUAL_CLIP = real("dual_clip", 1.0, 0.5, optional=True)
GSPO_FORM = choice("form", "sequence", "token_sg")
CISPO_BOUND = choice("bound", "relative", "absolute")
CISPO_SURROGATE = choice("surrogate", "logp", "ratio")
VALUE_CLIP = real("clip", 0.0, -0.5, optional=True)
TAU_POS = real("tau_pos", 0.0, -1.0)
TAU_NEG = real("tau_neg", 0.0, -1.0)
DIVERGENCE = choice("divergence", "tv", "kl")
DELTA_LOW = real("delta_low", -0.1)
DELTA_HIGH = real("delta_high", -0.1)
RATIO_CAP = real("ratio_cap", 0.0, -1.0, optional=True)
DRO_BETA = real("beta", 0.0, -0.5)
K_POS = real("k_pos", -1.0)
LAMBDA_POS = real("lambda_pos", 0.0, -1.0)
K_NEG = real("k_neg", -1.0)
LAMBDA_NEG = real("lambda_neg", 0.0, -1.0)
W_MIN = real("w_min", 0.0, -1.0, optional=True)
W_MAX = real("w_max", 0.0, -1.0, optional=True)
POLICY_KL_ESTIMATOR = choice("kl_estimator", "k1", "k2", "k3")

# --- aggregation ----------------------------------------------------------------------------------------------
AGG_MODE = choice("mode", "token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm",
                  "token_sum")
NORM_LENGTH = real("norm_length", 0.0, -4.0, optional=True)
NUM_TOKENS = real("num_tokens", -1.0, optional=True, doc="the step's global token count")
NUM_SEQS = real("num_seqs", -1.0, optional=True, doc="the step's global sequence count")

# --- off-policy corrections ---------------------------------------------------------------------------------
# lo / hi bound a ratio (> 0) in rollout_is_weights but a KL estimate (any real) in rollout_rejection_mask:
# only the generic NaN / inf / str / bool mutations apply to both
LO = real("lo", optional=True)
HI = real("hi", optional=True)
IS_LEVEL = choice("level", "token", "sequence")
IS_SEQ_STAT = choice("seq_stat", "product", "geometric")
IS_MODE = choice("mode", "none", "truncate", "mask")
REJECTION_STATISTIC = choice("statistic", "ratio", "k1", "k2", "k3")
REJECTION_LEVEL = choice("level", "token", "seq_sum", "seq_mean", "seq_max", "seq_all")
KL_OF = choice("kl_of", "rollout_old", "old_rollout")
BEHAV_CAP = real("behav_cap", 0.0, -1.0, optional=True)
BEHAV_MODE = choice("behav_mode", "truncate", "mask")
VERSION = integer("version", -1)
PROXIMAL_METHOD = choice("method", "loglinear", "linear")
THRESHOLD = real("threshold")
REJECTED = choice("rejected", "drop", "zero")
WEIGHT_KL = flag("weight_kl")

# --- covariance-selected tokens ------------------------------------------------------------------------------
FRACTION = real("fraction", 0.0, -0.1, 1.5)
COV_LOW = real("cov_low")  # any real; cov_low >= cov_high is reported as cov_high's error
COV_HIGH = real("cov_high", -1e9)
KL_COV_COEF = real("coef", -0.1)

# --- entropy terms and controllers ---------------------------------------------------------------------------
RHO = real("rho", -0.1, 1.5)
POOLED_ENTROPY = Keyword("pooled_entropy", "pool", optional=True,
                         doc="the valid entropies of every part of the step (a 1-D array)")
ENTROPY_COEF = real("entropy_coef")
# an entropy target is any real, a KL target is > 0: only the generic mutations apply to both
TARGET = real("target")
HORIZON = real("horizon", 0.0, -1.0)
DELTA = real("delta", -0.1)
COEF_MIN = real("coef_min")  # coef_min > coef_max is reported as coef_max's error
COEF_MAX = real("coef_max", -1e9)
