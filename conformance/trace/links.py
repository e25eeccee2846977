"""The links of a training step, each recomputed with the oracle from what the trace recorded
(``conformance/spec/v1/trace.md``, "Links"). One function per link, called once per step; each returns a
:class:`LinkOutcome`: pass, preset (the trainer's documented convention), fail (with what was identified,
when a known wiring or normalisation explains the recorded tensors) or not checked (what is missing).

The loss and gradient links share :func:`explain_gradient`: the recorded d loss / d logp of every token, as
the optimizer step sees it (divided by the ranks the all-reduce averages over), is compared with the
gradient of the step objective for every wiring of the recorded log-probs (old / reference / rollout in their
roles or swapped) and every normalisation (the step's global counts, each micro-batch's, each rank's, the
data-parallel group's only under context parallelism), with a constant factor named when one remains.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import oracle
from conformance.tolerances import Tol, tolerance
from conformance.trace.reader import StepTrace

NOT_CHECKED = "not_implemented"


@dataclass
class LinkOutcome:
    status: str  # pass, preset, fail, not_implemented (not checked: the message says what is missing)
    message: str = ""
    identified: list[str] = field(default_factory=list)  # what explains a divergence, by name
    max_abs: float = 0.0
    max_rel: float = 0.0
    n: int = 0  # elements compared
    notes: list[str] = field(default_factory=list)
    preset: str | None = None


def missing(*names: str) -> LinkOutcome:
    return LinkOutcome(NOT_CHECKED, "not recorded: " + ", ".join(names))


def _dtype(s: StepTrace, name: str) -> str:
    d = s.dtypes.get(name, "float32")
    return d if d in ("float64", "float32", "bfloat16") else ("bfloat16" if d == "float16" else "float32")


def close(actual: np.ndarray, expected: np.ndarray, tol: Tol, *, scaled: bool = False,
          scale: float | None = None) -> tuple[bool, float, float, int]:
    """(within tolerance, max abs error, max rel error, flat index of the worst element). ``scaled``: both are
    divided by max |expected| first (gradients of a step objective are O(1/N) per token); ``scale``: by that
    magnitude instead (a sum's, whose terms cancel: the size of its terms)."""
    a, e = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    if a.size == 0:
        return True, 0.0, 0.0, -1
    s = scale if scale is not None else (float(np.max(np.abs(e))) if scaled else 1.0)
    s = s if s > 0 else 1.0
    err = np.abs(a - e) / s
    bound = tol.atol + tol.rtol * np.abs(e) / s
    bad = ~(err <= bound)  # NaN counts as bad
    worst = int(np.argmax(np.where(np.isfinite(err), err, np.inf)))
    rel = float(np.max(np.abs(a - e) / np.maximum(np.abs(e), 1e-300))) if np.any(e != 0) else float(np.max(err) * s)
    return (not bad.any()), float(np.max(err) * s), rel, worst


def where(s: StepTrace, flat: int, T: int | None = None) -> str:
    """Where the element at flat index ``flat`` of an [N, T] array lives: rank, micro-batch, row and column."""
    T = T or s.tensors["input_ids"].shape[1]
    i, t = divmod(flat, T)
    mb = int(s.mb_of[i])
    first = int(np.flatnonzero(s.mb_of == mb)[0])
    return f"dp {int(s.dp_of[i])} micro-batch {mb} row {i - first} column {t}"


def _shift(m: np.ndarray, k: int) -> np.ndarray:
    out = np.zeros_like(m)
    if k > 0:
        out[:, k:] = m[:, :-k]
    else:
        out[:, :k] = m[:, -k:]
    return out


def completion_of(s: StepTrace) -> np.ndarray | None:
    if s.has("completion_mask"):
        return s.get("completion_mask")
    if s.has("prompt_mask", "attention_mask"):
        return s.get("attention_mask") & ~s.get("prompt_mask")
    return None


# ---------------------------------------------------------------------------------------------------------
# trace.mask
# ---------------------------------------------------------------------------------------------------------


def mask_link(s: StepTrace) -> LinkOutcome:
    """The loss counts exactly the completion tokens (never column 0, no prompt, no padding, nothing after
    the first EOS); tokens a correction rejects may leave it only when the config says ``loss_mask_subset``."""
    L = s.get("loss_mask")
    comp = completion_of(s)
    if comp is None:
        return missing("completion_mask (or prompt_mask and attention_mask)")
    found, ident = [], []
    eos = s.config.get("eos_token_id")
    if eos is not None:
        ids = s.get("input_ids")
        after = np.cumsum(comp & (ids == int(eos)), axis=1) - (comp & (ids == int(eos)))
        past = comp & (after > 0)
        if past.any():
            found.append(f"{int(past.sum())} completion tokens after the first EOS (e.g. {where(s, int(np.flatnonzero(past)[0]))})")
            ident.append("completion continues past the first EOS")
    if L[:, 0].any():
        found.append(f"column 0 in the loss mask in {int(L[:, 0].sum())} rows (no log-prob predicts the first token)")
    extra, lost = L & ~comp, comp & ~L
    subset_ok = bool(s.config.get("loss_mask_subset", False))
    n = int(comp.sum())
    if not extra.any() and (not lost.any() or subset_ok) and not found:
        msg = f"the loss counts the {int(L.sum())} completion tokens" + (
            f" ({int(lost.sum())} completion tokens dropped by the trainer's rejection)" if lost.any() else "")
        return LinkOutcome("pass", msg, n=n)
    for k, name in ((1, "loss mask shifted one column late (the first completion token untrained, the one after the last trained)"),
                    (-1, "loss mask shifted one column early (the last completion token untrained, the last prompt token trained)")):
        if np.array_equal(L, _shift(comp, k)):
            ident.append(name)
    if extra.any():
        prompt = s.get("prompt_mask") if s.has("prompt_mask") else None
        if prompt is not None and (extra & prompt).any():
            rows = int((extra & prompt).any(1).sum())
            ident.append("prompt tokens in the loss mask")
            found.append(f"{int((extra & prompt).sum())} prompt tokens in the loss mask in {rows} rows")
        if s.has("attention_mask") and (extra & ~s.get("attention_mask")).any():
            ident.append("padding in the loss mask")
            found.append(f"{int((extra & ~s.get('attention_mask')).sum())} padding tokens in the loss mask")
        rest = extra & ~(prompt if prompt is not None else np.zeros_like(extra))
        if s.has("attention_mask"):
            rest &= s.get("attention_mask")
        if rest.any():
            found.append(f"{int(rest.sum())} loss tokens outside the completion (first: {where(s, int(np.flatnonzero(rest)[0]))})")
    if lost.any() and not subset_ok:
        found.append(f"{int(lost.sum())} completion tokens not in the loss mask (first: {where(s, int(np.flatnonzero(lost)[0]))})")
    head = "; ".join(dict.fromkeys(ident)) or "the loss mask is not the completion mask"
    return LinkOutcome("fail", f"{head}: " + "; ".join(found), identified=list(dict.fromkeys(ident)), n=n)


# ---------------------------------------------------------------------------------------------------------
# trace.logp, trace.entropy (from hidden states and the LM head, on a seeded sample of rows)
# ---------------------------------------------------------------------------------------------------------


def sample_rows(s: StepTrace, k: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng([seed, s.step])
    n = s.rows
    return np.sort(rng.choice(n, size=min(k, n), replace=False)) if n else np.zeros(0, dtype=np.int64)


def _head_inputs(s: StepTrace) -> tuple[np.ndarray, np.ndarray] | None:
    if not s.has("hidden") or "lm_head_weight" not in s.probe:
        return None
    return s.get("hidden"), s.probe["lm_head_weight"]


def forward_mask(s: StepTrace) -> np.ndarray:
    """Where the forward links compare: tokens both in the loss and in the completion (a wrong loss mask is the
    mask link's finding; the forward is judged where a log-prob was wanted either way)."""
    comp = completion_of(s)
    return s.get("loss_mask") if comp is None else s.get("loss_mask") & comp


def _logprob_link(s: StepTrace, name: str, h: np.ndarray, W: np.ndarray, *, sample: int, seed: int, what: str,
                  label: str, alternatives: Callable[[np.ndarray, np.ndarray, np.ndarray, float], list[tuple[str, np.ndarray]]]
                  ) -> LinkOutcome:
    """The recorded log-probs ``name`` equal ``oracle.token_logprobs_from_hidden`` of ``h`` and ``W`` at the configured
    temperature on a seeded sample of rows; on a divergence, what explains it: no temperature, a one-column shift,
    or one of ``alternatives(rows, ids, mask, T)`` (named arrays the recorded values may be instead)."""
    rows = sample_rows(s, sample, seed)
    T = float(s.config.get("temperature", 1.0))
    m = forward_mask(s)[rows]
    ids = s.get("input_ids")[rows].astype(np.int64)
    got = np.where(m, s.get(name)[rows], 0.0)
    exp = oracle.token_logprobs_from_hidden(h[rows], W, ids, m, temperature=T)
    tol = tolerance("logprob.fused", _dtype(s, name))
    ok, ma, mr, worst = close(got, exp, tol)
    note = f"step {s.step}: rows {rows.tolist()} (seeded sample of {len(rows)} of {s.rows})"
    if ok:
        return LinkOutcome("pass", f"{what} at temperature {T:g}", max_abs=ma, max_rel=mr, n=int(m.sum()), notes=[note])
    ident = []
    if T != 1.0 and close(got, oracle.token_logprobs_from_hidden(h[rows], W, ids, m, temperature=1.0), tol)[0]:
        ident.append(f"{label} without the temperature (T = 1, configured {T:g})")
    for text, alt in alternatives(rows, ids, m, T):
        if close(got, alt, tol)[0] and not close(alt, exp, tol)[0]:
            ident.append(text)
    full = np.zeros_like(m)
    full[:, 1:] = True
    late = np.zeros(m.shape)
    late[:, 1:] = oracle.token_logprobs_from_hidden(h[rows], W, ids, full, temperature=T)[:, :-1]
    if close(got, np.where(m, late, 0.0), tol)[0]:
        ident.append(f"{label} shifted one column late (column t holds log p(x_{{t-1}}))")
    i, t = divmod(worst, m.shape[1])
    msg = (f"{'; '.join(ident) + ': ' if ident else ''}row {int(rows[i])} column {t}: {name} {got[i, t]:.9g}, "
           f"oracle {exp[i, t]:.9g}")
    return LinkOutcome("fail", msg, identified=ident, max_abs=ma, max_rel=mr, n=int(m.sum()), notes=[note])


def logp_link(s: StepTrace, *, sample: int, seed: int) -> LinkOutcome:
    """The loss forward's log-probs are those of the recorded hidden states and LM head at the configured
    temperature (oracle ``token_logprobs_from_hidden``), on a seeded sample of rows."""
    head = _head_inputs(s)
    if head is None or not s.has("logp"):
        return missing(*(n for n, ok in (("hidden", s.has("hidden")), ("lm_head_weight", "lm_head_weight" in s.probe),
                                          ("logp", s.has("logp"))) if not ok))

    def recorded_others(rows: np.ndarray, ids: np.ndarray, m: np.ndarray, T: float) -> list[tuple[str, np.ndarray]]:
        return [(f"logp is the recorded {o} (the loss forward's log-probs not used)", np.where(m, s.get(o)[rows], 0.0))
                for o in ("old_logp", "ref_logp", "rollout_logp") if s.has(o)]

    return _logprob_link(s, "logp", *head, sample=sample, seed=seed, what="log-probs of the hidden states",
                         label="log-probs", alternatives=recorded_others)


ROLE_NAMES = {"old": "the policy that sampled the batch (pi_old)", "ref": "the reference policy"}


def role_logp_link(s: StepTrace, role: str, *, sample: int, seed: int) -> LinkOutcome:
    """``old_logp`` (``ref_logp``) are the log-probs of the forward the trainer ran for that role: the oracle's
    ``token_logprobs_from_hidden`` of ``old_hidden`` (``ref_hidden``) and ``old_lm_head_weight``
    (``ref_lm_head_weight``) at the configured temperature, on a seeded sample of rows."""
    name, hid, wname = f"{role}_logp", f"{role}_hidden", f"{role}_lm_head_weight"
    if not (s.has(name) and s.has(hid) and wname in s.probe):
        return missing(*(n for n, ok in ((name, s.has(name)), (hid, s.has(hid)), (wname, wname in s.probe)) if not ok))
    other = "ref" if role == "old" else "old"
    forwards = [(f"{name} are the log-probs of {ROLE_NAMES[other]}", f"{other}_hidden", f"{other}_lm_head_weight"),
                (f"{name} are the current policy's log-probs (the loss forward's weights)", "hidden", "lm_head_weight")]

    def other_forwards(rows: np.ndarray, ids: np.ndarray, m: np.ndarray, T: float) -> list[tuple[str, np.ndarray]]:
        return [(text, oracle.token_logprobs_from_hidden(s.get(h)[rows], s.probe[w], ids, m, temperature=T))
                for text, h, w in forwards if s.has(h) and w in s.probe]

    return _logprob_link(s, name, s.get(hid), s.probe[wname], sample=sample, seed=seed,
                         what=f"{name}: log-probs of {ROLE_NAMES[role]}", label=name, alternatives=other_forwards)


SAMPLING_NEUTRAL = {"top_k": (None, 0, -1), "top_p": (None, 1.0), "min_p": (None, 0.0), "repetition_penalty": (None, 1.0)}


def sampling_link(s: StepTrace) -> LinkOutcome:
    """The sampler draws from the distribution the log-probs describe: softmax(z / T) at the configured
    temperature, with no top-k, top-p, min-p or repetition penalty (which change the distribution sampled from
    without changing the log-probs the loss uses)."""
    cfg = s.config.get("sampling")
    if not isinstance(cfg, dict):
        return missing("config.sampling")
    T = s.config.get("temperature", 1.0)
    problems = []
    if cfg.get("temperature", T) != T:
        problems.append(f"sampling temperature {cfg.get('temperature')}, log-probs at temperature {T}")
    for key, neutral in SAMPLING_NEUTRAL.items():
        if cfg.get(key) not in neutral:
            problems.append(f"{key}={cfg[key]} changes the sampling distribution")
    if problems:
        return LinkOutcome("fail", "; ".join(problems), identified=problems)
    return LinkOutcome("pass", f"samples from softmax(z/{float(T):g}) (no top-k/top-p/min-p/penalty): the distribution "
                               "the log-probs describe")


def entropy_link(s: StepTrace, *, sample: int, seed: int) -> LinkOutcome:
    """The recorded entropy of column t is that of the distribution that predicted x_t (hidden state t-1)."""
    head = _head_inputs(s)
    if head is None or not s.has("entropy"):
        return missing(*(n for n, ok in (("hidden", s.has("hidden")), ("lm_head_weight", "lm_head_weight" in s.probe),
                                          ("entropy", s.has("entropy"))) if not ok))
    h, W = head
    rows = sample_rows(s, sample, seed)
    T = float(s.config.get("temperature", 1.0))
    m = forward_mask(s)[rows]
    got = np.where(m, s.get("entropy")[rows], 0.0)
    full = np.zeros_like(m)
    full[:, 1:] = True
    every = oracle.token_entropy_from_hidden(h[rows], W, full, temperature=T)
    exp = np.where(m, every, 0.0)
    tol = tolerance("logprob.fused", _dtype(s, "entropy"))
    ok, ma, mr, worst = close(got, exp, tol)
    note = f"step {s.step}: rows {rows.tolist()} (seeded sample of {len(rows)} of {s.rows})"
    if ok:
        return LinkOutcome("pass", f"entropies of the predicting distributions at temperature {T:g}", max_abs=ma,
                           max_rel=mr, n=int(m.sum()), notes=[note])
    ident = []
    early = np.zeros_like(every)
    early[:, :-1] = every[:, 1:]
    last = h.shape[1] - 1
    if close(got[:, :last], np.where(m, early, 0.0)[:, :last], tol)[0]:
        ident.append("entropy computed unshifted (column t holds the entropy of the distribution after x_t)")
    i, t = divmod(worst, m.shape[1])
    msg = f"{'; '.join(ident) + ': ' if ident else ''}row {int(rows[i])} column {t}: entropy {got[i, t]:.9g}, oracle {exp[i, t]:.9g}"
    return LinkOutcome("fail", msg, identified=ident, max_abs=ma, max_rel=mr, n=int(m.sum()), notes=[note])


# ---------------------------------------------------------------------------------------------------------
# trace.rewards (PPO's per-token rewards) and trace.advantages
# ---------------------------------------------------------------------------------------------------------


def rewards_link(s: StepTrace) -> LinkOutcome:
    """PPO's per-token rewards: the score on each row's last loss token, minus the KL reward
    (oracle ``rlhf_token_rewards`` of the old and reference log-probs)."""
    need = [n for n in ("token_rewards", "rewards", "old_logp", "ref_logp") if not s.has(n)]
    if need:
        return missing(*need)
    m = s.get("loss_mask")
    cfg = s.config
    kw = dict(kl_coef=float(cfg.get("kl_reward_coef", 0.0)), estimator=str(cfg.get("kl_reward_estimator", "k1")))
    scores = s.get("rewards").astype(np.float64)
    old, ref = s.get("old_logp"), s.get("ref_logp")
    exp = oracle.rlhf_token_rewards(scores, old, ref, m, **kw)
    got = np.where(m, s.get("token_rewards"), 0.0)
    tol = tolerance("reward.rlhf_token_rewards", _dtype(s, "token_rewards"))
    ok, ma, mr, worst = close(got, exp, tol)
    if ok:
        return LinkOutcome("pass", "score on each row's last valid token, KL reward of old vs reference", max_abs=ma,
                           max_rel=mr, n=int(m.sum()))
    ident = []
    no_score = oracle.rlhf_token_rewards(np.zeros_like(scores), old, ref, m, **kw)
    got_all = s.get("token_rewards").astype(np.float64)
    last_col = no_score.copy()
    for i, w in enumerate(s.width):
        last_col[i, int(w) - 1] += scores[i]
    if close(got_all, last_col, tol)[0]:
        ident.append("score on the last column instead of the last valid token")
    i, t = divmod(worst, m.shape[1])
    msg = f"{'; '.join(ident) + ': ' if ident else ''}{where(s, worst)}: token reward {got[i, t]:.9g}, oracle {exp[i, t]:.9g}"
    return LinkOutcome("fail", msg, identified=ident, max_abs=ma, max_rel=mr, n=int(m.sum()))


def _row_order(s: StepTrace) -> np.ndarray:
    """The step's rows in global batch order: by ``row_ids`` when recorded, else as stacked."""
    return np.argsort(s.get("row_ids"), kind="stable") if s.has("row_ids") else np.arange(s.rows)


def _row_advantages(s: StepTrace) -> tuple[np.ndarray, list[str]]:
    """[N] sequence advantages as the loss used them (a [N, T] tensor must be constant over each row's loss tokens)."""
    A = s.get("advantages").astype(np.float64)
    if A.ndim == 1:
        return A, []
    m = s.get("loss_mask")
    first = np.argmax(m, axis=1)
    a = A[np.arange(A.shape[0]), first]
    varying = [i for i in range(A.shape[0]) if m[i].any() and not np.all(A[i][m[i]] == a[i])]
    return a, ([f"advantages vary along {len(varying)} rows (a sequence estimator broadcasts one value per row)"] if varying else [])


def _sequence_estimator(cfg: dict[str, Any], G: int) -> Callable[[np.ndarray], np.ndarray]:
    algo = cfg.get("algorithm")
    if algo == "grpo":
        kw = dict(scale=cfg.get("grpo_scale", "group"), std_ddof=int(cfg.get("grpo_std_ddof", 1)),
                  eps=float(cfg.get("grpo_eps", 1e-6)))
        return lambda r: oracle.grpo_advantages(r, G, **kw)
    if algo == "rloo":
        return lambda r: oracle.rloo_advantages(r, G)
    if algo == "reinforce":
        return lambda r: oracle.reinforce_advantages(r, baseline=cfg.get("reinforce_baseline", "none"))
    raise KeyError(algo)


def advantages_link(s: StepTrace) -> LinkOutcome:
    """Sequence estimators (grpo, rloo, reinforce): the advantages of the step's rewards, groups as
    ``group_ids`` (else contiguous in global row order) say. ``gae``: per-token rewards and rollout values
    through GAE (returns = advantages + values), whitened over the step when configured."""
    cfg = s.config
    algo = cfg.get("algorithm")
    if algo == "gae":
        return _gae_link(s)
    if algo not in ("grpo", "rloo", "reinforce"):
        return LinkOutcome(NOT_CHECKED, f"config: algorithm: {algo!r} is not one replay recomputes (grpo, rloo, reinforce, gae)")
    need = [n for n in ("rewards", "advantages") if not s.has(n)]
    if need:
        return missing(*need)
    G = int(cfg.get("group_size", 1))
    got, notes = _row_advantages(s)
    r = s.get("rewards").astype(np.float64)
    est = _sequence_estimator(cfg, G)
    order = _row_order(s)
    if s.has("group_ids"):
        gid = s.get("group_ids")[order]
        order = order[np.argsort(gid, kind="stable")]
        sizes = np.unique(s.get("group_ids"), return_counts=True)[1]
        if algo != "reinforce" and np.any(sizes != G):
            return LinkOutcome("fail", f"groups of sizes {sorted(set(sizes.tolist()))}, configured group_size {G}", n=s.rows)
    if algo != "reinforce" and len(order) % G:
        return LinkOutcome("fail", f"{len(order)} rows in the step do not form groups of {G}", n=s.rows)
    exp = np.zeros_like(r)
    exp[order] = est(r[order])
    tol = tolerance(f"adv.{algo}", _dtype(s, "advantages"))
    ok, ma, mr, worst = close(got, exp, tol)
    if ok and not notes:
        return LinkOutcome("pass", f"{algo} advantages of the step's rewards in groups of {G}", max_abs=ma, max_rel=mr, n=s.rows)
    ident = list(notes)
    if algo != "reinforce" and not ok:
        k = len(order) // G
        inter = np.zeros_like(r)
        strided = order.reshape(G, k).T.reshape(-1)  # row i of the step in group i mod k
        inter[strided] = est(r[strided])
        if close(got, inter, tol)[0]:
            ident.append(f"advantages from another group layout: group of row i is i mod {k} (interleaved), not contiguous groups of {G}")
        for g2 in (2, 4, 8, 16):
            if g2 != G and len(order) % g2 == 0:
                other = np.zeros_like(r)
                other[order] = _sequence_estimator(cfg, g2)(r[order])
                if close(got, other, tol)[0]:
                    ident.append(f"advantages over groups of {g2}, configured group_size {G}")
    i = int(worst)
    msg = f"{'; '.join(ident) + ': ' if ident else ''}row {i} (dp {int(s.dp_of[i])} micro-batch {int(s.mb_of[i])}): advantage {got[i]:.9g}, oracle {exp[i]:.9g}"
    return LinkOutcome("fail", msg, identified=ident, max_abs=ma, max_rel=mr, n=s.rows)


def _gae_link(s: StepTrace) -> LinkOutcome:
    need = [n for n in ("token_rewards", "old_values", "advantages", "returns") if not s.has(n)]
    if need:
        return missing(*need)
    cfg, m = s.config, s.get("loss_mask")
    A_raw, ret = oracle.gae(s.get("token_rewards"), s.get("old_values"), m, gamma=float(cfg.get("gamma", 1.0)),
                            lam=float(cfg.get("lam", 1.0)))
    tol = tolerance("adv.gae", _dtype(s, "returns"))
    ok, ma, mr, worst = close(np.where(m, s.get("returns"), 0.0), ret, tol)
    if not ok:
        i, t = divmod(worst, m.shape[1])
        return LinkOutcome("fail", f"{where(s, worst)}: return {s.get('returns')[i, t]:.9g}, oracle GAE return {ret[i, t]:.9g}",
                           max_abs=ma, max_rel=mr, n=int(m.sum()))
    got = np.where(m, s.get("advantages"), 0.0)
    notes = []
    if cfg.get("whiten_advantages"):
        if int(cfg.get("rollout_rows", s.rows)) != s.rows:
            notes.append(f"whitening spans the rollout's {cfg.get('rollout_rows')} rows, {s.rows} in this step: "
                         "the whitened advantages are not recomputed (GAE is, through the returns)")
            return LinkOutcome("pass", "GAE returns of the per-token rewards and rollout values", max_abs=ma, max_rel=mr,
                               n=int(m.sum()), notes=notes)
        exp = oracle.whiten(A_raw, m)
        tol = tolerance("adv.whiten", _dtype(s, "advantages"))
    else:
        exp = A_raw
    ok, ma2, mr2, worst = close(got, exp, tol)
    if ok:
        return LinkOutcome("pass", "GAE of the per-token rewards and rollout values" +
                           (", whitened over the step" if cfg.get("whiten_advantages") else ""),
                           max_abs=max(ma, ma2), max_rel=max(mr, mr2), n=int(m.sum()))
    i, t = divmod(worst, m.shape[1])
    return LinkOutcome("fail", f"{where(s, worst)}: advantage {got[i, t]:.9g}, oracle {exp[i, t]:.9g}", max_abs=ma2,
                       max_rel=mr2, n=int(m.sum()))
