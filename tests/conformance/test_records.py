"""The records are the single source: the oracle and the refimpl have exactly the signature each record
declares (positional arguments, keywords and canonical defaults, the `_grad` convention), each accepts
exactly the choices of each choice keyword, and every record has its spec section, golden entries, seeded
vectors and a case generator that honours its own signature."""

from __future__ import annotations

import inspect

import pytest
import torch

import oracle
import refimpl
from conformance import spec
from conformance.records import RECORDS, module_of
from conformance.records.cases import rounded_args, torch_args
from conformance.records.record import REQUIRED

CHOICE_KEYWORDS = [(r, k) for r in RECORDS for k in r.keywords if k.kind == "choice"]


def _split(fn):
    params = inspect.signature(fn).parameters.values()
    positional = [p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    keywords = {p.name: p.default for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY}
    return positional, keywords


def _declared(record):
    return list(record.arg_names), {k.name: (inspect.Parameter.empty if k.default is REQUIRED else k.default)
                                    for k in record.keywords}


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.function)
def test_the_oracle_has_the_records_signature(record):
    assert record.function in oracle.__all__
    assert _split(record.oracle) == _declared(record)
    assert list(_split(record.oracle)[1]) == [k.name for k in record.keywords]  # in the record's order


@pytest.mark.parametrize("record", [r for r in RECORDS if r.grad_args], ids=lambda r: r.function)
def test_the_oracle_gradient_is_args_then_upstream_then_the_same_keywords(record):
    assert f"{record.function}_grad" in oracle.__all__
    positional, keywords = _declared(record)
    assert _split(record.oracle_grad) == (positional + ["upstream"], keywords)


@pytest.mark.parametrize("record", [r for r in RECORDS if not r.grad_args], ids=lambda r: r.function)
def test_a_quantity_without_gradient_has_no_oracle_gradient(record):
    assert f"{record.function}_grad" not in oracle.__all__


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.function)
def test_the_refimpl_has_the_records_signature_and_may_add_keywords(record):
    """api.md: "Extra keyword parameters are welcome; these names, positional arguments and keywords are
    fixed." (refimpl adds chunk sizes, memory budgets, process groups)."""
    assert record.function in refimpl.__all__
    positional, keywords = _split(record.refimpl)
    declared_positional, declared = _declared(record)
    assert positional == declared_positional
    assert {k: v for k, v in keywords.items() if k in declared} == declared


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.function)
def test_a_record_has_its_section_golden_entries_and_seeds(record):
    assert spec.description(record.spec_id)
    assert record.golden and record.golden_seeds
    assert all(e.function == record.function for e in record.golden)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.function)
def test_a_records_cases_follow_its_signature(record):
    for seed in range(8):
        case = record.make_case(seed)
        assert list(case.args) == list(record.arg_names)
        assert set(case.kwargs) <= {k.name for k in record.keywords}
        for k in record.keywords:
            if k.kind == "choice" and k.name in case.kwargs:
                assert case.kwargs[k.name] in k.choices, (k.name, case.kwargs[k.name])


def _accepts(fn, record, keyword, value, lib):
    """None when some generated case of the record accepts `keyword=value`, else the last error."""
    last = None
    for seed in range(40):
        case = record.make_case(seed)
        kwargs = {**case.kwargs, keyword: value}
        args = rounded_args(case, "float64")
        if lib == "refimpl":
            args = torch_args(args, "float64", ())
        try:
            fn(*args.values(), **kwargs)
            return None
        except ValueError as exc:
            if f"{record.function}: {keyword}:" in str(exc):  # refused the value itself
                return exc
            last = exc  # this case's other keywords do not go with the value: try another case
    return last


@pytest.mark.parametrize("lib", ["oracle", "refimpl"])
@pytest.mark.parametrize("record,keyword", CHOICE_KEYWORDS, ids=lambda x: getattr(x, "function", getattr(x, "name", x)))
def test_each_implementation_accepts_exactly_the_records_choices(record, keyword, lib):
    """Every declared choice is accepted (on some generated case), and a value outside them is refused with an
    error naming the function and the keyword: the oracle's and the refimpl's own constants agree with the
    record's."""
    fn = record.oracle if lib == "oracle" else record.refimpl
    for value in keyword.choices:
        assert _accepts(fn, record, keyword.name, value, lib) is None, (keyword.name, value)
    case = record.make_case(0)
    args = rounded_args(case, "float64")
    if lib == "refimpl":
        args = torch_args(args, "float64", ())
    with pytest.raises((ValueError, TypeError), match=f"{record.function}: {keyword.name}:"):
        fn(*args.values(), **{**case.kwargs, keyword.name: "no_such_choice"})


def test_the_choice_constants_the_implementations_export_are_the_records():
    kl = {r.function: r for r in RECORDS}["kl_penalty"].keyword("estimator").choices
    assert tuple(oracle.KL_ESTIMATORS) == kl and tuple(refimpl.kl.KL_ESTIMATORS) == kl
    modes = {r.function: r for r in RECORDS}["aggregate"].keyword("mode").choices
    assert tuple(oracle.AGGREGATION_MODES) == modes and tuple(refimpl.aggregation.AGGREGATION_MODES) == modes


def test_every_keyword_default_is_a_valid_value():
    for record in RECORDS:
        for k in record.keywords:
            if k.kind == "choice" and not k.required:
                assert k.default in k.choices, (record.function, k.name)
            if k.default is None:
                assert k.optional, (record.function, k.name, "defaults to None but is not optional")


def test_records_oracle_and_refimpl_modules_are_named_alike():
    """A quantity lives in `oracle/<m>.py`, `refimpl/<m>.py` and `conformance/records/<m>.py`, one name <m>."""
    for record in RECORDS:
        modules = {module_of(record), record.oracle.__module__.rsplit(".", 1)[-1],
                   record.refimpl.__module__.rsplit(".", 1)[-1]}
        assert len(modules) == 1, (record.function, modules)


@pytest.mark.parametrize("record", [r for r in RECORDS if r.grad_args], ids=lambda r: r.function)
def test_refimpl_outputs_carry_a_graph_for_the_grad_args(record):
    case = record.make_case(1)
    targs = torch_args(rounded_args(case, "float64"), "float64", record.grad_args)
    out = record.refimpl(*targs.values(), **case.kwargs)
    first = out[0] if isinstance(out, tuple) else out
    assert isinstance(first, torch.Tensor) and first.requires_grad
