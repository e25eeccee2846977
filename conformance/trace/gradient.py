"""What a step's recorded gradients say about its loss: the links ``trace.grad``, ``trace.loss``,
``trace.token_loss``, ``trace.value`` and ``trace.probe``.

The recorded ``grad_logp`` of a token is d(its micro-batch's backward scalar)/d logp_t. The optimizer step
sees the sum over micro-batches, averaged over the ``dp x cp`` ranks by the all-reduce (``grad_reduce:
mean``, the default) or summed (``sum``): that effective gradient must equal d J / d logp_t, with J the step
objective of the spec, ``aggregate(l, loss_mask, mode, num_tokens=N, num_seqs=S)`` over every row of the step
(N and S the step's global counts) and l_t = policy_t + kl_coef * KL_t(logp || ref).

:func:`explain` compares the effective gradient with every *wiring* (which recorded log-probs play pi_old
and the KL anchor) times every *normalisation* (whose counts divide the sum: the step's, each micro-batch's
then averaged or summed over the accumulation, each rank's, the data-parallel group's only under context
parallelism; and the other aggregation modes), with a constant factor fitted and named when one remains
(1/M: divided by the M accumulation steps once more; DP: the all-reduce summed). The first match in order
(the claimed configuration, then wirings, then normalisations, then factors) is the explanation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import oracle
from conformance.tolerances import tolerance
from conformance.trace.links import NOT_CHECKED, LinkOutcome, _dtype, close, missing, where
from conformance.trace.reader import StepTrace

MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_sum")
SEQUENCE_LOSSES = ("gspo",)
PROBE_CHUNK_VALUES = 2 ** 24  # logits per oracle call of the probe link (128 MiB of float64)  # their token loss couples the tokens of a row: the VJP is not diagonal


@dataclass
class Normalisation:
    name: str  # step, micro_batch_mean, micro_batch_sum, rank, cp_dp_only
    mode: str
    weights: np.ndarray  # [N, T] d J / d l_t as the optimizer step sees it

    @property
    def label(self) -> str:
        return {
            "step": f"{self.mode} over the step's global counts",
            "micro_batch_mean": f"{self.mode} of each micro-batch (its own counts), averaged over the accumulation steps",
            "micro_batch_sum": f"{self.mode} of each micro-batch (its own counts), summed over the accumulation steps",
            "rank": f"{self.mode} over each rank's own counts, averaged over the ranks",
            "cp_dp_only": f"{self.mode} with the token count all-reduced over the data-parallel group only "
                          "(each context-parallel rank counts its own shard)",
        }[self.name]


@dataclass
class Wiring:
    name: str
    label: str
    old: str  # the recorded tensor playing pi_old
    ref: str  # the recorded tensor playing the KL anchor


WIRINGS = (
    Wiring("as_recorded", "old_logp as pi_old, ref_logp as the KL anchor", "old_logp", "ref_logp"),
    Wiring("old_ref_swapped", "old and reference log-probs swapped (ref_logp as pi_old, old_logp as the KL anchor)",
           "ref_logp", "old_logp"),
    Wiring("kl_to_old", "KL to the old policy instead of the reference (old_logp as the KL anchor)", "old_logp", "old_logp"),
    Wiring("rollout_as_old", "rollout (engine) log-probs used as pi_old", "rollout_logp", "ref_logp"),
    Wiring("ratio_to_ref", "the ratio taken against the reference (ref_logp as pi_old)", "ref_logp", "ref_logp"),
)


def _world(s: StepTrace) -> int:
    return s.dp * s.cp


def reduction(s: StepTrace) -> float:
    """What the all-reduce multiplies the summed micro-batch gradients by."""
    how = s.config.get("grad_reduce", "mean")
    if how not in ("mean", "sum"):
        raise ValueError(f"trace {s.folder}: config: grad_reduce: expected 'mean' or 'sum', got {how!r}")
    return 1.0 / _world(s) if how == "mean" else 1.0


def _weights(mask: np.ndarray, mode: str, norm_length: float | None, **counts: float) -> np.ndarray:
    z = np.zeros(mask.shape, dtype=np.float64)
    return oracle.aggregate_grad(z, mask, 1.0, mode=mode, norm_length=norm_length, **counts)


def normalisations(s: StepTrace, mode: str, mask: np.ndarray) -> list[Normalisation]:
    """Every normalisation of ``mode`` the layout allows, the step's global counts first."""
    L = s.config.get("norm_length")
    L = float(L) if L is not None else (float(mask.shape[1]) if mode == "seq_mean_token_sum_norm" else None)
    N, S = float(mask.sum()), float(mask.shape[0])
    out = [Normalisation("step", mode, _weights(mask, mode, L, num_tokens=N, num_seqs=S))]
    if s.n_micro > 1:
        mean = np.zeros_like(out[0].weights)
        total = np.zeros_like(mean)
        for i in range(s.n_micro):
            rows = s.mb_of == i
            w = _weights(mask[rows], mode, L)
            M = s.micro_per_rank[int(s.dp_of[rows][0])]
            mean[rows] = w / M / s.dp
            total[rows] = w / s.dp
        out += [Normalisation("micro_batch_mean", mode, mean), Normalisation("micro_batch_sum", mode, total)]
    if s.dp > 1:
        rank = np.zeros_like(out[0].weights)
        for d in range(s.dp):
            rows = s.dp_of == d
            rank[rows] = _weights(mask[rows], mode, L) / s.dp
        out.append(Normalisation("rank", mode, rank))
    if s.cp > 1 and mode == "token_mean":
        w = np.zeros_like(out[0].weights)
        for c in range(s.cp):
            held = mask & (s.cp_of == c)
            w[held] = 1.0 / max(float(held.sum()), 1.0)
        out.append(Normalisation("cp_dp_only", mode, w))
    return out


