"""tinker-cookbook rows that are not single core-API calls: the constant-reward group filter and the local chain
the trainer runs on a batch before it goes to the Tinker service (``rl/train.py::prepare_minibatch``: group-centred
advantages, datums, and the KL penalty folded into the advantages), as compositions of spec quantities.

The KL penalty in the advantage (``rl/metrics.py::incorporate_kl_penalty``, :165-225). With ``Δ_t`` = sampled
log-prob − reference log-prob of a datum's token (``logprob_diffs``, :208-213, multiplied by the datum mask),
``Δ̄`` their mean over every trained token of the batch (:214-216) and ``c = kl_penalty_coef``, each datum's
advantages get ``c·mask_t·(Δ̄ − Δ_t)`` added (:218, :221-223); with ``kl_discount_factor = γ > 0`` that term is
first replaced by its discounted sum to the end of the datum, ``Σ_k γ^k·x_{t+k}`` over every position
(``discounted_future_sum_vectorized``, :219-220, :228-247). In spec quantities, with ``A`` the group-centred
advantage on every trained token:

- ``k1 = kl_penalty(logp, ref_logp, mask, estimator="k1")`` (logp = the sampled log-probs),
  ``Δ̄ = aggregate(k1, mask, mode="token_mean")``, ``x = c·(Δ̄ − k1)`` (0 where masked);
- ``γ = 0``: ``A + x``;
- ``γ > 0``: ``A + reinforce_pp_advantages(x, mask, gamma=γ, gap="discount")[1]`` (the returns: masked positions
  hold 0 and still discount, one γ per position) at the trained tokens.

So the KL-in-advantage is a composition of existing spec quantities at every trained token, and no new spec
quantity is needed for it. What is not a spec quantity: the values the discounted sum leaves at mask-0 positions
(the prompt, observation tokens and masked parse-error turns before a trained token), where the spec's outputs
are 0. The rows compare them apart (``"masked positions"``).

The constant-reward filter (``rl/data_processing.py::remove_constant_reward_groups``, :305-332; off by default,
``Config.remove_constant_reward_groups``): it keeps the groups whose total rewards are not all equal
(``all_same``, Python ``==``), or the first group alone if none is left (:328-330). No spec quantity filters groups
(DAPO's dynamic sampling is outside ``adv.grpo``); the rows state it through one: group ``g`` is kept iff
``grpo_advantages(r, G, scale="none")`` is not all 0 on ``g`` (the spec makes an all-equal group's advantage
exactly 0 and any other group's nonzero somewhere), group 0 alone if no group is.

How a row is checked: a seeded batch in the spec layout (``minibatch_batch``: ragged rows, multi-turn rows whose
observation tokens sit between two turns, a masked parse-error turn, a row without any action, step rewards on
top of the group rewards, one all-equal group, finite values at every masked position) goes to the worker, which
turns it into trajectories and runs ``prepare_minibatch`` (``ops.py``); the datums' advantages come back in the
spec layout. The oracle composes the spec pieces in float64 on the float32-rounded inputs (the cookbook stores
log-probs and advantages as float32 tensors). The first candidate that matches decides the row (canonical:
``pass``), else ``fail`` with the mismatch.

Entry point: ``extra_rows(adapter, seed) -> list[RowResult]``. Row ids look like
``tinker_cookbook.prepare_minibatch[kl_penalty_coef=0.1,kl_discount_factor=0.9]``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.records import cases
from conformance.runner.composite import Candidate, composition_row
from conformance.records.pieces import fmt
from conformance.runner.rows import not_implemented_row
from conformance.runner.rows import RowResult
from conformance.tolerances import Tol, tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.tinker_cookbook.adapter import TinkerCookbookAdapter

DTYPE = "float32"  # the cookbook's log-probs and advantages are float32 tensors (TensorData.from_torch)
G = 2  # group size of the minibatch batch
T = 10
# per row: the action runs (start, stop, trained); a run that is not trained is a masked parse-error turn
ROWS = (
    ((3, 7, True),),
    ((2, 4, True), (6, 9, True)),  # two turns, observation tokens 4-5 between them
    ((4, 5, True),),
    ((2, 5, False), (6, 8, True)),  # a masked parse-error turn, then a trained one
    (),  # no action at all: its datum is the prompt alone
    ((1, 10, True),),
    ((3, 5, True), (8, 9, True)),
    ((2, 6, True),),
)
CONSTANT_GROUP = 2  # rows 4 and 5 get equal total rewards
KL_COEF = 0.1
DISCOUNT = 0.9

# the policy losses run on the Tinker service (forward_backward), never locally
SERVICE_LOSSES = (
    "The policy losses run on the Tinker service and cannot be called: rl/train.py sends the datums with "
    "training_client.forward_backward(..., loss_fn=...) (:364-375, :2078-2083) after dropping their 'mask' "
    "(_remove_mask, :274-278); loss_fn is one of tinker 0.38.0's LossFnType (types/loss_fn_type.py): "
    "importance_sampling (Config default, :545), ppo, cispo, dro, gspo, stable_reinforce (AsyncConfig default, "
    ":472), cross_entropy or custom. Only the datums the cookbook builds (advantages, sampled "
    "log-probs, mask) are checked here (the prepare_minibatch rows)."
)


def minibatch_batch(seed: int) -> dict[str, np.ndarray]:
    """Seeded spec-layout batch for ``prepare_minibatch`` (``ROWS``; float32-exact values): ``mask`` (trained
    tokens), ``action`` (every action token, trained or a parse-error turn), ``logp`` (sampled log-probs, finite
    garbage off the actions), ``ref_logp`` (reference log-probs at every position), ``step_rewards`` and
    ``final_rewards`` (multiples of 1/8: their sums are exact), ``rewards`` (the totals)."""
    rng = np.random.default_rng(seed)
    B = len(ROWS)
    mask = np.zeros((B, T), dtype=bool)
    action = np.zeros((B, T), dtype=bool)
    for b, runs in enumerate(ROWS):
        for s, e, trained in runs:
            action[b, s:e] = True
            mask[b, s:e] = trained
    logp = np.where(action, -np.abs(rng.normal(0.0, 1.5, size=(B, T))) - 1e-3, rng.uniform(-3.0, 0.0, size=(B, T)))
    ref = logp - np.where(action, rng.uniform(-0.6, 0.6, size=(B, T)), rng.uniform(-3.0, 3.0, size=(B, T)))
    rewards = rng.integers(-8, 17, size=B) / 8.0
    rewards[2 * CONSTANT_GROUP + 1] = rewards[2 * CONSTANT_GROUP]
    for g in range(B // G):  # every other group mixed
        if g != CONSTANT_GROUP and rewards[G * g] == rewards[G * g + 1]:
            rewards[G * g + 1] += 0.5
    step = np.where(np.arange(B) % 3 == 1, 0.25, 0.0)
    return {"mask": mask, "action": action, "logp": cases.round_to(logp, DTYPE), "ref_logp": cases.round_to(ref, DTYPE),
            "step_rewards": step, "final_rewards": rewards - step, "rewards": rewards}


def _sent(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {k: batch[k] for k in ("mask", "action", "step_rewards", "final_rewards")}
    out.update(logp=batch["logp"].astype(np.float32), ref_logp=batch["ref_logp"].astype(np.float32))
    return out


# ---------------------------------------------------------------------------------------------
# remove_constant_reward_groups
# ---------------------------------------------------------------------------------------------


def kept_groups(rewards: np.ndarray, group_size: int) -> np.ndarray:
    """The filter through a spec quantity: group g is kept iff grpo_advantages(scale='none') is not all 0 on it;
    group 0 alone when no group is. A 0/1 indicator per group."""
    A = oracle.grpo_advantages(rewards, group_size, scale="none").reshape(-1, group_size)
    keep = (A != 0).any(axis=1)
    if not keep.any():
        keep[0] = True
    return keep.astype(np.float64)


FILTER_FORMULA = "group g kept iff grpo_advantages(r, G, scale='none')[g] is not all 0 (group 0 alone if none is)"


def filter_row(adapter: TinkerCookbookAdapter, seed: int, label: str, rewards: np.ndarray, group_size: int) -> RowResult:
    def got() -> dict[str, Any]:
        keep = np.zeros(rewards.shape[0] // group_size)
        keep[adapter.constant_group_filter(rewards, group_size)] = 1.0
        return {"value": keep}

    cands = [Candidate("canonical", FILTER_FORMULA, lambda: {"value": kept_groups(rewards, group_size)})]
    note = ("(not a spec quantity: the spec's grpo_advantages keeps an all-equal group with A = 0; the filter is "
            "stated through it)")
    return composition_row(f"tinker_cookbook.remove_constant_reward_groups[{label}]", "adv.grpo",
                           "tinker_cookbook.remove_constant_reward_groups", adapter, got, cands,
                           {"value": Tol(rtol=0.0, atol=0.0, reason="a keep decision")}, seed=seed, note=note)


def filter_rows(adapter: TinkerCookbookAdapter, seed: int) -> list[RowResult]:
    rng = np.random.default_rng(seed + 7)
    mixed = rng.integers(0, 2, size=12).astype(np.float64)  # groups of 3 binary rewards: some all-equal, some mixed
    mixed[:3] = [1.0, 1.0, 1.0]
    mixed[3:6] = [0.3, 0.3, 1.0]
    return [filter_row(adapter, seed, "G=3", mixed, 3),
            filter_row(adapter, seed, "every group constant", np.array([0.5, 0.5, 0.0, 0.0, 0.3, 0.3]), 2)]


# ---------------------------------------------------------------------------------------------
# prepare_minibatch: advantages and the KL penalty folded into them
# ---------------------------------------------------------------------------------------------


def kl_in_advantage(batch: dict[str, np.ndarray], mask: np.ndarray, coef: float, gamma: float) -> np.ndarray:
    """The spec composition of incorporate_kl_penalty's term (module docstring), 0 where ``mask`` is False."""
    k1 = oracle.kl_penalty(batch["logp"], batch["ref_logp"], mask, estimator="k1")
    mean = oracle.aggregate(k1, mask, mode="token_mean")
    x = np.where(mask, coef * (mean - k1), 0.0)
    return x if gamma == 0 else oracle.reinforce_pp_advantages(x, mask, gamma=gamma, gap="discount")[1]


