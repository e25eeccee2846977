"""The registry: one record per quantity of the spec, in the style of PyTorch's OpInfo.

Why: every test and every conformance check iterates this table, so adding a quantity to rlspec is
adding one record here (plus its oracle function, refimpl function and case generator); nothing
else needs to know the list.

What a record holds:
- `function` / `spec_id`: the core-API name and the section of the spec it implements;
- `oracle`, `oracle_grad`, `refimpl`: the three implementations looked up by name;
- `grad_args`: the arguments the gradient is taken with respect to (empty: no gradient in the spec);
- `strategy()`: Hypothesis strategy of realistic inputs (`conformance.cases`);
- `dtypes`: input dtypes the refimpl is tested in;
- `invariants`: names of the metamorphic properties that apply (see `INVARIANTS`);
- `stop_grad_args`: inputs the spec makes constants: no gradient may reach them through any output
  (the `invariant:detached` check, `conformance.invariants`);
- `partition_stats`: the step statistics the `invariant:partition` check hands every part of a split
  batch (the global counts `num_tokens` / `num_seqs` by default; `pooled_entropy` for entropy_top_mask);
- `presets`: keyword sets from `oracle.presets.PRESETS` that apply to this function;
- `question`: the keywords a conformance check passes to an adapter (what is asked: the estimator,
  the clip range, the aggregation mode); every other keyword is left at its canonical default;
- `variants`: the keyword grid the fingerprinting search walks when a check fails (the oracle is
  re-run with these overrides; the adapter's call stays the same);
- `well_conditioned(args, kwargs)`: False for inputs within rounding distance of a kink (a clip
  boundary), where the gradient is not defined to the precision being compared.

What is tested automatically for every record: refimpl vs oracle value and gradient in every dtype,
every preset, every listed invariant (tests/refimpl), golden vectors (conformance/vectors) and the
`rlspec check` runs against adapters.
"""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

import oracle
import refimpl
from conformance import cases

INVARIANTS = {
    "mask": "values planted at masked positions (NaN, +-inf, 1e30) change no valid output or gradient",
    "group_permutation": "permuting the members of a group permutes the outputs the same way",
    "on_policy": "old == current log-probs give ratio 1 (no clipping) and ref == current gives KL 0",
    "partition": "splitting the batch into micro-batches with global counts sums to the whole",
    "detached": "no gradient reaches the inputs the spec makes constants (stop_grad_args)",
}

# The global counts the `invariant:partition` check passes on top of the question keywords
# (`conformance.invariants.run_partition`); a record whose step statistic is something else names it
# in `partition_stats` (entropy_top_mask: the pooled valid entropies of the step).
PARTITION_KEYWORDS = ("num_tokens", "num_seqs")


