"""Read an rlspec trace (``conformance/spec/v1/trace.md``) into one :class:`StepTrace` per optimizer step.

Each step's micro-batches are brought to the spec's layout before any check: context-parallel shards are
put back together by ``cp_columns`` (every column of a sequence held by exactly one CP rank), packed
micro-batches are unpacked into one row per sequence by ``cu_seqlens``, and all rows of the step are
stacked (right-padded to the widest micro-batch) in (data-parallel rank, micro-batch, row) order, with
where each row came from (``dp``, ``mb``, ``width``) and on which CP rank each token was (``cp``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rlspec.trace import MICRO_TENSORS, STEP_TENSORS, TRACE_FORMAT, TRACE_VERSION

# Per-row tensors (one value per sequence) and per-token tensors beyond [b, T].
_ROW = {"rewards", "group_ids", "row_ids"}
_SCALAR = {"loss"}
_LAYOUT = {"cu_seqlens", "cp_columns"}


class TraceError(ValueError):
    """The trace cannot be read (missing files, wrong format or version, inconsistent layout)."""


@dataclass
class StepTrace:
    """One optimizer step, every rank's micro-batches in spec layout."""

    step: int
    folder: Path
    config: dict[str, Any]
    dp: int
    cp: int
    tensors: dict[str, np.ndarray]  # [N, T] (or [N] per row, [N, T, D] hidden) over every row of the step
    present: dict[str, int]  # name -> micro-batches that recorded it
    n_micro: int  # micro-batches in the step (all ranks)
    micro_per_rank: dict[int, int]  # dp rank -> its micro-batches
    dp_of: np.ndarray  # [N] data-parallel rank of each row
    mb_of: np.ndarray  # [N] global micro-batch index of each row (0 .. n_micro - 1)
    width: np.ndarray  # [N] the row's width in its micro-batch (before right-padding)
    cp_of: np.ndarray  # [N, T] context-parallel rank that held each token (0 without CP)
    losses: list[tuple[int, int, float]]  # (dp rank, micro-batch on the rank, loss) per micro-batch that recorded it
    probe_name: str | None = None
    probe: dict[str, np.ndarray] = field(default_factory=dict)
    dtypes: dict[str, str] = field(default_factory=dict)  # each tensor's recorded dtype

    def has(self, *names: str) -> bool:
        """Every named tensor was recorded by every micro-batch (a tensor some micro-batches lack is not used)."""
        return all(self.present.get(n, 0) == self.n_micro for n in names)

    def get(self, name: str) -> np.ndarray:
        return self.tensors[name]

    @property
    def rows(self) -> int:
        return int(self.dp_of.shape[0])


@dataclass
class Trace:
    path: Path
    trainer: dict[str, Any]
    steps: list[StepTrace]

    @property
    def name(self) -> str:
        return str(self.trainer.get("name") or "trainer")

    @property
    def version(self) -> str:
        return str(self.trainer.get("version") or "")


def _json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise TraceError(f"{path}: missing") from None
    except json.JSONDecodeError as exc:
        raise TraceError(f"{path}: not JSON ({exc})") from None


def _check_header(path: Path, data: dict[str, Any]) -> None:
    if data.get("format") != TRACE_FORMAT:
        raise TraceError(f"{path}: format: expected {TRACE_FORMAT!r}, got {data.get('format')!r}")
    if data.get("version") != TRACE_VERSION:
        raise TraceError(f"{path}: version: this rlspec reads version {TRACE_VERSION}, got {data.get('version')!r}")


def _load(path: Path, dtypes: dict[str, str]) -> dict[str, np.ndarray]:
    """A safetensors file as NumPy arrays (bfloat16 and float16 widened to float32); each tensor's recorded
    dtype is noted in ``dtypes`` (the precision the checks allow)."""
    import torch
    from safetensors.torch import load_file

    try:
        raw = load_file(str(path))
    except FileNotFoundError:
        raise TraceError(f"{path}: missing") from None
    except Exception as exc:  # a truncated or foreign file
        raise TraceError(f"{path}: not a safetensors file ({exc})") from None
    out = {}
    for k, v in raw.items():
        dtypes.setdefault(k, str(v.dtype).removeprefix("torch."))
        out[k] = (v.float() if v.dtype in (torch.bfloat16, torch.float16) else v).numpy()
    return out


