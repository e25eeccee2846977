"""NaN, ±inf and 1e30 planted where the mask says "unused" change no output and no gradient (bit for bit)
of any refimpl function that takes a mask and an input to plant; gradients there are exactly 0, never NaN.

The spec quantities come from their records (every record with the "mask" invariant): its seeded cases,
each also with the variants of its fingerprinting grid and refimpl's chunking options on top, and its
hand-built golden entries, planted by `conformance.records.cases.plant_masked` (token ids by
`plant_ids`). The refimpl functions that are no spec quantity (the fused log-prob + entropy pair, the
vocab-parallel, packed and micro-batch forms) have explicit cases (`explicit_cases`).

"Unused" is: masked positions of per-token inputs; for logits / hidden states, the rows t-1 whose
token t is masked (and the last row); for input_ids, masked positions (planted with ids outside
the vocabulary).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

import refimpl
from conformance.records import BY_FUNCTION, RECORDS, Quantity, cases
from refimpl.aggregation import AGGREGATION_MODES


def run(fn: Callable, args: dict[str, Any], kwargs: dict[str, Any], grad: tuple[str, ...]) -> tuple[tuple, tuple]:
    """`fn`'s outputs and the gradients of a weighted sum of them (a different weight per element) w.r.t. the
    arguments `grad` (None where none reaches one; all None where the outputs have no gradient)."""
    leaves = {k: (v.detach().clone().requires_grad_() if k in grad else v) for k, v in args.items()}
    out = fn(*leaves.values(), **kwargs)
    outs = out if isinstance(out, tuple) else (out,)
    loss = sum((o.double() * (1.0 + torch.arange(o.numel(), dtype=torch.float64).view(o.shape))).sum() for o in outs)
    inputs = [leaves[k] for k in grad]
    if not inputs or not loss.requires_grad:  # a keep mask, a metric: nothing to differentiate
        return outs, (None,) * len(inputs)
    return outs, torch.autograd.grad(loss, inputs, allow_unused=True)


# ----------------------------------------------------------------------------------------------
# the spec quantities: from their records
# ----------------------------------------------------------------------------------------------

SEEDS = (0, 1, 2, 3, 4, 5)
SEARCH = 100  # a keyword choice that nothing else runs is run on the first seed below this that draws it
DTYPES = ("float32", "bfloat16")
MASK_RECORDS = [r for r in RECORDS if "mask" in r.invariants]
# the roles of the arguments planted: float [B, T, ...] arrays (advantages when [B, T]) and token ids
PLANTED_ROLES = ("token", "adv", "logits", "hidden", "weights", "ids")
# refimpl's own keywords (no record has them: they change how refimpl computes, not what): chunks small
# enough that their boundaries fall inside every batch
REFIMPL_OPTIONS = {"chunk_size": 3, "vocab_chunk_size": 4}


def keyword_sets(record: Quantity, kwargs: dict[str, Any], *, grid: bool) -> list[dict[str, Any]]:
    """A case's keywords, then (`grid`) each variant of the record's fingerprinting grid on top of them, then
    refimpl's chunking options on top where its refimpl has them; without repeats."""
    sets = [kwargs, *({**kwargs, **v} for v in record.variant_grid() if grid)]
    options = {k: v for k, v in REFIMPL_OPTIONS.items() if k in inspect.signature(record.refimpl).parameters}
    if options:
        sets.append({**kwargs, **options})
    return [kw for i, kw in enumerate(sets) if kw not in sets[:i]]


def _holds(kwargs: dict[str, Any], name: str, default: Any, choice: Any) -> bool:
    """Whether keyword `name` (`default` where absent) is `choice` in `kwargs`."""
    value = kwargs.get(name, default)
    return type(value) is type(choice) and value == choice  # (True is not the choice 1)


def missing_choices(record: Quantity, sets: list[dict[str, Any]]) -> Iterator[tuple[str, Any]]:
    """(keyword, choice) of every choice of a choice or bool keyword of `record` that no keyword set holds."""
    for k in record.keywords:
        for choice in k.choices:
            if not any(_holds(kw, k.name, k.default, choice) for kw in sets):
                yield k.name, choice


