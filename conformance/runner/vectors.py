"""An adapter checked against one stored golden vector, without the live oracle (what a consumer of the
files does; `rlspec check` runs the same vectors as its `golden` check)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conformance.records import BY_FUNCTION, cases
from conformance.runner.differential import Outcome, adapter_function, check_adapter
from conformance.runner.protocol import Adapter, LoadedAdapter
from conformance.vectors.golden import decode_case, decode_expected, decode_expected_grads, decode_upstream



@dataclass
class VectorOutcome(Outcome):
    """An `Outcome` of an adapter on one golden vector; reports name the vector id and file."""

    vector_id: str = ""

    def header(self) -> str:
        return (
            f"[golden {self.vector_id} | spec {self.record.spec_id} | adapter={self.adapter} | "
            f"{self.dtype}]"
        )

    def repro(self) -> str:
        return (
            f"conformance/vectors/v1/{self.vector_id}.json: "
            f"conformance.runner.vectors.check_vector(conformance.vectors.golden.load_vector(path), adapter)"
        )


def check_vector(vector: dict[str, Any], adapter: Adapter, dtype: str = "float64") -> VectorOutcome:
    """Run `adapter.<function>` on the vector's inputs and keywords and compare value and gradient
    (if the adapter gives autograd tensors or `<function>_grad`) with the stored expectation, within
    `conformance.tolerances.tolerance(spec_id, dtype)`.

    v1 vectors are float64 cases (`tolerance_class`): their expectations hold for the float64
    inputs only, so another `dtype` is a ValueError; the differential checks (`rlspec check`)
    cover lower precisions against the live oracle."""
    if dtype != vector["tolerance_class"]:
        raise ValueError(
            f"check_vector: dtype: vector {vector['id']} is of tolerance class "
            f"{vector['tolerance_class']!r}, got {dtype!r}"
        )
    adapter = LoadedAdapter.of(adapter)
    record = BY_FUNCTION[vector["function"]]
    case = decode_case(vector)
    outcome = VectorOutcome(
        "pass", record, adapter.name, dtype, case, dict(case.kwargs),
        vector_id=vector["id"],
    )
    fn = adapter_function(outcome, adapter)
    if fn is None:
        return outcome
    rounded = cases.rounded_args(case, dtype)
    grads = decode_expected_grads(vector) if record.grad_args else ()
    return check_adapter(
        outcome, adapter, fn, rounded, decode_expected(vector), decode_upstream(vector), lambda: grads
    )


__all__ = ["VectorOutcome", "check_vector"]
