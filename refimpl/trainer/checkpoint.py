"""Checkpoints without pickle: safetensors for every tensor (model, reference model, optimizer state,
RNG state) and a JSON sidecar for scalars, written atomically.

Layout of ``<out_dir>/checkpoints/``::

    step-000050/                 one complete checkpoint (directory renamed into place when complete)
        model.safetensors        the policy (LM + value head), keys of PolicyModel.state_dict()
        ref_model.safetensors    the frozen reference policy (the initial weights)
        optimizer.safetensors    optimizer state, flattened: "state.<param index>.<key>"
        rng.safetensors          torch RNG states (uint8 tensors)
        trainer_state.json       step, elapsed time, config, optimizer param_groups, format version
    latest                       the name of the newest complete checkpoint (replaced atomically)

A checkpoint is written into ``.tmp-step-000050-<pid>/`` and renamed with ``os.replace`` only once
every file is on disk (fsynced); ``latest`` is written to a temporary file and ``os.replace``d too, so a
run killed at any moment leaves the previous checkpoint and pointer intact.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

FORMAT = "rlspec-trainer-checkpoint-v1"
LATEST = "latest"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as fh:
        os.fsync(fh.fileno())


def flatten_optimizer(optimizer: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, JSON-able rest) of ``optimizer.state_dict()``; scalar state entries become 0-d tensors."""
    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, Any] = {}
    for idx, state in sd["state"].items():
        for key, value in state.items():
            name = f"state.{idx}.{key}"
            if isinstance(value, torch.Tensor):
                tensors[name] = value.detach().cpu().contiguous()
            else:
                scalars[name] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, value in list(tensors.items()) + list(meta.get("scalars", {}).items()):
        _, idx, key = name.split(".", 2)
        state.setdefault(int(idx), {})[key] = value
    return {"state": state, "param_groups": meta["param_groups"]}


def _state_tensors(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """``module.state_dict()`` on the CPU for safetensors, which refuses tensors sharing memory: a tied weight
    (a model whose LM head is its input embedding) is written under each of its names, copied after the first."""
    out, seen = {}, set()
    for k, v in module.state_dict().items():
        v = v.detach().cpu().contiguous()
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    return out


def save_checkpoint(out_dir: str | os.PathLike, *, step: int, policy: torch.nn.Module, ref: torch.nn.Module,
                    optimizer: torch.optim.Optimizer, trainer_state: dict[str, Any], keep: int = 2) -> Path:
    """Write ``checkpoints/step-<step>`` atomically and point ``latest`` at it. Returns its path."""
    from safetensors.torch import save_file

    root = Path(out_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:06d}"
    final = root / name
    tmp = root / f".tmp-{name}-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_file(_state_tensors(policy), str(tmp / "model.safetensors"))
    save_file(_state_tensors(ref), str(tmp / "ref_model.safetensors"))
    opt_tensors, opt_meta = flatten_optimizer(optimizer)
    save_file(opt_tensors, str(tmp / "optimizer.safetensors"))
    rng = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            rng[f"torch_cuda_{i}"] = s
    save_file(rng, str(tmp / "rng.safetensors"))
    state = {"format": FORMAT, "step": step, "optimizer": opt_meta, **trainer_state}
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    for f in tmp.iterdir():
        _fsync_file(f)
    _fsync_dir(tmp)
    if final.exists():  # a re-run of the same step: replace it
        old = root / f".old-{name}-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync_dir(root)
    pointer = root / f".{LATEST}.tmp-{os.getpid()}"
    pointer.write_text(name + "\n")
    _fsync_file(pointer)
    os.replace(pointer, root / LATEST)
    _fsync_dir(root)
    _prune(root, keep, final)
    return final


def _prune(root: Path, keep: int, current: Path) -> None:
    done = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step-"))
    for p in done[: max(0, len(done) - max(1, keep))]:
        if p != current:
            shutil.rmtree(p, ignore_errors=True)


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """A checkpoint directory from a run directory (its ``checkpoints/latest``), a ``checkpoints``
    directory, or a checkpoint directory itself. Raises FileNotFoundError when there is none."""
    p = Path(path)
    for candidate in (p, p / "checkpoints"):
        if (candidate / "trainer_state.json").is_file():
            return candidate
        latest = candidate / LATEST
        if latest.is_file():
            ckpt = candidate / latest.read_text().strip()
            if (ckpt / "trainer_state.json").is_file():
                return ckpt
    raise FileNotFoundError(f"resume: no checkpoint under {str(p)!r} (expected checkpoints/latest or trainer_state.json)")


def load_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """{"dir", "state", "model", "ref_model", "optimizer" (a state_dict), "rng"} of a checkpoint."""
    from safetensors.torch import load_file

    ckpt = resolve_checkpoint(path)
    state = json.loads((ckpt / "trainer_state.json").read_text())
    if state.get("format") != FORMAT:
        raise ValueError(f"resume: {str(ckpt)!r}: unknown checkpoint format {state.get('format')!r} (expected {FORMAT!r})")
    return {
        "dir": ckpt,
        "state": state,
        "model": load_file(str(ckpt / "model.safetensors")),
        "ref_model": load_file(str(ckpt / "ref_model.safetensors")),
        "optimizer": unflatten_optimizer(load_file(str(ckpt / "optimizer.safetensors")), state["optimizer"]),
        "rng": load_file(str(ckpt / "rng.safetensors")),
    }


__all__ = ["save_checkpoint", "load_checkpoint", "resolve_checkpoint", "flatten_optimizer", "unflatten_optimizer", "FORMAT"]