def composition_formula(coef: float, gamma: float) -> str:
    A = "grpo_advantages(rewards, G, scale='none') on every trained token"
    if coef == 0:
        return A
    x = f"{coef:g}·(aggregate(k1, mask, mode='token_mean') − k1), k1 = kl_penalty(logp, ref_logp, mask, estimator='k1')"
    if gamma == 0:
        return f"{A} + {x}"
    return f"{A} + reinforce_pp_advantages(x, mask, gamma={gamma:g}, gap='discount').returns, x = {x}"


def minibatch_row(adapter: TinkerCookbookAdapter, seed: int, label: str, *, coef: float = 0.0, gamma: float = 0.0, remove: bool = False,
                  batch: dict[str, np.ndarray] | None = None, note: str = "") -> RowResult:
    """``prepare_minibatch`` (with ``remove_constant_reward_groups`` first when ``remove``) against the composition:
    ``"value"`` at the trained tokens, ``"masked positions"`` (every other position a datum has: 0 in the spec),
    ``"mask"`` (the datums' mask) and ``"kept"`` (the rows whose group survived)."""
    b = minibatch_batch(seed) if batch is None else batch
    m = b["mask"]
    out: dict[str, Any] = {}

    def run() -> dict[str, Any]:
        if not out:
            out.update(adapter.prepare_minibatch(_sent(b), G, kl_penalty_coef=coef, kl_discount_factor=gamma,
                                                 remove_constant_reward_groups=remove))
        return out

    def got() -> dict[str, Any]:
        r = run()
        covered = np.asarray(r["covered"], dtype=bool)
        A = np.asarray(r["advantages"])
        return {"value": np.where(m, A, 0.0), "masked positions": np.where(covered & ~m, A, 0.0),
                "mask": np.where(covered, r["datum_mask"], 0.0), "kept": np.asarray(r["kept"], dtype=np.float64),
                "kl_policy_base": np.float64(r["kl_policy_base"])}

    def expected() -> dict[str, Any]:
        keep = np.repeat(kept_groups(b["rewards"], G), G) if remove else np.ones(m.shape[0])
        mk = m & (keep[:, None] > 0)
        A = np.where(mk, oracle.grpo_advantages(b["rewards"], G, scale="none")[:, None], 0.0)
        out = {"value": A, "masked positions": np.zeros(m.shape), "mask": mk.astype(np.float64), "kept": keep}
        if coef:
            out["value"] = A + kl_in_advantage(b, mk, coef, gamma)
            k1 = oracle.kl_penalty(b["logp"], b["ref_logp"], mk, estimator="k1")
            out["kl_policy_base"] = oracle.aggregate(k1, mk, mode="token_mean")
        return out

    formula = composition_formula(coef, gamma) + (f"; rows of the groups {FILTER_FORMULA}" if remove else "")
    tol_value = tolerance("adv.gae", DTYPE, "value") if gamma else tolerance("adv.grpo", DTYPE, "value")
    tol = {"value": tol_value, "mask": Tol(rtol=0.0, atol=0.0, reason="0/1"),
           "kept": Tol(rtol=0.0, atol=0.0, reason="0/1")}
    params = {"kl_penalty_coef": coef, "kl_discount_factor": gamma} if coef else {"kl_penalty_coef": 0.0}
    if remove:
        params = {"remove_constant_reward_groups": True, **params}
    return composition_row(f"tinker_cookbook.prepare_minibatch[{label or fmt(params).replace(' ', '')}]",
                           "adv.grpo+kl.estimator+agg+adv.reinforce_pp" if coef else "adv.grpo",
                           "tinker_cookbook.prepare_minibatch", adapter, got,
                           [Candidate("canonical", formula, expected)], tol, seed=seed, note=note)


