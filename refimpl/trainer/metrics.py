"""Per-step metrics: a JSONL log (one object per step), the "learned" threshold, and PNG plots of the
curves (matplotlib is the optional extra ``rlspec[plot]``)."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

# The curves drawn by plot_curves: (metric key, panel title), in panel order.
PANELS: tuple[tuple[str, str], ...] = (
    ("reward_mean", "reward (mean over the batch)"),
    ("accuracy", "solved completions (fraction): exact answers of the digit task, reward >= 1 with --reward"),
    ("kl_ref", "KL(policy || reference), k3 per token"),
    ("entropy", "entropy per token (nats)"),
    ("clip_frac_high", "clip fraction (upper)"),
    ("approx_kl_old", "approx. KL to old policy (k3)"),
    ("completion_len_mean", "completion length (tokens)"),
    ("grad_norm", "grad norm (before clipping)"),
    ("value_loss", "value loss"),
)


# Per-step keys measured from the clock (they differ between otherwise identical runs).
TIMING_KEYS: tuple[str, ...] = ("time_s", "wait_s", "gen_s", "samples_per_s", "learner_idle_frac")


class MissingPlotDependency(RuntimeError):
    pass


def require_matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingPlotDependency(
            "plots need matplotlib: pip install 'rlspec[plot]' (or matplotlib>=3.7)"
        ) from exc
    return plt


class JsonlWriter:
    """Appends one JSON object per line; on resume, lines of steps >= the resumed step are dropped
    (they were written after the checkpoint the run resumes from)."""

    def __init__(self, path: str | os.PathLike, *, resume_step: int | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not resume_step:
            self.path.write_text("")
        elif self.path.exists():
            kept = [r for r in read_jsonl(self.path) if r.get("step", -1) < resume_step]
            tmp = self.path.with_suffix(".jsonl.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            os.replace(tmp, self.path)

    def write(self, record: dict[str, Any]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(_jsonable(record)) + "\n")
            fh.flush()


def _jsonable(record: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for k, v in record.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        out[k] = v
    return out


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:  # a line cut short by a kill
                    break
    return rows


def moving_average(xs: Sequence[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= window:
            acc -= xs[i - window]
        out.append(acc / min(i + 1, window))
    return out


def threshold_reached(rows: Sequence[dict[str, Any]], target: float, *, key: str = "reward_mean",
                      window: int = 10) -> dict[str, Any] | None:
    """The first step whose trailing ``window``-step mean of ``key`` is >= ``target`` (needs a full window)."""
    xs = [float(r.get(key) or 0.0) for r in rows]
    ma = moving_average(xs, window)
    for i, v in enumerate(ma):
        if i + 1 >= window and v >= target:
            return {"step": rows[i]["step"], "time_s": rows[i].get("time_s"), "moving_average": v,
                    "window": window, "key": key, "target": target}
    return None


def summarize(rows: Sequence[dict[str, Any]], target: float, *, window: int = 10) -> dict[str, Any]:
    if not rows:
        return {"steps": 0}
    last = rows[-window:]
    keys = ("reward_mean", "accuracy", "kl_ref", "entropy", "completion_len_mean")
    return {
        "steps": len(rows),
        "wall_time_s": rows[-1].get("time_s"),
        "threshold": threshold_reached(rows, target, window=window),
        "final": {k: sum(float(r.get(k) or 0.0) for r in last) / len(last) for k in keys},
        "final_window": len(last),
        # throughput over the whole run (the last step's running figures)
        "samples_per_s": rows[-1].get("samples_per_s"),
        "learner_idle_frac": rows[-1].get("learner_idle_frac"),
    }


def plot_curves(runs: dict[str, Sequence[dict[str, Any]]] | Sequence[dict[str, Any]], path: str | os.PathLike, *,
                title: str | None = None, panels: Iterable[tuple[str, str]] = PANELS, smooth: int = 5,
                target: float | None = None) -> Path:
    """One panel per metric, one line per run (``runs``: {label: rows} or the rows of one run); the
    reward panel is drawn against steps and, in a last panel, against wall-clock seconds."""
    plt = require_matplotlib()
    if not isinstance(runs, dict):
        runs = {"run": runs}
    panels = [p for p in panels if any(r.get(p[0]) is not None for rows in runs.values() for r in rows)]
    n = len(panels) + 1
    cols = 3
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.4 * cols, 3.0 * nrows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    cycle = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0", "C1", "C2", "C3"])
    color = {name: cycle[i % len(cycle)] for i, name in enumerate(runs)}
    for ax, (key, label) in zip(flat, panels):
        for name, rows in runs.items():
            pts = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
            if not pts:
                continue
            xs, ys = zip(*pts)
            ax.plot(xs, moving_average(list(ys), smooth) if smooth > 1 else ys, label=name, linewidth=1.2,
                    color=color[name])
        if key == "reward_mean" and target is not None:
            ax.axhline(target, color="grey", linestyle=":", linewidth=1)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(alpha=0.3)
    ax = flat[len(panels)]
    for name, rows in runs.items():
        pts = [(r["time_s"], r["reward_mean"]) for r in rows if r.get("reward_mean") is not None and r.get("time_s") is not None]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, moving_average(list(ys), smooth) if smooth > 1 else ys, label=name, linewidth=1.2,
                    color=color[name])
    if target is not None:
        ax.axhline(target, color="grey", linestyle=":", linewidth=1)
    ax.set_title("reward vs wall-clock seconds", fontsize=9)
    ax.set_xlabel("seconds", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.grid(alpha=0.3)
    for extra in flat[len(panels) + 1:]:
        extra.axis("off")
    if len(runs) > 1 or next(iter(runs)) != "run":
        flat[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


__all__ = ["TIMING_KEYS", "JsonlWriter", "read_jsonl", "moving_average", "threshold_reached", "summarize", "plot_curves", "require_matplotlib", "MissingPlotDependency", "PANELS"]
