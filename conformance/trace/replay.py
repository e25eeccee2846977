"""``rlspec replay``: every link of every recorded step recomputed with the oracle, one report row per link.

A row's verdict is the worst over the steps (fail, then preset, then pass); its message is the first failing
step's, prefixed with the step; what was identified (a wiring, a shifted mask, a normalisation and its
factor) is listed in ``consistent_with``. A link no step could check (a tensor it needs was not recorded)
is "not implemented", with what is missing, never a pass.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from conformance.runner.report import AdapterInfo, Report
from conformance.runner.rows import RowResult
from conformance.trace.gradient import grad_link, loss_link, probe_link, token_loss_link, value_link
from conformance.trace.links import (
    NOT_CHECKED,
    LinkOutcome,
    advantages_link,
    entropy_link,
    logp_link,
    mask_link,
    rewards_link,
    role_logp_link,
    sampling_link,
)
from conformance.trace.reader import StepTrace, Trace, read_trace

# (row name, spec section of trace.md, what it checks) in the order of the step's data flow.
LINKS: tuple[tuple[str, str], ...] = (
    ("mask", "the loss mask is the completion mask"),
    ("sampling", "the sampler draws from the distribution the log-probs describe"),
    ("logp", "log-probs of the loss forward from the hidden states and LM head"),
    ("old_logp", "pi_old's log-probs from the forward that produced them"),
    ("ref_logp", "the reference policy's log-probs from its forward"),
    ("entropy", "entropies of the predicting distributions"),
    ("rewards", "per-token rewards: score placement and KL reward"),
    ("advantages", "advantages of the step's rewards and groups"),
    ("token_loss", "the trainer's per-token loss"),
    ("grad", "d loss/d logp: wiring of old/reference/rollout log-probs and the normalisation across micro-batches and ranks"),
    ("loss", "each micro-batch's backward scalar"),
    ("value", "d loss/d values of the critic"),
    ("probe", "the probe parameter's accumulated, all-reduced gradient"),
)
RANK = {"fail": 3, "preset": 2, "pass": 1, NOT_CHECKED: 0}


@dataclass(frozen=True)
class ReplayOptions:
    sample_rows: int = 8  # rows per step of the hidden-state links (logp, entropy)
    seed: int = 0  # seeds the sample


def step_outcomes(s: StepTrace, opts: ReplayOptions) -> dict[str, LinkOutcome]:
    out: dict[str, LinkOutcome] = {}
    out["mask"] = mask_link(s)
    out["sampling"] = sampling_link(s)
    out["logp"] = logp_link(s, sample=opts.sample_rows, seed=opts.seed)
    out["old_logp"] = role_logp_link(s, "old", sample=opts.sample_rows, seed=opts.seed)
    out["ref_logp"] = role_logp_link(s, "ref", sample=opts.sample_rows, seed=opts.seed)
    out["entropy"] = entropy_link(s, sample=opts.sample_rows, seed=opts.seed)
    out["rewards"] = rewards_link(s)
    out["advantages"] = advantages_link(s)
    out["token_loss"] = token_loss_link(s)
    out["grad"], explanation = grad_link(s)
    out["loss"] = loss_link(s, explanation)
    out["value"] = value_link(s)
    out["probe"] = probe_link(s)
    return out


def _row(trace: Trace, link: str, what: str, per_step: list[tuple[int, LinkOutcome]], seconds: float) -> RowResult:
    worst = max(per_step, key=lambda so: RANK[so[1].status])
    status = worst[1].status
    checked = [(k, o) for k, o in per_step if o.status != NOT_CHECKED]
    failing = [(k, o) for k, o in per_step if o.status == "fail"]
    if status == NOT_CHECKED:
        message = f"not checked: {worst[1].message}"
    elif failing:
        k, o = failing[0]
        message = f"step {k}: {o.message}" + (f" (and {len(failing) - 1} more steps)" if len(failing) > 1 else "")
    else:
        message = f"{len(checked)} steps: {worst[1].message}"
    notes = [f"{what}"]
    skipped = [k for k, o in per_step if o.status == NOT_CHECKED]
    if checked and skipped:
        notes.append(f"not checked at steps {skipped}: {next(o for k, o in per_step if o.status == NOT_CHECKED).message}")
    if checked:
        notes.append(f"{sum(o.n for _, o in checked)} values compared over {len(checked)} steps")
    for _, o in checked[:3]:
        notes += o.notes
    ident = list(dict.fromkeys(i for _, o in failing for i in o.identified))
    preset = next((o.preset for _, o in per_step if o.preset and o.status == "preset"), None)
    return RowResult(
        id=f"{trace.name}.trace.{link}", spec_id=f"trace.{link}", function=f"trace.{link}", adapter=trace.name,
        status=status, matched_preset=f"{trace.name}: {preset}" if preset and status == "preset" else None,
        max_abs_err=max((o.max_abs for _, o in checked), default=0.0),
        max_rel_err=max((o.max_rel for _, o in checked), default=float("nan")),
        message=message, consistent_with=ident, n_cases=len(checked), notes=notes, seconds=seconds,
        reproduce=f"rlspec replay {trace.path}" if status == "fail" else "",
    )


def replay(path: str, opts: ReplayOptions | None = None) -> tuple[Trace, list[RowResult]]:
    """Read the trace at ``path`` and replay every step; one row per link."""
    opts = opts or ReplayOptions()
    trace = read_trace(path)
    per_link: dict[str, list[tuple[int, LinkOutcome]]] = {name: [] for name, _ in LINKS}
    t0 = time.perf_counter()
    for s in trace.steps:
        for name, outcome in step_outcomes(s, opts).items():
            per_link[name].append((s.step, outcome))
    seconds = (time.perf_counter() - t0) / max(len(LINKS), 1)
    rows = [_row(trace, name, what, per_link[name], seconds) for name, what in LINKS]
    return trace, rows


def replay_report(path: str, opts: ReplayOptions | None = None) -> Report:
    t0 = time.perf_counter()
    trace, rows = replay(path, opts)
    return Report(seed=(opts or ReplayOptions()).seed, n_seeds=1,
                  adapters=[AdapterInfo(trace.name, trace.version, "v1")], rows=rows,
                  seconds=time.perf_counter() - t0, command=f"rlspec replay {path}")


__all__ = ["LINKS", "ReplayOptions", "replay", "replay_report", "step_outcomes"]