def factor_name(k: float, s: StepTrace) -> str | None:
    """A name for the constant factor k between observed and predicted, when it is one the layout explains
    (every meaning listed when several sizes coincide: "x1/2 (1/the accumulation steps M, 1/the data-parallel size)")."""
    M = max(s.micro_per_rank.values())
    meanings: dict[int, list[str]] = {}
    for value, name in ((M, "the accumulation steps M"), (s.dp, "the data-parallel size"), (s.cp, "the context-parallel size"),
                        (_world(s), "the world size")):
        if value > 1 and name not in meanings.get(value, []):
            meanings.setdefault(value, []).append(name)
    meanings.setdefault(2, [])
    for value, names in meanings.items():
        for v, inverse in ((float(value), False), (1.0 / value, True)):
            if abs(k - v) <= 1e-4 * v:
                head = f"x1/{value}" if inverse else f"x{value}"
                said = ", ".join(f"1/{n}" if inverse else n for n in names)
                return head + (f" ({said})" if said else "")
    return None


# A step whose loss has no gradient (every advantage 0, no KL or entropy term) tells no normalisation apart.
ZERO_STEP = "the step's loss gradient is exactly 0 (every advantage 0, no KL or entropy term): nothing to compare"


class _Terms:
    """The step's per-token objective under one wiring: token loss l and, for the diagonal losses, dl/dlogp."""

    def __init__(self, s: StepTrace, wiring: Wiring, mask: np.ndarray) -> None:
        cfg = s.config
        self.s, self.mask, self.wiring = s, mask, wiring
        self.loss_name = str(cfg.get("loss", "ppo"))
        self.logp = s.get("logp").astype(np.float64)
        self.A = s.get("advantages").astype(np.float64)
        self.old = s.get(wiring.old).astype(np.float64) if self.loss_name != "pg" else None
        self.kl_coef = float(cfg.get("kl_coef", 0.0) or 0.0)
        self.ref = s.get(wiring.ref).astype(np.float64) if self.kl_coef else None
        self.kl_kw = dict(estimator=str(cfg.get("kl_estimator", "k3")), gradient=str(cfg.get("kl_gradient", "estimator")),
                          log_ratio_clamp=cfg.get("kl_log_ratio_clamp"), clamp=cfg.get("kl_clamp"))
        if self.kl_coef and self.kl_kw["gradient"] in ("unbiased", "bias_corrected") and self.old is None:
            self.old = s.get(wiring.old).astype(np.float64)  # the ratio forms read pi_old
        name = self.loss_name
        if name == "ppo":
            self.kw = dict(eps_low=float(cfg.get("eps_low", 0.2)), eps_high=float(cfg.get("eps_high", 0.2)),
                           dual_clip=cfg.get("dual_clip"))
        elif name == "gspo":
            self.kw = dict(eps_low=float(cfg.get("eps_low", 3e-4)), eps_high=float(cfg.get("eps_high", 4e-4)))
        elif name == "cispo":
            self.kw = dict(eps_low=cfg.get("eps_low"), eps_high=float(cfg.get("eps_high", 0.28)),
                           bound=str(cfg.get("cispo_bound", "relative")))
        elif name == "pg":
            self.kw = {}
        elif name in ("sapo", "vespo"):  # their oracle keywords, as claimed (the oracle's defaults otherwise)
            self.kw = dict(cfg.get("loss_kwargs") or {})
        else:
            raise ValueError(f"trace {s.folder}: config: loss: {name!r} not one of ppo, gspo, cispo, sapo, vespo, pg")
        self._unit: np.ndarray | None = None

    def _policy(self, fn: str, *extra: np.ndarray) -> np.ndarray:
        f = getattr(oracle, f"{self.loss_name}_token_loss{fn}")
        if self.loss_name == "pg":
            return f(self.logp, self.A, self.mask, *extra)
        return f(self.logp, self.old, self.A, self.mask, *extra, **self.kw)

    def token_loss(self) -> np.ndarray:
        l = self._policy("")
        if self.kl_coef:
            l = l + self.kl_coef * oracle.kl_loss_term(self.logp, self.ref, self.mask, self.old, **self.kl_kw)
        return l

    def grad(self, w: np.ndarray) -> np.ndarray:
        """d(sum_t w_t l_t)/d logp."""
        if self.loss_name not in SEQUENCE_LOSSES:
            if self._unit is None:
                one = np.ones_like(self.logp)
                u = self._policy("_grad", one)
                if self.kl_coef:
                    u = u + self.kl_coef * oracle.kl_loss_term_grad(self.logp, self.ref, self.mask, self.old, one, **self.kl_kw)
                self._unit = u
            return self._unit * w
        g = self._policy("_grad", w)
        if self.kl_coef:
            g = g + self.kl_coef * oracle.kl_loss_term_grad(self.logp, self.ref, self.mask, self.old, w, **self.kl_kw)
        return g


