"""The asynchronous-training study: how much staleness the digit task tolerates, and what the off-policy
corrections of spec v1.1 buy back.

Runs of the refimpl trainer on the default digit task (GRPO, PPO clip 0.2, 32 prompts x 8 samples per
step, 2 minibatches), identical but for the schedule: synchronous (the learner samples with its own
weights), and asynchronous with ``max_staleness`` S (one Ray rollout actor, float32 unless the study
is asked for another actor precision), each with no correction, token TIS (cap 2) and decoupled PPO
(AReaL; uncapped behaviour weight). Every configuration runs for the same seeds; the seed fixes the
initial weights and the prompts and sampling seeds of every step, so runs of one seed differ only in
the weights that sample each batch.

Threads: a synchronous run uses 2 torch threads (it samples and trains in turn); an asynchronous run
uses 1 learner thread and 1 actor thread (they work at the same time), so that both use the 2 cores
of the reference machine and their wall times compare.

Reported per configuration (mean and standard deviation over seeds): final reward (mean of the last
10 steps), the step and the wall seconds at which the 10-step mean reward first reaches the target,
samples per second, the learner's idle fraction, mean staleness, and the correction statistics
(|log rho|, clipped and rejected fractions). ``conformance.commands.async_study`` is the CLI.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch

DEFAULT_STALENESS = (1, 2, 4, 8)
DEFAULT_CORRECTIONS = ("none", "tis_token", "decoupled")
DEFAULT_SEEDS = (0, 1, 2, 3, 4)
DEFAULT_STEPS = 400
TARGET = 0.9
PER_RUN_KEYS = ("final_reward", "final_accuracy", "final_kl_ref", "steps_to_target", "seconds_to_target",
                "samples_per_s", "learner_idle_frac", "staleness_mean", "log_rho_abs_mean", "is_clipped_frac",
                "behav_capped_frac", "mismatch_k3_kl", "mismatch_chi2_token", "mismatch_token_mult_prob_error",
                "wall_s")


def configurations(staleness: Sequence[int], corrections: Sequence[str], *, behav_cap: float | None = None,
                   sync: bool = True) -> list[dict[str, Any]]:
    """The study's configurations: synchronous first (unless ``sync`` is False), then every
    (staleness, correction); ``behav_cap`` caps the behaviour weight of the decoupled ones."""
    out: list[dict[str, Any]] = [{"name": "sync", "asynchronous": False}] if sync else []
    for s in staleness:
        for c in corrections:
            conf = {"name": f"async S={s} {c}", "asynchronous": True, "max_staleness": int(s), "correction": c}
            if c == "decoupled" and behav_cap is not None:
                conf.update(name=f"async S={s} decoupled cap {behav_cap:g}", behav_cap=float(behav_cap))
            out.append(conf)
    return out


def _one_run(conf: dict[str, Any], seed: int, steps: int, actor_dtype: str, base: dict[str, Any],
             engine: str = "hf") -> dict[str, Any]:
    from refimpl.trainer import TrainConfig, Trainer
    from refimpl.trainer.async_trainer import AsyncTrainer

    kw = dict(base, seed=seed, steps=steps, checkpoint_every=0, target_reward=TARGET)
    extra: dict[str, Any] = {}
    if conf["asynchronous"]:
        kw.update(asynchronous=True, max_staleness=conf["max_staleness"], correction=conf["correction"],
                  behav_cap=conf.get("behav_cap"), actor_dtype=actor_dtype, actor_threads=1, engine=engine)
        threads, cls = 1, AsyncTrainer
        if engine == "vllm":
            from conformance.frameworks.vllm.rollout import VllmRolloutWorker

            extra["rollout_worker"] = VllmRolloutWorker
    else:
        threads, cls = 2, Trainer
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        trainer = cls(TrainConfig(**kw), **extra)
        summary = trainer.train()
    finally:
        torch.set_num_threads(before)
    hist = trainer.history
    thr = summary.get("threshold")

    def mean(key: str) -> float | None:
        xs = [r[key] for r in hist if r.get(key) is not None]
        return sum(xs) / len(xs) if xs else None

    return {
        "seed": seed,
        "final_reward": summary["final"]["reward_mean"],
        "final_accuracy": summary["final"]["accuracy"],
        "final_kl_ref": summary["final"]["kl_ref"],
        "steps_to_target": None if thr is None else thr["step"],
        "seconds_to_target": None if thr is None else thr["time_s"],
        "samples_per_s": summary.get("samples_per_s"),
        "learner_idle_frac": summary.get("learner_idle_frac"),
        "staleness_mean": mean("staleness") if conf["asynchronous"] else 0.0,
        "log_rho_abs_mean": mean("log_rho_abs_mean"),
        "is_clipped_frac": mean("is_clipped_frac"),
        "behav_capped_frac": mean("behav_capped_frac"),
        "mismatch_k3_kl": mean("mismatch_k3_kl"),
        "mismatch_chi2_token": mean("mismatch_chi2_token"),
        "mismatch_token_mult_prob_error": mean("mismatch_token_mult_prob_error"),
        "wall_s": time.perf_counter() - t0,
        "reward_curve": [round(float(r["reward_mean"]), 4) for r in hist],
    }


def _aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in PER_RUN_KEYS:
        xs = [r[key] for r in runs if r[key] is not None]
        out[key] = {"mean": statistics.fmean(xs) if xs else None,
                    "std": statistics.pstdev(xs) if len(xs) > 1 else (0.0 if xs else None), "n": len(xs)}
    out["reached_target"] = sum(r["steps_to_target"] is not None for r in runs)
    curves = [r["reward_curve"] for r in runs]
    n = min(len(c) for c in curves)
    out["mean_reward_curve"] = [round(statistics.fmean(c[i] for c in curves), 4) for i in range(n)]
    return out


def run_study(*, staleness: Sequence[int] = DEFAULT_STALENESS, corrections: Sequence[str] = DEFAULT_CORRECTIONS,
              seeds: Sequence[int] = DEFAULT_SEEDS, steps: int = DEFAULT_STEPS, actor_dtype: str = "float32",
              base: dict[str, Any] | None = None, behav_cap: float | None = None, sync: bool = True,
              progress: Callable[[str], None] | None = None, engine: str = "hf") -> dict[str, Any]:
    """Run every configuration for every seed (one local Ray cluster for all asynchronous runs)."""
    from refimpl.trainer.actors import require_ray

    ray = require_ray()
    started = not ray.is_initialized()
    if started:
        import logging

        ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=False)
    base = dict(base or {})
    confs = configurations(staleness, corrections, behav_cap=behav_cap, sync=sync)
    t0 = time.perf_counter()
    results = []
    try:
        for conf in confs:
            runs = []
            for seed in seeds:
                r = _one_run(conf, seed, steps, actor_dtype, base, engine)
                runs.append(r)
                if progress:
                    at = "not reached" if r["steps_to_target"] is None else f"step {r['steps_to_target']}"
                    progress(f"[async-study] {conf['name']:<24} seed {seed}: final reward {r['final_reward']:.3f}, "
                             f"target {at}, {r['samples_per_s']:.0f} samples/s, {r['wall_s']:.0f}s")
            results.append({**conf, "runs": runs, "summary": _aggregate(runs)})
    finally:
        if started:
            ray.shutdown()
    return {
        "task": "reverse 3 digits, tiny random-weight Llama (defaults of rlspec train)",
        "algo": "grpo", "loss": "ppo", "target_reward": TARGET, "steps": steps, "seeds": list(seeds),
        "actor_dtype": actor_dtype, "engine": engine, "behav_cap": behav_cap, "base_overrides": base,
        "torch": torch.__version__,
        "threads": {"sync": 2, "async_learner": 1, "async_actor": 1},
        "seconds": round(time.perf_counter() - t0, 1),
        "configurations": results,
    }


def _fmt(stat: dict[str, Any], digits: int = 3) -> str:
    if stat["mean"] is None:
        return "-"
    if stat["n"] > 1:
        return f"{stat['mean']:.{digits}f} ± {stat['std']:.{digits}f}"
    return f"{stat['mean']:.{digits}f}"


def render_table(study: dict[str, Any]) -> str:
    """A Markdown table of the study (one row per configuration)."""
    n = len(study["seeds"])
    capped = study.get("behav_cap") is not None
    # the metric.mismatch columns (studies recorded before they existed have none)
    mismatch = all("mismatch_k3_kl" in c["summary"] for c in study["configurations"])
    lines = [
        f"| configuration | final reward | reached {study['target_reward']} | steps to target | seconds to target | "
        "samples/s | learner idle | staleness | mean abs log rho | TIS clipped |" + (" behav capped |" if capped else "")
        + (" k3 KL(π_behav ‖ π_old) | token mult. prob. error |" if mismatch else ""),
        "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if capped else "") + ("---|---|" if mismatch else ""),
    ]
    for c in study["configurations"]:
        s = c["summary"]
        lines.append(
            f"| {c['name']} | {_fmt(s['final_reward'])} | {s['reached_target']}/{n} | {_fmt(s['steps_to_target'], 0)} | "
            f"{_fmt(s['seconds_to_target'], 1)} | {_fmt(s['samples_per_s'], 0)} | {_fmt(s['learner_idle_frac'], 2)} | "
            f"{_fmt(s['staleness_mean'], 2)} | {_fmt(s['log_rho_abs_mean'], 4)} | {_fmt(s['is_clipped_frac'], 4)} |"
            + (f" {_fmt(s['behav_capped_frac'], 4)} |" if capped else "")
            + (f" {_fmt(s['mismatch_k3_kl'], 5)} | {_fmt(s['mismatch_token_mult_prob_error'], 4)} |" if mismatch else "")
        )
    return "\n".join(lines)


def plot_study(study: dict[str, Any], path: str) -> None:
    """Reward curves (mean over seeds) per correction, steps to target and throughput per configuration."""
    from refimpl.trainer.metrics import moving_average, require_matplotlib

    plt = require_matplotlib()
    confs = study["configurations"]
    sync = next((c for c in confs if not c["asynchronous"]), None)
    corrections = list(dict.fromkeys(c["correction"] for c in confs if c["asynchronous"]))
    staleness = sorted({c["max_staleness"] for c in confs if c["asynchronous"]})
    fig, axes = plt.subplots(2, max(3, len(corrections)), figsize=(15, 8.5), squeeze=False)
    cmap = plt.get_cmap("viridis")
    colour = {s: cmap(i / max(1, len(staleness) - 1) * 0.9) for i, s in enumerate(staleness)}
    for ax, corr in zip(axes[0], corrections):
        if sync is not None:
            ax.plot(moving_average(sync["summary"]["mean_reward_curve"], 10), color="black", linewidth=1.6, label="sync")
        for c in confs:
            if c["asynchronous"] and c["correction"] == corr:
                ax.plot(moving_average(c["summary"]["mean_reward_curve"], 10), color=colour[c["max_staleness"]],
                        linewidth=1.1, label=f"S={c['max_staleness']}")
        ax.axhline(study["target_reward"], color="grey", linestyle=":", linewidth=1)
        ax.set_title(f"correction: {corr} (reward, mean of {len(study['seeds'])} seeds, 10-step avg)", fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    names = [c["name"].replace("async ", "") for c in confs]
    x = range(len(confs))
    panels = [("steps_to_target", f"steps to 10-step mean reward {study['target_reward']} (unreached: not drawn)"),
              ("final_reward", "final reward (last 10 steps)"),
              ("samples_per_s", "throughput (samples / s, 2 cores)")]
    for ax, (key, title) in zip(axes[1], panels):
        means = [c["summary"][key]["mean"] for c in confs]
        stds = [c["summary"][key]["std"] or 0.0 for c in confs]
        vals = [m if m is not None else math.nan for m in means]
        cols = ["black" if not c["asynchronous"] else colour[c["max_staleness"]] for c in confs]
        ax.bar(list(x), vals, yerr=[s if m is not None else 0 for s, m in zip(stds, means)], color=cols, capsize=2)
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=70, fontsize=6.5)
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    for extra in list(axes[0][len(corrections):]) + list(axes[1][len(panels):]):
        extra.axis("off")
    what = "synchronous vs asynchronous" if sync is not None else "asynchronous"
    cap = f", behaviour weight capped at {study['behav_cap']:g}" if study.get("behav_cap") is not None else ""
    fig.suptitle(f"rlspec async-study: {what} (max staleness S) GRPO on the digit task{cap}, "
                 f"{study['actor_dtype']} {'' if study.get('engine', 'hf') == 'hf' else study['engine'] + ' '}actors, seeds {study['seeds']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


__all__ = ["run_study", "render_table", "plot_study", "configurations", "DEFAULT_STALENESS", "DEFAULT_CORRECTIONS",
           "DEFAULT_SEEDS", "DEFAULT_STEPS"]
