"""NaN, ±inf and 1e30 planted where the mask says "unused" change no output and no gradient, for
every spec function (api.md) that takes a mask; gradients there are exactly 0, never NaN.

"Unused" is: masked positions of per-token inputs; for logits / hidden states, the rows t-1 whose
token t is masked (and the last row); for input_ids, masked positions (planted with ids outside
the vocabulary).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

import refimpl
from refimpl.aggregation import AGGREGATION_MODES

B, T, V, D = 5, 8, 11, 4
POISON = (float("nan"), float("inf"), float("-inf"), 1e30, -1e30)


def make_mask() -> torch.Tensor:
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, 2:6] = True  # right padding
    mask[1, 4:] = True  # left padding
    mask[2, 1:7] = True
    mask[2, 3] = False  # a gap inside the completion
    mask[4, 1:] = True
    # row 3: no valid token
    return mask


MASK = make_mask()
MASKED = ~MASK
UNREAD_ROWS = torch.ones(B, T, dtype=torch.bool)
UNREAD_ROWS[:, :-1] = ~MASK[:, 1:]


@dataclass
class Case:
    fn: Callable
    args: dict[str, torch.Tensor]  # positional arguments, in order
    kwargs: dict = field(default_factory=dict)
    plant: dict[str, torch.Tensor] = field(default_factory=dict)  # argument -> [B, T] unused positions
    grad: tuple[str, ...] = ()


def token(dtype, seed, scale=1.0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    return (offset + scale * torch.randn(B, T, generator=g, dtype=torch.float64)).to(dtype)


def cases(dtype: torch.dtype) -> dict[str, Case]:
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(B, T, V, generator=g, dtype=torch.float64)).to(dtype)
    hidden = torch.randn(B, T, D, generator=g, dtype=torch.float64).to(dtype)
    weight = torch.randn(V, D, generator=g, dtype=torch.float64).to(dtype)
    ids = torch.randint(0, V, (B, T), generator=g)
    logp = -token(dtype, 1).abs()
    old = logp + 0.3 * token(dtype, 2)
    adv_bt, adv_b = token(dtype, 3), torch.randn(B, generator=g, dtype=torch.float64).to(dtype)
    scores = torch.randn(B, generator=g, dtype=torch.float64).to(dtype)
    per_token = {"logp": MASKED, "old_logp": MASKED, "ref_logp": MASKED, "advantages": MASKED}
    out = {
        "token_logprobs": Case(refimpl.token_logprobs, {"logits": logits, "input_ids": ids, "mask": MASK},
                               {"temperature": 0.7}, {"logits": UNREAD_ROWS, "input_ids": MASKED}, ("logits",)),
        "token_entropy": Case(refimpl.token_entropy, {"logits": logits, "mask": MASK}, {"temperature": 1.3},
                              {"logits": UNREAD_ROWS}, ("logits",)),
        "token_logprobs_from_hidden": Case(
            refimpl.token_logprobs_from_hidden, {"hidden": hidden, "weight": weight, "input_ids": ids, "mask": MASK},
            {"temperature": 0.7, "chunk_size": 3}, {"hidden": UNREAD_ROWS, "input_ids": MASKED}, ("hidden", "weight")),
        "token_entropy_from_hidden": Case(
            refimpl.token_entropy_from_hidden, {"hidden": hidden, "weight": weight, "mask": MASK},
            {"vocab_chunk_size": 4}, {"hidden": UNREAD_ROWS}, ("hidden", "weight")),
        "token_logprobs_and_entropy_from_hidden": Case(
            refimpl.token_logprobs_and_entropy_from_hidden,
            {"hidden": hidden, "weight": weight, "input_ids": ids, "mask": MASK},
            {}, {"hidden": UNREAD_ROWS, "input_ids": MASKED}, ("hidden", "weight")),
        "rlhf_token_rewards": Case(refimpl.rlhf_token_rewards, {"scores": scores, "logp": logp, "ref_logp": old, "mask": MASK},
                                   {"kl_coef": 0.1, "estimator": "k3"}, per_token, ()),
        "gae": Case(refimpl.gae, {"token_rewards": token(dtype, 4), "values": token(dtype, 5), "mask": MASK},
                    {"gamma": 0.99, "lam": 0.95}, {"token_rewards": MASKED, "values": MASKED}, ()),
        # spec v1.1 adv.reinforce_pp: row 2's tool gap is where the three rules differ
        **{f"reinforce_pp_advantages-{gap}": Case(
            refimpl.reinforce_pp_advantages, {"token_rewards": token(dtype, 15), "mask": MASK},
            {"gamma": 0.9, "gap": gap, "std_ddof": 0}, {"token_rewards": MASKED}, ())
           for gap in ("skip", "reset", "discount")},
        # spec v1.1 adv.optimal_token_baseline: the 5 rows as one group (row 2's tool gap, row 3 empty), both
        # alignments; every per-token input is planted
        **{f"optimal_token_baseline_advantages-{align}": Case(
            refimpl.optimal_token_baseline_advantages,
            {"token_rewards": token(dtype, 17), "mask": MASK, "group_size": B, "old_logp": logp,
             "sum_pi_squared": torch.exp(2 * logp) + 0.1, "is_weights": torch.exp(0.3 * token(dtype, 18))},
            {"align": align, "eps": 1e-8},
            {"token_rewards": MASKED, "old_logp": MASKED, "sum_pi_squared": MASKED, "is_weights": MASKED}, ())
           for align in ("position", "valid_token")},
        "whiten": Case(refimpl.whiten, {"x": token(dtype, 6, 2.0, 5.0), "mask": MASK}, {"shift_mean": False},
                       {"x": MASKED}, ()),
        "pg_token_loss": Case(refimpl.pg_token_loss, {"logp": logp, "advantages": adv_bt, "mask": MASK}, {},
                              per_token, ("logp", "advantages")),
        "value_token_loss": Case(refimpl.value_token_loss,
                                 {"values": token(dtype, 7), "old_values": token(dtype, 8), "returns": token(dtype, 9), "mask": MASK},
                                 {"clip": 0.2}, {"values": MASKED, "old_values": MASKED, "returns": MASKED}, ("values", "old_values")),
    }
    for estimator in ("k1", "k2", "k3"):
        out[f"kl_penalty-{estimator}"] = Case(
            refimpl.kl_penalty, {"logp": logp, "ref_logp": old, "mask": MASK},
            {"estimator": estimator, "log_ratio_clamp": 5.0, "clamp": 10.0}, per_token, ("logp", "ref_logp"))
    for estimator, gradient in (("abs", "estimator"), ("k3", "straight_through"), ("k1", "unbiased"),
                                ("k3", "bias_corrected")):
        out[f"kl_loss_term-{gradient}"] = Case(
            refimpl.kl_loss_term, {"logp": logp, "ref_logp": old - 0.2, "mask": MASK, "old_logp": old},
            {"estimator": estimator, "gradient": gradient, "log_ratio_clamp": 5.0, "clamp": 10.0, "weight_cap": None},
            per_token, ("logp", "ref_logp", "old_logp"))
    for name, fn, kw in [
        ("ppo", refimpl.ppo_token_loss, {"dual_clip": 3.0, "log_ratio_clamp": 20.0}),
        ("gspo-sequence", refimpl.gspo_token_loss, {"eps_low": 0.05, "eps_high": 0.1}),
        ("gspo-token_sg", refimpl.gspo_token_loss, {"form": "token_sg"}),
        ("cispo-relative", refimpl.cispo_token_loss, {"eps_low": 0.2}),
        ("cispo-absolute", refimpl.cispo_token_loss, {"eps_high": 5.0, "bound": "absolute"}),
        ("cispo-ratio", refimpl.cispo_token_loss, {"eps_low": 0.2, "eps_high": 0.2, "surrogate": "ratio"}),
        ("sapo", refimpl.sapo_token_loss, {"tau_pos": 2.0, "log_ratio_clamp": 20.0}),
        ("gmpo", refimpl.gmpo_token_loss, {"eps_low": 0.2}),
        ("dppo-tv", refimpl.dppo_token_loss, {"ratio_cap": 3.0}),
        ("dppo-kl", refimpl.dppo_token_loss, {"divergence": "kl", "delta_high": 0.05}),
        ("dro", refimpl.dro_token_loss, {"beta": 0.1}),
        ("vespo", refimpl.vespo_token_loss, {"log_ratio_clamp": 20.0, "w_max": 100.0}),
        ("kl_cov", refimpl.kl_cov_token_loss, {"fraction": 0.3, "coef": 1.0}),
    ]:
        for adv_name, adv in (("tokens", adv_bt), ("rows", adv_b)):
            args = {"logp": logp, "old_logp": old, "advantages": adv, "mask": MASK}
            plant = dict(per_token) if adv.dim() == 2 else {k: v for k, v in per_token.items() if k != "advantages"}
            out[f"{name}-{adv_name}"] = Case(fn, args, kw, plant, ("logp", "old_logp"))
        # Clip-Cov's keep mask: the draws are planted too (a window that holds candidates, half of them cut)
        out[f"clip_cov_mask-{adv_name}"] = Case(
            refimpl.clip_cov_mask, {"logp": logp, "old_logp": old, "advantages": adv, "mask": MASK, "draws": token(dtype, 15)},
            {"fraction": 0.5, "cov_low": -0.5, "cov_high": 5.0}, {**plant, "draws": MASKED})
    policy_args = {"logp": logp, "old_logp": old, "ref_logp": old - 0.2, "advantages": adv_bt, "mask": MASK}
    out["policy_loss"] = Case(refimpl.policy_loss, policy_args, {"kl_coef": 0.1, "mode": "seq_mean_token_mean"},
                              per_token, ("logp", "old_logp", "ref_logp"))
    out["ppo_clipped_mask"] = Case(refimpl.ppo_clipped_mask, {k: v for k, v in policy_args.items() if k != "ref_logp"},
                                   {"dual_clip": 3.0}, per_token)
    for mode in AGGREGATION_MODES:
        out[f"aggregate-{mode}"] = Case(refimpl.aggregate, {"token_loss": token(dtype, 10), "mask": MASK},
                                        {"mode": mode, "norm_length": 7.0}, {"token_loss": MASKED}, ("token_loss",))
    # spec v1.1 entropy terms: entropies >= 0; the pooled case holds another part's entropies too
    entropy = token(dtype, 16).abs()
    out["entropy_top_mask"] = Case(refimpl.entropy_top_mask, {"entropy": entropy, "mask": MASK}, {"rho": 0.3},
                                   {"entropy": MASKED})
    pool = entropy.double()[MASK].tolist() + [0.1, 2.5, 0.7]
    out["entropy_top_mask-pooled"] = Case(refimpl.entropy_top_mask, {"entropy": entropy, "mask": MASK},
                                          {"rho": 0.5, "pooled_entropy": pool}, {"entropy": MASKED})
    for mode in AGGREGATION_MODES:
        out[f"entropy_bonus-{mode}"] = Case(
            refimpl.entropy_bonus, {"entropy": entropy, "mask": MASK},
            {"entropy_coef": 0.01, "mode": mode, "norm_length": 7.0, "num_tokens": 40.0, "num_seqs": 9.0},
            {"entropy": MASKED}, ("entropy",))
    out.update(offpolicy_cases(dtype, logp, old, adv_bt, adv_b))
    out.update(multi_gpu_cases(dtype, logits, hidden, weight, ids))
    return out


def offpolicy_cases(dtype, logp, old, adv_bt, adv_b) -> dict[str, Case]:
    """Spec v1.1: every log-prob and advantage array is planted at masked positions (behav_version is
    an integer array: -1 there, as AReaL's prompt tokens)."""
    rollout = old - 0.2 * token(dtype, 13)
    pair = {"old_logp": MASKED, "rollout_logp": MASKED}
    out = {}
    for level, mode in (("token", "truncate"), ("sequence", "mask"), ("sequence", "none")):
        out[f"rollout_is_weights-{level}-{mode}"] = Case(
            refimpl.rollout_is_weights, {"old_logp": old, "rollout_logp": rollout, "mask": MASK},
            {"level": level, "seq_stat": "geometric", "mode": mode, "lo": 0.5, "hi": 3.0, "batch_normalize": True}, pair)
    for level in ("token", "seq_mean", "seq_all"):
        out[f"rollout_rejection_mask-{level}"] = Case(
            refimpl.rollout_rejection_mask, {"old_logp": old, "rollout_logp": rollout, "mask": MASK},
            {"statistic": "k3", "level": level, "hi": 0.2}, pair)
    for adv_name, adv in (("tokens", adv_bt), ("rows", adv_b)):
        plant = {"logp": MASKED, "prox_logp": MASKED, "behav_logp": MASKED}
        if adv.dim() == 2:
            plant["advantages"] = MASKED
        out[f"decoupled_ppo_token_loss-{adv_name}"] = Case(
            refimpl.decoupled_ppo_token_loss,
            {"logp": logp, "prox_logp": old, "behav_logp": rollout, "advantages": adv, "mask": MASK},
            {"dual_clip": 3.0, "behav_cap": 2.0, "behav_mode": "mask"}, plant, ("logp",))
        out[f"off_policy_sequence_mask-{adv_name}"] = Case(
            refimpl.off_policy_sequence_mask, {"logp": logp, "old_logp": old, "advantages": adv, "mask": MASK},
            {"threshold": 0.05}, {k: v for k, v in plant.items() if k in ("logp", "advantages")} | {"old_logp": MASKED})
    weights = torch.exp(0.3 * token(dtype, 14))
    keep = ~(torch.arange(T).expand(B, T) % 3 == 0)  # True at masked positions too: never read there
    for rejected in ("drop", "zero"):
        out[f"corrected_policy_loss-{rejected}"] = Case(
            refimpl.corrected_policy_loss,
            {"logp": logp, "old_logp": old, "ref_logp": rollout, "advantages": adv_bt, "is_weights": weights,
             "keep_mask": keep, "mask": MASK},
            {"kl_coef": 0.1, "mode": "seq_mean_token_mean", "weight_kl": True, "rejected": rejected},
            {"logp": MASKED, "old_logp": MASKED, "ref_logp": MASKED, "advantages": MASKED, "is_weights": MASKED},
            ("logp",))
    versions = torch.where(MASK, torch.arange(T).expand(B, T) % 4, -1)
    out["proximal_logp_interpolation"] = Case(
        refimpl.proximal_logp_interpolation, {"logp": logp, "behav_logp": rollout, "behav_version": versions, "mask": MASK},
        {"version": 4, "method": "linear"}, {"logp": MASKED, "behav_logp": MASKED})
    return out


# Packed rows for the packed functions: every sequence boundary (position id 0) sits on a masked
# position of MASK, as the packed functions require.
POSITION_IDS = torch.tensor([
    [0, 1, 2, 3, 4, 5, 0, 1],
    [0, 1, 0, 1, 2, 3, 4, 5],
    [0, 1, 2, 0, 1, 2, 3, 4],
    [0, 0, 0, 1, 0, 1, 2, -1],
    [0, 1, 2, 3, 4, 5, 6, 7],
])


def multi_gpu_cases(dtype, logits, hidden, weight, ids) -> dict[str, Case]:
    """refimpl.distributed / refimpl.vocab_parallel (one process: W = 1) and refimpl.packed."""
    out = {
        "vocab_parallel_token_logprobs": Case(
            refimpl.vocab_parallel_token_logprobs, {"logits_shard": logits, "input_ids": ids, "mask": MASK},
            {"vocab_start": 0, "temperature": 0.7, "chunk_size": 3}, {"logits_shard": UNREAD_ROWS, "input_ids": MASKED},
            ("logits_shard",)),
        "vocab_parallel_token_entropy": Case(
            refimpl.vocab_parallel_token_entropy, {"logits_shard": logits, "mask": MASK}, {"temperature": 1.3},
            {"logits_shard": UNREAD_ROWS}, ("logits_shard",)),
        "vocab_parallel_token_logprobs_from_hidden": Case(
            refimpl.vocab_parallel_token_logprobs_from_hidden,
            {"hidden": hidden, "weight_shard": weight, "input_ids": ids, "mask": MASK},
            {"vocab_start": 0, "chunk_size": 3, "vocab_chunk_size": 4}, {"hidden": UNREAD_ROWS, "input_ids": MASKED},
            ("hidden", "weight_shard")),
        "vocab_parallel_token_entropy_from_hidden": Case(
            refimpl.vocab_parallel_token_entropy_from_hidden, {"hidden": hidden, "weight_shard": weight, "mask": MASK},
            {"temperature": 0.7}, {"hidden": UNREAD_ROWS}, ("hidden", "weight_shard")),
        "vocab_parallel_token_logprobs_and_entropy_from_hidden": Case(
            refimpl.vocab_parallel_token_logprobs_and_entropy_from_hidden,
            {"hidden": hidden, "weight_shard": weight, "input_ids": ids, "mask": MASK},
            {"vocab_start": 0}, {"hidden": UNREAD_ROWS, "input_ids": MASKED}, ("hidden", "weight_shard")),
        "packed_token_logprobs": Case(
            refimpl.packed_token_logprobs, {"logits": logits, "input_ids": ids, "mask": MASK},
            {"position_ids": POSITION_IDS, "temperature": 0.7}, {"logits": UNREAD_ROWS, "input_ids": MASKED}, ("logits",)),
        "packed_token_entropy": Case(
            refimpl.packed_token_entropy, {"logits": logits, "mask": MASK}, {"position_ids": POSITION_IDS},
            {"logits": UNREAD_ROWS}, ("logits",)),
    }
    counts = refimpl.StepCounts(num_tokens=float(MASK.sum()) + 3.0, num_seqs=float(B) + 1.0)
    for mode in AGGREGATION_MODES:
        out[f"packed_aggregate-{mode}"] = Case(
            refimpl.packed_aggregate, {"token_loss": token(dtype, 11), "mask": MASK},
            {"mode": mode, "norm_length": 7.0, "position_ids": POSITION_IDS}, {"token_loss": MASKED}, ("token_loss",))
        out[f"micro_batch_loss-{mode}"] = Case(
            refimpl.micro_batch_loss, {"token_loss": token(dtype, 12), "mask": MASK},
            {"counts": counts, "mode": mode, "norm_length": 7.0, "dp_world_size": 2}, {"token_loss": MASKED}, ("token_loss",))
    return out


SEQUENCE_LEVEL = {"reinforce_advantages", "rloo_advantages", "grpo_advantages",  # no mask, no masked position
                  "overlong_penalty", "shaped_rewards",  # spec v1.1 reward shaping: [B] in, [B] out
                  # spec v1.1 advantage estimators with [B] rewards only; the two that take a mask read
                  # nothing at its positions but the mask itself (the valid-token counts of OPO, where
                  # REINFORCE++-baseline writes): there is no per-token input to plant
                  "remax_advantages", "grpo_passk_advantages", "gdpo_advantages", "maxrl_advantages",
                  "gpg_advantages", "opo_advantages", "reinforce_pp_baseline_advantages"}
CONTROLLERS = {"kl_controller_update", "entropy_coef_update", "entropy_coef_applied"}  # scalars: no mask
API = Path(__file__).resolve().parents[2] / "conformance" / "spec" / "v1" / "api.md"


def test_every_spec_function_is_covered():
    """Every function of the api.md table (plus the fused log-prob + entropy pair) is exercised here."""
    spec = set(re.findall(r"^\| `[^`]+` \| `([a-z_]+)\(", API.read_text(), flags=re.M))
    assert spec, f"no function table found in {API}"
    covered = {case.fn.__name__ for case in cases(torch.float32).values()}
    assert spec - SEQUENCE_LEVEL - CONTROLLERS <= covered
    assert "token_logprobs_and_entropy_from_hidden" in covered
    assert (spec | covered) <= set(refimpl.__all__)


def planted(name: str, x: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    if name == "input_ids":
        bad = torch.tensor([-100, V, V + 1000, -1]).repeat(B * T)[: B * T].view(B, T)
        return torch.where(where, bad, x)
    poison = torch.tensor(POISON, dtype=torch.float64).repeat(B * T)[: B * T].view(B, T).to(x.dtype)
    if x.dim() == 3:
        poison = poison.unsqueeze(2).expand_as(x)
        where = where.unsqueeze(2).expand_as(x)
    return torch.where(where, poison, x)


def run(case: Case, args: dict[str, torch.Tensor]):
    leaves = {k: (v.clone().requires_grad_() if k in case.grad else v) for k, v in args.items()}
    out = case.fn(*leaves.values(), **case.kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.double() * (1.0 + torch.arange(o.numel(), dtype=torch.float64).view(o.shape))).sum() for o in outs)
    inputs = [leaves[k] for k in case.grad]
    grads = torch.autograd.grad(loss, inputs, allow_unused=True) if inputs else ()
    return outs, grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(cases(torch.float32)))
def test_planted_values_change_nothing(name, dtype):
    case = cases(dtype)[name]
    clean_out, clean_grads = run(case, case.args)
    dirty_args = {k: planted(k, v, case.plant[k]) if k in case.plant else v for k, v in case.args.items()}
    assert any(not torch.equal(dirty_args[k], case.args[k]) for k in case.plant)
    dirty_out, dirty_grads = run(case, dirty_args)
    for a, b in zip(clean_out, dirty_out):
        assert torch.equal(a, b), f"{name}: output changed"
        assert torch.isfinite(b).all()
    for arg, a, b in zip(case.grad, clean_grads, dirty_grads):
        a = torch.zeros_like(case.args[arg]) if a is None else a
        b = torch.zeros_like(case.args[arg]) if b is None else b
        assert torch.equal(a, b), f"{name}: gradient w.r.t. {arg} changed"
        assert torch.isfinite(b).all()
        if arg in case.plant:
            unused = case.plant[arg]
            unused = unused.unsqueeze(2).expand_as(b) if b.dim() == 3 else unused
            assert (b[unused] == 0).all(), f"{name}: non-zero gradient w.r.t. {arg} at unused positions"
