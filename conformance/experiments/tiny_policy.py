"""The tiny autoregressive policy experiment: why baselines and clipping exist, in numbers.

A policy writes ``LENGTH = 3`` tokens from a vocabulary of ``V = 8``, one at a time, and earns one
point per token that matches a hidden target sequence, plus a constant ``OFFSET = 10`` (real rewards
are rarely centred at zero). The policy is a table of logits with one row per prefix
(``1 + V + V**2`` rows, ``V`` columns), initialised to zeros and trained with Adam on batches of 16
sampled sequences. Five learners differ only in their advantage and loss (see ``LEARNERS``).

Every loss goes through the spec'd token API of ``refimpl``: a sequence's log-probability (the sum of
its three token log-probabilities, a differentiable function of the table) sits at column 1 of a
``[B, 2]`` tensor whose mask is ``[[False, True]] * B`` (column 0 is never valid: ``mask[:, 0]`` is
False by the spec), so ``pg_token_loss`` / ``ppo_token_loss`` give the per-sequence term and
``aggregate(..., mode="token_mean")`` the mean over the batch.

Everything is vectorised over seeds: a run holds one ``[S, ROWS, V]`` table, one row of tables per
seed. The loss is the sum over seeds of each seed's batch mean, and Adam is element-wise, so the seeds
train exactly as ``S`` independent runs would. Each seed owns a ``torch.Generator`` seeded with the
seed itself; it draws the seed's target, then one block of uniforms per update, which inverse-CDF
sampling turns into tokens. Learners with the same seed therefore see the same target and draw the
same first batch (the table is zero for all of them).

The functions here are pure apart from the optimiser state inside ``train_learner``; the CLI glue is
``conformance.commands.tiny_policy``.
"""

from __future__ import annotations

import contextlib
import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np
import torch

V = 8
LENGTH = 3
ROWS = 1 + V + V * V  # one row per prefix: (), (a,), (a, b)
OFFSET = 10.0
BATCH_SIZE = 16
CLIP_EPS = 0.2
SOLVED_AT = 2.9
CHECKPOINTS = (10, 50, 100, 200, 300)
DTYPE = torch.float64

DEFAULT_SEEDS = 10
DEFAULT_UPDATES = 300
DEFAULT_LRS = (0.1, 0.03)
DEFAULT_COSINE_BATCHES = 1000
COSINE_SEED = 1_000_003  # the cosine batches' own generator, apart from the training seeds
EARLY_UPDATES = 20  # PPO ratio statistics are also reported for these first updates


@dataclass(frozen=True)
class Learner:
    """One learner: reward offset, advantage, optimiser steps per batch and the loss."""

    name: str
    offset: float  # added to the matches to make the reward
    baseline: bool  # advantage = reward - batch mean (else advantage = reward)
    passes: int  # optimiser steps on each sampled batch
    loss: str  # "pg" (pg_token_loss) or "ppo" (ppo_token_loss, one ratio per sequence)


LEARNERS = (
    Learner("REINFORCE", OFFSET, baseline=False, passes=1, loss="pg"),
    Learner("REINFORCE, no offset", 0.0, baseline=False, passes=1, loss="pg"),
    Learner("REINFORCE + baseline", OFFSET, baseline=True, passes=1, loss="pg"),
    Learner("baseline, 4 passes", OFFSET, baseline=True, passes=4, loss="pg"),
    Learner("PPO", OFFSET, baseline=True, passes=4, loss="ppo"),
)
LEARNER_NAMES = tuple(learner.name for learner in LEARNERS)
_LEARNERS_BY_NAME = {learner.name: learner for learner in LEARNERS}

REQUIRED_LOSSES = ("pg_token_loss", "ppo_token_loss", "aggregate")


class MissingPlotDependency(RuntimeError):
    """matplotlib is an optional dependency, needed only for the plot."""


# --------------------------------------------------------------------------------------------------
# The losses under test


