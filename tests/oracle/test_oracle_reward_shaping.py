"""oracle.overlong_penalty and oracle.shaped_rewards (spec v1.1 reward.overlong / reward.shaping).

Every expected number is worked out by hand in the comments from DAPO eq. 13 (arXiv:2503.14476) and the
frameworks' documented rules (OpenRLHF's stop_properly_penalty_coef, OAT's non_stop_penalty, AReaL's
mask_no_eos_with_zero, the ±10 / ±20 reward clips), never from the code under test.
"""

import inspect

import numpy as np
import pytest

import oracle
from conformance.records.presets import preset_kwargs
from tests.preset_tables import NOT_EXPRESSIBLE, PRESETS, SCOPE

pytestmark = pytest.mark.filterwarnings("error")  # no division or invalid-value warning anywhere


def pen(lengths, **kw):
    return oracle.overlong_penalty(np.array(lengths, dtype=np.int64), **kw).tolist()


# --------------------------------------------------------------------------------------------
# overlong_penalty
# --------------------------------------------------------------------------------------------


def test_eq13_at_every_boundary():
    # L_max = 10, L_cache = 4: L_start = 6. 0 up to and at 6; (6 - L)/4 on (6, 10]; -1 beyond 10.
    assert pen([0, 5, 6, 7, 8, 9, 10, 11, 40], max_length=10, buffer=4) == [
        0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0, -1.0]


def test_factor_scales_the_line_and_the_floor():
    # factor 3: -3/4 per token past 6, -3 at and beyond 10
    assert pen([6, 7, 10, 12], max_length=10, buffer=4, factor=3.0) == [0.0, -0.75, -3.0, -3.0]


def test_linear_continues_past_max_length():
    # verl / AReaL / ms-swift: min(-(L - 6)/4 * f, 0) with no floor: L = 12 gives -1.5, L = 30 gives -6
    assert pen([6, 10, 11, 12, 30], max_length=10, buffer=4, beyond="linear") == [0.0, -1.0, -1.25, -1.5, -6.0]
    # the two forms agree up to and at max_length
    lengths = list(range(11))
    assert pen(lengths, max_length=10, buffer=4) == pen(lengths, max_length=10, buffer=4, beyond="linear")


def test_buffer_zero_is_a_hard_step():
    # eq. 13 with L_cache = 0: the middle case is empty; 0 for L <= L_max, -1 for L > L_max
    assert pen([0, 9, 10, 11, 1000], max_length=10, buffer=0) == [0.0, 0.0, 0.0, -1.0, -1.0]
    assert pen([11], max_length=10, buffer=0, factor=0.5) == [-0.5]


def test_buffer_equal_to_max_length_starts_at_the_first_token():
    # L_start = 0: -L/8 up to 8
    assert pen([0, 1, 4, 8, 9], max_length=8, buffer=8) == [0.0, -0.125, -0.5, -1.0, -1.0]


def test_empty_completion_and_empty_batch():
    assert pen([0], max_length=1, buffer=1) == [0.0]
    out = oracle.overlong_penalty(np.zeros(0, dtype=np.int64), max_length=4, buffer=2)
    assert out.shape == (0,) and out.dtype == np.float64


def test_factor_zero_gives_positive_zero():
    out = oracle.overlong_penalty(np.array([3, 9, 12]), max_length=10, buffer=4, factor=0.0)
    assert out.tolist() == [0.0, 0.0, 0.0] and not np.signbit(out).any()


def test_trl_docstring_example():
    # trl/rewards/other_rewards.py:107-110: max 100, cache 20, a 90-token completion -> -0.5
    assert pen([90], max_length=100, buffer=20) == [-0.5]


def test_openrlhf_min_exceed_form_is_the_floor():
    # OpenRLHF: exceed = min(L - (max - buf), buf); penalty -exceed/buf*f when exceed > 0
    max_len, buf, f = 12, 5, 2.0
    for L in range(20):
        exceed = min(L - (max_len - buf), buf)
        expected = -exceed / buf * f if exceed > 0 else 0.0
        assert pen([L], max_length=max_len, buffer=buf, factor=f) == [expected], L


