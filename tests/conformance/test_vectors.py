"""Golden vectors: the published tree matches the catalogue and its manifest, every vector passes
against the oracle and refimpl adapters, the hand-worked values agree with the oracle's, and a
broken adapter fails with the case id in its report."""

from __future__ import annotations

import json
import shutil
import types
from collections import Counter

import numpy as np
import pytest

import oracle
from conformance import SPEC_VERSION, cli
from conformance.runner.builtin import oracle_adapter, refimpl_adapter
from conformance.records import RECORDS, golden_catalogue
from conformance.runner.vectors import check_vector
from conformance.vectors import V1_ROOT, generate, golden
from tests.conformance import hand_formulas as hand

CATALOGUE = golden_catalogue()

VECTORS = golden.load_vectors(V1_ROOT)  # verifies the manifest first
BY_ID = {v["id"]: v for v in VECTORS}
ENTRIES = {e.id: e for e in CATALOGUE}


def _outcome_failures(adapter, vectors):
    failures = []
    for vector in vectors:
        outcome = check_vector(vector, adapter)
        if outcome.status != "pass":
            failures.append(outcome.report())
        elif outcome.record.grad_args and not outcome.grad_checked:
            failures.append(f"{vector['id']}: gradient not compared")
    return failures


# ---------------------------------------------------------------------------------------------
# The published tree
# ---------------------------------------------------------------------------------------------


def test_vectors_check_passes(capsys):
    assert cli.main(["vectors", "--check"]) == 0, capsys.readouterr().out


def test_vectors_list_prints_every_id(capsys):
    assert cli.main(["vectors", "--list"]) == 0
    assert capsys.readouterr().out.split() == [e.id for e in CATALOGUE]


def test_ids_unique_and_files_named_by_id():
    counts = Counter(e.id for e in CATALOGUE)
    assert not [i for i, n in counts.items() if n > 1]
    assert sorted(BY_ID) == sorted(ENTRIES)
    for name in golden.vector_files(V1_ROOT):
        assert golden.load_vector(V1_ROOT / name)["id"] == name[: -len(".json")]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.function)
def test_every_function_has_at_least_five_vectors_and_its_presets(record):
    vectors = [v for v in VECTORS if v["function"] == record.function]
    assert len(vectors) >= 5
    presets = {v["preset"]: v["kwargs"] for v in vectors if v["preset"]}
    assert set(presets) == set(record.presets)
    for name, kw in record.presets.items():  # the preset's keywords, plus required (no default) or question ones
        assert {k: presets[name].get(k) for k in kw} == dict(kw)
        assert set(presets[name]) - set(kw) <= set(record.required_kwargs(presets[name])) | set(record.question)
    assert sum(v["seed"] is not None for v in vectors) >= 3


def test_metadata():
    for v in VECTORS:
        record = next(r for r in RECORDS if r.function == v["function"])
        assert v["spec_id"] == record.spec_id and v["spec_version"] == SPEC_VERSION
        assert v["tolerance_class"] == "float64"
        assert v["generator_version"] == generate.GENERATOR_VERSION
        assert v["description"] and "\n" not in v["description"]
        assert ("expected_grad" in v) == bool(record.grad_args) == ("upstream" in v)


def test_files_are_canonical_text():
    for name in golden.vector_files(V1_ROOT)[:40]:
        text = (V1_ROOT / name).read_text()
        assert golden.dumps(json.loads(text)) == text


# ---------------------------------------------------------------------------------------------
# Manifest, --write and --check on copies
# ---------------------------------------------------------------------------------------------


def test_tampered_copy_is_detected(tmp_path):
    root = tmp_path / "v1"
    shutil.copytree(V1_ROOT, root)
    golden.verify_manifest(root)

    tampered = root / "grpo_advantages" / "all-equal-group-eps0.json"
    tampered.write_text(tampered.read_text().replace('"description": "', '"description": "x', 1))
    (root / "gae" / "lam0-td-error.json").unlink()
    (root / "gae" / "extra.json").write_text("{}\n")
    with pytest.raises(golden.ManifestError) as info:
        golden.verify_manifest(root)
    message = str(info.value)
    assert "grpo_advantages/all-equal-group-eps0.json: sha256 differs" in message
    assert "gae/lam0-td-error.json: listed in MANIFEST.sha256 but missing" in message
    assert "gae/extra.json: not listed" in message
    with pytest.raises(golden.ManifestError, match="MANIFEST.sha256"):
        golden.load_vectors(root)


