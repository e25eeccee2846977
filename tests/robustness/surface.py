"""The public surface of `oracle` and `refimpl`, found by introspection, and a *valid* base call of
every public function, built from one integer seed.

Used by the bad-input fuzzer (`test_bad_inputs.py`: every mutation starts from a base call that
passes). Coverage is automatic: a spec function's base call is its record's case
(`conformance.records`), and a callable newly added to a package's `__all__` without a record has no
base call until one is written in `EXTRA_BASE`; `base_call` then raises
`LookupError("no base call for ...")`, which fails the fuzzer's coverage test.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import oracle
import refimpl
from conformance.records import BY_FUNCTION, make_case

LIBS = {"oracle": oracle, "refimpl": refimpl}

# Public callables that are not checked here, with the reason. Data (`PRESETS`, `KL_ESTIMATORS`,
# `AGGREGATION_MODES`) is not callable and is never listed. Every public callable of both packages validates
# its inputs; the ones below are fuzzed elsewhere, argument by argument.
_CP = "its layout arguments (lengths, ranks, column indices) are fuzzed in tests/refimpl/test_context_parallel.py"
EXCLUDED: dict[tuple[str, str], str] = {
    ("refimpl", name): _CP for name in ("cp_columns", "cp_token_columns", "cp_token_logprobs", "cp_step_counts",
                                        "cp_sequence_counts", "cp_micro_batch_loss")
}
REFIMPL_DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def public_functions(lib: str) -> list[str]:
    """Every callable of `<lib>.__all__` (classes and data excluded), minus `EXCLUDED`."""
    module = LIBS[lib]
    names = []
    for name in module.__all__:
        obj = getattr(module, name)
        if callable(obj) and not isinstance(obj, type) and (lib, name) not in EXCLUDED:
            names.append(name)
    return names


def surface() -> list[tuple[str, str]]:
    return [(lib, name) for lib in LIBS for name in public_functions(lib)]


@dataclass
class Call:
    """One call of a public function: positional arguments in order, keywords, and the bool mask
    (NumPy, for choosing valid positions) when the function has one."""

    lib: str
    function: str
    args: dict[str, Any]
    kwargs: dict[str, Any]
    mask: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def fn(self) -> Callable[..., Any]:
        return getattr(LIBS[self.lib], self.function)

    def invoke(self) -> Any:
        return self.fn(*self.args.values(), **self.kwargs)

    def with_value(self, name: str, value: Any) -> Call:
        """The same call with argument `name` (positional or keyword) replaced."""
        args, kwargs = dict(self.args), dict(self.kwargs)
        if name in args:
            args[name] = value
        else:
            kwargs[name] = value
        return Call(self.lib, self.function, args, kwargs, self.mask, dict(self.meta))

    def value(self, name: str) -> Any:
        return self.args[name] if name in self.args else self.kwargs.get(name)

    def keyword_names(self) -> list[str]:
        return [
            p.name for p in inspect.signature(self.fn).parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]


# ----------------------------------------------------------------------------------------------
# base calls
# ----------------------------------------------------------------------------------------------


def _ensure_valid_position(args: dict[str, Any]) -> None:
    """The generators may draw a batch with no valid token; the fuzzer needs one (NaN at a valid
    position must be findable). mask[0, -1] is a completion token whose id is already in range."""
    mask = args.get("mask")
    if isinstance(mask, np.ndarray) and mask.size and not mask.any():
        mask[0, -1] = True


def _from_record(function: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    case = make_case(function, seed)
    args = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in case.args.items()}
    _ensure_valid_position(args)
    return args, dict(case.kwargs)


def _global_counts(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    args, _ = _from_record("whiten", seed)
    return {"mask": args["mask"]}, {}


def _renamed(function: str, renames: dict[str, str], **extra: Any) -> Callable[[int], tuple[dict[str, Any], dict[str, Any]]]:
    """A record case of `function` with arguments renamed (`logits` -> `logits_shard`) and extra
    keywords (single process: a vocabulary shard is the whole vocabulary, `vocab_start=0`)."""

    def build(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
        args, kwargs = _from_record(function, seed)
        return {renames.get(k, k): v for k, v in args.items()}, {**kwargs, **extra}

    return build


def one_sequence_per_row(mask: np.ndarray) -> np.ndarray:
    """`cu_seqlens` of a packed batch whose rows each hold one sequence: [0, T, 2T, ..., B*T]."""
    B, T = mask.shape
    return np.arange(0, B * T + 1, T, dtype=np.int64) if T else np.zeros(1, dtype=np.int64)


def _packed(function: str) -> Callable[[int], tuple[dict[str, Any], dict[str, Any]]]:
    """A record case of `function` (token_logprobs, token_entropy, aggregate) laid out as packed rows."""

    def build(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
        args, kwargs = _from_record(function, seed)
        return args, {**kwargs, "cu_seqlens": one_sequence_per_row(args["mask"])}

    return build


def _packed_mask_only(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    args, _ = _from_record("whiten", seed)
    return {"mask": args["mask"]}, {"cu_seqlens": one_sequence_per_row(args["mask"])}


def _step_counts(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    a, _ = _from_record("whiten", seed)
    b, _ = _from_record("whiten", seed + 1)
    return {"masks": [a["mask"], b["mask"]]}, {}


def _micro_batch_loss(seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    args, kwargs = _from_record("aggregate", seed)
    counts = refimpl.step_counts([torch.from_numpy(args["mask"])])
    return {**args, "counts": counts}, kwargs


# Functions outside the records (no spec id of their own: refimpl extras): how to build a valid call.
EXTRA_BASE: dict[str, Callable[[int], tuple[dict[str, Any], dict[str, Any]]]] = {
    "token_logprobs_and_entropy_from_hidden": lambda seed: _from_record("token_logprobs_from_hidden", seed),
    "global_counts": _global_counts,
    # refimpl.distributed / refimpl.vocab_parallel on one process
    "step_counts": _step_counts,
    "micro_batch_loss": _micro_batch_loss,
    "vocab_parallel_token_logprobs": _renamed("token_logprobs", {"logits": "logits_shard"}, vocab_start=0),
    "vocab_parallel_token_entropy": _renamed("token_entropy", {"logits": "logits_shard"}),
    "vocab_parallel_token_logprobs_from_hidden": _renamed(
        "token_logprobs_from_hidden", {"weight": "weight_shard"}, vocab_start=0),
    "vocab_parallel_token_entropy_from_hidden": _renamed("token_entropy_from_hidden", {"weight": "weight_shard"}),
    "vocab_parallel_token_logprobs_and_entropy_from_hidden": _renamed(
        "token_logprobs_from_hidden", {"weight": "weight_shard"}, vocab_start=0),
    # refimpl.packed: one sequence per row (cu_seqlens)
    "packed_token_logprobs": _packed("token_logprobs"),
    "packed_token_entropy": _packed("token_entropy"),
    "packed_aggregate": _packed("aggregate"),
    "packed_segments": _packed_mask_only,
    "pack_boundary_mask": _packed_mask_only,
}


def spec_function(name: str) -> str:
    return name[: -len("_grad")] if name.endswith("_grad") else name


def _numpy_base(name: str, seed: int) -> tuple[dict[str, Any], dict[str, Any]]:
    if name in EXTRA_BASE:
        return EXTRA_BASE[name](seed)
    base = spec_function(name)
    if base not in BY_FUNCTION or (base != name and not BY_FUNCTION[base].grad_args):
        raise LookupError(f"no base call for {name}: add a record or an EXTRA_BASE builder")
    args, kwargs = _from_record(base, seed)
    if base != name:  # `<name>_grad(<args>, upstream, **kwargs)`: upstream has the output's shape
        out = getattr(oracle, base)(*args.values(), **kwargs)
        first = out[0] if isinstance(out, tuple) else out
        rng = np.random.default_rng(seed + 1)
        if np.ndim(first) == 0:
            args["upstream"] = float(rng.normal())
        else:
            args["upstream"] = rng.normal(size=np.shape(first))
    return args, kwargs


def to_torch(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "f":
            return torch.tensor(value, dtype=dtype)
        return torch.from_numpy(value.copy())
    if isinstance(value, list):
        return [to_torch(v, dtype) for v in value]
    return value


def base_call(lib: str, name: str, seed: int) -> Call:
    """A valid call of `<lib>.<name>` (NumPy float64 arrays for the oracle; torch tensors of float32
    or float64, chosen by the seed, for the refimpl)."""
    args, kwargs = _numpy_base(name, seed)
    mask = args.get("mask", args["masks"][0] if "masks" in args else None)
    mask = mask.copy() if isinstance(mask, np.ndarray) else None
    call = Call(lib, name, args, kwargs, mask)
    if lib == "refimpl":
        dtype = REFIMPL_DTYPES[seed % len(REFIMPL_DTYPES)]
        call.args = {k: to_torch(v, dtype) for k, v in args.items()}
        call.kwargs = {k: to_torch(v, dtype) for k, v in kwargs.items()}
        call.meta["dtype"] = dtype
    return call


def outputs(result: Any) -> tuple[Any, ...]:
    """A result as a tuple of NumPy arrays (float64 for floats)."""
    if hasattr(result, "__dataclass_fields__"):  # StepCounts
        result = tuple(getattr(result, f) for f in result.__dataclass_fields__)
    items = result if isinstance(result, tuple) else (result,)
    out = []
    for item in items:
        if isinstance(item, torch.Tensor):
            item = item.detach().to(torch.float64).numpy() if item.is_floating_point() else item.numpy()
        out.append(np.asarray(item))
    return tuple(out)