def load_losses(module: str = "refimpl") -> ModuleType:
    """Import the module whose spec'd losses the experiment runs, checking that it exports them."""
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeError(f"tiny-policy: cannot import {module!r}: {exc}") from exc
    missing = [name for name in REQUIRED_LOSSES if not callable(getattr(mod, name, None))]
    if missing:
        raise RuntimeError(
            f"tiny-policy: {module} does not export {', '.join(missing)} "
            f"(needed: {', '.join(REQUIRED_LOSSES)})"
        )
    return mod


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, then restore the setting.

    The tensors here are tiny (at most a few thousand elements): threads only add synchronisation,
    and on a shared machine a busy core makes every op wait for the slowest thread (measured: a 50-update
    PPO run took 9-17 s on two threads next to other jobs, 0.5-1.1 s on one).
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def lr_key(lr: float) -> str:
    """The JSON key of a learning rate: ``0.1 -> "0.1"``, ``0.03 -> "0.03"``."""
    return f"{lr:g}"


def checkpoints_for(updates: int) -> tuple[int, ...]:
    """The reported updates: the standard checkpoints within the run, and always the last update."""
    return tuple(sorted({c for c in CHECKPOINTS if c <= updates} | {updates}))


# --------------------------------------------------------------------------------------------------
# The policy: a table of logits, one row per prefix


def prefix_rows(seqs: torch.Tensor) -> torch.Tensor:
    """Row of the table that predicts each token: ``[..., 3] -> [..., 3]``.

    Row 0 is the empty prefix, rows ``1 + a`` the prefixes ``(a,)``, rows ``1 + V + a*V + b`` the
    prefixes ``(a, b)``.
    """
    first = torch.zeros_like(seqs[..., 0])
    second = 1 + seqs[..., 0]
    third = 1 + V + seqs[..., 0] * V + seqs[..., 1]
    return torch.stack([first, second, third], dim=-1)


def sequence_logprob(table: torch.Tensor, seqs: torch.Tensor) -> torch.Tensor:
    """log pi(x) = sum of the three token log-probs: table ``[S, ROWS, V]``, seqs ``[S, N, 3]`` -> ``[S, N]``.

    Differentiable in ``table``.
    """
    logp_rows = torch.log_softmax(table, dim=-1)
    seed_index = torch.arange(table.shape[0])[:, None, None]
    token_logp = logp_rows[seed_index, prefix_rows(seqs), seqs]  # [S, N, 3]
    return token_logp.sum(dim=-1)


def sample_sequences(table: torch.Tensor, uniforms: torch.Tensor) -> torch.Tensor:
    """Sample one token at a time by inverse CDF: uniforms ``[S, N, 3]`` in [0, 1) -> tokens ``[S, N, 3]``."""
    table = table.detach()
    n_seeds, n_seqs, _ = uniforms.shape
    seed_index = torch.arange(n_seeds)[:, None]
    seqs = torch.zeros(n_seeds, n_seqs, LENGTH, dtype=torch.long)
    rows = torch.zeros(n_seeds, n_seqs, dtype=torch.long)
    for t in range(LENGTH):
        cdf = torch.softmax(table[seed_index, rows], dim=-1).cumsum(dim=-1)  # [S, N, V]
        token = (cdf < uniforms[..., t : t + 1]).sum(dim=-1).clamp_max(V - 1)
        seqs[..., t] = token
        rows = 1 + token if t == 0 else 1 + V + seqs[..., 0] * V + token
    return seqs


