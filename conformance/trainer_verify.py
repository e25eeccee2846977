"""``rlspec train --verify``: every optimizer update of the refimpl trainer recomputed by the oracle.

:class:`TrainerVerifier` is the trainer's ``on_step`` hook (``refimpl.trainer.StepRecord``). For each
update it checks, on exactly the batch and tensors the trainer used (float32 inputs, float64 oracle):

- ``mask``: every micro-batch mask covers exactly the completion tokens (after the prompt, through the
  first EOS, nothing after it), ``mask[:, 0]`` is False, and the attention mask agrees;
- ``logp`` / ``entropy``: the trainer's fused log-probs and entropies equal
  ``oracle.token_logprobs_from_hidden`` / ``token_entropy_from_hidden`` on the captured final hidden
  states and LM-head weight at the configured temperature;
- ``loss`` and ``grad[logp]``: the micro-batch objective ``aggregate(policy_t + kl_coef*KL_t -
  entropy_coef*H_t, mode, num_tokens=N, num_seqs=S) * world_size`` (global counts of the update) and its
  gradient w.r.t. the log-probs (captured with ``retain_grad``), composed from the oracle's pieces and
  their ``_grad`` functions;
- ``value`` / ``grad[values]`` (algo ppo): the value loss and its gradient;
- ``clip`` (loss ppo): the clip masks equal ``oracle.ppo_clipped_mask``;
- ``advantages`` (first update of each step): GRPO / RLOO / REINFORCE from every rank's rewards, or
  PPO's per-token rewards, GAE and whitening, against the oracle;
- ``counts``: the update's global token and sequence counts are those of the tokens the loss keeps
  (single process: every micro-batch's mask, minus the rejected tokens), so a rejected token can not
  stay in the denominator;
- asynchronous mode (``rlspec train --async``): ``staleness`` (every row sampled with a version ``v``,
  ``0 <= step - v <= max_staleness``) and ``behav_logp`` (finite, <= 0 at valid tokens, 0 elsewhere) on
  the first update of each step; ``engine_logp`` (``--engine vllm``): the engine's behaviour log-probs
  against ``oracle.sampling_logprobs`` of the actor's own forward of the weights that sampled them; ``is_weights`` / ``keep`` (the correction's constant weights and
  rejection mask against ``oracle.rollout_is_weights`` / ``rollout_rejection_mask`` of the recorded
  old and behaviour log-probs) and the ``loss`` / ``grad[logp]`` of the configured correction
  (``oracle.corrected_policy_loss`` or ``oracle.decoupled_ppo_token_loss``, with their ``_grad``);
- ``identities``: on the first minibatch of the first epoch of every step the current log-probs equal
  the old ones bit for bit (ratio exactly 1, clip fraction 0); at step 0 they also equal the reference
  log-probs bit for bit (KL to the reference exactly 0).

A mismatch raises :class:`VerificationError` naming the step, update, micro-batch and the first
mismatch. ``rows()`` summarises what was checked as ``rlspec check`` rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import oracle
from conformance.runner.compare import Mismatch, compare
from conformance.runner.rows import RowResult
from conformance.tolerances import ENGINE_FLOAT32, Tol, tolerance

EXACT = Tol(rtol=0.0, atol=0.0, reason="bitwise identity")
# A keep / mask-out decision whose ratio lies within this relative band of a bound may go either way
# between the float32 trainer and the float64 oracle (the ratio itself carries float32 rounding).
BOUND_BAND = 1e-5


class VerificationError(AssertionError):
    """A trainer update disagrees with the oracle (or breaks an exact identity)."""


def _np(x: torch.Tensor | None) -> np.ndarray | None:
    return None if x is None else x.detach().cpu().to(torch.float64).numpy()


@dataclass
class _Stat:
    """One check over the updates seen (all micro-batches)."""

    check: str
    spec_id: str
    n: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    failures: list[str] = field(default_factory=list)
    steps: set[int] = field(default_factory=set)
    note: str = ""


@dataclass
class _Outcome:
    mismatch: Mismatch | None
    max_abs: float
    max_rel: float


def _compare(actual: Any, expected: Any, tol: Tol, what: str) -> _Outcome:
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64)
    mm = compare(a, e, tol, what=what)
    if a.shape == e.shape and a.size:
        diff = np.abs(a - e)
        rel = diff / np.maximum(np.abs(e), 1e-300)
        rel = np.where(diff == 0, 0.0, rel)
        return _Outcome(mm, float(np.nanmax(diff)), float(np.nanmax(rel)))
    return _Outcome(mm, 0.0 if mm is None else float("inf"), 0.0 if mm is None else float("inf"))


def _policy_piece(cfg: Any, lp: np.ndarray, old: np.ndarray, A: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, Callable, str]:
    """(token loss, vjp, spec id) of the configured policy loss, from the oracle."""
    if cfg.loss == "ppo":
        kw = dict(eps_low=cfg.eps_low, eps_high=cfg.eps_high, dual_clip=cfg.dual_clip)
        return (oracle.ppo_token_loss(lp, old, A, m, **kw),
                lambda u: oracle.ppo_token_loss_grad(lp, old, A, m, u, **kw), "loss.ppo")
    if cfg.loss == "gspo":
        kw = dict(eps_low=cfg.eps_low, eps_high=cfg.eps_high)
        return (oracle.gspo_token_loss(lp, old, A, m, **kw),
                lambda u: oracle.gspo_token_loss_grad(lp, old, A, m, u, **kw), "loss.gspo")
    kw = dict(eps_low=cfg.eps_low, eps_high=cfg.eps_high)
    return (oracle.cispo_token_loss(lp, old, A, m, **kw),
            lambda u: oracle.cispo_token_loss_grad(lp, old, A, m, u, **kw), "loss.cispo")


def expected_mask(input_ids: np.ndarray, prompt_width: int, eos_id: int) -> np.ndarray:
    """Completion tokens through the first EOS (all of them when there is none): the spec's mask of a
    rollout whose completions start at column ``prompt_width``."""
    B, T = input_ids.shape
    out = np.zeros((B, T), dtype=bool)
    for b in range(B):
        for t in range(prompt_width, T):
            out[b, t] = True
            if input_ids[b, t] == eos_id:
                break
    return out


class TrainerVerifier:
    """The ``on_step`` hook of ``rlspec train --verify`` (see the module docstring)."""

    wants_hidden = True  # the trainer captures final hidden states and the LM-head weight for us

    def __init__(self, *, raise_on_fail: bool = True, log: Callable[[str], None] | None = None) -> None:
        self.raise_on_fail = raise_on_fail
        self.log = log
        self.stats: dict[str, _Stat] = {}
        self.per_step: dict[tuple[int, str], _Stat] = {}
        self.updates = 0
        self.seconds = 0.0
        self.failures: list[str] = []

    # -------------------------------------------------------------------------------------------

    def _record(self, step: int, check: str, spec_id: str, outcome: _Outcome | None, where: str,
                failure: str | None = None, note: str = "") -> None:
        for key, table in ((check, self.stats), ((step, check), self.per_step)):
            st = table.get(key)  # type: ignore[arg-type]
            if st is None:
                st = table[key] = _Stat(check, spec_id)  # type: ignore[index]
            st.n += 1
            st.steps.add(step)
            if note:
                st.note = note
            msg = failure
            if outcome is not None:
                st.max_abs = max(st.max_abs, outcome.max_abs)
                st.max_rel = max(st.max_rel, outcome.max_rel)
                if outcome.mismatch is not None:
                    msg = outcome.mismatch.describe()
            if msg:
                st.failures.append(f"{where}: {msg}")
        if failure or (outcome is not None and outcome.mismatch is not None):
            self.failures.append(f"{where}: {check} ({spec_id}): " + (failure or outcome.mismatch.describe()))

    def __call__(self, rec: Any) -> None:
        t0 = time.perf_counter()
        n_fail = len(self.failures)
        try:
            self._check_update(rec)
        finally:
            self.seconds += time.perf_counter() - t0
            self.updates += 1
        if self.raise_on_fail and len(self.failures) > n_fail:
            new = self.failures[n_fail:]
            raise VerificationError(
                f"--verify: step {rec.step}, update {rec.update} (epoch {rec.epoch}, minibatch {rec.minibatch}, "
                f"rank {rec.rank}/{rec.world_size}): the trainer disagrees with the oracle:\n  " + "\n  ".join(new)
            )

    # -------------------------------------------------------------------------------------------

    def _check_update(self, rec: Any) -> None:
        cfg = rec.config
        step, world = rec.step, rec.world_size
        tau = cfg.temperature
        W = _np(rec.weight)
        if rec.rollout is not None:
            self._check_rollout(rec)
        counted_tokens = 0
        for i, mb in enumerate(rec.micro):
            where = f"step {step} update {rec.update} micro-batch {i} (rows {mb.rows[0]}-{mb.rows[1]})"
            ids = mb.input_ids.numpy()
            m = mb.mask.numpy().astype(bool)
            # --- mask: exactly the completion tokens -------------------------------------------
            exp_m = expected_mask(ids, rec.prompt_width, rec.eos_id)
            att = mb.attention_mask.numpy().astype(bool)
            problems = []
            if m[:, 0].any():
                problems.append("mask[:, 0] is set")
            if not np.array_equal(m, exp_m):
                b, t = np.argwhere(m != exp_m)[0]
                problems.append(f"mask differs from the completion tokens through the first EOS at row {b}, "
                                f"position {t} (mask {bool(m[b, t])}, token {int(ids[b, t])})")
            if not np.array_equal(att[:, rec.prompt_width:], m[:, rec.prompt_width:]):
                problems.append("the attention mask of the completion differs from the loss mask")
            after = ~m & (np.arange(m.shape[1]) >= rec.prompt_width)
            if (ids[after] != rec.pad_id).any():
                problems.append("a token after a completion's end is not padding")
            self._record(step, "mask", "conventions", None, where, "; ".join(problems) or None)
            # --- log-probs and entropies from the hidden states -------------------------------
            lp = _np(mb.logp)
            if mb.hidden is not None and W is not None and rec.fused:
                h = mb.hidden.numpy()
                if mb.support is None:
                    exp_lp = oracle.token_logprobs_from_hidden(h, W, ids, m, temperature=tau)
                    self._record(step, "logp", "logprob.fused",
                                 _compare(lp, exp_lp, tolerance("logprob.fused", "float32", "value"), "logp"), where)
                else:  # keep_sampling_mask: renormalised over the sets the tokens were drawn from
                    logits = h.astype(np.float64) @ W.astype(np.float64).T
                    exp_lp = oracle.support_logprobs(logits, ids, m, mb.support.numpy(), temperature=tau)
                    self._record(step, "logp", "logprob.sampling",
                                 _compare(lp, exp_lp, tolerance("logprob.fused", "float32", "value"), "logp"), where,
                                 note="support_logprobs over the recorded sampling support (keep_sampling_mask)")
                exp_H = oracle.token_entropy_from_hidden(h, W, m, temperature=tau)
                self._record(step, "entropy", "logprob.fused",
                             _compare(_np(mb.entropy), exp_H, tolerance("logprob.fused", "float32", "value"), "entropy"), where)
                H = exp_H
            else:
                H = _np(mb.entropy)
            # --- the objective and its gradient w.r.t. logp -----------------------------------
            old, ref, A = _np(mb.old_logp), _np(mb.ref_logp), _np(mb.advantages)
            if cfg.correction == "none":
                self._check_objective(rec, mb, where, lp, old, ref, A, H, m)
                counted = m
            else:
                counted = self._check_corrected(rec, mb, where, lp, old, ref, A, H, m)
            counted_tokens += int(counted.sum())
            # --- value loss (PPO) ----------------------------------------------------------------
            if mb.values is not None:
                V, Vo, R = _np(mb.values), _np(mb.old_values), _np(mb.returns)
                vkw = dict(mode=cfg.value_agg, norm_length=cfg.norm_length, num_tokens=rec.num_tokens, num_seqs=rec.num_seqs)
                vt = oracle.value_token_loss(V, Vo, R, m, clip=cfg.value_clip)
                self._record(step, "value", "loss.value+agg",
                             _compare(mb.value_loss, oracle.aggregate(vt, counted, **vkw) * world,
                                      tolerance("agg", "float32", "value"), "value loss"), where)
                uv = oracle.aggregate_grad(vt, counted, float(world) * cfg.vf_coef, **vkw)
                gv = oracle.value_token_loss_grad(V, Vo, R, m, uv, clip=cfg.value_clip)
                self._record(step, "grad[values]", "loss.value+agg",
                             _compare(_np(mb.grad_values), gv, tolerance("loss.value", "float32", "grad"), "grad[values]"), where)
            # --- clip masks ------------------------------------------------------------------------
            if cfg.loss == "ppo":
                got = np.maximum(np.maximum(_np(mb.clipped["high"]), _np(mb.clipped["low"])), _np(mb.clipped["dual"]))
                exp_c = oracle.ppo_clipped_mask(lp, old, A, m, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                                                dual_clip=cfg.dual_clip)
                self._record(step, "clip", "metric.clip", _compare(got, exp_c, EXACT, "clipped"), where)
            # --- exact identities -------------------------------------------------------------------
            if rec.first_of_step:
                problems = []
                lpt, oldt = mb.logp[mb.mask], mb.old_logp[mb.mask]
                if not torch.equal(lpt, oldt):
                    d = (lpt.double() - oldt.double()).abs().max()
                    problems.append(f"first minibatch of the step: logp != old_logp (max |diff| {float(d):.3g}); the ratio must be exactly 1")
                clipped = sum(float(mb.clipped[k].sum()) for k in ("high", "low", "dual"))
                if clipped:
                    problems.append(f"first minibatch of the step: {clipped:g} clipped tokens; the clip fraction must be 0")
                if step == 0:
                    reft = mb.ref_logp[mb.mask]
                    if not torch.equal(lpt, reft):
                        d = (lpt.double() - reft.double()).abs().max()
                        problems.append(f"step 0: logp != ref_logp (max |diff| {float(d):.3g}); KL to the reference must be exactly 0")
                    kl = oracle.kl_penalty(lp, ref, m, estimator=cfg.kl_estimator)
                    if np.any(kl != 0.0):
                        problems.append(f"step 0: KL({cfg.kl_estimator}) to the reference is {float(np.abs(kl).max()):.3g}, not exactly 0")
                self._record(step, "identities", "invariant:on_policy", None, where, "; ".join(problems) or None)

        # --- the update's counts: the tokens the loss keeps, every row ------------------------------
        if world == 1:
            rows = sum(mb.rows[1] - mb.rows[0] for mb in rec.micro)
            problems = []
            if rec.num_tokens != counted_tokens:
                problems.append(f"num_tokens {rec.num_tokens:g} != {counted_tokens} tokens the loss keeps in the update's "
                                "micro-batches (a rejected token left in the denominator?)")
            if rec.num_seqs != rows:
                problems.append(f"num_seqs {rec.num_seqs:g} != the update's {rows} rows")
            self._record(step, "counts", "agg", None, f"step {step} update {rec.update}", "; ".join(problems) or None)

    def _check_objective(self, rec: Any, mb: Any, where: str, lp: np.ndarray, old: np.ndarray, ref: np.ndarray,
                         A: np.ndarray, H: np.ndarray, m: np.ndarray) -> None:
        """The synchronous objective (policy loss + KL + entropy, aggregated) and d/d logp."""
        cfg, step, world = rec.config, rec.step, rec.world_size
        agg_kw = dict(mode=cfg.agg, norm_length=cfg.norm_length, num_tokens=rec.num_tokens, num_seqs=rec.num_seqs)
        pol, pol_vjp, spec = _policy_piece(cfg, lp, old, A, m)
        ell = pol
        vjps = [pol_vjp]
        spec_ids = [spec]
        if cfg.kl_coef:
            kl = oracle.kl_penalty(lp, ref, m, estimator=cfg.kl_estimator)
            ell = ell + cfg.kl_coef * kl
            vjps.append(lambda u: cfg.kl_coef * oracle.kl_penalty_grad(lp, ref, m, u, estimator=cfg.kl_estimator))
            spec_ids.append("kl.estimator")
        if cfg.entropy_coef:
            ell = ell - cfg.entropy_coef * H
            spec_ids.append("logprob.entropy")
        spec_ids.append("agg")
        loss_spec = "+".join(spec_ids)
        exp_loss = oracle.aggregate(ell, m, **agg_kw) * world
        self._record(step, "loss", loss_spec,
                     _compare(mb.policy_loss, exp_loss, tolerance("agg", "float32", "value"), "loss"), where)
        u = oracle.aggregate_grad(ell, m, float(world), **agg_kw)
        exp_g = sum(v(u) for v in vjps)
        self._record(step, "grad[logp]", loss_spec,
                     _compare(_np(mb.grad_logp), exp_g, tolerance(spec, "float32", "grad"), "grad[logp]"), where)

    def _check_corrected(self, rec: Any, mb: Any, where: str, lp: np.ndarray, old: np.ndarray, ref: np.ndarray,
                         A: np.ndarray, H: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Asynchronous mode with a correction: its weights and keep mask, then the loss and d/d logp.
        Returns the tokens the loss counts (the mask minus the rejected ones)."""
        cfg, step, world = rec.config, rec.step, rec.world_size
        agg_kw = dict(mode=cfg.agg, norm_length=cfg.norm_length, num_tokens=rec.num_tokens, num_seqs=rec.num_seqs)
        if mb.behav_logp is None:
            self._record(step, "loss", "offpolicy", None, where, f"correction {cfg.correction!r} but no behaviour log-probs recorded")
            return m
        behav = _np(mb.behav_logp)
        ppo_kw = dict(eps_low=cfg.eps_low, eps_high=cfg.eps_high, dual_clip=cfg.dual_clip)
        if cfg.correction == "decoupled":
            dkw = dict(behav_cap=cfg.behav_cap, **ppo_kw)
            ell = oracle.decoupled_ppo_token_loss(lp, old, behav, A, m, **dkw)
            if cfg.kl_coef:
                ell = ell + cfg.kl_coef * oracle.kl_penalty(lp, ref, m, estimator=cfg.kl_estimator)
            if cfg.entropy_coef:
                ell = ell - cfg.entropy_coef * H
            spec = "offpolicy.decoupled_ppo+kl.estimator+agg"
            self._record(step, "loss", spec, _compare(mb.policy_loss, oracle.aggregate(ell, m, **agg_kw) * world,
                                                      tolerance("agg", "float32", "value"), "loss"), where)
            u = oracle.aggregate_grad(ell, m, float(world), **agg_kw)
            g = oracle.decoupled_ppo_token_loss_grad(lp, old, behav, A, m, u, **dkw)
            if cfg.kl_coef:
                g = g + cfg.kl_coef * oracle.kl_penalty_grad(lp, ref, m, u, estimator=cfg.kl_estimator)
            self._record(step, "grad[logp]", spec, _compare(_np(mb.grad_logp), g, tolerance(
                "offpolicy.decoupled_ppo", "float32", "grad"), "grad[logp]"), where)
            return m
        w, keep = self._expected_correction(rec, mb, where, old, behav, m)
        ckw = dict(kl_coef=cfg.kl_coef, kl_estimator=cfg.kl_estimator, rejected="drop", **ppo_kw, **agg_kw)
        counted = m & keep
        exp_loss = oracle.corrected_policy_loss(lp, old, ref, A, w, keep, m, **ckw) * world
        if cfg.entropy_coef:
            exp_loss = exp_loss + oracle.aggregate(-cfg.entropy_coef * H, counted, **agg_kw) * world
        spec = "offpolicy.loss" + ("+logprob.entropy" if cfg.entropy_coef else "")
        self._record(step, "loss", spec, _compare(mb.policy_loss, exp_loss, tolerance("agg", "float32", "value"), "loss"),
                     where)
        g = oracle.corrected_policy_loss_grad(lp, old, ref, A, w, keep, m, float(world), **ckw)
        self._record(step, "grad[logp]", spec, _compare(_np(mb.grad_logp), g, tolerance("offpolicy.loss", "float32", "grad"),
                                                        "grad[logp]"), where)
        return counted

    def _expected_correction(self, rec: Any, mb: Any, where: str, old: np.ndarray, behav: np.ndarray,
                             m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The oracle's weights and keep mask of the configured correction, checked against the trainer's.
        A decision whose ratio lies within BOUND_BAND of a bound is accepted either way (the oracle is
        evaluated with the bounds narrowed and widened by the band; the trainer's must lie between)."""
        cfg, step = rec.config, rec.step
        lo, hi = cfg.correction_low, cfg.correction_high

        def bounds(sign: int) -> tuple[float | None, float]:
            f = 1.0 + sign * BOUND_BAND
            return (None if lo is None else lo / f), hi * f

        got_w, got_keep = _np(mb.is_weights), mb.keep.numpy().astype(bool)
        if cfg.correction == "rejection":
            kw = dict(statistic="ratio", level=cfg.rejection_level)
            narrow = oracle.rollout_rejection_mask(old, behav, m, lo=bounds(-1)[0], hi=bounds(-1)[1], **kw)
            wide = oracle.rollout_rejection_mask(old, behav, m, lo=bounds(1)[0], hi=bounds(1)[1], **kw)
            keep = np.where(narrow == wide, narrow, got_keep)
            self._record(step, "keep", "offpolicy.rejection", _compare(got_keep, keep, EXACT, "keep"), where)
            w = np.where(m, 1.0, 0.0)
            self._record(step, "is_weights", "offpolicy.rejection", _compare(got_w, w, EXACT, "is_weights"), where)
            return w, keep
        kw = {"tis_token": dict(level="token", mode="truncate"), "tis_sequence": dict(level="sequence", mode="truncate"),
              "mis_token": dict(level="token", mode="mask")}[cfg.correction]
        w = oracle.rollout_is_weights(old, behav, m, lo=lo, hi=hi, **kw)
        if kw["mode"] == "mask":  # a ratio on a bound may be kept or zeroed
            narrow = oracle.rollout_is_weights(old, behav, m, lo=bounds(-1)[0], hi=bounds(-1)[1], **kw)
            wide = oracle.rollout_is_weights(old, behav, m, lo=bounds(1)[0], hi=bounds(1)[1], **kw)
            w = np.where((narrow == 0) != (wide == 0), np.where(got_w == 0, 0.0, wide), w)
        self._record(step, "is_weights", "offpolicy.is_weights", _compare(
            got_w, w, tolerance("offpolicy.is_weights", "float32", "value"), "is_weights"), where)
        keep = m.copy()
        self._record(step, "keep", "offpolicy.is_weights", _compare(got_keep, keep, EXACT, "keep"), where)
        return w, keep

    def _check_rollout(self, rec: Any) -> None:
        cfg, ro = rec.config, rec.rollout
        where = f"step {rec.step} rollout (rank {rec.rank})"
        B = ro.input_ids.shape[0]
        lo = ro.rank_offset
        r = _np(ro.rewards_global)
        m = ro.mask.numpy().astype(bool)
        if cfg.algo == "grpo":
            exp = oracle.grpo_advantages(r, cfg.group_size, scale=cfg.grpo_scale, std_ddof=cfg.grpo_std_ddof, eps=cfg.grpo_eps)
            self._record(rec.step, "advantages", "adv.grpo",
                         _compare(_np(ro.advantages), exp[lo:lo + B], tolerance("adv.grpo", "float32", "value"), "advantages"), where)
        elif cfg.algo == "rloo":
            exp = oracle.rloo_advantages(r, cfg.group_size)
            self._record(rec.step, "advantages", "adv.rloo",
                         _compare(_np(ro.advantages), exp[lo:lo + B], tolerance("adv.rloo", "float32", "value"), "advantages"), where)
        elif cfg.algo == "reinforce":
            exp = oracle.reinforce_advantages(r, baseline=cfg.reinforce_baseline)
            self._record(rec.step, "advantages", "adv.reinforce",
                         _compare(_np(ro.advantages), exp[lo:lo + B], tolerance("adv.reinforce", "float32", "value"), "advantages"), where)
        else:
            old, ref = _np(ro.old_logp), _np(ro.ref_logp)
            scores = r[lo:lo + B]
            R = oracle.rlhf_token_rewards(scores, old, ref, m, kl_coef=cfg.kl_reward_coef, estimator=cfg.kl_reward_estimator)
            self._record(rec.step, "token_rewards", "reward.rlhf",
                         _compare(_np(ro.token_rewards), R, tolerance("reward.rlhf", "float32", "value"), "token rewards"), where)
            A, ret = oracle.gae(_np(ro.token_rewards), _np(ro.old_values), m, gamma=cfg.gamma, lam=cfg.lam)
            self._record(rec.step, "gae", "adv.gae",
                         _compare(_np(ro.advantages_raw), A, tolerance("adv.gae", "float32", "value"), "gae advantages"), where)
            self._record(rec.step, "returns", "adv.gae",
                         _compare(_np(ro.returns), ret, tolerance("adv.gae", "float32", "value"), "returns"), where)
            if cfg.whiten_advantages and rec.world_size == 1:
                W = oracle.whiten(_np(ro.advantages_raw), m)
                self._record(rec.step, "advantages", "adv.whiten",
                             _compare(_np(ro.advantages), W, tolerance("adv.whiten", "float32", "value"), "whitened advantages"), where)
            elif cfg.whiten_advantages:
                self._record(rec.step, "advantages", "adv.whiten", None, where,
                             note="whitened over every rank's tokens: checked by the rank-0 total only in single-process runs")
        if getattr(cfg, "asynchronous", False):
            self._check_behaviour(rec, where, m)
        if rec.step == 0:
            problems = None
            if not torch.equal(ro.old_logp[ro.mask], ro.ref_logp[ro.mask]):
                problems = "step 0: the rollout's old and reference log-probs differ (the reference must be the initial policy)"
            self._record(rec.step, "identities", "invariant:on_policy", None, where, problems)

    def _check_behaviour(self, rec: Any, where: str, m: np.ndarray) -> None:
        """Asynchronous mode: every row sampled within the staleness bound, and behaviour log-probs that
        are log-probabilities of the sampled tokens (finite, <= 0) at valid tokens and 0 elsewhere."""
        cfg, ro, step = rec.config, rec.rollout, rec.step
        problems = []
        if ro.behav_version is None or ro.behav_logp is None:
            self._record(step, "staleness", "async", None, where, "no behaviour versions / log-probs recorded")
            return
        v = ro.behav_version.numpy()
        lag = step - v
        if (v < 0).any() or (lag < 0).any() or (lag > cfg.max_staleness).any():
            b = int(np.argmax((v < 0) | (lag < 0) | (lag > cfg.max_staleness)))
            problems.append(f"row {b} sampled with version {int(v[b])} at step {step}: staleness {int(lag[b])} outside "
                            f"[0, max_staleness={cfg.max_staleness}]")
        self._record(step, "staleness", "async", None, where, "; ".join(problems) or None,
                     note=f"max_staleness {cfg.max_staleness}")
        lb = _np(ro.behav_logp)
        problems = []
        if not np.isfinite(lb[m]).all() or (lb[m] > 0).any():
            problems.append("behaviour log-probs not finite or above 0 at a valid token")
        if (lb[~m] != 0).any():
            problems.append("behaviour log-probs not 0 off the mask")
        self._record(step, "behav_logp", "conventions", None, where, "; ".join(problems) or None)
        if ro.behav_check_logits is not None:
            self._check_engine_logp(rec, where, m, lb)

    def _check_engine_logp(self, rec: Any, where: str, m: np.ndarray, behav: np.ndarray) -> None:
        """An engine's behaviour log-probs (``engine_check``) against ``oracle.sampling_logprobs`` of the
        actor's own float32 forward of the batch (the weights that sampled it; untruncated at the temperature).
        Tolerance: a float32 engine ``ENGINE_FLOAT32``; a bfloat16 engine twice the gap between the actor's
        bfloat16 and float32 forwards on the same batch (as ``rlspec check --adapter vllm`` holds it)."""
        cfg, ro = rec.config, rec.rollout
        ids = ro.input_ids.numpy()
        if ro.support is not None:  # truncated: renormalised over the set the engine drew each token from
            K = ro.support.numpy()
            expected = lambda z: oracle.support_logprobs(z, ids, m, K, temperature=cfg.temperature)  # noqa: E731
        else:
            expected = lambda z: oracle.sampling_logprobs(z, ids, m, temperature=cfg.temperature)  # noqa: E731
        exp = expected(_np(ro.behav_check_logits))
        if cfg.actor_dtype == "bfloat16":
            half = expected(_np(ro.behav_check_logits_half))
            gap = float(np.max(np.abs(half - exp)[m])) if m.any() else 0.0
            tol = Tol(rtol=0.0, atol=2 * gap + 1e-5, reason=f"twice the actor's bfloat16-forward gap ({gap:.3g})")
            note = f"bfloat16 engine: within twice the actor's own bfloat16 forward's gap (last {gap:.3g})"
        else:
            tol, note = ENGINE_FLOAT32, f"float32 engine: {ENGINE_FLOAT32.reason}"
        self._record(rec.step, "engine_logp", "logprob.sampling", _compare(behav, exp, tol, "behaviour log-probs"),
                     where, note=note)

    # -------------------------------------------------------------------------------------------

    def rows(self, *, per_step: bool = False, adapter: str = "refimpl", prefix: str = "train") -> list[RowResult]:
        """The checks as ``rlspec check`` rows: one per check (over every update), or one per (step, check)."""
        out = []
        items = sorted(self.per_step.items(), key=lambda kv: kv[0][0]) if per_step else list(self.stats.items())
        for key, st in items:
            rid = f"{prefix}[step={key[0]}].{st.check}" if per_step else f"{prefix}.{st.check}"
            status = "fail" if st.failures else "pass"
            msg = "\n".join(st.failures[:5]) if st.failures else (
                f"{st.n} comparisons over {len(st.steps)} step(s)" + (f"; {st.note}" if st.note else ""))
            out.append(RowResult(id=rid, spec_id=st.spec_id, function=rid, adapter=adapter, status=status,
                                 max_abs_err=st.max_abs, max_rel_err=st.max_rel, message=msg, n_cases=st.n,
                                 seeds=sorted(st.steps)))
        return out


__all__ = ["TrainerVerifier", "VerificationError", "expected_mask"]