@dataclass
class Explanation:
    wiring: Wiring
    norm: Normalisation
    factor: float
    factor_label: str | None
    max_abs: float
    max_rel: float
    terms: _Terms

    @property
    def exact(self) -> bool:
        return self.factor == 1.0

    def describe(self) -> str:
        parts = []
        if self.wiring.name != "as_recorded":
            parts.append(self.wiring.label)
        parts.append(self.norm.label)
        if not self.exact:
            parts.append(self.factor_label or f"x{self.factor:.6g}")
        return "; ".join(parts)


def _needs(s: StepTrace) -> list[str]:
    loss = s.config.get("loss", "ppo")
    need = ["logp", "grad_logp", "advantages"] + (["old_logp"] if loss != "pg" else [])
    if float(s.config.get("kl_coef", 0.0) or 0.0):
        need.append("ref_logp")
    return [n for n in need if not s.has(n)]


def claimed(s: StepTrace) -> tuple[str, str]:
    mode = str(s.config.get("agg", "token_mean"))
    if mode not in MODES:
        raise ValueError(f"trace {s.folder}: config: agg: expected one of {', '.join(MODES)}, got {mode!r}")
    scope = str(s.config.get("agg_scope", "step"))
    if scope not in ("step", "micro_batch"):
        raise ValueError(f"trace {s.folder}: config: agg_scope: expected 'step' or 'micro_batch', got {scope!r}")
    return mode, scope


def applicable_wirings(s: StepTrace, terms: _Terms) -> list[Wiring]:
    """The wirings whose tensors were recorded, one per distinct (pi_old, anchor) pair the loss reads: without
    a KL term the anchor plays no part, and the policy-gradient loss reads no pi_old."""
    seen, out = set(), []
    for w in WIRINGS:
        key = (w.old if terms.loss_name != "pg" else None, w.ref if terms.kl_coef else None)
        if key in seen or not s.has(*(n for n in key if n)):
            continue
        seen.add(key)
        out.append(w)
    return out


