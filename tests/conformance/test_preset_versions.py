"""Presets per version ([20] item 6): a preset is (framework, the versions it was read for) -> keywords. The one
holding at the pinned VERSION is named after the framework, one holding only at another read version
``<framework>@<version>``; a run of a version that was not read says so and is fingerprinted against every read
version's presets instead of being judged against the pinned one's."""

from __future__ import annotations

import types

import numpy as np
import pytest

import oracle
from conformance.records import presets
from conformance.runner import RunOptions, run, select_records
from conformance.runner.composite import Candidate, composition_row, preset_candidates
from conformance.tolerances import Tol


def test_a_preset_read_at_another_version_is_named_after_it():
    found = presets.presets_of("cispo_token_loss")
    assert found["skyrl"] == {"eps_low": 0.0, "eps_high": 5.0}  # 0.3.0: CISPOConfig 0.0 / 5.0, w in [1, 6]
    assert found["skyrl@a956457"] == {"eps_low": 1.0, "eps_high": 4.0}  # main after #1928: w in [0, 5]
    assert presets.preset_kwargs("skyrl", "cispo_token_loss", "a956457") == {"eps_low": 1.0, "eps_high": 4.0}
    # a version re-read for one change holds only what was re-read there
    assert list(presets.presets("skyrl", "a956457")) == ["cispo_token_loss"]
    # a preset unchanged across versions is not repeated under a versioned name
    assert not any(name.startswith("skyrl@") for name in presets.presets_of("ppo_token_loss"))


def test_an_unread_version_is_named_with_the_versions_read():
    with pytest.raises(KeyError, match=r"not read for version '0.4.0'; read: 0.3.0, a956457"):
        presets.presets("skyrl", "0.4.0")
    assert presets.unread_version_note("skyrl", "0.3.0") == ""
    assert presets.unread_version_note("not-a-home", "1.0") == ""
    note = presets.unread_version_note("skyrl", "0.4.0")
    assert note.startswith("presets read for skyrl 0.3.0, a956457, running 0.4.0")


def _cispo_default_row(lo: float, hi: float, version: str):
    """A framework row of a stand-in "skyrl" adapter: its CISPO loss at the framework's default bounds [lo, hi]
    (what a real SkyRL computes with its default config), against canonical CISPO and SkyRL's presets of every
    version read, as skyrl's own policy rows build them."""
    rng = np.random.default_rng(0)
    logp = rng.normal(-1.0, 0.3, (2, 6))
    old = logp - rng.normal(0.0, 1.2, (2, 6))  # ratios well inside and outside [1, 6] and [0, 5]
    A, mask = rng.normal(size=(2, 6)), np.ones((2, 6), dtype=bool)
    mask[:, 0] = False  # the first token has no prediction

    def ev(kw):
        return lambda: {"value": oracle.cispo_token_loss(logp, old, A, mask, **kw)}

    got = ev({"eps_low": 1.0 - lo, "eps_high": hi - 1.0})
    tol = {"value": Tol(1e-9, 1e-9, "float64 oracle against itself")}
    cands = [Candidate("canonical", "cispo_token_loss()", ev({}))]
    cands += preset_candidates("skyrl", "cispo_token_loss", {}, ev, lambda kw: f"cispo_token_loss({kw})")
    row = composition_row("skyrl.policy_loss[cispo,defaults]", "loss.cispo", "cispo_token_loss", "skyrl", got, cands, tol)
    adapter = types.SimpleNamespace(name="skyrl", version=version, spec_version="v1", array_api="numpy",
                                    extra_rows=lambda seed: [row])
    report = run([adapter], select_records(["loss.cispo"]), RunOptions(seed=0, n_seeds=1, isolate="never",
                                                                        parts=("framework",)))
    (only,) = report.rows
    return only


def test_a_newer_version_with_new_defaults_is_refingerprinted_not_failed():
    row = _cispo_default_row(0.0, 5.0, "0.4.0")  # main's defaults after #1928, on an unread release
    assert row.status == "preset" and row.matched_preset == "skyrl@a956457", (row.status, row.message)
    assert any(n.startswith("presets read for skyrl 0.3.0, a956457, running 0.4.0") for n in row.notes), row.notes


def test_the_pinned_version_is_judged_against_its_own_preset_without_a_note():
    row = _cispo_default_row(1.0, 6.0, "0.3.0")  # 0.3.0's CISPOConfig 0.0 / 5.0
    assert row.status == "preset" and row.matched_preset == "skyrl", (row.status, row.message)
    assert not any(n.startswith("presets read for") for n in row.notes)


def test_defaults_no_version_explains_stay_a_fail():
    row = _cispo_default_row(0.5, 1.5, "0.4.0")
    assert row.status == "fail", row.message