def _merge_cp(shards: list[dict[str, np.ndarray]], where: str) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Put CP shards of one micro-batch back together along the columns (per-token tensors), checking that
    per-row tensors agree and that the shards' ``cp_columns`` partition the columns."""
    if len(shards) == 1 and "cp_columns" not in shards[0]:
        return shards[0], None
    cols = []
    for c, s in enumerate(shards):
        if "cp_columns" not in s:
            raise TraceError(f"{where}: cp rank {c}: cp_columns missing (required with cp > 1)")
        cols.append(s["cp_columns"].astype(np.int64).ravel())
    width = int(max(int(c.max()) for c in cols if c.size) + 1)
    seen = np.zeros(width, dtype=np.int64)
    for c in cols:
        np.add.at(seen, c, 1)
    if not np.all(seen == 1):
        bad = int(np.flatnonzero(seen != 1)[0])
        raise TraceError(f"{where}: cp_columns: column {bad} is held by {int(seen[bad])} CP ranks (expected exactly 1)")
    out: dict[str, np.ndarray] = {}
    owner = None
    names = set().union(*shards) - _LAYOUT
    for name in sorted(names):
        parts = [s.get(name) for s in shards]
        if any(p is None for p in parts):
            continue
        if name in _ROW or name in _SCALAR or parts[0].ndim < 2:  # per-row ([b]: e.g. sequence advantages) or scalar
            if name == "loss":
                out[name] = np.asarray(sum(float(p) for p in parts))  # each CP rank's share of the micro-batch loss
                continue
            if any(not np.array_equal(parts[0], p) for p in parts[1:]):
                raise TraceError(f"{where}: {name}: differs between CP ranks (a per-row tensor)")
            out[name] = parts[0]
            continue
        first = parts[0]
        full = np.zeros(first.shape[:1] + (width,) + first.shape[2:], dtype=first.dtype)
        for c, p in zip(cols, parts):
            if p.shape[1] != c.shape[0]:
                raise TraceError(f"{where}: {name}: {p.shape[1]} columns but cp_columns has {c.shape[0]}")
            full[:, c] = p
        out[name] = full
    owner = np.zeros(width, dtype=np.int64)
    for r, c in enumerate(cols):
        owner[c] = r
    return out, owner


