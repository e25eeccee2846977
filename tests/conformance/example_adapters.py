"""Adapters used by the conformance tests: a broken one, a partial one, misbehaving ones.

Loaded by `module:attribute` path (tests/ is on sys.path under pytest's rootdir conftest), like a
third-party adapter would be.
"""

from __future__ import annotations

import time
import types

import numpy as np
import torch

import oracle
import refimpl


def _base(name: str, **functions: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(name=name, version="0.0-test", spec_version="v1", array_api="torch", **functions)


def _logprobs_without_temperature(logits, input_ids, mask, *, temperature=1.0):
    """The classic bug: the sampler used softmax(z/T), the trainer scores softmax(z)."""
    return refimpl.token_logprobs(logits, input_ids, mask, temperature=1.0)


def broken() -> types.SimpleNamespace:
    """token_logprobs ignores the temperature; everything else is the refimpl."""
    functions = {fn: getattr(refimpl, fn) for fn in ("grpo_advantages", "rloo_advantages", "pg_token_loss")}
    return _base("broken", token_logprobs=_logprobs_without_temperature, **functions)


def partial() -> types.SimpleNamespace:
    """Only GRPO advantages."""
    return _base("partial", grpo_advantages=refimpl.grpo_advantages)


def _raises(*args, **kwargs):
    raise RuntimeError("adapter exploded")


def _hangs(*args, **kwargs):
    time.sleep(3600)


def _wrong_shape(rewards, group_size, **kwargs):
    return torch.zeros(rewards.shape[0] + 1, dtype=rewards.dtype)


def misbehaving() -> types.SimpleNamespace:
    """One function raises, one hangs, one returns the wrong shape."""
    return _base("misbehaving", rloo_advantages=_raises, reinforce_advantages=_hangs, grpo_advantages=_wrong_shape)


# ---------------------------------------------------------------------------------------------
# Contract breakers (tests/robustness/test_adapter_isolation.py): each gets a `fail` row that says why
# ---------------------------------------------------------------------------------------------


def _mutates_mask(logp, advantages, mask):
    """Clears the mask in place (a trainer that reuses its buffers), then computes correctly."""
    out = refimpl.pg_token_loss(logp, advantages, mask.clone())
    mask.zero_()
    return out


def _mutates_logp(logp, old_logp, advantages, mask, **kwargs):
    """Scales logp in place behind autograd's back (``.data``)."""
    out = refimpl.ppo_token_loss(logp, old_logp, advantages, mask, **kwargs)
    logp.data.mul_(2.0)
    return out


def _float64_output(rewards, group_size, **kwargs):
    """Upcasts: float64 advantages for float32 (and bfloat16) rewards."""
    return refimpl.grpo_advantages(rewards.double(), group_size, **kwargs)


def _int_output(rewards, group_size):
    """Returns an integer tensor."""
    return refimpl.rloo_advantages(rewards, group_size).round().long()


def _nan_output(rewards, *, baseline="none"):
    """NaN at a valid position (a 0/0 somewhere)."""
    out = refimpl.reinforce_advantages(rewards, baseline=baseline).clone()
    out[0] = float("nan")
    return out


def _returns_none(x, mask, **kwargs):
    return None


def contract_breakers() -> types.SimpleNamespace:
    """Mutates its inputs in place (mask, logp), upcasts, returns ints, NaN or None; entropy is fine."""
    return _base(
        "contract_breakers",
        pg_token_loss=_mutates_mask,
        ppo_token_loss=_mutates_logp,
        grpo_advantages=_float64_output,
        rloo_advantages=_int_output,
        reinforce_advantages=_nan_output,
        whiten=_returns_none,
        token_entropy=refimpl.token_entropy,
    )


def _numpy_mutates_mask(logp, advantages, mask):
    out = oracle.pg_token_loss(logp, advantages, np.array(mask, copy=True))
    mask[...] = False
    return out


def _numpy_kl_grad_zeroes_upstream(logp, ref_logp, mask, upstream, **kwargs):
    out = oracle.kl_penalty_grad(logp, ref_logp, mask, upstream, **kwargs)
    upstream *= 0.0
    return out


def numpy_contract_breakers() -> types.SimpleNamespace:
    """A NumPy adapter: pg_token_loss clears the mask in place; kl_penalty is the oracle's, but its
    gradient zeroes ``upstream`` in place."""
    ns = _base(
        "numpy_contract_breakers",
        pg_token_loss=_numpy_mutates_mask,
        kl_penalty=oracle.kl_penalty,
        kl_penalty_grad=_numpy_kl_grad_zeroes_upstream,
    )
    ns.array_api = "numpy"
    return ns


def _not_implemented(*args, **kwargs):
    raise NotImplementedError


def all_not_implemented() -> types.SimpleNamespace:
    """A fresh `rlspec new-adapter` skeleton: functions present, every one raising NotImplementedError."""
    return _base("all_not_implemented", grpo_advantages=_not_implemented, ppo_token_loss=_not_implemented)


def _pg_nonzero_at_masked(logp, advantages, mask):
    """The loss right at valid tokens, 1e-3 instead of 0 at masked ones (the spec's value there is 0)."""
    out = refimpl.pg_token_loss(logp, advantages, mask)
    return torch.where(mask, out, torch.full_like(out, 1e-3))


def nonzero_at_masked() -> types.SimpleNamespace:
    """pg_token_loss leaves 1e-3 at masked positions: every wrong element expects exactly 0."""
    return _base("nonzero_at_masked", pg_token_loss=_pg_nonzero_at_masked)


def with_framework_row() -> types.SimpleNamespace:
    """GRPO advantages (correct) and one framework-specific row (``extra_rows``) whose loss is the sum
    where the canonical composition is the token mean: a FAIL that only ``rlspec repro --row`` re-runs."""
    from conformance.runner.composite import Candidate, composition_row, loss_tolerances

    def extra_rows(seed: int) -> list:
        rng = np.random.default_rng(seed)
        ell = rng.normal(size=(2, 4))
        mask = np.array([[False, True, True, False], [False, True, True, True]])

        def got() -> dict:
            return {"value": float(ell[mask].sum())}

        canonical = Candidate("canonical", "aggregate(ell, mask, mode='token_mean')",
                              lambda: {"value": oracle.aggregate(ell, mask, mode="token_mean")})
        return [composition_row("with_framework_row.loss[sum]", "agg", "aggregate", adapter, got, [canonical],
                                loss_tolerances("float64"), seed=seed)]

    adapter = _base("with_framework_row", grpo_advantages=refimpl.grpo_advantages, extra_rows=extra_rows)
    return adapter


def _kl_without_graph(logp, ref_logp, mask, **kwargs):
    """The KL value computed under no_grad: right value, no autograd graph (a metric, not a loss)."""
    with torch.no_grad():
        return refimpl.kl_penalty(logp, ref_logp, mask, **kwargs)


def metric_without_graph() -> types.SimpleNamespace:
    """kl_penalty computed under torch.no_grad, undeclared: its gradient is 0 where the spec's is not."""
    return _base("metric_without_graph", kl_penalty=_kl_without_graph)


def metric_declared_without_grad() -> types.SimpleNamespace:
    """The same kl_penalty, declared values-only for that function alone (`supports_grad` per function);
    gae, the refimpl's, keeps its gradient check."""
    return _base("metric_declared_without_grad", kl_penalty=_kl_without_graph, gae=refimpl.gae,
                 supports_grad={"kl_penalty": False})


def per_function_dtypes() -> types.SimpleNamespace:
    """The refimpl's gae checked in float64 only, its grpo_advantages in the default float64 and float32
    (`dtypes` per function, "*" for the rest)."""
    return _base("per_function_dtypes", gae=refimpl.gae, grpo_advantages=refimpl.grpo_advantages,
                 dtypes={"gae": ("float64",), "*": ("float64", "float32")})


def _grpo_for_published_vectors_only(rewards, group_size, **kwargs):
    """The refimpl's GRPO advantages, offered only for the rewards of a published golden vector (a lookup
    table of the vectors, as a framework tested only against them would be)."""
    from conformance.vectors.golden import cases_for

    seen = rewards.detach().double().numpy()
    for case in cases_for("grpo_advantages"):
        known = case.args["rewards"]
        if known.shape == seen.shape and np.allclose(known, seen, rtol=1e-2, equal_nan=True):
            return refimpl.grpo_advantages(rewards, group_size, **kwargs)
    raise NotImplementedError("only the published golden vectors")


def golden_vectors_only() -> types.SimpleNamespace:
    """grpo_advantages that answers the golden vectors and nothing else: every property case is not offered."""
    return _base("golden_vectors_only", grpo_advantages=_grpo_for_published_vectors_only)


def _imports_a_missing_framework(*args, **kwargs):
    """Imports its framework on every call, as an adapter written lazily does; the framework is not installed."""
    import rlspec_no_such_framework  # noqa: F401

    raise AssertionError("unreachable")


def framework_not_installed() -> types.SimpleNamespace:
    """Three functions, each importing a framework that is not installed."""
    return _base("framework_not_installed", grpo_advantages=_imports_a_missing_framework,
                 gae=_imports_a_missing_framework, ppo_token_loss=_imports_a_missing_framework)


def _ppo_two_bugs(logp, old_logp, advantages, mask, **kwargs):
    """Two bugs in one function: the ratio clamped at 2 (a finite difference wherever r > 2 with A > 0), and
    NaN for a row with no valid token (a masked mean over zero tokens)."""
    out = refimpl.ppo_token_loss(logp, old_logp, advantages, mask, **kwargs)
    adv = advantages.reshape(advantages.shape + (1,) * (logp.dim() - advantages.dim()))  # [B] or [B, T]
    ratio = torch.exp(torch.where(mask, logp - old_logp, 0.0))
    clamped = -adv * ratio.clamp(max=2.0)
    out = torch.where(mask & (ratio > 2.0) & (adv > 0), clamped.to(out.dtype), out)
    empty = ~mask.any(dim=-1, keepdim=True)
    return torch.where(empty, torch.full_like(out, float("nan")), out)


def two_bugs() -> types.SimpleNamespace:
    """ppo_token_loss with two distinct bugs (`_ppo_two_bugs`): two failure modes, both shown."""
    return _base("two_bugs", ppo_token_loss=_ppo_two_bugs)


def _raises_on_empty_rows(*args, **kwargs):
    raise ValueError("At least one element in the mask has to be 1.")


def _gae_raising_without_valid_tokens(rewards, values, mask, **kwargs):
    """The refimpl's gae, raising ValueError on a batch without any valid token (as verl's masked_whiten does)."""
    if not bool(mask.any()):
        _raises_on_empty_rows()
    return refimpl.gae(rewards, values, mask, **kwargs)


def raises_on_degenerate() -> types.SimpleNamespace:
    """gae right on every batch with a valid token, raising on the degenerate one without any."""
    return _base("raises_on_degenerate", gae=_gae_raising_without_valid_tokens)


def scalar_policy_loss_without_kl() -> types.SimpleNamespace:
    """The refimpl's policy_loss for a framework with no KL term: every case asking kl_coef != 0 is
    declared not offered with a predicate, not with the exact values the runner draws."""
    ns = _base("scalar_policy_loss_without_kl", policy_loss=refimpl.policy_loss)
    ns.unsupported_kwargs = {"policy_loss": {"kl_coef": lambda coef: coef != 0}}
    return ns


def _ppo_canonical_only(logp, old_logp, advantages, mask):
    """The refimpl's PPO loss at the canonical clip range only: the function takes no keyword at all."""
    return refimpl.ppo_token_loss(logp, old_logp, advantages, mask)


def canonical_keywords_only() -> types.SimpleNamespace:
    """ppo_token_loss offering no keyword (eps_low, eps_high, dual_clip stay at their canonical defaults):
    every case passing one raises TypeError; the cases that pass none are its verdict."""
    return _base("canonical_keywords_only", ppo_token_loss=_ppo_canonical_only)


def _ppo_ignoring_dual_clip(logp, old_logp, advantages, mask, *, dual_clip=None, **kwargs):
    """The refimpl's PPO loss, accepting every keyword and silently dropping dual_clip."""
    return refimpl.ppo_token_loss(logp, old_logp, advantages, mask, **kwargs)


def ignores_a_preset_keyword() -> types.SimpleNamespace:
    """ppo_token_loss with accepts_variants: every preset's keywords are passed, and dual_clip is ignored."""
    ns = _base("ignores_a_preset_keyword", ppo_token_loss=_ppo_ignoring_dual_clip)
    ns.accepts_variants = True
    return ns


def _gspo_token_form_only(logp, old_logp, advantages, mask, *, form="sequence", **kwargs):
    """GSPO in verl's per-token form only (form="token_sg"); the canonical sequence form is not offered."""
    if form != "token_sg":
        raise NotImplementedError("only the token_sg form")
    return refimpl.gspo_token_loss(logp, old_logp, advantages, mask, form=form, **kwargs)


def _gspo_token_form_only_nan(logp, old_logp, advantages, mask, **kwargs):
    """The same, NaN on every row without a valid token (a per-row mean over zero tokens)."""
    out = _gspo_token_form_only(logp, old_logp, advantages, mask, **kwargs)
    empty = ~mask.any(dim=-1, keepdim=True)
    return torch.where(empty, torch.full_like(out, float("nan")), out)


def lacks_the_canonical_form() -> types.SimpleNamespace:
    """gspo_token_loss offering only the token_sg form, correct there (accepts_variants)."""
    ns = _base("lacks_the_canonical_form", gspo_token_loss=_gspo_token_form_only)
    ns.accepts_variants = True
    return ns


def lacks_the_canonical_form_nan() -> types.SimpleNamespace:
    """gspo_token_loss offering only the token_sg form, NaN on empty rows there."""
    ns = _base("lacks_the_canonical_form_nan", gspo_token_loss=_gspo_token_form_only_nan)
    ns.accepts_variants = True
    return ns


def _grpo_nan_for_a_group_of_one(rewards, group_size, **kwargs):
    """The refimpl's GRPO advantages, NaN for a group of one (the unbiased std of one element)."""
    if group_size == 1:
        return torch.full_like(rewards, float("nan"))
    return refimpl.grpo_advantages(rewards, group_size, **kwargs)


def nan_for_a_group_of_one() -> types.SimpleNamespace:
    """grpo_advantages, NaN for a group of one, with no domain declared: a FAIL."""
    return _base("nan_for_a_group_of_one", grpo_advantages=_grpo_nan_for_a_group_of_one)


def group_of_one_outside_its_domain() -> types.SimpleNamespace:
    """The same function, declaring that its trainer never builds a group of one (its config refuses it)."""
    ns = _base("group_of_one_outside_its_domain", grpo_advantages=_grpo_nan_for_a_group_of_one)
    ns.domain = {"grpo_advantages": {"group of one": "the trainer's config refuses num_generations = 1 (config.py:12)"}}
    return ns



def _framework_scalar_ppo(logp, old_logp, advantages, weights, eps=0.2):
    """A stand-in framework loss that returns only a scalar: sum_t weights_t * PPO_t (its own code, written
    from the PPO paper, not the refimpl), with a float weight per token; it clears the inputs where the
    weight is 0 before computing, so padding never reaches the value or the gradient."""
    keep = weights != 0
    logp, old_logp, advantages = (torch.where(keep, x, torch.zeros_like(x)) for x in (logp, old_logp, advantages))
    zero = advantages == 0  # r * 0 is 0 even where r overflows (the spec's value), in value and gradient
    log_ratio = logp - old_logp
    ratio = torch.exp(torch.where(zero, torch.zeros_like(log_ratio), log_ratio))
    per_token = -torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - eps, 1 + eps) * advantages)
    return (weights * per_token).sum()


