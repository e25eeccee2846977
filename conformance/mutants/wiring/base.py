"""The :class:`WiringMutant` record, the runs that plant one into the refimpl trainer, and discovery.

A mutant's ``plant(stack, cfg)`` replaces one name the trainer's modules look up at call time
(``refimpl.trainer.loop.generate``, ``...loop.objective_token_loss``, ``refimpl.trainer._dist.micro_batch_loss``,
...) with a re-creation of the bug, registered on ``stack`` so that leaving the ``with`` restores it. The
run records a trace with :class:`conformance.trainer_trace.TraceHook` and replays it: the mutant is *caught*
when its ``link`` row FAILs and *named* when one of the row's ``consistent_with`` entries contains its
``identifies`` text. Runs of more than one process (``world_size`` > 1, ``cp_size`` > 1) go through
``torchrun`` with ``_rank.py`` as the entry point, which plants the mutant in every rank.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The run every mutant starts from: two rollout steps (reference and old policies differ from the second on),
# two micro-batches per update, a KL term, one update per step.
BASE_CONFIG: dict[str, Any] = dict(steps=2, prompts_per_step=4, group_size=4, grad_accum=2, num_minibatches=1,
                                   kl_coef=0.05, checkpoint_every=0, seed=0)


@dataclass(frozen=True)
class WiringMutant:
    """One training-step bug planted in the refimpl trainer.

    ``name``: the module name; ``bug_class``: one sentence; ``cites``: where it happened; ``link``: the replay row
    that must FAIL (``trace.grad``); ``identifies``: text of the identification replay must print; ``config``:
    TrainConfig overrides on top of BASE_CONFIG that expose the bug; ``plant``: installs the bug;
    ``world_size``/``cp_size``: processes of the run; ``asynchronous``: the run needs Ray.
    """

    name: str
    bug_class: str
    cites: tuple[str, ...]
    link: str
    identifies: str
    plant: Callable[[contextlib.ExitStack, Any], None]
    config: dict[str, Any] = field(default_factory=dict)
    world_size: int = 1
    cp_size: int = 1
    doc: str = field(default="", compare=False)

    @property
    def multi_process(self) -> bool:
        return self.world_size * self.cp_size > 1

    @property
    def asynchronous(self) -> bool:
        return bool(self.config.get("asynchronous"))


def replace_attr(stack: contextlib.ExitStack, owner: Any, name: str, value: Any) -> Any:
    """Set ``owner.name = value`` until ``stack`` closes; returns the original."""
    original = getattr(owner, name)
    setattr(owner, name, value)
    stack.callback(setattr, owner, name, original)
    return original


def discover() -> list[WiringMutant]:
    """Every ``MUTANT`` of this package's modules, sorted by name."""
    pkg = importlib.import_module(__package__)
    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name.startswith("_") or info.name in ("base", "judge"):  # the machinery, not mutants
            continue
        module = importlib.import_module(f"{__package__}.{info.name}")
        mutant = getattr(module, "MUTANT", None)
        if not isinstance(mutant, WiringMutant):
            raise ValueError(f"wiring mutant module {module.__name__}: MUTANT is missing or not a WiringMutant")
        if mutant.name != info.name:
            raise ValueError(f"wiring mutant module {module.__name__}: MUTANT.name is {mutant.name!r}")
        if not mutant.doc and module.__doc__:
            object.__setattr__(mutant, "doc", module.__doc__.strip())
        found.append(mutant)
    return sorted(found, key=lambda m: m.name)


def by_name(name: str) -> WiringMutant:
    for m in discover():
        if m.name == name:
            return m
    raise KeyError(f"no wiring mutant {name!r}")


def config_of(mutant: WiringMutant | None, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    cfg = dict(BASE_CONFIG)
    if mutant is not None:
        cfg.update(mutant.config)
    cfg.update(overrides or {})
    return cfg


def _train(mutant: WiringMutant | None, trace_dir: Path, config: dict[str, Any]) -> None:
    """Train in this process (one rank of a torchrun job, or alone) with the mutant planted."""
    from conformance.trainer_trace import TraceHook
    from refimpl.trainer import TrainConfig
    from refimpl.trainer.async_trainer import AsyncTrainer
    from refimpl.trainer.loop import Trainer

    cfg = TrainConfig(**config)
    cls = AsyncTrainer if cfg.asynchronous else Trainer
    with contextlib.ExitStack() as stack:
        if mutant is not None:
            mutant.plant(stack, cfg.resolved())
        cls(cfg, on_step=TraceHook(trace_dir)).train()


def record(mutant: WiringMutant | None, trace_dir: str | Path, *, overrides: dict[str, Any] | None = None,
           world_size: int | None = None, cp_size: int | None = None) -> Path:
    """Record the trace of a run with ``mutant`` planted (None: the trainer as it is, same configuration)."""
    trace_dir = Path(trace_dir)
    config = config_of(mutant, overrides)
    world = world_size if world_size is not None else (mutant.world_size if mutant else 1)
    cp = cp_size if cp_size is not None else (mutant.cp_size if mutant else 1)
    if cp > 1:
        config["cp_size"] = cp
    if world * cp == 1:
        _train(mutant, trace_dir, config)
        return trace_dir
    import json

    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world * cp}",
           "-m", f"{__package__}._rank", mutant.name if mutant else "-", str(trace_dir), json.dumps(config)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"wiring mutant {mutant.name if mutant else 'none'}: torchrun exited {done.returncode}:\n"
                           f"{done.stderr[-3000:]}")
    return trace_dir


def rank_main(argv: list[str]) -> int:
    """One torchrun rank: plant the mutant named by argv[0] (or none: '-') and train, recording argv[1]."""
    import json

    import torch.distributed as dist

    name, trace_dir, config = argv
    dist.init_process_group("gloo")
    try:
        _train(None if name == "-" else by_name(name), Path(trace_dir), json.loads(config))
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0