def record_runs(record: Quantity) -> list[tuple[str, cases.Case, dict[str, Any]]]:
    """(label, case, keywords) of every run of `record`: the cases of SEEDS with their `keyword_sets` (grid
    included), then the case of the first seed drawing each keyword choice that neither these nor the golden
    entries run, then the hand-built golden entries with theirs (no grid: their keywords are chosen)."""
    seeded = {seed: record.make_case(seed) for seed in SEEDS}
    golden = [(entry.id, entry.build()) for entry in record.golden]
    sets = [kw for c in seeded.values() for kw in keyword_sets(record, c.kwargs, grid=True)]
    sets += [kw for _, c in golden for kw in keyword_sets(record, c.kwargs, grid=False)]
    for name, choice in list(missing_choices(record, sets)):
        default = record.keyword(name).default
        if any(_holds(kw, name, default, choice) for kw in sets):
            continue  # drawn by the seed added for an earlier choice
        for seed in (s for s in range(SEARCH) if s not in seeded):
            case = record.make_case(seed)
            if _holds(case.kwargs, name, default, choice):
                seeded[seed] = case
                sets += keyword_sets(record, case.kwargs, grid=True)
                break
    runs = [(f"seed {s}", c, kw) for s, c in seeded.items() for kw in keyword_sets(record, c.kwargs, grid=True)]
    return runs + [(label, c, kw) for label, c in golden for kw in keyword_sets(record, c.kwargs, grid=False)]


def _vocabulary(record: Quantity, args: dict[str, Any]) -> int:
    """V: the last axis of the logits, or the rows of the LM head."""
    for a in record.args:
        if a.role in ("logits", "weight"):
            shape = args[a.name].shape
            return shape[-1] if a.role == "logits" else shape[0]
    raise AssertionError(f"{record.function}: token ids without logits or an LM head")


def plant_ids(record: Quantity, rounded: dict[str, Any], planted: dict[str, Any], seed: int) -> dict[str, Any]:
    """`planted` with ids outside the vocabulary (-100, -1, V, V + 1000) at the masked positions of the
    token ids: api.md never reads an id there (`plant_masked` plants floats only)."""
    mask = rounded["mask"]
    out = dict(planted)
    for a in record.args:
        if a.role == "ids":
            V = _vocabulary(record, rounded)
            bad = np.array([-100, -1, V, V + 1000])[np.random.default_rng(seed).integers(0, 4, size=mask.shape)]
            out[a.name] = np.where(mask, rounded[a.name], bad)
    return out


def _same(a: Any, b: Any) -> bool:
    return np.array_equal(a, b, equal_nan=True) if isinstance(a, np.ndarray) else a is b or a == b


def _identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """torch.equal, with a NaN equal to a NaN at the same place (a golden entry's overflow can give one in a
    gradient the spec does not define, such as dL/dA times an infinite ratio; planting must not move it)."""
    nan = torch.isnan(a)
    return torch.equal(nan, torch.isnan(b)) and torch.equal(torch.where(nan, 0, a), torch.where(nan, 0, b))