def _ppo_one_token_at_a_time(logp, old_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None):
    """docs/checking.md, "One token at a time": the scalar of a mask holding only (b, t) is loss[b, t]."""
    if eps_low != eps_high or dual_clip is not None:
        raise NotImplementedError("the framework has one clip range and no dual clip")
    advantages = advantages[:, None].expand_as(logp) if advantages.dim() == 1 else advantages  # per sequence
    out = torch.zeros_like(logp)
    for b, t in mask.nonzero().tolist():
        only = torch.zeros_like(logp)
        only[b, t] = 1.0
        one = _framework_scalar_ppo(logp, old_logp, advantages, only, eps_low)
        out = out.index_put((torch.tensor([b]), torch.tensor([t])), one.reshape(1))  # keeps each scalar's graph
    return out


def _ppo_from_weight_gradient(logp, old_logp, advantages, mask, *, eps_low=0.2, eps_high=0.2, dual_clip=None,
                              create_graph=True):
    """docs/checking.md, "The gradient with respect to a weight": for a token-sum loss with a float weight per
    token, d loss / d w_t is loss_t; create_graph keeps its own graph, so the gradient check still applies."""
    if eps_low != eps_high or dual_clip is not None:
        raise NotImplementedError("the framework has one clip range and no dual clip")
    advantages = advantages[:, None].expand_as(logp) if advantages.dim() == 1 else advantages  # per sequence
    weights = mask.to(logp.dtype).requires_grad_(True)
    scalar = _framework_scalar_ppo(logp, old_logp, advantages, weights, eps_low)
    (per_token,) = torch.autograd.grad(scalar, weights, create_graph=create_graph)
    return per_token * mask


def scalar_loss_one_token_at_a_time() -> types.SimpleNamespace:
    return _base("scalar_loss_one_token_at_a_time", ppo_token_loss=_ppo_one_token_at_a_time)


def scalar_loss_from_weight_gradient() -> types.SimpleNamespace:
    return _base("scalar_loss_from_weight_gradient", ppo_token_loss=_ppo_from_weight_gradient)


def _ppo_weight_gradient_without_graph(logp, old_logp, advantages, mask, **kwargs):
    return _ppo_from_weight_gradient(logp, old_logp, advantages, mask, create_graph=False, **kwargs)


def scalar_loss_weight_gradient_without_graph() -> types.SimpleNamespace:
    """The same recipe without create_graph: the per-token losses carry no graph back to logp."""
    return _base("scalar_loss_weight_gradient_without_graph", ppo_token_loss=_ppo_weight_gradient_without_graph)
