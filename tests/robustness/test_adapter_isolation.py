"""Adapter isolation: an adapter that raises, hangs, returns the wrong shape, dtype or NaN, or modifies
its inputs in place gets an `error` or `fail` row that says why; the run goes on and the report is
complete. Inputs handed to an adapter are fresh copies (torch and NumPy paths, golden vectors too)."""

from __future__ import annotations

import json
import types

import jsonschema
import numpy as np
import torch

import oracle
import refimpl
from conformance.records import make_case
from conformance.runner import report as reports
from conformance.runner.run import run, select_records
from conformance.runner.options import RunOptions
from conformance.runner.differential import run_case
from conformance.records import BY_FUNCTION
from conformance.runner.vectors import check_vector
from conformance.vectors import golden

EXAMPLES = "tests.conformance.example_adapters"
ADAPTERS = [f"{EXAMPLES}:contract_breakers", f"{EXAMPLES}:numpy_contract_breakers", f"{EXAMPLES}:misbehaving"]
SPEC_IDS = ["loss.pg", "loss.ppo", "adv.grpo", "adv.rloo", "adv.reinforce", "adv.whiten", "logprob.entropy",
            "kl.estimator"]

# (adapter, function) -> (statuses allowed, fragments the row's message must contain)
EXPECTED = {
    ("contract_breakers", "pg_token_loss"): ({"fail", "error"}, ["adapter modified its input mask in place"]),
    ("contract_breakers", "ppo_token_loss"): ({"fail", "error"}, ["adapter modified its input logp in place"]),
    ("contract_breakers", "grpo_advantages"): ({"fail"}, ["output dtype torch.float64, expected torch.float32"]),
    ("contract_breakers", "rloo_advantages"): ({"fail"}, ["output dtype torch.int64"]),
    ("contract_breakers", "reinforce_advantages"): ({"fail"}, ["NaN at index"]),
    ("contract_breakers", "whiten"): ({"fail"}, ["shape ()"]),
    ("contract_breakers", "token_entropy"): ({"pass"}, []),
    ("contract_breakers", "kl_penalty"): ({"not_implemented"}, []),
    ("numpy_contract_breakers", "pg_token_loss"): ({"fail", "error"}, ["adapter modified its input mask in place"]),
    ("numpy_contract_breakers", "kl_penalty"): ({"fail", "error"}, ["adapter modified its input upstream in place"]),
    ("misbehaving", "rloo_advantages"): ({"error"}, ["RuntimeError: adapter exploded"]),
    ("misbehaving", "reinforce_advantages"): ({"error"}, ["timed out after 3s"]),
    ("misbehaving", "grpo_advantages"): ({"fail"}, ["shape (", "but should be"]),
}


def test_misbehaving_adapters_get_rows_with_the_reason_and_the_report_is_complete(tmp_path):
    records = select_records(SPEC_IDS)
    rep = run(ADAPTERS, records, RunOptions(seed=0, n_seeds=2, timeout=3))
    rows = {(r.adapter, r.function): r for r in rep.rows}
    assert len(rep.rows) == len(ADAPTERS) * len(records), "one row per (quantity, adapter), none lost"
    for key, (statuses, fragments) in EXPECTED.items():
        row = rows[key]
        assert row.status in statuses, (key, row.status, row.message)
        for fragment in fragments:
            assert fragment in row.message, (key, fragment, row.message)
    for row in rep.rows:
        if row.status in ("fail", "error"):
            assert row.message and row.seeds, row.id
    assert not rep.ok
    # every output is complete and well-formed
    reports.write_outputs(rep, json_path=str(tmp_path / "r.json"), junit_path=str(tmp_path / "r.xml"),
                          markdown_path=str(tmp_path / "r.md"))
    data = json.loads((tmp_path / "r.json").read_text())
    jsonschema.validate(data, json.loads(reports.SCHEMA_PATH.read_text()))
    assert len(data["checks"]) == len(rep.rows)
    assert "adapter modified its input mask in place" in (tmp_path / "r.md").read_text()
    assert "ERROR" in reports.render_table(rep) and "FAIL" in reports.render_table(rep)


def _spy(array_api: str, seen: list) -> types.SimpleNamespace:
    compute = refimpl.pg_token_loss if array_api == "torch" else oracle.pg_token_loss

    def pg_token_loss(logp, advantages, mask):
        seen.append((logp, advantages, mask))
        return compute(logp, advantages, mask)

    return types.SimpleNamespace(name=f"spy-{array_api}", version="0", spec_version="v1", array_api=array_api,
                                 supports_grad=False, pg_token_loss=pg_token_loss)


def _shares(x, y: np.ndarray) -> bool:
    if isinstance(x, torch.Tensor):
        x = x.detach().numpy()
    return np.shares_memory(np.asarray(x), y)


def test_inputs_handed_to_an_adapter_are_copies():
    record = BY_FUNCTION["pg_token_loss"]
    case = make_case("pg_token_loss", 3)
    golden_cases = golden.cases_for("pg_token_loss")
    for api in ("torch", "numpy"):
        seen: list = []
        adapter = _spy(api, seen)
        for dtype in ("float64", "float32"):
            assert run_case(record, adapter, case, dtype).status == "pass"
        for gcase in golden_cases:
            run_case(record, adapter, gcase, "float64")
        assert seen
        originals = [a for c in (case, *golden_cases) for a in c.args.values() if isinstance(a, np.ndarray)]
        for inputs in seen:
            for x in inputs:
                assert not any(_shares(x, y) for y in originals), f"{api}: an input shares memory with the case"


def test_a_mutating_numpy_adapter_cannot_corrupt_the_cached_golden_vectors():
    from tests.conformance.example_adapters import numpy_contract_breakers

    adapter = numpy_contract_breakers()
    before = [c.args["mask"].copy() for c in golden.cases_for("pg_token_loss")]
    for path in sorted(golden.V1_ROOT.glob("pg_token_loss/*.json")):
        outcome = check_vector(golden.load_vector(path), adapter)
        assert outcome.status == "fail" and "modified its input mask" in outcome.message, outcome.report()
    after = [c.args["mask"] for c in golden.cases_for("pg_token_loss")]
    assert all(np.array_equal(a, b) for a, b in zip(before, after))


def test_the_builtin_adapters_pass_the_isolation_checks():
    """The refimpl keeps the input dtype and never writes to its inputs (no false positive)."""
    from conformance.runner.builtin import oracle_adapter, refimpl_adapter

    for adapter in (refimpl_adapter(), oracle_adapter()):
        for function in ("ppo_token_loss", "grpo_advantages", "gae", "aggregate", "token_logprobs", "ppo_clipped_mask"):
            record = BY_FUNCTION[function]
            for dtype in getattr(adapter, "dtypes"):
                outcome = run_case(record, adapter, make_case(function, 11), dtype)
                assert outcome.status in ("pass", "ill_conditioned"), outcome.report()