def explain(s: StepTrace) -> tuple[list[Explanation], Explanation, np.ndarray]:
    """(every wiring x normalisation x factor that reproduces the effective gradient, most plausible first: the
    claimed mode before the others, an exact match before a fitted factor, the recorded wiring before a swap;
    the claimed configuration's prediction (spec wiring, claimed mode and scope, factor 1); the observed
    effective gradient). When the claimed configuration reproduces it, the list is just that."""
    mask = s.get("loss_mask")
    obs = np.where(mask, s.get("grad_logp").astype(np.float64), 0.0) * reduction(s)
    tol = tolerance("agg.aggregate", _dtype(s, "grad_logp"), "grad")
    mode, scope = claimed(s)
    norms = {mode: normalisations(s, mode, mask)}
    want = "step" if scope == "step" else "micro_batch_mean"
    base_norm = next((n for n in norms[mode] if n.name == want), norms[mode][0])
    spec_terms = _Terms(s, WIRINGS[0], mask)
    pred = spec_terms.grad(base_norm.weights)
    ok, ma, mr, _ = close(obs, pred, tol, scaled=True)
    base = Explanation(WIRINGS[0], base_norm, 1.0, None, ma, mr, spec_terms)
    if ok:
        return [base], base, obs
    for other in MODES:
        if other != mode:
            norms[other] = normalisations(s, other, mask)
    found: list[tuple[tuple[int, int, int], Explanation]] = []
    for wi, w in enumerate(applicable_wirings(s, spec_terms)):
        terms = spec_terms if w.name == "as_recorded" else _Terms(s, w, mask)
        for m in [mode] + [x for x in MODES if x != mode]:
            for norm in norms[m]:
                p = terms.grad(norm.weights)
                ok, ma, mr, _ = close(obs, p, tol, scaled=True)
                rank_mode = 0 if m == mode else 1
                if ok:
                    found.append(((rank_mode, 0, wi), Explanation(w, norm, 1.0, None, ma, mr, terms)))
                    continue
                denom = float(np.sum(p * p))
                if denom > 0:
                    k = float(np.sum(obs * p) / denom)
                    label = factor_name(k, s)
                    if label is not None:
                        ok, ma, mr, _ = close(obs, k * p, tol, scaled=True)
                        if ok:
                            found.append(((rank_mode, 1, wi), Explanation(w, norm, k, label, ma, mr, terms)))
    found.sort(key=lambda x: x[0])
    return [e for _, e in found], base, obs


def grad_link(s: StepTrace) -> tuple[LinkOutcome, Explanation | None]:
    need = _needs(s)
    if need:
        return missing(*need), None
    cfg = s.config
    if cfg.get("correction", "none") not in (None, "none"):
        return LinkOutcome(NOT_CHECKED, f"config: correction {cfg['correction']!r}: the corrected losses are not replayed yet"), None
    explanations, base, obs = explain(s)
    found = explanations[0] if explanations else None
    mode, scope = claimed(s)
    n = int(s.get("loss_mask").sum())
    pred = base.terms.grad(base.norm.weights)
    if not np.any(obs) and not np.any(pred):
        return LinkOutcome(NOT_CHECKED, ZERO_STEP), None
    if found is base:
        if scope == "step":
            return LinkOutcome("pass", f"d J/d logp of {base.norm.label}", max_abs=base.max_abs, max_rel=base.max_rel, n=n), found
        return LinkOutcome("preset", f"the trainer's documented convention: {base.norm.label}", max_abs=base.max_abs,
                           max_rel=base.max_rel, n=n, preset=f"{mode} per micro-batch"), found
    _, ma, mr, worst = close(obs, pred, tolerance("agg.aggregate", _dtype(s, "grad_logp"), "grad"), scaled=True)
    i, t = divmod(worst, obs.shape[1])
    first = f"{where(s, worst)}: {obs[i, t]:.6g}, expected {pred[i, t]:.6g}"
    claim = f"claimed: {base.norm.label}"
    if found is None:
        return LinkOutcome("fail", f"no wiring or normalisation explains d loss/d logp ({claim}); first divergence {first}",
                           max_abs=ma, max_rel=mr, n=n), None
    ident = [e.describe() for e in explanations]
    also = f"; also consistent: {' | '.join(ident[1:])}" if len(ident) > 1 else ""
    return LinkOutcome("fail", f"the gradient is {found.describe()} ({claim}){also}; first divergence {first}", identified=ident,
                       max_abs=ma, max_rel=mr, n=n), found