def _unpack(t: dict[str, np.ndarray], owner: np.ndarray | None, cu: np.ndarray, where: str
            ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """One packed row [1, total] to one row per sequence (right-padded)."""
    cu = cu.astype(np.int64).ravel()
    if cu.ndim != 1 or cu.size < 2 or cu[0] != 0 or np.any(np.diff(cu) < 0):
        raise TraceError(f"{where}: cu_seqlens: expected 0 = c_0 <= c_1 <= ..., got {cu.tolist()}")
    n, L = cu.size - 1, int(np.diff(cu).max())
    out: dict[str, np.ndarray] = {}
    for name, x in t.items():
        if name in _SCALAR or name in _ROW:
            out[name] = x
            continue
        flat = x.reshape((-1,) + x.shape[2:]) if x.ndim >= 2 else x
        if flat.shape[0] != cu[-1]:
            raise TraceError(f"{where}: {name}: {flat.shape[0]} packed tokens but cu_seqlens ends at {int(cu[-1])}")
        rows = np.zeros((n, L) + flat.shape[1:], dtype=flat.dtype)
        for i in range(n):
            rows[i, : cu[i + 1] - cu[i]] = flat[cu[i]:cu[i + 1]]
        out[name] = rows
    own = None
    if owner is not None:
        own = np.zeros((n, L), dtype=np.int64)
        for i in range(n):
            own[i, : cu[i + 1] - cu[i]] = owner[cu[i]:cu[i + 1]]
    return out, own


def _stack(pieces: list[np.ndarray], T: int) -> np.ndarray:
    out = []
    for p in pieces:
        if p.ndim >= 2 and p.shape[1] < T:
            pad = np.zeros((p.shape[0], T - p.shape[1]) + p.shape[2:], dtype=p.dtype)
            p = np.concatenate([p, pad], axis=1)
        out.append(p)
    return np.concatenate(out, axis=0)


def read_step(folder: Path) -> StepTrace:
    manifest = _json(folder / "manifest.json")
    _check_header(folder / "manifest.json", manifest)
    layout = manifest.get("layout", {})
    dp, cp = int(layout.get("dp", 1)), int(layout.get("cp", 1))
    parts = {}
    for d in range(dp):
        for c in range(cp):
            parts[(d, c)] = _json(folder / f"part-dp{d}-cp{c}.json")
    micro: list[tuple[int, int, dict[str, np.ndarray], np.ndarray | None]] = []
    micro_per_rank: dict[int, int] = {}
    dtypes: dict[str, str] = {}
    losses: list[tuple[int, int, float]] = []
    for d in range(dp):
        counts = {c: len(parts[(d, c)]["micro_batches"]) for c in range(cp)}
        if len(set(counts.values())) != 1:
            raise TraceError(f"{folder}: dp rank {d}: CP ranks recorded different numbers of micro-batches {counts}")
        micro_per_rank[d] = counts[0]
        for j in range(counts[0]):
            where = f"{folder.name} dp{d} mb{j}"
            shards = [_load(folder / parts[(d, c)]["micro_batches"][j]["file"], dtypes) for c in range(cp)]
            t, owner = _merge_cp(shards, where)
            cu = shards[0].get("cu_seqlens")
            if cu is not None:
                t, owner = _unpack(t, owner, cu, where)
            elif owner is not None:
                owner = np.broadcast_to(owner, t["input_ids"].shape).copy()
            for req in ("input_ids", "loss_mask"):
                if req not in t:
                    raise TraceError(f"{where}: {req}: required tensor missing")
            if "loss" in t:
                losses.append((d, j, float(t["loss"])))
            micro.append((d, j, t, owner))
    T = max(m[2]["input_ids"].shape[1] for m in micro)
    names = sorted(set().union(*(m[2] for m in micro)) - _SCALAR)
    present = {n: sum(1 for m in micro if n in m[2]) for n in names}
    tensors: dict[str, np.ndarray] = {}
    for n in names:
        if present[n] != len(micro):
            continue
        arrs = []
        for _, _, t, _ in micro:
            x = t[n]
            if x.ndim >= 2 and x.shape[1] != t["input_ids"].shape[1] and n not in _ROW:
                raise TraceError(f"{folder.name}: {n}: {x.shape[1]} columns, input_ids has {t['input_ids'].shape[1]}")
            arrs.append(x)
        tensors[n] = _stack(arrs, T)
    for n in ("loss_mask", "attention_mask", "prompt_mask", "completion_mask"):
        if n in tensors:
            tensors[n] = tensors[n].astype(bool)
    rows = [m[2]["input_ids"].shape[0] for m in micro]
    dp_of = np.concatenate([np.full(r, m[0]) for r, m in zip(rows, micro)])
    mb_of = np.concatenate([np.full(r, i) for i, r in enumerate(rows)])
    width = np.concatenate([np.full(r, m[2]["input_ids"].shape[1]) for r, m in zip(rows, micro)])
    cp_of = _stack([m[3] if m[3] is not None else np.zeros(m[2]["input_ids"].shape, dtype=np.int64) for m in micro], T)
    probe: dict[str, np.ndarray] = {}
    if (folder / "step.safetensors").exists():
        probe = _load(folder / "step.safetensors", dtypes)
        unknown = sorted(set(probe) - set(STEP_TENSORS))
        if unknown:
            raise TraceError(f"{folder}/step.safetensors: {unknown[0]}: not a step tensor name")
    return StepTrace(step=int(manifest["step"]), folder=folder, config=dict(manifest.get("config") or {}), dp=dp, cp=cp,
                     tensors=tensors, present=present, n_micro=len(micro), micro_per_rank=micro_per_rank,
                     dp_of=dp_of, mb_of=mb_of, width=width, cp_of=cp_of, losses=losses,
                     probe_name=manifest.get("probe"), probe=probe, dtypes=dtypes)


def read_trace(path: str | Path) -> Trace:
    """Every step of the trace folder ``path`` (``trace.json`` and ``step-*/``), in step order."""
    root = Path(path)
    if not root.is_dir():
        raise TraceError(f"{root}: not a trace folder")
    header = _json(root / "trace.json")
    _check_header(root / "trace.json", header)
    folders = sorted(p for p in root.glob("step-*") if p.is_dir())
    if not folders:
        raise TraceError(f"{root}: no step-* folder (nothing was recorded)")
    unknown = set()
    steps = [read_step(f) for f in folders]
    for s in steps:
        unknown |= set(s.present) - set(MICRO_TENSORS)
    if unknown:
        raise TraceError(f"{root}: {sorted(unknown)[0]}: not a trace tensor name")
    return Trace(path=root, trainer=dict(header.get("trainer") or {}), steps=steps)


__all__ = ["Trace", "StepTrace", "TraceError", "read_trace", "read_step"]