def _unused_where(unused: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    where = torch.from_numpy(unused)
    return where.reshape(where.shape + (1,) * (like.dim() - 2)).expand_as(like)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("function", [r.function for r in MASK_RECORDS])
def test_record_planted_values_change_nothing(function, dtype):
    """Every run of `record_runs`, rounded to `dtype`, against the same with NaN, ±inf, ±1e30 (and bad ids) at
    every unused position: outputs and the gradients w.r.t. every float argument (the spec's gradient
    arguments and the others autograd reaches, such as old log-probs and advantages) unchanged, the
    gradients exactly 0 at the unused positions; a seeded case (well inside the dtype's range) all finite."""
    record = BY_FUNCTION[function]
    seeds_planted = False
    for i, (label, case, kwargs) in enumerate(record_runs(record)):
        what = f"{function} [{dtype}] {label} {kwargs}"
        rounded = cases.rounded_args(case, dtype)
        dirty = plant_ids(record, rounded, cases.plant_masked(case.derived(rounded, "rounded"), i).args, i)
        unused = {a.name: cases.unused_positions(a.name, rounded["mask"]) for a in record.args
                  if a.role in PLANTED_ROLES and np.shape(rounded[a.name])[:2] == rounded["mask"].shape}
        changed = {k for k in rounded if not _same(rounded[k], dirty[k])}
        assert changed <= set(unused), f"{what}: planted {sorted(changed - set(unused))}: not a per-token input"
        seeds_planted |= case.seed is not None and bool(changed)
        floats = tuple(k for k, v in rounded.items() if cases.is_float_array(v))
        clean_out, clean_grads = run(record.refimpl, cases.torch_args(rounded, dtype, ()), kwargs, floats)
        dirty_out, dirty_grads = run(record.refimpl, cases.torch_args(dirty, dtype, ()), kwargs, floats)
        for j, (a, b) in enumerate(zip(clean_out, dirty_out)):
            assert _identical(a, b), f"{what}: output {j} changed"
            assert case.seed is None or torch.isfinite(b).all(), f"{what}: output {j} not finite"
        for name, a, b in zip(floats, clean_grads, dirty_grads):
            zeros = torch.zeros(rounded[name].shape, dtype=cases.TORCH_DTYPES[dtype])
            a, b = (zeros if g is None else g for g in (a, b))
            assert _identical(a, b), f"{what}: gradient w.r.t. {name} changed"
            assert case.seed is None or torch.isfinite(b).all(), f"{what}: gradient w.r.t. {name} not finite"
            if name in unused:
                assert (b[_unused_where(unused[name], b)] == 0).all(), f"{what}: gradient w.r.t. {name} where unused"
    assert seeds_planted, f"{function}: no seeded case has a position to plant"


def test_every_record_with_a_mask_is_run():
    """A record with a mask and an input to plant holds the "mask" invariant (so it is run above), and its
    runs hold every choice of its choice and bool keywords."""
    for record in RECORDS:
        plantable = [a.name for a in record.args if a.role in PLANTED_ROLES]
        if "mask" in record.arg_names and plantable:
            assert record in MASK_RECORDS, f"{record.function}: takes a mask and {plantable}, no mask invariant"
    for record in MASK_RECORDS:
        assert "mask" in record.arg_names, f"{record.function}: the mask invariant without a mask argument"
        missing = list(missing_choices(record, [kw for _, _, kw in record_runs(record)]))
        assert not missing, f"{record.function}: no run (seeds < {SEARCH}, grid, golden entries) holds {missing}"


# ----------------------------------------------------------------------------------------------
# refimpl functions that are no spec quantity: explicit cases
# ----------------------------------------------------------------------------------------------

B, T, V, D = 5, 8, 11, 4
POISON = (float("nan"), float("inf"), float("-inf"), 1e30, -1e30)


def make_mask() -> torch.Tensor:
    mask = torch.zeros(B, T, dtype=torch.bool)
    mask[0, 2:6] = True  # right padding
    mask[1, 4:] = True  # left padding
    mask[2, 1:7] = True
    mask[2, 3] = False  # a gap inside the completion
    mask[4, 1:] = True
    # row 3: no valid token
    return mask


MASK = make_mask()
MASKED = ~MASK
UNREAD_ROWS = torch.ones(B, T, dtype=torch.bool)
UNREAD_ROWS[:, :-1] = ~MASK[:, 1:]


@dataclass
class Case:
    """An explicit case of a refimpl function that is no spec quantity."""

    fn: Callable
    args: dict[str, torch.Tensor]  # positional arguments, in order
    kwargs: dict = field(default_factory=dict)
    plant: dict[str, torch.Tensor] = field(default_factory=dict)  # argument -> [B, T] unused positions
    grad: tuple[str, ...] = ()


def token(dtype, seed, scale=1.0, offset=0.0):
    g = torch.Generator().manual_seed(seed)
    return (offset + scale * torch.randn(B, T, generator=g, dtype=torch.float64)).to(dtype)


def explicit_cases(dtype: torch.dtype) -> dict[str, Case]:
    """The refimpl functions with a mask that have no record: the fused log-prob + entropy pair and
    `multi_gpu_cases`."""
    g = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(B, T, V, generator=g, dtype=torch.float64)).to(dtype)
    hidden = torch.randn(B, T, D, generator=g, dtype=torch.float64).to(dtype)
    weight = torch.randn(V, D, generator=g, dtype=torch.float64).to(dtype)
    ids = torch.randint(0, V, (B, T), generator=g)
    out = {
        "token_logprobs_and_entropy_from_hidden": Case(
            refimpl.token_logprobs_and_entropy_from_hidden,
            {"hidden": hidden, "weight": weight, "input_ids": ids, "mask": MASK},
            {}, {"hidden": UNREAD_ROWS, "input_ids": MASKED}, ("hidden", "weight")),
    }
    out.update(multi_gpu_cases(dtype, logits, hidden, weight, ids))
    return out