def _entropy_part(s: StepTrace, w: np.ndarray) -> np.ndarray | None:
    c = float(s.config.get("entropy_coef", 0.0) or 0.0)
    if not c:
        return np.zeros_like(w)
    if not s.has("entropy"):
        return None
    return -c * s.get("entropy").astype(np.float64) * w


def loss_link(s: StepTrace, explanation: Explanation | None) -> LinkOutcome:
    """Every micro-batch's backward scalar equals its share of the step objective (sum_t W_t l_t over its tokens,
    W the effective weights divided by the all-reduce's factor), for the claimed configuration."""
    if not s.losses:
        return missing("loss")
    need = _needs(s)
    need = [n for n in need if n != "grad_logp"]
    if need:
        return missing(*need)
    mask = s.get("loss_mask")
    mode, scope = claimed(s)
    norms = normalisations(s, mode, mask)
    want = "step" if scope == "step" else "micro_batch_mean"
    norm = next((n for n in norms if n.name == want), norms[0])
    terms = _Terms(s, WIRINGS[0], mask)
    l = terms.token_loss()
    ent = _entropy_part(s, norm.weights)
    if ent is None:
        return missing("entropy (entropy_coef > 0)")
    vpart = _value_share(s)
    if isinstance(vpart, LinkOutcome):
        return vpart
    per_token = l * norm.weights + ent
    red = reduction(s)
    got, exp, size = [], [], []
    for d, j, value in s.losses:
        rows = np.flatnonzero(s.dp_of == d)
        i = int(np.unique(s.mb_of[rows])[j])
        sel = s.mb_of == i
        terms = np.concatenate([per_token[sel].ravel(), vpart[sel].ravel() if vpart is not None else []])
        exp.append(terms.sum() / red)
        size.append(np.abs(terms).sum() / red)  # the sum's terms cancel (advantages of mean 0): compare at their size
        got.append(value)
    got_a, exp_a = np.array(got), np.array(exp)
    if not np.any(got_a) and not max(size):
        return LinkOutcome(NOT_CHECKED, ZERO_STEP)
    tol = tolerance("agg.aggregate", _dtype(s, "logp"))
    ok, ma, mr, worst = close(got_a, exp_a, tol, scale=max(size) or 1.0)
    if ok:
        return LinkOutcome("pass" if scope == "step" else "preset", f"each micro-batch's loss is its share of {norm.label}",
                           max_abs=ma, max_rel=mr, n=len(got), preset=None if scope == "step" else f"{mode} per micro-batch")
    d, j, _ = s.losses[worst]
    msg = f"dp {d} micro-batch {j}: loss {got_a[worst]:.9g}, expected {exp_a[worst]:.9g} ({norm.label})"
    ident = []
    if explanation is not None and not (explanation.norm is norm and explanation.exact and explanation.wiring is WIRINGS[0]):
        ident = [explanation.describe()]
        msg += f"; the gradient link identified: {explanation.describe()}"
    return LinkOutcome("fail", msg, identified=ident, max_abs=ma, max_rel=mr, n=len(got))


def _value_share(s: StepTrace) -> np.ndarray | None | LinkOutcome:
    """[N, T] the value loss's part of each token in the backward scalars (vf_coef * W_t * value loss_t), or None."""
    if s.config.get("algorithm") != "gae" or not float(s.config.get("vf_coef", 0.0) or 0.0):
        return None
    need = [n for n in ("values", "old_values", "returns") if not s.has(n)]
    if need:
        return missing(*need)
    mask = s.get("loss_mask")
    mode = str(s.config.get("value_agg", s.config.get("agg", "token_mean")))
    w = normalisations(s, mode, mask)[0].weights
    vl = oracle.value_token_loss(s.get("values"), s.get("old_values"), s.get("returns"), mask, clip=s.config.get("value_clip"))
    return float(s.config["vf_coef"]) * w * vl


