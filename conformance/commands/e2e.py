"""`rlspec e2e`: a real trainer trained for a few steps, every step checked against the oracle.

``--trainer trl`` trains TRL's ``GRPOTrainer`` on the tiny random-weight Llama and digit task of ``rlspec train``
with the TRL recorder (``conformance/frameworks/trl/recorder.py``) and replays the trace: one row per link of
the step (``rlspec replay``), the first failing step named. ``--trainer refimpl`` runs rlspec's own trainer with
the ``--verify`` hook, one row per (step, check). Both in the table format of ``rlspec check``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from conformance.runner.report import REPORT_SCHEMA_VERSION


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes"):
        return True
    if text.lower() in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def register(subparsers: argparse._SubParsersAction) -> None:
    from conformance.frameworks.trl.recorder import E2E_DEFAULTS as DEFAULT_TRL_CONFIG

    parser = subparsers.add_parser(
        "e2e",
        help="train a real trainer (TRL GRPOTrainer, or rlspec's own) a few steps and check every step against the oracle",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--trainer", choices=("trl", "refimpl"), default="trl", help="the trainer to run [trl]")
    parser.add_argument("--steps", type=int, default=4, metavar="N", help="optimizer steps [4]")
    parser.add_argument("--seed", type=int, default=0, help="model, prompts and trainer seed [0]")
    trl = parser.add_argument_group("--trainer trl: GRPOConfig values (defaults in brackets)")
    trl.add_argument("--loss-type", default=DEFAULT_TRL_CONFIG["loss_type"],
                     help=f"GRPOConfig.loss_type [{DEFAULT_TRL_CONFIG['loss_type']}]")
    trl.add_argument("--beta", type=float, default=DEFAULT_TRL_CONFIG["beta"], help=f"KL coefficient [{DEFAULT_TRL_CONFIG['beta']}]")
    trl.add_argument("--num-iterations", type=int, default=DEFAULT_TRL_CONFIG["num_iterations"],
                     help=f"steps per generated batch [{DEFAULT_TRL_CONFIG['num_iterations']}]")
    trl.add_argument("--temperature", type=float, default=DEFAULT_TRL_CONFIG["temperature"],
                     help=f"sampling and scoring temperature [{DEFAULT_TRL_CONFIG['temperature']}]")
    trl.add_argument("--scale-rewards", choices=("group", "batch", "none"), default=DEFAULT_TRL_CONFIG["scale_rewards"],
                     help=f"[{DEFAULT_TRL_CONFIG['scale_rewards']}]")
    trl.add_argument("--importance-sampling-level", choices=("token", "sequence"), default="token", help="[token]")
    trl.add_argument("--use-bias-correction-kl", type=_bool, default=None, metavar="BOOL",
                     help="TRL's KL times the importance ratio [TRL's default]")
    trl.add_argument("--trace", metavar="DIR", help="keep the recorded trace in DIR/e2e (for rlspec replay) [a temporary folder]")
    ref = parser.add_argument_group("--trainer refimpl")
    ref.add_argument("--algo", choices=("grpo", "rloo", "reinforce", "ppo"), default="grpo", help="[grpo]")
    ref.add_argument("--loss", choices=("ppo", "gspo", "cispo"), default="ppo", help="[ppo]")
    parser.add_argument("--json", metavar="PATH", help=f"write the report as JSON (schema {REPORT_SCHEMA_VERSION})")
    parser.add_argument("--junit", metavar="PATH", help="write the report as JUnit XML")
    parser.add_argument("--markdown", metavar="PATH", help="write the report as Markdown")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from conformance.runner.report import AdapterInfo, Report, render_table, write_outputs

    if args.steps < 1:
        print("rlspec e2e: --steps: expected >= 1", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    if args.trainer == "trl":
        try:
            import trl  # noqa: F401

            from conformance.frameworks.trl import recorder
        except ImportError as exc:  # pragma: no cover - depends on the environment
            print(f"rlspec e2e: trl: not installed ({exc}): pip install 'rlspec[trl]'", file=sys.stderr)
            return 2
        from conformance.trace.replay import replay

        config = dict(loss_type=args.loss_type, beta=args.beta, num_iterations=args.num_iterations,
                      temperature=args.temperature, scale_rewards=args.scale_rewards,
                      importance_sampling_level=args.importance_sampling_level)
        if args.use_bias_correction_kl is not None:
            config["use_bias_correction_kl"] = args.use_bias_correction_kl
        with tempfile.TemporaryDirectory(prefix="rlspec-e2e-trl-") as tmp:
            try:
                folder = recorder.record(args.trace or tmp, "e2e", steps=args.steps, seed=args.seed,
                                         settings=recorder.grpo_settings(**config))
            except (ValueError, RuntimeError) as exc:
                print(f"rlspec e2e: trl: {exc}", file=sys.stderr)
                return 2
            _, rows = replay(str(folder))
        repro = (f"rlspec e2e --trainer trl --steps {args.steps} --seed {args.seed} "
                 + " ".join(f"--{k.replace('_', '-')} {v}" for k, v in config.items()) + " --trace DIR && rlspec replay DIR/e2e")
        for r in rows:
            r.id = f"trl.{r.function}"
            r.adapter = "trl"
            r.reproduce = repro
        adapter = AdapterInfo("trl", trl.__version__, "v1")
        header = (f"TRL {trl.__version__} GRPOTrainer, {args.steps} steps on the tiny random-weight Llama "
                  f"(reverse 3 digits), replayed from its trace: " + ", ".join(f"{k}={v}" for k, v in config.items()))
    else:
        import torch

        from conformance.trainer_verify import TrainerVerifier, VerificationError
        from refimpl.trainer import TrainConfig, Trainer
        from refimpl.trainer.task import MissingTransformers

        verifier = TrainerVerifier(raise_on_fail=False)
        cfg = TrainConfig(steps=args.steps, seed=args.seed, algo=args.algo, loss=args.loss, prompts_per_step=8,
                          checkpoint_every=0)
        try:
            Trainer(cfg, on_step=verifier).train()
        except VerificationError as exc:  # pragma: no cover - raise_on_fail=False
            print(exc, file=sys.stderr)
        except MissingTransformers as exc:
            print(f"rlspec e2e: {exc}", file=sys.stderr)
            return 2
        rows = verifier.rows(per_step=True, prefix="refimpl.train")
        adapter = AdapterInfo("refimpl", f"torch {torch.__version__}", "v1")
        header = f"rlspec refimpl trainer, {args.steps} steps: algo={args.algo}, loss={args.loss}, {verifier.updates} updates"
    report = Report(seed=args.seed, n_seeds=1, adapters=[adapter], rows=rows, seconds=time.perf_counter() - t0)
    print(header + "\n")
    print(render_table(report))
    write_outputs(report, json_path=args.json, junit_path=args.junit, markdown_path=args.markdown)
    return 0 if report.ok else 1