DISCOUNT_NOTE = (
    "At mask-0 positions (the prompt, the observation tokens between turns, a masked parse-error turn) before a "
    "trained token the datum's advantage is not 0: discounted_future_sum_vectorized runs over every datum position "
    "(rl/metrics.py:219-220, :242-246), so each holds sum_k gamma^k x_(t+k) of the trained tokens after it. The "
    "trainer then drops the mask (_remove_mask, rl/train.py:274-278) and the Tinker service's importance_sampling "
    "loss is -sum_t (p/q)_t A_t over every target (Tinker docs, losses/importance-sampling), so those prompt and "
    "observation tokens are trained with these advantages (q = 1: their sampled log-prob is the 0.0 placeholder, "
    "rl/data_processing.py:250-252). Config refuses the setting only for loss_fn='stable_reinforce' "
    "(rl/train.py:2496-2507). The trained tokens match the composition."
)

NO_TOKEN_NOTE = (
    "A batch with no trained token (every turn a masked parse-error turn, or no action): the mean of the log-ratios "
    "is 0/0 = NaN (rl/metrics.py:214-216) and c·mask·(NaN − Δ) is NaN at every position (:218), so every datum's "
    "advantages become NaN, also where the advantage was 0; the spec's token mean of no token is 0, and the "
    "advantages stay 0."
)