def token_loss_link(s: StepTrace) -> LinkOutcome:
    """The trainer's own per-token loss (where it exposes one) is l_t of the spec wiring."""
    need = [n for n in ["token_loss"] + _needs(s) if n != "grad_logp" and not s.has(n)]
    if need:
        return missing(*need)
    mask = s.get("loss_mask")
    got = np.where(mask, s.get("token_loss"), 0.0)
    tol = tolerance("loss.ppo", _dtype(s, "token_loss"))
    for w in applicable_wirings(s, _Terms(s, WIRINGS[0], mask)):  # the recorded wiring first
        terms = _Terms(s, w, mask)
        exp = terms.token_loss()
        ent = _entropy_part(s, np.ones_like(exp))
        if ent is not None:
            exp = exp + ent
        ok, ma, mr, worst = close(got, exp, tol)
        if w is WIRINGS[0]:
            first = (ma, mr, worst, exp)
        if ok:
            if w is WIRINGS[0]:
                return LinkOutcome("pass", "policy loss + kl_coef * KL (- entropy_coef * H) per token", max_abs=ma, max_rel=mr,
                                   n=int(mask.sum()))
            return LinkOutcome("fail", f"the per-token loss is computed with {w.label}", identified=[w.label], max_abs=first[0],
                               max_rel=first[1], n=int(mask.sum()))
    ma, mr, worst, exp = first
    i, t = divmod(worst, mask.shape[1])
    return LinkOutcome("fail", f"{where(s, worst)}: token loss {got[i, t]:.9g}, expected {exp[i, t]:.9g}", max_abs=ma,
                       max_rel=mr, n=int(mask.sum()))


def value_link(s: StepTrace) -> LinkOutcome:
    """d loss / d values = vf_coef * d aggregate(value loss)/d values with the step's counts; the targets
    (returns) and the clip anchor are constants."""
    if s.config.get("algorithm") != "gae":
        return LinkOutcome(NOT_CHECKED, "no critic in this configuration (algorithm is not gae)")
    need = [n for n in ("values", "grad_values", "old_values", "returns") if not s.has(n)]
    if need:
        return missing(*need)
    mask = s.get("loss_mask")
    mode = str(s.config.get("value_agg", s.config.get("agg", "token_mean")))
    c = float(s.config.get("vf_coef", 1.0))
    obs = np.where(mask, s.get("grad_values").astype(np.float64), 0.0) * reduction(s)
    tol = tolerance("loss.value", _dtype(s, "grad_values"), "grad")
    args = (s.get("values"), s.get("old_values"), s.get("returns"), mask)
    clip = s.config.get("value_clip")
    cands = normalisations(s, mode, mask)
    exp = c * oracle.value_token_loss_grad(*args, cands[0].weights, clip=clip)
    ok, ma, mr, worst = close(obs, exp, tol, scaled=True)
    if ok:
        return LinkOutcome("pass", f"vf_coef * d value loss/d values, {cands[0].label}", max_abs=ma, max_rel=mr, n=int(mask.sum()))
    ident = []
    live = np.abs(exp) > 1e-6 * np.max(np.abs(exp))
    if live.any() and np.all(np.abs(obs[live]) <= 1e-6 * np.max(np.abs(exp))):
        ident.append("value targets not detached (the returns move with the values: d loss/d values is 0)")
    for norm in cands[1:]:
        if close(obs, c * oracle.value_token_loss_grad(*args, norm.weights, clip=clip), tol, scaled=True)[0]:
            ident.append(norm.label)
    i, t = divmod(worst, mask.shape[1])
    msg = f"{'; '.join(ident) + ': ' if ident else ''}{where(s, worst)}: {obs[i, t]:.6g}, expected {exp[i, t]:.6g}"
    return LinkOutcome("fail", msg, identified=ident, max_abs=ma, max_rel=mr, n=int(mask.sum()))


