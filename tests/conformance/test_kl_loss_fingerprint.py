"""kl.loss's registry record names the gradient form an adapter computes: an adapter that computes one
form whatever it is asked is explained, from its values and gradients alone, by that `gradient` value
(the variant grid of its record), and the refimpl is canonical."""

from __future__ import annotations

import types

import pytest

import refimpl
from conformance.records import BY_FUNCTION, make_case
from conformance.runner.verdict import check_row
from conformance.runner.rows import seeds_for

RECORD = BY_FUNCTION["kl_loss_term"]
FORMS = ("estimator", "straight_through", "unbiased", "bias_corrected")


def one_form_adapter(form: str) -> types.SimpleNamespace:
    """Computes `form` for every case, whatever `gradient` it is asked."""

    def kl_loss_term(logp, ref_logp, mask, old_logp=None, *, estimator="k3", gradient="estimator"):
        return refimpl.kl_loss_term(logp, ref_logp, mask, old_logp, estimator=estimator, gradient=form)

    return types.SimpleNamespace(name=f"always-{form}", version="0", spec_version="v1", array_api="torch",
                                 dtypes=("float64", "float32"), kl_loss_term=kl_loss_term)


def test_the_generated_cases_ask_every_form():

    asked = {make_case("kl_loss_term", s).kwargs["gradient"] for s in seeds_for("kl_loss_term", 0, 8)}
    assert asked == set(FORMS)


@pytest.mark.parametrize("form", FORMS)
def test_the_row_names_the_gradient_form_computed(form):
    row = check_row(RECORD, one_form_adapter(form), seeds=seeds_for("kl_loss_term", 0, 8))
    if form == "bias_corrected":  # TRL's default: named by its preset
        assert (row.status, row.matched_preset, row.matched_kwargs) == ("preset", "trl", {"gradient": form}), row.message
    else:
        assert row.status == "variant", row.message
        assert row.matched_kwargs is not None and row.matched_kwargs["gradient"] == form, row.message


def test_refimpl_is_canonical():
    adapter = types.SimpleNamespace(name="refimpl", version="0", spec_version="v1", array_api="torch",
                                    kl_loss_term=refimpl.kl_loss_term)
    row = check_row(RECORD, adapter, seeds=seeds_for("kl_loss_term", 0, 8))
    assert row.status == "pass", row.message
