"""The tolerance table's own rules: every override is justified and widens something, and the
precision classes are nested for every spec id (the runner reports the finest class an adapter's
outputs meet, which only means something when a finer class's tolerance is inside a coarser one's)."""

from __future__ import annotations

import pytest

from conformance.records import RECORDS
from conformance.tolerances import DEFAULT, DTYPES, OVERRIDES, tolerance


@pytest.mark.parametrize("key", sorted(OVERRIDES), ids=lambda k: "/".join(k))
def test_override_has_a_reason_and_widens(key):
    spec_id, dtype, what = key
    override, base = OVERRIDES[key], DEFAULT[dtype]
    assert override.reason.strip(), f"{key}: an override needs its reason"
    assert override.rtol > base.rtol or override.atol > base.atol, f"{key}: widens nothing"


@pytest.mark.parametrize("spec_id", sorted({r.spec_id for r in RECORDS}))
@pytest.mark.parametrize("what", ["value", "grad"])
def test_precision_classes_are_nested(spec_id, what):
    tols = [tolerance(spec_id, d, what) for d in DTYPES]  # finest first
    for finer, coarser in zip(tols, tols[1:]):
        assert finer.rtol <= coarser.rtol and finer.atol <= coarser.atol, (spec_id, what, finer, coarser)


def test_unknown_dtype_or_what_is_an_error():
    with pytest.raises(ValueError, match="tolerance: dtype"):
        tolerance("adv.gae", "float16")
    with pytest.raises(ValueError, match="tolerance: what"):
        tolerance("adv.gae", "float32", "values")