def probe_link(s: StepTrace) -> LinkOutcome:
    """The LM-head weight's gradient after accumulation and all-reduce is the step objective's: the chain rule
    through the recorded hidden states of d J/d logp (claimed configuration) and of the entropy bonus."""
    if "probe_grad" not in s.probe:
        return missing("probe_grad")
    if "lm_head_weight" not in s.probe or not s.has("hidden"):
        return missing(*(n for n, ok in (("lm_head_weight", "lm_head_weight" in s.probe), ("hidden", s.has("hidden"))) if not ok))
    W, G = s.probe["lm_head_weight"], s.probe["probe_grad"].astype(np.float64)
    if G.shape != W.shape:
        return LinkOutcome(NOT_CHECKED, f"probe {s.probe_name!r} has shape {list(G.shape)}, not the LM head's {list(W.shape)}")
    need = [n for n in _needs(s) if n != "grad_logp"]
    if need:
        return missing(*need)
    mask = s.get("loss_mask")
    mode, scope = claimed(s)
    norms = normalisations(s, mode, mask)
    want = "step" if scope == "step" else "micro_batch_mean"
    norm = next((n for n in norms if n.name == want), norms[0])
    terms = _Terms(s, WIRINGS[0], mask)
    T = float(s.config.get("temperature", 1.0))
    h, ids = s.get("hidden"), s.get("input_ids").astype(np.int64)

    # the oracle materialises [rows, T, V] float64 logits: rows in chunks of about PROBE_CHUNK_VALUES values
    chunk = max(1, int(PROBE_CHUNK_VALUES // max(1, h.shape[1] * W.shape[0])))

    def through_head(g_logp: np.ndarray, g_ent: np.ndarray | None) -> np.ndarray:
        dW = np.zeros(W.shape, dtype=np.float64)
        for a in range(0, h.shape[0], chunk):
            b = slice(a, a + chunk)
            dW += oracle.token_logprobs_from_hidden_grad(h[b], W, ids[b], mask[b], g_logp[b], temperature=T)[1]
            if g_ent is not None and np.any(g_ent[b]):
                dW += oracle.token_entropy_from_hidden_grad(h[b], W, mask[b], g_ent[b], temperature=T)[1]
        return dW

    c = float(s.config.get("entropy_coef", 0.0) or 0.0)
    g_ent = -c * norm.weights if c else None
    exp = through_head(terms.grad(norm.weights), g_ent)
    if not np.any(G) and not np.any(exp):
        return LinkOutcome(NOT_CHECKED, ZERO_STEP)
    tol = tolerance("logprob.fused", _dtype(s, "logp"), "grad")
    ok, ma, mr, worst = close(G, exp, tol, scaled=True)
    label = f"{s.probe_name or 'the LM-head weight'}"
    if ok:
        status = "pass" if scope == "step" else "preset"
        return LinkOutcome(status, f"{label}: the gradient of {norm.label} through the recorded hidden states",
                           max_abs=ma, max_rel=mr, n=int(G.size), preset=None if scope == "step" else f"{mode} per micro-batch")
    ident = []
    if s.has("grad_logp"):
        red = reduction(s)
        g_obs = np.where(mask, s.get("grad_logp").astype(np.float64), 0.0) * red
        e_obs = (np.where(mask, s.get("grad_entropy").astype(np.float64), 0.0) * red) if s.has("grad_entropy") else g_ent
        chain = through_head(g_obs, e_obs)
        if close(G, chain, tol, scaled=True)[0]:
            ident.append("the probe carries the recorded d loss/d logp: the divergence is the loss's (see trace.grad)")
        else:
            denom = float(np.sum(chain * chain))
            k = float(np.sum(G * chain) / denom) if denom else 0.0
            name = factor_name(k, s)
            if name and close(G, k * chain, tol, scaled=True)[0]:
                ident.append(f"the gradient is scaled after the backward: {name} (the loss's own gradient is recorded unscaled)")
    denom = float(np.sum(exp * exp))
    k = float(np.sum(G * exp) / denom) if denom else 0.0
    name = factor_name(k, s)
    if name and close(G, k * exp, tol, scaled=True)[0] and not ident:
        ident.append(f"the probe gradient is {name} the step objective's")
    v, dim = divmod(worst, W.shape[1])
    msg = f"{'; '.join(ident) + ': ' if ident else ''}{label}[{v}, {dim}]: {G.flat[worst]:.6g}, expected {exp.flat[worst]:.6g} ({norm.label})"
    return LinkOutcome("fail", msg, identified=ident, max_abs=ma, max_rel=mr, n=int(G.size))