def count_matches(seqs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Matching tokens per sequence: seqs ``[S, N, 3]``, targets ``[S, 3]`` -> ``[S, N]`` float."""
    return (seqs == targets[:, None, :]).sum(dim=-1).to(DTYPE)


def all_sequences() -> torch.Tensor:
    """All ``V**3 = 512`` sequences, ``[512, 3]``, in lexicographic order."""
    vocab = torch.arange(V)
    return torch.cartesian_prod(vocab, vocab, vocab)


def exact_distribution(table: torch.Tensor) -> torch.Tensor:
    """pi(x) for every sequence, by enumeration: ``[S, ROWS, V] -> [S, 512]`` (differentiable)."""
    seqs = all_sequences().expand(table.shape[0], -1, -1)
    return sequence_logprob(table, seqs).exp()


def expected_reward(table: torch.Tensor, targets: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """J = sum_x pi(x) (matches(x) + offset), exactly: ``[S]`` (differentiable in ``table``)."""
    seqs = all_sequences().expand(table.shape[0], -1, -1)
    probs = sequence_logprob(table, seqs).exp()
    return (probs * (count_matches(seqs, targets) + offset)).sum(dim=-1)


def exact_gradient(table: torch.Tensor, targets: torch.Tensor, offset: float = 0.0) -> torch.Tensor:
    """dJ/d(table) by autograd on the enumerated sum, ``[S, ROWS, V]``. The offset adds nothing
    (the probabilities sum to 1), but it may be given."""
    leaf = table.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(expected_reward(leaf, targets, offset).sum(), leaf)
    return grad


def seed_generators(seeds: Sequence[int]) -> list[torch.Generator]:
    return [torch.Generator().manual_seed(int(seed)) for seed in seeds]


def draw_targets(generators: Sequence[torch.Generator]) -> torch.Tensor:
    """Each seed's hidden target, ``[S, 3]``: the first draw from the seed's generator."""
    return torch.stack([torch.randint(V, (LENGTH,), generator=g) for g in generators])


def draw_uniforms(generators: Sequence[torch.Generator], n: int) -> torch.Tensor:
    """One batch's uniforms per seed, ``[S, n, 3]``."""
    return torch.stack([torch.rand(n, LENGTH, generator=g, dtype=DTYPE) for g in generators])


# --------------------------------------------------------------------------------------------------
# Sequence-level losses through the token API


def sequence_mask(n: int) -> torch.Tensor:
    """``[[False, True]] * n``: column 1 holds each sequence's term; column 0 is never valid."""
    mask = torch.zeros(n, 2, dtype=torch.bool)
    mask[:, 1] = True
    return mask


def as_token_column(seq_values: torch.Tensor) -> torch.Tensor:
    """``[B] -> [B, 2]`` with the values at column 1 and 0 at the (masked) column 0."""
    return torch.stack([torch.zeros_like(seq_values), seq_values], dim=1)


def sequence_token_loss(
    losses: ModuleType,
    loss: str,
    seq_logp: torch.Tensor,
    advantages: torch.Tensor,
    old_seq_logp: torch.Tensor | None = None,
    *,
    eps: float = CLIP_EPS,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The per-sequence loss terms of ``B`` sequences as a ``[B, 2]`` token loss, and its mask.

    ``loss="pg"``: ``pg_token_loss``, i.e. ``-A * log pi(x)``; ``loss="ppo"``: ``ppo_token_loss`` with one
    ratio per sequence, ``exp(log pi(x) - log pi_old(x))``, clipped to ``[1 - eps, 1 + eps]``.
    """
    mask = sequence_mask(seq_logp.shape[0])
    logp = as_token_column(seq_logp)
    if loss == "pg":
        token_loss = losses.pg_token_loss(logp, advantages, mask)
    elif loss == "ppo":
        if old_seq_logp is None:
            raise ValueError("sequence_token_loss: old_seq_logp is required for loss='ppo'")
        token_loss = losses.ppo_token_loss(
            logp, as_token_column(old_seq_logp), advantages, mask, eps_low=eps, eps_high=eps
        )
    else:
        raise ValueError(f"sequence_token_loss: loss: expected 'pg' or 'ppo', got {loss!r}")
    return token_loss, mask


def batch_loss(
    losses: ModuleType,
    loss: str,
    seq_logp: torch.Tensor,
    advantages: torch.Tensor,
    old_seq_logp: torch.Tensor | None = None,
) -> torch.Tensor:
    """Sum over seeds of each seed's mean over its batch of the per-sequence terms.

    Inputs are ``[S, N]``. Each seed's table only enters its own term, so the gradient of the sum is
    each seed's own gradient.
    """
    n_seeds, n = seq_logp.shape
    old = None if old_seq_logp is None else old_seq_logp.reshape(-1)
    token_loss, mask = sequence_token_loss(
        losses, loss, seq_logp.reshape(-1), advantages.reshape(-1), old
    )
    total = seq_logp.new_zeros(())
    for s in range(n_seeds):
        rows = slice(s * n, (s + 1) * n)
        total = total + losses.aggregate(token_loss[rows], mask[rows], mode="token_mean")
    return total


def advantages_for(learner: Learner, matches: torch.Tensor) -> torch.Tensor:
    """Reward = matches + offset; advantage = reward, or reward minus its seed's batch mean. ``[S, N]``."""
    rewards = matches + learner.offset
    if learner.baseline:
        return rewards - rewards.mean(dim=1, keepdim=True)
    return rewards


# --------------------------------------------------------------------------------------------------
# Training


@dataclass
class LearnerRun:
    """One learner at one learning rate, all seeds."""

    learner: str
    lr: float
    seeds: tuple[int, ...]
    batch_matches: np.ndarray  # [S, updates]: mean matches of the batch sampled at each update
    ratio_outside: np.ndarray  # [updates, passes]: sequences (all seeds) with ratio outside [0.8, 1.2]
    ratio_count: np.ndarray  # [updates, passes]: sequences (all seeds)
    seconds: float = 0.0

    def curve(self, checkpoints: Sequence[int]) -> dict[str, float]:
        """Mean over seeds of the batch mean matches at each checkpoint update (1-based)."""
        return {str(c): float(self.batch_matches[:, c - 1].mean()) for c in checkpoints}

    @property
    def solved(self) -> int:
        """Seeds whose batch at the last update has mean matches >= SOLVED_AT."""
        return int((self.batch_matches[:, -1] >= SOLVED_AT).sum())

    @property
    def passes(self) -> int:
        return self.ratio_count.shape[1]

    def outside_fraction(self, passes: slice = slice(1, None), updates: slice = slice(None)) -> float:
        """Fraction of sequences whose ratio exp(log pi(x) - log pi_old(x)) was outside
        [1 - eps, 1 + eps] in the given passes (default: passes 2 onwards) of the given updates
        (default: all), over all seeds. Counted for every learner; only PPO acts on it."""
        count = self.ratio_count[updates, passes].sum()
        return float(self.ratio_outside[updates, passes].sum() / count) if count else 0.0


def train_learner(
    learner: str | Learner,
    *,
    lr: float,
    seeds: Sequence[int],
    updates: int,
    batch_size: int = BATCH_SIZE,
    losses: ModuleType | None = None,
) -> LearnerRun:
    """Train one learner from the zero table on every seed at once (Adam, ``updates`` batches)."""
    with one_thread():
        return _train_learner(
            _LEARNERS_BY_NAME[learner] if isinstance(learner, str) else learner,
            lr=lr,
            seeds=seeds,
            updates=updates,
            batch_size=batch_size,
            losses=load_losses() if losses is None else losses,
        )


def _train_learner(
    spec: Learner,
    *,
    lr: float,
    seeds: Sequence[int],
    updates: int,
    batch_size: int,
    losses: ModuleType,
) -> LearnerRun:
    start = time.perf_counter()
    generators = seed_generators(seeds)
    targets = draw_targets(generators)
    table = torch.zeros(len(seeds), ROWS, V, dtype=DTYPE, requires_grad=True)
    optimizer = torch.optim.Adam([table], lr=lr)
    batch_matches = np.zeros((len(seeds), updates))
    ratio_outside = np.zeros((updates, spec.passes), dtype=np.int64)
    ratio_count = np.zeros((updates, spec.passes), dtype=np.int64)
    for update in range(updates):
        seqs = sample_sequences(table, draw_uniforms(generators, batch_size))
        matches = count_matches(seqs, targets)
        batch_matches[:, update] = matches.mean(dim=1).numpy()
        advantages = advantages_for(spec, matches)
        with torch.no_grad():
            old_logp = sequence_logprob(table, seqs)
        for p in range(spec.passes):
            logp = sequence_logprob(table, seqs)
            ratio = (logp.detach() - old_logp).exp()
            ratio_outside[update, p] = int(((ratio < 1 - CLIP_EPS) | (ratio > 1 + CLIP_EPS)).sum())
            ratio_count[update, p] = ratio.numel()
            loss = batch_loss(losses, spec.loss, logp, advantages, old_logp)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
    return LearnerRun(
        learner=spec.name,
        lr=lr,
        seeds=tuple(int(s) for s in seeds),
        batch_matches=batch_matches,
        ratio_outside=ratio_outside,
        ratio_count=ratio_count,
        seconds=time.perf_counter() - start,
    )


# --------------------------------------------------------------------------------------------------
# Gradient quality at the initial table


COSINE_VARIANTS = (
    ("offset", "rewards 10..13 (matches + 10)"),
    ("no_offset", "rewards 0..3 (matches)"),
    ("baseline", "rewards minus the batch mean"),
)


@dataclass
class CosineResult:
    batches: int
    batch_size: int
    cosines: dict[str, np.ndarray]  # variant -> [batches]; a zero estimate counts as cosine 0
    zero_batches: dict[str, int]  # variant -> batches whose gradient estimate is exactly zero

    def mean(self, variant: str) -> float:
        return float(self.cosines[variant].mean())

    def std(self, variant: str) -> float:
        return float(self.cosines[variant].std())


def gradient_cosines(
    batches: int = DEFAULT_COSINE_BATCHES,
    *,
    batch_size: int = BATCH_SIZE,
    seed: int = COSINE_SEED,
    losses: ModuleType | None = None,
) -> CosineResult:
    """Cosine between one batch's gradient and the exact gradient of J at the zero table.

    The exact gradient comes from autograd on the enumerated sum over all 512 sequences; each batch's
    estimate is minus the gradient of the learner's loss (``pg_token_loss`` + ``aggregate``) with
    advantage = matches + 10, matches, or matches minus the batch mean. The three variants see the
    same ``batches`` batches. A batch whose estimate is exactly zero (e.g. all 16 sequences score the
    same under the baseline) gives no direction and counts as cosine 0; the count is reported.
    """
    with one_thread():
        return _gradient_cosines(
            batches, batch_size, seed, load_losses() if losses is None else losses
        )


def _gradient_cosines(batches: int, batch_size: int, seed: int, losses: ModuleType) -> CosineResult:
    (generator,) = seed_generators([seed])
    target = draw_targets([generator])  # [1, 3]
    exact = exact_gradient(torch.zeros(1, ROWS, V, dtype=DTYPE), target)[0].reshape(-1)
    tables = torch.zeros(batches, ROWS, V, dtype=DTYPE, requires_grad=True)
    uniforms = torch.rand(batches, batch_size, LENGTH, generator=generator, dtype=DTYPE)
    seqs = sample_sequences(tables, uniforms)
    matches = count_matches(seqs, target.expand(batches, -1))
    advantages = {
        "offset": matches + OFFSET,
        "no_offset": matches,
        "baseline": matches - matches.mean(dim=1, keepdim=True),
    }
    cosines: dict[str, np.ndarray] = {}
    zero_batches: dict[str, int] = {}
    for variant, _ in COSINE_VARIANTS:
        loss = batch_loss(losses, "pg", sequence_logprob(tables, seqs), advantages[variant])
        (grad,) = torch.autograd.grad(loss, tables)
        estimate = -grad.reshape(batches, -1)
        norms = estimate.norm(dim=1)
        zero = norms == 0
        cos = (estimate @ exact) / (norms.clamp_min(1e-300) * exact.norm())
        cosines[variant] = torch.where(zero, torch.zeros_like(cos), cos).numpy()
        zero_batches[variant] = int(zero.sum())
    return CosineResult(batches, batch_size, cosines, zero_batches)


# --------------------------------------------------------------------------------------------------
# The whole experiment


@dataclass
class ExperimentResult:
    seeds: tuple[int, ...]
    updates: int
    lrs: tuple[float, ...]
    batch_size: int
    runs: dict[tuple[str, str], LearnerRun]  # (lr key, learner name) -> run
    cosine: CosineResult
    seconds: float = 0.0
    checkpoints: tuple[int, ...] = field(default=())

    def run(self, lr: float | str, learner: str) -> LearnerRun:
        return self.runs[(lr if isinstance(lr, str) else lr_key(lr), learner)]


def run_experiment(
    *,
    seeds: int | Sequence[int] = DEFAULT_SEEDS,
    updates: int = DEFAULT_UPDATES,
    lrs: Sequence[float] = DEFAULT_LRS,
    batch_size: int = BATCH_SIZE,
    cosine_batches: int = DEFAULT_COSINE_BATCHES,
    learners: Sequence[str] = LEARNER_NAMES,
    losses: ModuleType | None = None,
    progress: Callable[[str], None] | None = None,
) -> ExperimentResult:
    """Every learner at every learning rate on every seed, then the gradient cosines."""
    if updates < 1:
        raise ValueError(f"run_experiment: updates: expected >= 1, got {updates}")
    if batch_size < 2:
        raise ValueError(f"run_experiment: batch_size: expected >= 2, got {batch_size}")
    if cosine_batches < 1:
        raise ValueError(f"run_experiment: cosine_batches: expected >= 1, got {cosine_batches}")
    seed_list = tuple(range(seeds)) if isinstance(seeds, int) else tuple(int(s) for s in seeds)
    if not seed_list:
        raise ValueError("run_experiment: seeds: expected at least one seed")
    if not lrs:
        raise ValueError("run_experiment: lrs: expected at least one learning rate")
    losses = load_losses() if losses is None else losses
    start = time.perf_counter()
    runs: dict[tuple[str, str], LearnerRun] = {}
    for lr in lrs:
        for name in learners:
            run = train_learner(
                name, lr=lr, seeds=seed_list, updates=updates, batch_size=batch_size, losses=losses
            )
            runs[(lr_key(lr), name)] = run
            if progress is not None:
                progress(f"lr={lr_key(lr)} {name}: {run.seconds:.1f} s")
    cosine = gradient_cosines(cosine_batches, batch_size=batch_size, losses=losses)
    if progress is not None:
        progress(f"gradient cosines over {cosine_batches} batches: done")
    return ExperimentResult(
        seeds=seed_list,
        updates=updates,
        lrs=tuple(float(lr) for lr in lrs),
        batch_size=batch_size,
        runs=runs,
        cosine=cosine,
        seconds=time.perf_counter() - start,
        checkpoints=checkpoints_for(updates),
    )


def to_json(result: ExperimentResult) -> dict[str, Any]:
    """The JSON document of ``rlspec tiny-policy --json``."""
    out: dict[str, Any] = {
        "lr": {},
        "ppo_clip_fraction": {},
        "ppo_clip_fraction_by_pass": {},
        f"ppo_clip_fraction_first_{EARLY_UPDATES}_updates": {},
    }
    for lr in result.lrs:
        key = lr_key(lr)
        out["lr"][key] = {}
        for (run_lr, name), run in result.runs.items():
            if run_lr == key:
                out["lr"][key][name] = {"curve": run.curve(result.checkpoints), "solved": run.solved}
        if (key, "PPO") in result.runs:
            ppo = result.runs[(key, "PPO")]
            out["ppo_clip_fraction"][key] = ppo.outside_fraction()
            out["ppo_clip_fraction_by_pass"][key] = [
                ppo.outside_fraction(slice(p, p + 1)) for p in range(ppo.passes)
            ]
            early = slice(0, min(EARLY_UPDATES, result.updates))
            out[f"ppo_clip_fraction_first_{EARLY_UPDATES}_updates"][key] = ppo.outside_fraction(
                updates=early
            )
    c = result.cosine
    out["cosine"] = {variant: c.mean(variant) for variant, _ in COSINE_VARIANTS}
    out["cosine_std"] = {variant: c.std(variant) for variant, _ in COSINE_VARIANTS}
    out["cosine_batches"] = c.batches
    out["cosine_zero_gradient_batches"] = dict(c.zero_batches)
    out["config"] = {
        "vocab": V,
        "length": LENGTH,
        "offset": OFFSET,
        "batch_size": result.batch_size,
        "updates": result.updates,
        "seeds": list(result.seeds),
        "lrs": [lr_key(lr) for lr in result.lrs],
        "clip_eps": CLIP_EPS,
        "solved_at": SOLVED_AT,
        "curve": "mean over seeds of the mean matches (of 3) of the batch sampled at that update",
        "seconds": round(result.seconds, 1),
    }
    return out


def format_tables(result: ExperimentResult) -> str:
    """The printed report: one table per learning rate, PPO ratio statistics, the gradient cosines."""
    lines: list[str] = []
    cps = result.checkpoints
    n = len(result.seeds)
    name_width = max(len(name) for _, name in result.runs)
    header = f"{'learner':<{name_width}}  " + "  ".join(f"{'@' + str(c):>6}" for c in cps) + "  solved"
    for lr in result.lrs:
        key = lr_key(lr)
        lines.append(
            f"Adam lr = {key}: mean matches per sequence (of 3) in the batch sampled at each update, "
            f"averaged over {n} seeds; solved = seeds with mean matches >= {SOLVED_AT} at update "
            f"{result.updates}"
        )
        lines.append(header)
        lines.append("-" * len(header))
        for (run_lr, name), run in result.runs.items():
            if run_lr != key:
                continue
            curve = run.curve(cps)
            cells = "  ".join(f"{curve[str(c)]:>6.3f}" for c in cps)
            lines.append(f"{name:<{name_width}}  {cells}  {run.solved:>3}/{n}")
        if (key, "PPO") in result.runs:
            ppo = result.runs[(key, "PPO")]
            by_pass = ", ".join(
                f"pass {p + 1} {ppo.outside_fraction(slice(p, p + 1)):.3f}" for p in range(ppo.passes)
            )
            early = min(EARLY_UPDATES, result.updates)
            lines.append(
                f"PPO: fraction of sequences with ratio outside [{1 - CLIP_EPS:.1f}, {1 + CLIP_EPS:.1f}] "
                f"in passes 2-{ppo.passes}, all updates and seeds: {ppo.outside_fraction():.3f}"
            )
            lines.append(
                f"     by pass: {by_pass}; passes 2-{ppo.passes} of updates 1-{early} only: "
                f"{ppo.outside_fraction(updates=slice(0, early)):.3f}"
            )
        lines.append("")
    c = result.cosine
    lines.append(
        f"Cosine between one batch's gradient ({c.batch_size} sequences) and the exact gradient "
        f"(all {V ** LENGTH} sequences enumerated), at the zero table, mean ± std over {c.batches} "
        "batches:"
    )
    for variant, label in COSINE_VARIANTS:
        zero = c.zero_batches[variant]
        note = f"  ({zero} batches with a zero gradient, counted as 0)" if zero else ""
        lines.append(f"  {label:<32} {c.mean(variant):6.3f} ± {c.std(variant):.3f}{note}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# Plot (matplotlib is optional: `pip install rlspec[plot]`)


def require_matplotlib() -> None:
    """Raise ``MissingPlotDependency`` with an install hint when matplotlib is not installed."""
    try:
        importlib.import_module("matplotlib")
    except ImportError as exc:
        raise MissingPlotDependency(
            "tiny-policy: --plot needs matplotlib, which is not installed; "
            "install it with: pip install 'rlspec[plot]'"
        ) from exc


def _running_mean(x: np.ndarray, window: int) -> np.ndarray:
    """Trailing running mean along the last axis (the first points average what exists so far)."""
    cumsum = np.cumsum(x, axis=-1)
    out = cumsum.copy()
    out[..., window:] = cumsum[..., window:] - cumsum[..., :-window]
    counts = np.minimum(np.arange(1, x.shape[-1] + 1), window)
    return out / counts


def plot_curves(result: ExperimentResult, path: str, *, smooth: int = 10) -> None:
    """PNG of the learning curves: one panel per learning rate, one line per learner (mean over
    seeds), with a band from the worst to the best seed; batch means smoothed over ``smooth`` updates."""
    require_matplotlib()
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.0 * len(result.lrs), 4.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(result.lrs), sharey=True, squeeze=False)[0]
    colors = ("tab:red", "tab:orange", "tab:blue", "tab:purple", "tab:green")
    smooth = max(1, min(smooth, result.updates))
    x = np.arange(1, result.updates + 1)
    for ax, lr in zip(axes, result.lrs):
        key = lr_key(lr)
        for color, name in zip(colors, LEARNER_NAMES):
            if (key, name) not in result.runs:
                continue
            per_seed = _running_mean(result.runs[(key, name)].batch_matches, smooth)
            ax.plot(x, per_seed.mean(axis=0), color=color, lw=1.8, label=name)
            ax.fill_between(x, per_seed.min(axis=0), per_seed.max(axis=0), color=color, alpha=0.15, lw=0)
        ax.axhline(SOLVED_AT, color="grey", ls=":", lw=1)
        ax.axhline(LENGTH / V, color="grey", ls="--", lw=0.8)
        ax.set_title(f"Adam lr = {key}")
        ax.set_xlabel("update")
        ax.set_xlim(1, result.updates)
        ax.set_ylim(0, LENGTH + 0.05)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"mean matches per sequence (of {LENGTH})")
    axes[0].legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.suptitle(
        f"Tiny policy: V = {V}, {LENGTH} tokens, reward = matches + {OFFSET:g}, {result.batch_size} "
        f"sequences per update, {len(result.seeds)} seeds\n"
        f"line: mean over seeds; band: worst to best seed; batch means smoothed over {smooth} updates; "
        f"dotted: solved ({SOLVED_AT}); dashed: uniform policy ({LENGTH}/{V})",
        fontsize=9,
    )
    fig.savefig(path, dpi=120)


def describe_learners() -> str:
    """One line per learner, for the CLI help."""
    lines = []
    for spec in LEARNERS:
        adv = "reward - batch mean" if spec.baseline else "reward"
        loss = "PPO clip 0.2, one ratio per sequence" if spec.loss == "ppo" else "-A log pi(x)"
        lines.append(
            f"  {spec.name}: reward = matches + {spec.offset:g}, A = {adv}, {loss}, "
            f"{spec.passes} optimiser step{'s' if spec.passes > 1 else ''} per batch"
        )
    return "\n".join(lines)


__all__ = [
    "BATCH_SIZE",
    "CHECKPOINTS",
    "LEARNERS",
    "LEARNER_NAMES",
    "ROWS",
    "V",
    "CosineResult",
    "ExperimentResult",
    "Learner",
    "LearnerRun",
    "MissingPlotDependency",
    "all_sequences",
    "batch_loss",
    "checkpoints_for",
    "count_matches",
    "exact_distribution",
    "exact_gradient",
    "expected_reward",
    "format_tables",
    "gradient_cosines",
    "load_losses",
    "lr_key",
    "plot_curves",
    "prefix_rows",
    "require_matplotlib",
    "run_experiment",
    "sample_sequences",
    "sequence_logprob",
    "sequence_token_loss",
    "to_json",
    "train_learner",
]