# Packed rows for the packed functions: every sequence boundary (position id 0) sits on a masked
# position of MASK, as the packed functions require.
POSITION_IDS = torch.tensor([
    [0, 1, 2, 3, 4, 5, 0, 1],
    [0, 1, 0, 1, 2, 3, 4, 5],
    [0, 1, 2, 0, 1, 2, 3, 4],
    [0, 0, 0, 1, 0, 1, 2, -1],
    [0, 1, 2, 3, 4, 5, 6, 7],
])


def multi_gpu_cases(dtype, logits, hidden, weight, ids) -> dict[str, Case]:
    """refimpl.distributed / refimpl.vocab_parallel (one process: W = 1) and refimpl.packed."""
    out = {
        "vocab_parallel_token_logprobs": Case(
            refimpl.vocab_parallel_token_logprobs, {"logits_shard": logits, "input_ids": ids, "mask": MASK},
            {"vocab_start": 0, "temperature": 0.7, "chunk_size": 3}, {"logits_shard": UNREAD_ROWS, "input_ids": MASKED},
            ("logits_shard",)),
        "vocab_parallel_token_entropy": Case(
            refimpl.vocab_parallel_token_entropy, {"logits_shard": logits, "mask": MASK}, {"temperature": 1.3},
            {"logits_shard": UNREAD_ROWS}, ("logits_shard",)),
        "vocab_parallel_token_logprobs_from_hidden": Case(
            refimpl.vocab_parallel_token_logprobs_from_hidden,
            {"hidden": hidden, "weight_shard": weight, "input_ids": ids, "mask": MASK},
            {"vocab_start": 0, "chunk_size": 3, "vocab_chunk_size": 4}, {"hidden": UNREAD_ROWS, "input_ids": MASKED},
            ("hidden", "weight_shard")),
        "vocab_parallel_token_entropy_from_hidden": Case(
            refimpl.vocab_parallel_token_entropy_from_hidden, {"hidden": hidden, "weight_shard": weight, "mask": MASK},
            {"temperature": 0.7}, {"hidden": UNREAD_ROWS}, ("hidden", "weight_shard")),
        "vocab_parallel_token_logprobs_and_entropy_from_hidden": Case(
            refimpl.vocab_parallel_token_logprobs_and_entropy_from_hidden,
            {"hidden": hidden, "weight_shard": weight, "input_ids": ids, "mask": MASK},
            {"vocab_start": 0}, {"hidden": UNREAD_ROWS, "input_ids": MASKED}, ("hidden", "weight_shard")),
        "packed_token_logprobs": Case(
            refimpl.packed_token_logprobs, {"logits": logits, "input_ids": ids, "mask": MASK},
            {"position_ids": POSITION_IDS, "temperature": 0.7}, {"logits": UNREAD_ROWS, "input_ids": MASKED}, ("logits",)),
        "packed_token_entropy": Case(
            refimpl.packed_token_entropy, {"logits": logits, "mask": MASK}, {"position_ids": POSITION_IDS},
            {"logits": UNREAD_ROWS}, ("logits",)),
    }
    # context parallelism: the shard of CP rank 1 of 2, zigzag (model columns 2-3 and 4-5 of T = 8), its mask and
    # token losses at its token columns
    cols = refimpl.cp_columns(T, 2, 1, zigzag=True)
    tok = refimpl.cp_token_columns(cols, T)
    cp_mask = MASK[:, tok]
    out["cp_token_logprobs"] = Case(
        refimpl.cp_token_logprobs, {"logits": logits[:, cols], "input_ids": ids, "mask": cp_mask, "columns": cols},
        {"temperature": 0.7}, {"logits": ~cp_mask, "input_ids": MASKED}, ("logits",))
    counts = refimpl.StepCounts(num_tokens=float(MASK.sum()) + 3.0, num_seqs=float(B) + 1.0)
    seq_counts = MASK.sum(1).double() + 1.0
    for mode in AGGREGATION_MODES:
        out[f"cp_micro_batch_loss-{mode}"] = Case(
            refimpl.cp_micro_batch_loss, {"token_loss": token(dtype, 13)[:, tok], "mask": cp_mask},
            {"counts": counts, "mode": mode, "norm_length": 7.0, "world_size": 2, "token_columns": tok,
             "sequence_counts": seq_counts}, {"token_loss": ~cp_mask}, ("token_loss",))
        out[f"packed_aggregate-{mode}"] = Case(
            refimpl.packed_aggregate, {"token_loss": token(dtype, 11), "mask": MASK},
            {"mode": mode, "norm_length": 7.0, "position_ids": POSITION_IDS}, {"token_loss": MASKED}, ("token_loss",))
        out[f"micro_batch_loss-{mode}"] = Case(
            refimpl.micro_batch_loss, {"token_loss": token(dtype, 12), "mask": MASK},
            {"counts": counts, "mode": mode, "norm_length": 7.0, "dp_world_size": 2}, {"token_loss": MASKED}, ("token_loss",))
    return out