def no_trained_token_batch(seed: int) -> dict[str, np.ndarray]:
    """``minibatch_batch`` with every action turned into a masked parse-error turn (no trained token)."""
    b = dict(minibatch_batch(seed))
    b["mask"] = np.zeros_like(b["mask"])
    return b


def minibatch_rows(adapter: TinkerCookbookAdapter, seed: int) -> list[RowResult]:
    return [
        minibatch_row(adapter, seed, "", coef=0.0),
        minibatch_row(adapter, seed, "", coef=KL_COEF),
        minibatch_row(adapter, seed, "", coef=KL_COEF, gamma=DISCOUNT, note=DISCOUNT_NOTE),
        minibatch_row(adapter, seed, "", coef=KL_COEF, remove=True),
        minibatch_row(adapter, seed, f"kl_penalty_coef={KL_COEF},no trained token", coef=KL_COEF,
                      batch=no_trained_token_batch(seed), note=NO_TOKEN_NOTE),
    ]


def extra_rows(adapter: TinkerCookbookAdapter, seed: int = 0) -> list[RowResult]:
    """Every tinker-cookbook row."""
    rows = filter_rows(adapter, seed) + minibatch_rows(adapter, seed)
    rows.append(not_implemented_row("tinker_cookbook.forward_backward[loss_fn=*]", "loss.*", "tinker.TrainingClient.forward_backward",
                                    adapter, SERVICE_LOSSES))
    return rows


__all__ = ["extra_rows", "filter_rows", "minibatch_rows", "minibatch_row", "filter_row", "minibatch_batch",
           "no_trained_token_batch", "kept_groups", "kl_in_advantage", "composition_formula", "ROWS", "G", "T",
           "KL_COEF", "DISCOUNT"]
