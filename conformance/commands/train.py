"""`rlspec train`: RL-train the tiny random-weight Llama on the digit task with the refimpl trainer, or your
own local model on your prompts with your reward (``--model DIR --prompts FILE.jsonl --reward module:function``).

Every ``TrainConfig`` field is a flag (``--prompts-per-step``, ``--kl-coef``, ...; ``none`` for an
optional number). ``--verify`` checks every optimizer update against the oracle
(``conformance.trainer_verify``) and fails on the first mismatch. Under ``torchrun`` the run is
data-parallel (gloo on CPU, NCCL on GPU). ``--compare DIR ...`` draws several finished runs into one
PNG instead of training.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import typing
from pathlib import Path
from typing import Any

DEFAULT_OUT_ROOT = "rlspec-runs"
_SHORT = {"algo", "loss", "agg", "steps", "seed", "lr"}  # shown first in --help


def _none_or(kind: type) -> Any:
    def parse(text: str) -> Any:
        if text.lower() in ("none", "null"):
            return None
        return kind(text)

    parse.__name__ = f"{kind.__name__}_or_none"
    return parse


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    from refimpl.trainer.config import ACTOR_DTYPES, CORRECTIONS, REJECTION_LEVELS, ALGOS, AGG_MODES, GRPO_SCALES, KL_ESTIMATORS, LOSSES, TASKS, TrainConfig, field_help

    helps = field_help()
    choices = {"correction": CORRECTIONS, "actor_dtype": ACTOR_DTYPES, "rejection_level": REJECTION_LEVELS, "algo": ALGOS, "loss": LOSSES, "agg": AGG_MODES, "value_agg": AGG_MODES, "grpo_scale": GRPO_SCALES,
               "kl_estimator": KL_ESTIMATORS, "kl_reward_estimator": KL_ESTIMATORS, "task": TASKS,
               "reinforce_baseline": ("none", "batch_mean")}
    hints = typing.get_type_hints(TrainConfig)
    group = parser.add_argument_group("training configuration (TrainConfig; defaults in brackets)")
    fields = sorted(dataclasses.fields(TrainConfig), key=lambda f: f.name not in _SHORT)
    for f in fields:
        if f.name in ("extra", "out_dir"):
            continue
        flag = "--" + f.name.replace("_", "-")
        hint = hints[f.name]
        optional = type(None) in typing.get_args(hint)
        base = next((a for a in typing.get_args(hint) if a is not type(None)), hint)
        default = f.default
        text = helps.get(f.name, "") + f" [{default}]"
        text = text.replace("%", "%%")
        if base is bool:
            flags = ("--async", flag) if f.name == "asynchronous" else (flag,)
            group.add_argument(*flags, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=text)
        elif f.name in choices:
            group.add_argument(flag, choices=choices[f.name], default=None, help=text)
        else:
            kind = _none_or(base) if optional else base
            group.add_argument(flag, type=kind, default=None, metavar=f.name.upper(), help=text)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="RL-train a tiny random-weight Llama on a digit task, or a local model (--model, --prompts, --reward), "
             "with the refimpl trainer (--verify: every step against the oracle)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", metavar="DIR", default=None,
                        help=f"run directory: metrics.jsonl, summary.json, curves.png, checkpoints/ "
                             f"[{DEFAULT_OUT_ROOT}/<algo>-<loss>-seed<seed>]")
    parser.add_argument("--resume", metavar="DIR", default=None,
                        help="continue the run in DIR (its checkpoints/latest, or a checkpoint directory); "
                             "the saved configuration is used (only --steps, --out, --checkpoint-every, "
                             "--keep-checkpoints, --target-reward, --device may change)")
    parser.add_argument("--overwrite", action="store_true",
                        help="start afresh in an --out directory that already holds a run's checkpoints")
    parser.add_argument("--verify", action="store_true",
                        help="recompute every optimizer update with the oracle (loss, d loss/d logp, log-probs, "
                             "masks, advantages, step-0 identities) and stop at the first mismatch")
    parser.add_argument("--trace", metavar="DIR", default=None,
                        help="record every optimizer update as an rlspec trace in DIR (every rank its own rows), "
                             "for `rlspec replay DIR`")
    parser.add_argument("--ray-address", metavar="ADDR", default=None,
                        help="with --async: join a running Ray cluster ('auto', or host:port) whose nodes host the "
                             "rollout actors [start a private local cluster]")
    parser.add_argument("--threads", type=int, default=None, metavar="N", help="torch.set_num_threads(N)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--json", metavar="PATH", help="also write the summary (and --verify rows) as JSON to PATH")
    parser.add_argument("--compare", nargs="+", metavar="DIR",
                        help="do not train: plot the finished runs in DIR ... into one PNG (--plot) and print a table")
    parser.add_argument("--plot", metavar="PATH", help="with --compare: the PNG to write [compare.png]")
    parser.add_argument("--summary-jsonl", metavar="PATH",
                        help="with --compare: write one JSON line per run (configuration, threshold, final metrics)")
    _add_config_flags(parser)
    parser.set_defaults(func=run)


def _config_overrides(args: argparse.Namespace) -> dict[str, Any]:
    from refimpl.trainer.config import TrainConfig

    out = {}
    for f in dataclasses.fields(TrainConfig):
        if f.name in ("extra", "out_dir"):
            continue
        value = getattr(args, f.name, None)
        if value is not None:
            out[f.name] = value
    return out


def _init_distributed() -> bool:
    """Initialise torch.distributed under torchrun (WORLD_SIZE > 1); True when this call did it."""
    import torch
    import torch.distributed as dist

    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return False
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend=backend)
    return True


def _close_distributed(clean: bool) -> None:
    """Tear the process group down. Unless an exception is propagating (``clean`` False: a peer may never
    reach it), every rank first meets at a barrier, also after the handled errors that return 1 or 2: a gloo rank
    that destroys its group while a peer still has a collective in flight aborts the whole job
    ("terminate called without an active exception", seen in CI about one run in six)."""
    import torch.distributed as dist

    if clean:
        dist.barrier()
    dist.destroy_process_group()


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(args)
    started_dist = _init_distributed()
    code = _train(args, started_dist)
    if started_dist:
        from refimpl.trainer._dist import exit_skipping_finalization

        exit_skipping_finalization(code)
    return code


def _train(args: argparse.Namespace, started_dist: bool) -> int:
    import torch

    from conformance.trainer_verify import TrainerVerifier, VerificationError
    from refimpl.trainer import TrainConfig
    from refimpl.trainer.actors import MissingRay
    from refimpl.trainer.task import MissingTransformers

    if args.threads:
        torch.set_num_threads(args.threads)
    rank = int(os.environ.get("RANK", "0"))

    def log(line: str) -> None:
        if rank == 0:
            print(line, file=sys.stderr, flush=True)

    overrides = _config_overrides(args)
    if args.verify and overrides.get("engine") == "vllm":
        overrides["engine_check"] = True  # the actors return their own forward: --verify checks the engine's log-probs
    verifier = TrainerVerifier() if args.verify else None
    hook: Any = verifier
    if args.trace:
        from conformance.trainer_trace import TraceHook

        hook = TraceHook(args.trace, then=verifier)
    t0 = time.perf_counter()
    try:
        if args.resume:
            if args.out:
                overrides["out_dir"] = args.out
            saved = TrainConfig.from_dict(load_checkpoint_config(args.resume))
            _traceable(args, saved.keep_sampling_mask)
            if args.verify and overrides.get("engine", saved.engine) == "vllm":
                overrides["engine_check"] = True
            trainer = _trainer_class(saved).resume(args.resume, overrides=overrides, on_step=hook,
                                                   progress=not args.no_progress, log=log, **_async_kwargs(saved, args))
            log(f"[train] resumed {trainer._resumed_from} at step {trainer.step}")
        else:
            cfg = TrainConfig(**overrides)
            _traceable(args, cfg.keep_sampling_mask)
            cfg.out_dir = args.out or str(Path(DEFAULT_OUT_ROOT) / f"{cfg.algo}-{cfg.loss}-seed{cfg.seed}")
            if (Path(cfg.out_dir) / "checkpoints" / "latest").exists() and not args.overwrite:
                raise ValueError(f"--out {cfg.out_dir}: holds a run already; continue it with --resume {cfg.out_dir}, "
                                 "or start afresh with --overwrite")
            trainer = _trainer_class(cfg)(cfg, on_step=hook, progress=not args.no_progress, log=log,
                                          **_async_kwargs(cfg, args))
        cfg = trainer.cfg
        log(f"[train] {cfg.algo} advantages, {cfg.loss} loss, agg {cfg.agg}, {cfg.prompts_per_step} prompts x "
            f"{cfg.group_size} samples per step, {cfg.epochs} epoch(s) x {cfg.num_minibatches} minibatch(es) x "
            f"{cfg.grad_accum} micro-batch(es), world size {trainer.world}, device {trainer.device}; out {cfg.out_dir}")
        if cfg.asynchronous:
            log(f"[train] asynchronous: {cfg.num_actors} Ray rollout actor(s) ({cfg.engine}) in {cfg.actor_dtype}, max staleness "
                f"{cfg.max_staleness}, correction {cfg.correction}")
            log(f"[train] {_behaviour_line(cfg)}")
        summary = trainer.train()
    except VerificationError as exc:
        print(f"rlspec train: FAIL\n{exc}", file=sys.stderr)
        return 1
    except (ValueError, FileNotFoundError, MissingRay, MissingTransformers) as exc:
        print(f"rlspec train: {exc}", file=sys.stderr)
        return 2
    finally:
        if started_dist:
            _close_distributed(sys.exc_info()[0] is None)
    if rank != 0:
        return 0
    print(_format_summary(summary, cfg.out_dir, time.perf_counter() - t0))
    payload: dict[str, Any] = {"summary": summary}
    if verifier is not None:
        from conformance.runner.report import AdapterInfo, Report, render_table

        report = Report(seed=cfg.seed, n_seeds=1, adapters=[AdapterInfo("refimpl", "trainer", "v1")],
                        rows=verifier.rows(), seconds=verifier.seconds)
        print(f"\n--verify: {verifier.updates} optimizer updates checked against the oracle "
              f"({verifier.seconds:.1f}s of checking)\n")
        print(render_table(report))
        payload["verify"] = [r.to_json() for r in report.rows]
    if args.json:
        Path(args.json).write_text(json.dumps(payload, indent=2) + "\n")
    return 0


def _traceable(args: argparse.Namespace, keep_sampling_mask: bool) -> None:
    if args.trace and keep_sampling_mask:
        raise ValueError("--trace: keep_sampling_mask runs cannot be traced yet: the trace format (rlspec.trace v1) "
                         "records no sampling support, so `rlspec replay` would score the tokens over the whole "
                         "vocabulary and report a mismatch that is not there")


def _behaviour_line(cfg: Any) -> str:
    """What the behaviour log-probs are, and what that makes rho = pi_old / pi_behav under truncation."""
    line = f"behaviour log-probs: {cfg.behav_logprobs} form"
    if not (cfg.top_k > 0 or cfg.top_p < 1.0):
        return line + " (untruncated sampler: both forms are the tempered log-softmax)"
    line += f"; sampler truncated (top_k {cfg.top_k}, top_p {cfg.top_p}): "
    if cfg.keep_sampling_mask:
        return line + "the learner renormalises its log-probs over each token's sampling support (keep_sampling_mask)"
    if cfg.behav_logprobs == "sampling":
        return line + ("against the learner's full-support log-probs rho carries the kept mass S (rho = S < 1 "
                       "on-policy); --keep-sampling-mask or --behav-logprobs full removes it")
    return line + "full-support log-probs on both sides of rho"


def _trainer_class(cfg: Any) -> type:
    """Trainer, or AsyncTrainer for an asynchronous configuration."""
    from refimpl.trainer import Trainer
    from refimpl.trainer.async_trainer import AsyncTrainer

    return AsyncTrainer if cfg.asynchronous else Trainer


def _async_kwargs(cfg: Any, args: argparse.Namespace) -> dict[str, Any]:
    if args.ray_address and not cfg.asynchronous:
        raise ValueError("--ray-address: only with --async")
    if not cfg.asynchronous:
        return {}
    kwargs: dict[str, Any] = {"ray_address": args.ray_address}
    if cfg.engine == "vllm":
        from conformance.frameworks.vllm.rollout import VllmRolloutWorker

        kwargs["rollout_worker"] = VllmRolloutWorker
    return kwargs


def load_checkpoint_config(path: str) -> dict[str, Any]:
    """The configuration stored with the checkpoint at ``path`` (a run directory or a checkpoint)."""
    from refimpl.trainer.checkpoint import resolve_checkpoint

    return json.loads((resolve_checkpoint(path) / "trainer_state.json").read_text())["config"]


def _format_summary(summary: dict[str, Any], out_dir: str | None, wall: float) -> str:
    final = summary.get("final", {})
    thr = summary.get("threshold")
    target = summary["config"]["target_reward"]
    lines = [
        f"steps {summary.get('steps')}  training time {summary.get('wall_time_s') or 0:.1f}s (this process {wall:.1f}s)",
        "final (mean of the last {0} steps): reward {1:.3f}, solved {2:.3f}, KL to reference {3:.3f}, "
        "entropy {4:.3f}, completion length {5:.2f}".format(
            summary.get("final_window", 0), final.get("reward_mean", 0), final.get("accuracy", 0),
            final.get("kl_ref", 0), final.get("entropy", 0), final.get("completion_len_mean", 0)),
    ]
    if summary.get("asynchronous"):
        lines.append(f"asynchronous: {summary.get('samples_per_s') or 0:.0f} samples/s, learner idle "
                     f"{100 * (summary.get('learner_idle_frac') or 0):.0f}% of the time, samples per staleness "
                     f"{summary.get('staleness_histogram')}")
    if thr:
        lines.append(f"learned: 10-step mean reward >= {target} at step {thr['step']} ({thr['time_s']:.1f}s)")
    else:
        lines.append(f"not learned: the 10-step mean reward never reached {target}")
    if out_dir:
        lines.append(f"wrote {out_dir}/metrics.jsonl, summary.json, curves.png, checkpoints/")
    return "\n".join(lines)


def _compare(args: argparse.Namespace) -> int:
    from refimpl.trainer.metrics import MissingPlotDependency, plot_curves, read_jsonl, summarize

    runs: dict[str, list[dict[str, Any]]] = {}
    configs: dict[str, dict[str, Any]] = {}
    targets = []
    for d in args.compare:
        path = Path(d)
        summary_path = path / "summary.json"
        rows = read_jsonl(path / "metrics.jsonl")
        label = path.name
        if summary_path.exists():
            s = json.loads(summary_path.read_text())
            c = s["config"]
            kl = (f"kl_reward_coef={c['kl_reward_coef']:g}" if s["algo"] == "ppo" and not c.get("kl_coef")
                  else f"kl_coef={c['kl_coef']:g}")
            label = f"{s['algo']} ({s['loss']} loss, {kl})"
            targets.append(c["target_reward"])
            configs[label] = c
        runs[label] = rows
    target = targets[0] if targets else 0.9
    width = max(len(label) for label in runs) + 2
    header = (f"{'run':<{width}} {'steps':>6} {'time s':>8} {'final reward':>13} {'exact':>7}  "
              f"reward >= {target} (10-step mean) at")
    lines = [header, "-" * len(header)]
    summaries = []
    for label, rows in runs.items():
        s = summarize(rows, target)
        thr = s.get("threshold")
        at = f"step {thr['step']} ({thr['time_s']:.1f}s)" if thr else "not reached"
        lines.append(f"{label:<{width}} {s['steps']:>6} {s.get('wall_time_s') or 0:>8.1f} {s['final']['reward_mean']:>13.3f} "
                     f"{s['final']['accuracy']:>7.3f}  {at}")
        summaries.append({"run": label, **s, "config": configs.get(label)})
    print("\n".join(lines))
    if args.summary_jsonl:
        Path(args.summary_jsonl).write_text("".join(json.dumps(x) + "\n" for x in summaries))
        print(f"wrote {args.summary_jsonl}")
    out = args.plot or "compare.png"
    try:
        plot_curves(runs, out, target=target, title="rlspec train: reverse 3 digits, tiny random-weight Llama, 2-core CPU")
    except MissingPlotDependency as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0