def test_write_adds_missing_cases_and_never_overwrites(tmp_path, capsys):
    subset = [ENTRIES["grpo_advantages/all-equal-group-eps0"], ENTRIES["aggregate/token-mean-2-and-6"],
              ENTRIES["gae/lam0-td-error"]]
    root = tmp_path / "v1"
    _, written = generate.write(root, catalogue=subset[:2])
    assert written == [generate.relative_path(e) for e in subset[:2]]
    for e in subset[:2]:  # identical to the published files
        assert (root / generate.relative_path(e)).read_bytes() == (V1_ROOT / generate.relative_path(e)).read_bytes()

    # A catalogue case missing from disk fails --check; --write adds it and only it.
    scan = generate.check(root, catalogue=subset)
    assert any("gae/lam0-td-error.json: catalogue case missing" in p for p in scan.problems())
    _, written = generate.write(root, catalogue=subset)
    assert written == ["gae/lam0-td-error.json"]
    assert not generate.check(root, catalogue=subset).problems()

    # A published file that its regeneration would change: --write refuses and writes nothing.
    path = root / "aggregate" / "token-mean-2-and-6.json"
    vector = json.loads(path.read_text())
    vector["expected"] = 0.5
    path.write_text(golden.dumps(vector))
    (root / golden.MANIFEST_NAME).write_text(golden.manifest_text(root))  # a consistent manifest
    before = path.read_bytes()
    scan, written = generate.write(root, catalogue=subset)
    assert written == [] and any("token-mean-2-and-6.json: expected differs" in p for p in scan.refusals())
    assert path.read_bytes() == before
    assert cli.main(["vectors", "--write", "--root", str(root)]) == 1
    assert "refused" in capsys.readouterr().out
    assert path.read_bytes() == before


def test_check_fails_listing_files(tmp_path, capsys):
    root = tmp_path / "v1"
    generate.write(root, catalogue=[ENTRIES["rloo_advantages/group-of-2"]])
    (root / "rloo_advantages" / "orphan.json").write_text("{}\n")
    assert cli.main(["vectors", "--check", "--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "rloo_advantages/orphan.json: published file that no catalogue case regenerates" in out
    assert "gae/lam0-td-error.json: catalogue case missing from disk" in out


def test_within_tolerance_output_drift_is_not_a_difference_unless_exact():
    vector = BY_ID["gae/gamma-0.99-lam-0.95"]
    drifted = json.loads(json.dumps(vector))
    data = drifted["expected"][0]["data"]
    data[2] = float(np.nextafter(data[2], np.inf))
    assert generate.differences(vector, drifted, exact=False) == []
    assert generate.differences(vector, drifted, exact=True) == ["expected differs"]
    drifted["expected"][0]["data"][2] += 1e-6
    assert generate.differences(vector, drifted, exact=False) == ["expected differs beyond the float64 tolerance"]


# ---------------------------------------------------------------------------------------------
# Adapters against the stored expectations
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("factory", [oracle_adapter, refimpl_adapter], ids=["oracle", "refimpl"])
def test_every_vector_passes(factory):
    failures = _outcome_failures(factory(), VECTORS)
    assert not failures, "\n\n".join(failures)


def test_broken_adapter_fails_naming_the_case():
    def grpo_ddof0(rewards, group_size, **kwargs):
        return oracle.grpo_advantages(rewards, group_size, **{**kwargs, "std_ddof": 0})

    broken = types.SimpleNamespace(
        name="ddof0", version="0", spec_version="v1", array_api="numpy", grpo_advantages=grpo_ddof0
    )
    outcomes = {
        v["id"]: check_vector(v, broken) for v in VECTORS if v["function"] == "grpo_advantages"
    }
    assert outcomes["grpo_advantages/group-unbiased-std"].status == "fail"
    assert outcomes["grpo_advantages/biased-std-ddof0"].status == "pass"
    assert outcomes["grpo_advantages/scale-none"].status == "pass"
    for case_id, outcome in outcomes.items():
        if outcome.status == "fail":
            assert case_id in outcome.report() and "greatest absolute difference" in outcome.report()
    other = check_vector(BY_ID["gae/lam0-td-error"], broken)
    assert other.status == "not_implemented"


def test_check_vector_is_float64_only():
    with pytest.raises(ValueError, match="tolerance class"):
        check_vector(BY_ID["pg_token_loss/zero-advantage"], oracle_adapter(), dtype="float32")


# ---------------------------------------------------------------------------------------------
# Hand checks of the oracle's expectations
# ---------------------------------------------------------------------------------------------


def _close(a, b) -> bool:
    return np.allclose(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64), rtol=1e-9, atol=1e-12)


def test_hand_worked_values_agree_with_the_oracle():
    checked = 0
    for entry in CATALOGUE:
        vector = BY_ID[entry.id]
        if entry.expect is not None:
            expect = entry.expect if isinstance(entry.expect, tuple) else (entry.expect,)
            stored = golden.decode_expected(vector)
            assert all(_close(a, b) for a, b in zip(stored, expect)), entry.id
            checked += 1
        if entry.grad_factor is not None:
            stored = golden.decode_expected_grads(vector)[0]
            assert _close(stored, np.asarray(entry.grad_factor) * golden.decode_upstream(vector)), entry.id
            checked += 1
    assert checked >= 100


def test_independent_formulas_agree_with_the_oracle():
    for vector in VECTORS:
        case = golden.decode_case(vector)
        with np.errstate(divide="raise", invalid="raise", over="raise"):
            values = hand.HAND[case.function](case.args, case.kwargs)
        assert all(_close(a, b) for a, b in zip(golden.decode_expected(vector), values)), vector["id"]
        if case.function in hand.HAND_GRAD:
            with np.errstate(divide="raise", invalid="raise", over="raise"):
                grads = hand.HAND_GRAD[case.function](case.args, case.kwargs, golden.decode_upstream(vector))
            stored = golden.decode_expected_grads(vector)
            assert all(_close(a, b) for a, b in zip(stored, grads)), vector["id"]