# refimpl functions with a mask whose other inputs are integer layouts, nothing a value could be planted in
NOTHING_TO_PLANT = {"cp_sequence_counts"}  # (mask, token_columns): counts of valid tokens per sequence


def test_every_other_function_with_a_mask_has_an_explicit_case():
    """A refimpl function with a mask and another positional input that is no record has an explicit case
    (those with the mask alone, such as the packing helpers, have nothing to plant); a record has none."""
    explicit = {case.fn.__name__ for case in explicit_cases(torch.float32).values()}
    assert explicit.isdisjoint(BY_FUNCTION), f"records run from their records: {sorted(explicit & set(BY_FUNCTION))}"
    assert {r.function for r in MASK_RECORDS} | explicit <= set(refimpl.__all__)
    for name in refimpl.__all__:
        fn = getattr(refimpl, name)
        if name in BY_FUNCTION or name in NOTHING_TO_PLANT or not inspect.isfunction(fn):
            continue
        parameters = inspect.signature(fn).parameters.values()
        inputs = [p.name for p in parameters if p.kind is p.POSITIONAL_OR_KEYWORD and p.name != "mask"]
        if "mask" in inspect.signature(fn).parameters and inputs:
            assert name in explicit, f"{name}: takes a mask and {inputs}, has no explicit case"


def planted(name: str, x: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    b, t = x.shape[:2]  # [B, T], or a context-parallel shard [B, T_local]
    if name == "input_ids":
        bad = torch.tensor([-100, V, V + 1000, -1]).repeat(b * t)[: b * t].view(b, t)
        return torch.where(where, bad, x)
    poison = torch.tensor(POISON, dtype=torch.float64).repeat(b * t)[: b * t].view(b, t).to(x.dtype)
    if x.dim() == 3:
        poison = poison.unsqueeze(2).expand_as(x)
        where = where.unsqueeze(2).expand_as(x)
    return torch.where(where, poison, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", sorted(explicit_cases(torch.float32)))
def test_planted_values_change_nothing(name, dtype):
    case = explicit_cases(dtype)[name]
    clean_out, clean_grads = run(case.fn, case.args, case.kwargs, case.grad)
    dirty_args = {k: planted(k, v, case.plant[k]) if k in case.plant else v for k, v in case.args.items()}
    assert any(not torch.equal(dirty_args[k], case.args[k]) for k in case.plant)
    dirty_out, dirty_grads = run(case.fn, dirty_args, case.kwargs, case.grad)
    for a, b in zip(clean_out, dirty_out):
        assert torch.equal(a, b), f"{name}: output changed"
        assert torch.isfinite(b).all()
    for arg, a, b in zip(case.grad, clean_grads, dirty_grads):
        a = torch.zeros_like(case.args[arg]) if a is None else a
        b = torch.zeros_like(case.args[arg]) if b is None else b
        assert torch.equal(a, b), f"{name}: gradient w.r.t. {arg} changed"
        assert torch.isfinite(b).all()
        if arg in case.plant:
            unused = case.plant[arg]
            unused = unused.unsqueeze(2).expand_as(b) if b.dim() == 3 else unused
            assert (b[unused] == 0).all(), f"{name}: non-zero gradient w.r.t. {arg} at unused positions"