def test_unsigned_and_small_integer_lengths():
    for dtype in (np.uint8, np.int16, np.int32):
        assert pen(np.array([7, 9], dtype=dtype), max_length=8, buffer=2) == [-0.5, -1.0]


@pytest.mark.parametrize("lengths,kw,exc,arg", [
    ([1.0, 2.0], {}, TypeError, "lengths"),
    ([True, False], {}, TypeError, "lengths"),
    ([[1, 2]], {}, ValueError, "lengths"),
    ([3, -1], {}, ValueError, "lengths"),
    ([1], {"max_length": 0}, ValueError, "max_length"),
    ([1], {"max_length": 8.0}, TypeError, "max_length"),
    ([1], {"buffer": -1}, ValueError, "buffer"),
    ([1], {"buffer": 9}, ValueError, "buffer"),
    ([1], {"buffer": 0, "beyond": "linear"}, ValueError, "buffer"),
    ([1], {"factor": -0.1}, ValueError, "factor"),
    ([1], {"factor": float("inf")}, ValueError, "factor"),
    ([1], {"beyond": "clip"}, ValueError, "beyond"),
])
def test_overlong_errors(lengths, kw, exc, arg):
    kwargs = {"max_length": 8, "buffer": 2, **kw}
    with pytest.raises(exc, match=rf"^overlong_penalty: {arg}:"):
        oracle.overlong_penalty(np.array(lengths), **kwargs)


# --------------------------------------------------------------------------------------------
# shaped_rewards
# --------------------------------------------------------------------------------------------

R = np.array([2.0, -3.0, 0.5, 12.0])
T = np.array([True, False, True, False])


def shaped(**kw):
    return oracle.shaped_rewards(R, T, **kw).tolist()


def test_canonical_is_the_identity():
    assert shaped() == R.tolist()


def test_openrlhf_stop_properly_coefficient():
    # coef 0.5 >= 0: truncated rewards scaled (2 -> 1, 0.5 -> 0.25); coef -0.5 < 0: replaced by -0.5
    assert shaped(truncated_scale=0.5) == [1.0, -3.0, 0.25, 12.0]
    assert shaped(truncated_value=-0.5) == [-0.5, -3.0, -0.5, 12.0]
    # coef 0 (scale) and AReaL's mask_no_eos_with_zero (value 0) agree
    assert shaped(truncated_scale=0.0) == shaped(truncated_value=0.0) == [0.0, -3.0, 0.0, 12.0]


def test_oat_fixed_reward_then_penalty():
    # non_stop_fixed_reward -1 then += non_stop_penalty -0.25: -1.25; the penalty alone: r - 0.25
    assert shaped(truncated_value=-1.0, truncated_shift=-0.25) == [-1.25, -3.0, -1.25, 12.0]
    assert shaped(truncated_shift=-0.25) == [1.75, -3.0, 0.25, 12.0]


def test_clip_after_the_rule():
    # OpenRLHF's (-10, 10): 12 -> 10; a replacement value -15 -> -10
    assert shaped(clip_low=-10.0, clip_high=10.0) == [2.0, -3.0, 0.5, 10.0]
    assert shaped(truncated_value=-15.0, clip_low=-10.0, clip_high=10.0) == [-10.0, -3.0, -10.0, 10.0]
    # one-sided bounds clip one side only
    assert shaped(clip_high=1.0) == [1.0, -3.0, 0.5, 1.0]
    assert shaped(clip_low=-1.0) == [2.0, -1.0, 0.5, 12.0]
    # a reward exactly on a bound is unchanged
    assert oracle.shaped_rewards(np.array([-2.0, 2.0]), np.zeros(2, bool), clip_low=-2.0, clip_high=2.0).tolist() == [-2.0, 2.0]


def test_flags_as_exact_zero_one_numbers():
    for flags in (np.array([1, 0, 1, 0]), np.array([1.0, 0.0, 1.0, 0.0]), np.array([1, 0, 1, 0], dtype=np.uint8)):
        assert oracle.shaped_rewards(R, flags, truncated_scale=0.0).tolist() == [0.0, -3.0, 0.0, 12.0]