@dataclass(frozen=True)
class QuantityInfo:
    function: str
    spec_id: str
    grad_args: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = ("float64", "float32", "bfloat16")
    invariants: tuple[str, ...] = ("mask",)
    question: tuple[str, ...] = ()
    variants: dict[str, tuple[Any, ...]] = field(default_factory=dict)
    well_conditioned: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None
    output: str = "array"  # "array", "pair" (gae), "scalar" (aggregate) or "mask" (bool [B, T])
    stop_grad_args: tuple[str, ...] = ()
    partition_stats: tuple[str, ...] = PARTITION_KEYWORDS  # the step statistics invariant:partition passes

    @property
    def oracle(self) -> Callable[..., Any]:
        return getattr(oracle, self.function)

    @property
    def oracle_grad(self) -> Callable[..., Any] | None:
        return getattr(oracle, f"{self.function}_grad", None) if self.grad_args else None

    @property
    def refimpl(self) -> Callable[..., Any]:
        return getattr(refimpl, self.function)

    @property
    def presets(self) -> dict[str, dict[str, Any]]:
        return {
            name: table[self.function]
            for name, table in oracle.PRESETS.items()
            if self.function in table
        }

    def strategy(self) -> st.SearchStrategy[cases.Case]:
        return cases.strategy(self.function)

    @property
    def partition_keywords(self) -> tuple[str, ...]:
        """The keywords the `invariant:partition` check passes on top of the question (none for a
        record without that check)."""
        return self.partition_stats if "partition" in self.invariants else ()

    def canonical_keywords(self) -> dict[str, Any]:
        """The oracle's keywords that a check never passes an adapter, with their canonical
        defaults: the adapter is held to computing the quantity at these values (only the preset
        checks of an `accepts_variants` adapter pass some of them)."""
        passed = self.question + self.partition_keywords
        return {
            name: p.default
            for name, p in inspect.signature(self.oracle).parameters.items()
            if p.kind is p.KEYWORD_ONLY and name not in passed
        }

    def question_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The part of a case's keywords that a conformance check asks an adapter for."""
        return {k: v for k, v in kwargs.items() if k in self.question}

    def required_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The keywords of a case that have no canonical default (`mode`, `norm_length`,
        `kl_coef`): the base a preset's keywords are applied on."""
        params = inspect.signature(self.oracle).parameters
        return {
            k: v
            for k, v in kwargs.items()
            if k in params and (params[k].default is inspect.Parameter.empty or k == "norm_length")
        }

    def preset_kwargs(self, preset: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        """A case's required keywords with `preset`'s keywords on top (canonical elsewhere)."""
        return {**self.required_kwargs(kwargs), **self.presets[preset]}

    def variant_kwargs(self) -> Iterator[dict[str, Any]]:
        """Every keyword combination of the variant grid (presets first)."""
        yield from self.presets.values()
        names = list(self.variants)
        for values in itertools.product(*(self.variants[n] for n in names)):
            yield dict(zip(names, values))


# ---------------------------------------------------------------------------------------------
# Conditioning: keep compared gradients away from kinks (the spec's tie rule decides exact ties;
# inputs within rounding distance of a kink cannot be compared across precisions).
# ---------------------------------------------------------------------------------------------

MARGIN = 1e-4


def _far(x: np.ndarray, kinks: list[float]) -> bool:
    x = np.nan_to_num(x, nan=np.inf)
    return all(np.all(np.abs(x - k) > MARGIN * max(1.0, abs(k))) for k in kinks)


def _ratio(args: dict[str, Any], clamp: float | None = None) -> np.ndarray:
    d = (args["logp"] - args["old_logp"])[args["mask"]]
    if clamp is not None:
        d = np.clip(d, -clamp, clamp)
    with np.errstate(over="ignore"):
        return np.exp(d)


def _ppo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    d = (args["logp"] - args["old_logp"])[args["mask"]]
    kinks = [1 - kw.get("eps_low", 0.2), 1 + kw.get("eps_high", 0.2)]
    if kw.get("dual_clip") is not None:
        kinks.append(kw["dual_clip"])
    clamp = kw.get("log_ratio_clamp")
    far_clamp = clamp is None or _far(d, [-clamp, clamp])
    return far_clamp and _far(_ratio(args, clamp), kinks)


def _gspo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    mask = args["mask"]
    d = np.where(mask, args["logp"] - np.where(mask, args["old_logp"], 0.0), 0.0)
    n = mask.sum(axis=1)
    with np.errstate(over="ignore"):
        s = np.exp(d.sum(axis=1)[n > 0] / n[n > 0])
    return _far(s, [1 - kw.get("eps_low", 3e-4), 1 + kw.get("eps_high", 4e-4)])


def _kl_conditioned(args: dict[str, Any], kw: dict[str, Any], default_estimator: str = "k1") -> bool:
    """The KL estimators' clamp kinks: d off ±log_ratio_clamp and the estimate off ±clamp. abs's kink at
    d = 0 needs none: the sign of a difference of two rounded inputs is exact."""
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf in hostile cases: not near a kink
        d = (args["logp"] - args["ref_logp"])[args["mask"]]
    if kw.get("log_ratio_clamp") is not None:
        c = kw["log_ratio_clamp"]
        if not _far(d, [-c, c]):
            return False
        d = np.clip(d, -c, c)
    if kw.get("clamp") is not None:
        est = kw.get("estimator", default_estimator)
        with np.errstate(over="ignore"):
            k = {"k1": d, "k2": d * d / 2, "k3": np.expm1(-d) + d, "abs": np.abs(d)}[est]
        return _far(k, [-kw["clamp"], kw["clamp"]])
    return True


def _cispo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The "logp" surrogate's gradient −clip(r)·A is continuous in r; the "ratio" surrogate's gradient
    jumps to 0 at the clip bounds, which the ratio must be off."""
    if kw.get("surrogate", "logp") != "ratio":
        return True
    eps_low, eps_high = kw.get("eps_low"), kw.get("eps_high", 0.28)
    high = 1 + eps_high if kw.get("bound", "relative") == "relative" else eps_high
    return _far(_ratio(args), [high] + ([] if eps_low is None else [1 - eps_low]))


def _value_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    if kw.get("clip") is None:
        return True
    delta = (args["values"] - args["old_values"])[args["mask"]]
    return _far(delta, [-kw["clip"], kw["clip"]])


def _log_ratio(args: dict[str, Any]) -> np.ndarray:
    """δ = old_logp − rollout_logp with masked positions 0 (they are never read)."""
    mask = args["mask"]
    with np.errstate(invalid="ignore", over="ignore"):
        return np.where(mask, args["old_logp"] - np.where(mask, args["rollout_logp"], 0.0), 0.0)


def _row_stats(x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sum, mean, max) of x over each row's valid positions, for the rows that have one."""
    n = mask.sum(axis=1)
    rows = n > 0
    total = np.where(mask, x, 0.0).sum(axis=1)[rows]
    top = np.where(mask, x, -np.inf).max(axis=1)[rows]
    return total, total / n[rows], top


def _is_weights_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Masked importance sampling keeps a weight only inside [lo, hi]: the statistic must not sit
    on a bound (the decision flips with rounding)."""
    if kw.get("mode", "truncate") != "mask":
        return True
    mask, d = args["mask"], _log_ratio(args)
    if kw.get("level", "token") == "token":
        s = d[mask]
    else:
        total, mean, _ = _row_stats(d, mask)
        s = total if kw.get("seq_stat", "product") == "product" else mean
    if kw.get("log_ratio_clamp") is not None:
        s = np.clip(s, -kw["log_ratio_clamp"], kw["log_ratio_clamp"])
    with np.errstate(over="ignore"):
        return _far(np.exp(s), [b for b in (kw.get("lo"), kw.get("hi", 2.0)) if b is not None])


def _rejection_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Every statistic the keep decision reads must be off its bounds."""
    bounds = [b for b in (kw.get("lo"), kw.get("hi")) if b is not None]
    if not bounds:
        return True
    mask, delta = args["mask"], _log_ratio(args)
    d = -delta if kw.get("kl_of", "rollout_old") == "rollout_old" else delta
    statistic = kw.get("statistic", "ratio")
    with np.errstate(over="ignore"):
        per_token = {"ratio": delta, "k1": d, "k2": d * d / 2, "k3": np.expm1(-d) + d}[statistic]
    level = kw.get("level", "token")
    if level in ("token", "seq_all"):
        values = per_token[mask]
    else:
        total, mean, top = _row_stats(per_token, mask)
        values = {"seq_sum": total, "seq_mean": mean, "seq_max": top}[level]
    with np.errstate(over="ignore"):
        values = np.exp(values) if statistic == "ratio" else values
    return _far(values, bounds)


def _decoupled_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """PPO's kinks in r = π/π_prox, and the behaviour-weight cap in w = π_prox/π_behav."""
    ratio_args = {"logp": args["logp"], "old_logp": args["prox_logp"], "mask": args["mask"]}
    if not _ppo_conditioned(ratio_args, kw):
        return False
    if kw.get("behav_cap") is None:
        return True
    w = _ratio({"logp": args["prox_logp"], "old_logp": args["behav_logp"], "mask": args["mask"]})
    return _far(w, [kw["behav_cap"]])


def _opsm_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The mean log-ratio of each row must be off the threshold."""
    mask = args["mask"]
    d = np.where(mask, args["old_logp"] - np.where(mask, args["logp"], 0.0), 0.0)
    return _far(_row_stats(d, mask)[1], [kw["threshold"]])


def _sapo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Only the optional log-ratio clamp has a kink (the gate is smooth)."""
    c = kw.get("log_ratio_clamp")
    return c is None or _far((args["logp"] - args["old_logp"])[args["mask"]], [-c, c])


def _gmpo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The per-token log-ratio must be off GMPO's log-space clip bounds."""
    d = (args["logp"] - args["old_logp"])[args["mask"]]
    return _far(d, [-kw.get("eps_low", 0.4), kw.get("eps_high", 0.4)])


def _dppo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """DPPO's keep decision flips at its divergence bounds and at p = p_old; the ratio cap is a kink."""
    m = args["mask"]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        p, q = np.exp(args["logp"][m]), np.exp(args["old_logp"][m])
        d = args["logp"][m] - args["old_logp"][m]
        lo, hi = kw.get("delta_low", 0.2), kw.get("delta_high", 0.2)
        if kw.get("divergence", "tv") == "tv":
            ok = _far(p - q, [-lo, hi])
        else:
            kl = q * (np.log(q) - np.log(p)) + (1 - q) * (np.log1p(-q) - np.log1p(-p))
            ok = _far(kl, [lo, hi]) and _far(d, [0.0])
    cap = kw.get("ratio_cap")
    return ok and (cap is None or _far(np.exp(d), [cap]))


def _covariance(args: dict[str, Any]) -> np.ndarray:
    """(A − Ā)·(logp − l̄) at the valid tokens (row-major), the means over the valid tokens of the batch."""
    mask = args["mask"]
    A = np.broadcast_to(args["advantages"][:, None], mask.shape) if args["advantages"].ndim == 1 else args["advantages"]
    a, lp = A[mask], args["logp"][mask]
    return (a - a.mean()) * (lp - lp.mean())


def _clip_cov_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """Clip-Cov's candidates: every ratio off PPO's clip bounds and every covariance off the covariance
    bounds (the draws are exact inputs: their ties are the spec's row-major rule, never rounding)."""
    if not args["mask"].any():
        return True
    return (_ppo_conditioned(args, {"eps_low": kw.get("eps_low", 0.2), "eps_high": kw.get("eps_high", 0.2)})
            and _far(_covariance(args), [kw.get("cov_low", 1.0), kw.get("cov_high", 5.0)]))


def _kl_cov_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """KL-Cov's top n: the n-th and (n+1)-th largest covariances apart (no near tie at the cut). The
    |log-ratio| kink at 0 needs none: the sign of a difference of two rounded inputs is exact."""
    if not args["mask"].any():
        return True
    cov = np.sort(_covariance(args))[::-1]
    n = max(1, int(kw.get("fraction", 2e-4) * cov.size))
    return n >= cov.size or cov[n - 1] - cov[n] > MARGIN * max(1.0, abs(cov[n - 1]))



def _kl_loss_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """kl.estimator's clamp kinks where the gradient reads them ("estimator", "bias_corrected"); the
    straight-through and unbiased gradients w·d are continuous (their clamps act on the value only, and
    w = min(r, cap) is a constant factor)."""
    if kw.get("gradient", "estimator") in ("straight_through", "unbiased"):
        return True
    return _kl_conditioned(args, kw, default_estimator="k3")


def _entropy_mask_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """The keep decision flips where a valid entropy lies within rounding distance of the threshold τ
    (quantile(P, 1 − ρ) by linear interpolation, P the batch's valid entropies). A tie at τ (ρ = 0 or 1,
    an order statistic, equal neighbours) is one too: its decision (kept, ≥) is pinned by golden
    vectors of exact dyadic values, not compared across precisions."""
    mask = args["mask"]
    H = args["entropy"][mask]
    pooled = kw.get("pooled_entropy")
    P = np.sort(H if pooled is None else np.asarray(pooled, dtype=np.float64))
    if P.size == 0 or H.size == 0:
        return True
    p = (1.0 - kw.get("rho", 1.0)) * (P.size - 1)
    i = min(int(np.floor(p)), P.size - 1)
    tau = P[i] if p == i else P[i] + (p - i) * (P[i + 1] - P[i])
    return _far(H, [float(tau)])


def _gdpo_conditioned(args: dict[str, Any], kw: dict[str, Any]) -> bool:
    """GDPO's batch normalisation divides the spread of s = Σ_k w_k·z_k: when the weighted z-scores nearly
    cancel (s of the size of eps's effect on them) the result is a ratio of rounding-sized differences.
    Either s is exactly constant (the output is exactly 0) or its spread is well above that size."""
    if not kw.get("batch_normalize", True):
        return True
    s = oracle.gdpo_advantages(args["rewards"], args["group_size"], **{**kw, "batch_normalize": False})
    weights = kw.get("reward_weights") or [1.0] * args["rewards"].shape[1]
    spread = float(np.ptp(s)) if s.size else 0.0
    return spread == 0.0 or spread > 1e-3 * sum(abs(w) for w in weights)


REGISTRY: tuple[QuantityInfo, ...] = (
    QuantityInfo(
        "token_logprobs", "logprob.token", grad_args=("logits",), question=("temperature",)
    ),
    QuantityInfo(
        "token_entropy", "logprob.entropy", grad_args=("logits",), question=("temperature",)
    ),
    QuantityInfo(
        "token_logprobs_from_hidden",
        "logprob.fused",
        grad_args=("hidden", "weight"),
        question=("temperature",),
    ),
    QuantityInfo(
        "token_entropy_from_hidden",
        "logprob.fused",
        grad_args=("hidden", "weight"),
        question=("temperature",),
    ),
    QuantityInfo(
        "reinforce_advantages",
        "adv.reinforce",
        invariants=(),
        question=("baseline",),
        stop_grad_args=("rewards",),
    ),
    QuantityInfo(
        "rloo_advantages",
        "adv.rloo",
        invariants=("group_permutation",),
        stop_grad_args=("rewards",),
        variants={"singleton": ("zero", "raw")},  # spec v1.1: verl's loop rloo leaves a singleton's score
    ),
    QuantityInfo(
        "grpo_advantages",
        "adv.grpo",
        invariants=("group_permutation",),
        question=("scale",),
        stop_grad_args=("rewards",),
        variants={
            "std_ddof": (1, 0),
            "eps": (1e-6, 0.0, 1e-4, 1e-8, 1e-9),
            "singleton": ("zero", "raw"),
        },
    ),
    QuantityInfo(
        "rlhf_token_rewards",
        "reward.rlhf",
        invariants=("mask", "on_policy"),
        question=("kl_coef", "estimator"),
        stop_grad_args=("scores", "logp", "ref_logp"),
    ),
    QuantityInfo(
        "gae",
        "adv.gae",
        output="pair",
        question=("gamma", "lam"),
        stop_grad_args=("token_rewards", "values"),
    ),
    QuantityInfo(
        "whiten",
        "adv.whiten",
        question=("shift_mean",),
        variants={"std_ddof": (1, 0), "eps": (1e-8, 1e-6, 0.0)},
        stop_grad_args=("x",),
    ),
    QuantityInfo(
        "kl_penalty",
        "kl.estimator",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("estimator",),
        variants={"log_ratio_clamp": (None, 20.0, 40.0), "clamp": (None, 10.0)},
        well_conditioned=_kl_conditioned,
    ),
    QuantityInfo("pg_token_loss", "loss.pg", grad_args=("logp",)),
    QuantityInfo(
        "ppo_token_loss",
        "loss.ppo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("eps_low", "eps_high", "dual_clip"),
        variants={"dual_clip": (None, 3.0), "log_ratio_clamp": (None, 20.0)},
        well_conditioned=_ppo_conditioned,
    ),
    QuantityInfo(
        "gspo_token_loss",
        "loss.gspo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("eps_low", "eps_high"),
        variants={"form": ("sequence", "token_sg")},
        well_conditioned=_gspo_conditioned,
    ),
    QuantityInfo(
        "cispo_token_loss",
        "loss.cispo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("eps_low", "eps_high", "bound"),
        variants={"surrogate": ("logp", "ratio")},
        well_conditioned=_cispo_conditioned,
    ),
    QuantityInfo(
        "value_token_loss",
        "loss.value",
        grad_args=("values",),
        question=("clip",),
        well_conditioned=_value_conditioned,
        stop_grad_args=("returns",),
    ),
    QuantityInfo(
        "aggregate",
        "agg",
        grad_args=("token_loss",),
        invariants=("mask", "partition"),
        question=("mode", "norm_length"),
        output="scalar",
    ),
    QuantityInfo(
        "ppo_clipped_mask",
        "metric.clip",
        invariants=("mask", "on_policy"),
        question=("eps_low", "eps_high", "dual_clip"),
        variants={"log_ratio_clamp": (None, 20.0)},
        well_conditioned=_ppo_conditioned,
    ),
    QuantityInfo(
        "policy_loss",
        "loss.policy",
        grad_args=("logp",),
        invariants=("mask", "on_policy", "partition"),
        question=("eps_low", "eps_high", "dual_clip", "kl_coef", "kl_estimator", "mode", "norm_length"),
        output="scalar",
        well_conditioned=_ppo_conditioned,
    ),
    # spec v1.1: off-policy and asynchronous training (api.md "Spec v1.1")
    QuantityInfo(
        "rollout_is_weights",
        "offpolicy.is_weights",
        invariants=("mask", "on_policy"),
        question=("level", "seq_stat", "mode", "lo", "hi", "batch_normalize"),
        variants={"log_ratio_clamp": (None, 20.0)},
        well_conditioned=_is_weights_conditioned,
        stop_grad_args=("old_logp", "rollout_logp"),
    ),
    QuantityInfo(
        "rollout_rejection_mask",
        "offpolicy.rejection",
        invariants=("mask", "on_policy"),
        question=("statistic", "level", "lo", "hi"),
        variants={"kl_of": ("rollout_old", "old_rollout")},
        well_conditioned=_rejection_conditioned,
        output="mask",
    ),
    QuantityInfo(
        "decoupled_ppo_token_loss",
        "offpolicy.decoupled_ppo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("eps_low", "eps_high", "dual_clip", "behav_cap", "behav_mode"),
        well_conditioned=_decoupled_conditioned,
        stop_grad_args=("prox_logp", "behav_logp"),
    ),
    QuantityInfo(
        "proximal_logp_interpolation",
        "offpolicy.proximal",
        question=("version", "method"),
        stop_grad_args=("logp", "behav_logp"),
    ),
    QuantityInfo(
        "off_policy_sequence_mask",
        "offpolicy.opsm",
        question=("threshold",),
        well_conditioned=_opsm_conditioned,
        output="mask",
    ),
    # spec v1.1: policy losses of 2025-26 (api.md "Spec v1.1: policy losses")
    QuantityInfo(
        "sapo_token_loss",
        "loss.sapo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("tau_pos", "tau_neg"),
        variants={"log_ratio_clamp": (None, 20.0)},
        well_conditioned=_sapo_conditioned,
    ),
    QuantityInfo(
        "gmpo_token_loss",
        "loss.gmpo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("eps_low", "eps_high"),
        well_conditioned=_gmpo_conditioned,
    ),
    QuantityInfo(
        "dppo_token_loss",
        "loss.dppo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("divergence", "delta_low", "delta_high", "ratio_cap"),
        variants={"log_ratio_clamp": (None, 20.0)},
        well_conditioned=_dppo_conditioned,
    ),
    QuantityInfo(
        "dro_token_loss",
        "loss.dro",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("beta",),
    ),
    QuantityInfo(
        "vespo_token_loss",
        "loss.vespo",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("k_pos", "lambda_pos", "k_neg", "lambda_neg"),
        variants={"log_ratio_clamp": (None, 20.0), "w_min": (None, 1e-8), "w_max": (None, float(np.exp(20.0)))},
    ),
    # spec v1.1: advantage estimators (api.md "Spec v1.1: advantage estimators"). Constants: no gradient;
    # the group estimators hold under a permutation of each group's members (ties included: a shared
    # maximum gives pass@k 0 whichever member the tie rule names).
    QuantityInfo(
        "reinforce_pp_advantages",
        "adv.reinforce_pp",
        output="pair",
        question=("gamma",),
        variants={"gap": ("skip", "reset", "discount"), "std_ddof": (1, 0)},
        stop_grad_args=("token_rewards",),
    ),
    QuantityInfo(
        "reinforce_pp_baseline_advantages",
        "adv.reinforce_pp_baseline",
        invariants=("group_permutation",),
        variants={"level": ("token", "sequence"), "std_ddof": (1, 0), "eps": (1e-8, 1e-4), "singleton": ("zero", "raw")},
        stop_grad_args=("rewards",),
    ),
    QuantityInfo(
        "remax_advantages",
        "adv.remax",
        invariants=("group_permutation",),
        stop_grad_args=("rewards", "greedy_rewards"),
    ),
    QuantityInfo(
        "opo_advantages",
        "adv.opo",
        invariants=("group_permutation",),
        variants={"singleton": ("zero", "raw")},
        stop_grad_args=("rewards",),
    ),
    QuantityInfo(
        "grpo_passk_advantages",
        "adv.grpo_passk",
        invariants=("group_permutation",),
        question=("scale",),
        variants={"std_ddof": (1, 0), "eps": (1e-6, 1e-4, 1e-8)},
        stop_grad_args=("rewards",),
    ),
    QuantityInfo(
        "gdpo_advantages",
        "adv.gdpo",
        invariants=("group_permutation",),
        question=("reward_weights",),
        variants={"eps": (1e-6, 1e-4, 1e-8), "std_ddof": (1, 0), "batch_normalize": (True, False),
                  "singleton": ("zero", "raw")},
        well_conditioned=_gdpo_conditioned,
        stop_grad_args=("rewards",),
    ),
    QuantityInfo(
        "maxrl_advantages",
        "adv.maxrl",
        invariants=("group_permutation",),
        variants={"eps": (1e-6, 1e-8), "singleton": ("zero", "raw")},
        stop_grad_args=("rewards",),
    ),
    QuantityInfo(
        "gpg_advantages",
        "adv.gpg",
        invariants=("group_permutation",),
        variants={"singleton": ("zero", "raw")},
        stop_grad_args=("rewards",),
    ),
    # The per-token optimal baseline reads per-token inputs (masked positions never read) and groups; the
    # question is the estimator verl registers (align) and its zero-tail switch.
    QuantityInfo(
        "optimal_token_baseline_advantages",
        "adv.optimal_token_baseline",
        output="pair",
        invariants=("mask", "group_permutation"),
        question=("align", "zero_tail"),
        variants={"eps": (0.0, 1e-8), "tail_length": ("extent", "count")},
        stop_grad_args=("token_rewards", "old_logp", "sum_pi_squared", "is_weights"),
    ),
    # spec v1.1: reward shaping before the advantage (api.md "Spec v1.1: reward shaping"). Sequence-level
    # [B] constants: no mask, no gradient. overlong_penalty's inputs are integers (no dtype to round to).
    QuantityInfo(
        "overlong_penalty",
        "reward.overlong",
        invariants=(),
        question=("max_length", "buffer", "factor"),
        variants={"beyond": ("floor", "linear")},
    ),
    QuantityInfo(
        "shaped_rewards",
        "reward.shaping",
        invariants=(),
        question=("truncated_scale", "truncated_value", "truncated_shift", "clip_low", "clip_high"),
        stop_grad_args=("rewards",),
    ),
    # spec v1.1: the KL term in a loss (api.md "Spec v1.1: the KL term in a loss"). The variant grid
    # names the gradient form an adapter computes (the asked estimator is kept: a grid value would pin
    # one estimator for every case of a row that asks several).
    QuantityInfo(
        "kl_loss_term",
        "kl.loss",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("estimator", "gradient"),
        variants={
            "gradient": ("estimator", "straight_through", "unbiased", "bias_corrected"),
            "log_ratio_clamp": (None, 20.0),
            "clamp": (None, 10.0),
            "weight_cap": (10.0, None),
        },
        well_conditioned=_kl_loss_conditioned,
        stop_grad_args=("ref_logp", "old_logp"),
    ),
    # spec v1.1: covariance-selected tokens (api.md "Spec v1.1: covariance-selected tokens")
    QuantityInfo(
        "clip_cov_mask",
        "select.clip_cov",
        invariants=("mask", "on_policy"),
        question=("fraction", "cov_low", "cov_high", "eps_low", "eps_high"),
        well_conditioned=_clip_cov_conditioned,
        output="mask",
    ),
    QuantityInfo(
        "kl_cov_token_loss",
        "loss.kl_cov",
        grad_args=("logp",),
        invariants=("mask", "on_policy"),
        question=("fraction", "coef"),
        well_conditioned=_kl_cov_conditioned,
    ),
    # spec v1.1: entropy terms and coefficient controllers (api.md "Spec v1.1: entropy terms and
    # coefficient controllers"). The high-entropy mask's step statistic is the pooled valid entropies of
    # every part (as num_tokens is for aggregate): its invariant:partition check passes them to each part.
    QuantityInfo(
        "entropy_top_mask",
        "entropy.top_mask",
        invariants=("mask", "partition"),
        question=("rho",),
        well_conditioned=_entropy_mask_conditioned,
        output="mask",
        partition_stats=("pooled_entropy",),
    ),
    QuantityInfo(
        "entropy_bonus",
        "loss.entropy",
        grad_args=("entropy",),
        invariants=("mask", "partition"),
        question=("entropy_coef", "mode", "norm_length"),
        output="scalar",
    ),
    QuantityInfo(
        "kl_controller_update",
        "ctrl.kl",
        dtypes=("float64", "float32"),  # scalars (Python floats) either way: the dtype picks the tolerance class
        invariants=(),
        question=("target", "horizon"),
        output="scalar",
    ),
    QuantityInfo(
        "entropy_coef_update",
        "ctrl.entropy",
        dtypes=("float64", "float32"),
        invariants=(),
        question=("target", "delta", "coef_min", "coef_max"),
        output="scalar",
    ),
    QuantityInfo(
        "entropy_coef_applied",
        "ctrl.entropy",
        dtypes=("float64", "float32"),
        invariants=(),
        question=("target",),
        output="scalar",
    ),
    QuantityInfo(
        "corrected_policy_loss",
        "offpolicy.loss",
        grad_args=("logp",),
        invariants=("mask", "on_policy", "partition"),
        question=("eps_low", "eps_high", "dual_clip", "kl_coef", "kl_estimator", "mode", "norm_length"),
        variants={"rejected": ("drop", "zero"), "weight_kl": (False, True)},
        output="scalar",
        well_conditioned=_ppo_conditioned,
        stop_grad_args=("is_weights",),
    ),
)

BY_FUNCTION: dict[str, QuantityInfo] = {q.function: q for q in REGISTRY}


def records_for(spec_glob: str = "*") -> list[QuantityInfo]:
    """Records whose spec id or function name matches a glob (`adv.*`, `loss.ppo`, `gae`)."""
    import fnmatch

    return [
        q
        for q in REGISTRY
        if fnmatch.fnmatch(q.spec_id, spec_glob) or fnmatch.fnmatch(q.function, spec_glob)
    ]