def test_empty_batch():
    out = oracle.shaped_rewards(np.zeros(0), np.zeros(0, bool), clip_low=-1.0, clip_high=1.0)
    assert out.shape == (0,)


@pytest.mark.parametrize("rewards,flags,kw,exc,arg", [
    (R, T[:3], {}, ValueError, "truncated"),
    (R, T.astype(np.complex64), {}, TypeError, "truncated"),
    (R, np.array([0.5, 0, 1, 0]), {}, ValueError, "truncated"),
    (R, np.array([2, 0, 1, 0]), {}, ValueError, "truncated"),
    (R, T[:, None], {}, ValueError, "truncated"),
    (np.array([1, 2, 3, 4]), T, {}, TypeError, "rewards"),
    (np.array([np.nan, 0, 0, 0]), T, {}, ValueError, "rewards"),
    (R, T, {"truncated_scale": 0.5, "truncated_value": -1.0}, ValueError, "truncated_scale"),
    (R, T, {"truncated_value": float("nan")}, ValueError, "truncated_value"),
    (R, T, {"truncated_shift": "1"}, TypeError, "truncated_shift"),
    (R, T, {"clip_low": 1.0, "clip_high": -1.0}, ValueError, "clip_high"),
    (R, T, {"clip_low": -float("inf")}, ValueError, "clip_low"),
])
def test_shaping_errors(rewards, flags, kw, exc, arg):
    with pytest.raises(exc, match=rf"^shaped_rewards: {arg}:"):
        oracle.shaped_rewards(rewards, flags, **kw)


# --------------------------------------------------------------------------------------------
# signatures, docstrings, presets
# --------------------------------------------------------------------------------------------


def test_signatures_match_api():
    def split(fn):
        params = inspect.signature(fn).parameters.values()
        return ([p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD],
                {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY})

    empty = inspect.Parameter.empty
    assert split(oracle.overlong_penalty) == (["lengths"], {"max_length": empty, "buffer": empty, "factor": 1.0,
                                                            "beyond": "floor"})
    assert split(oracle.shaped_rewards) == (["rewards", "truncated"], {
        "truncated_scale": 1.0, "truncated_value": None, "truncated_shift": 0.0, "clip_low": None, "clip_high": None})
    for name in ("overlong_penalty", "shaped_rewards"):
        assert name in oracle.__all__ and f"{name}_grad" not in oracle.__all__  # no gradient in the spec
        assert "Spec: reward." in inspect.getdoc(getattr(oracle, name))


def test_presets():
    for fw in ("verl", "areal", "ms_swift"):  # no floor beyond max_length
        assert preset_kwargs(fw, "overlong_penalty") == {"beyond": "linear"}
    for fw in ("trl", "openrlhf"):  # eq. 13's floor (TRL: factor fixed at 1, the canonical default)
        assert "overlong_penalty" not in PRESETS[fw]
    assert preset_kwargs("openrlhf", "shaped_rewards") == {"clip_low": -10.0, "clip_high": 10.0}
    assert preset_kwargs("areal", "shaped_rewards") == {"clip_low": -20.0, "clip_high": 20.0}
    assert preset_kwargs("oat", "shaped_rewards") == {} and SCOPE["oat"] == ("shaped_rewards",)
    assert "overlong_penalty" in SCOPE["ms_swift"] and {"overlong_penalty", "shaped_rewards"} <= set(SCOPE["areal"])
    assert "overlong_penalty" in NOT_EXPRESSIBLE["openrlhf"] and "shaped_rewards" in NOT_EXPRESSIBLE["areal"]
    # every preset's keywords are accepted
    for fw, table in PRESETS.items():
        if "overlong_penalty" in table:
            oracle.overlong_penalty(np.array([0, 9, 12]), max_length=10, buffer=4, **table["overlong_penalty"])
        if "shaped_rewards" in table:
            out = oracle.shaped_rewards(np.array([25.0, -25.0, 1.0]), np.zeros(3, bool), **table["shaped_rewards"])
            assert out[2] == 1.0 and abs(out[0]) == abs(out[1]) == table["shaped_rewards"]["clip_high"]
