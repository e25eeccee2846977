"""End-to-end I: the tiny autoregressive policy experiment (`rlspec tiny-policy`).

(a) the per-sequence loss terms the experiment builds from the refimpl token API, and their gradients
(down to the table of logits), match the NumPy oracle on a sampled batch;
(b) a reduced run produces the JSON document with every key and finite values, and the facts one can
derive by hand hold (enumeration, expected matches and exact gradient at the zero table, cosines in
[-1, 1], PPO ratios all 1 on the first pass, seeds independent, same first batch for every learner).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import numpy as np
import pytest
import torch

from conformance.commands import tiny_policy as command
from conformance.experiments import tiny_policy as tp

REDUCED = dict(seeds=2, updates=30, lrs=(0.1,), cosine_batches=200)


def run_command(argv: list[str]) -> int:
    """`rlspec tiny-policy ARGV`, with only this sub-command registered (as `conformance.cli` does)."""
    parser = argparse.ArgumentParser(prog="rlspec")
    command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["tiny-policy", *argv])
    return args.func(args)


@pytest.fixture(scope="module")
def refimpl():
    return tp.load_losses("refimpl")


@pytest.fixture(scope="module")
def reduced(refimpl):
    return tp.run_experiment(**REDUCED, losses=refimpl)


# --------------------------------------------------------------------------------------------------
# (a) refimpl vs oracle on the experiment's own sequence-level terms


def _sampled_batch(n: int = 16, seed: int = 7):
    """A batch from a random table, old log-probs from a perturbed table (ratios on both sides of
    the clip range), batch-mean advantages of matches + 10 (both signs)."""
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(1, tp.ROWS, tp.V, generator=g, dtype=torch.float64)
    old_table = table + 0.4 * torch.randn(1, tp.ROWS, tp.V, generator=g, dtype=torch.float64)
    target = torch.randint(tp.V, (1, tp.LENGTH), generator=g)
    seqs = tp.sample_sequences(old_table, torch.rand(1, n, tp.LENGTH, generator=g, dtype=torch.float64))
    matches = tp.count_matches(seqs, target)
    advantages = (matches + tp.OFFSET) - (matches + tp.OFFSET).mean(dim=1, keepdim=True)
    old_logp = tp.sequence_logprob(old_table, seqs)
    return table, seqs, advantages, old_logp


def _table_grad_from_seq_grad(table: np.ndarray, seqs: np.ndarray, g_seq: np.ndarray) -> np.ndarray:
    """Chain rule written out: d log pi(x) / d z[row_t, v] = 1[v = x_t] - softmax(z[row_t])[v]."""
    probs = np.exp(table - table.max(axis=-1, keepdims=True))
    probs /= probs.sum(axis=-1, keepdims=True)
    rows = tp.prefix_rows(torch.from_numpy(seqs)).numpy()
    out = np.zeros_like(table)
    for b in range(seqs.shape[0]):
        for t in range(tp.LENGTH):
            row, tok = rows[b, t], seqs[b, t]
            out[row] -= g_seq[b] * probs[row]
            out[row, tok] += g_seq[b]
    return out


@pytest.mark.parametrize("loss", ["pg", "ppo"])
def test_sequence_terms_and_gradients_match_oracle(refimpl, loss):
    oracle = pytest.importorskip("oracle")
    table, seqs, advantages, old_logp = _sampled_batch()
    leaf = table.clone().requires_grad_(True)
    seq_logp = tp.sequence_logprob(leaf, seqs)  # [1, 16]
    seq_logp.retain_grad()

    # the per-sequence terms, as the experiment builds them
    token_loss, mask = tp.sequence_token_loss(
        refimpl, loss, seq_logp[0], advantages[0], old_logp[0] if loss == "ppo" else None
    )
    assert token_loss.shape == (16, 2) and mask.tolist() == [[False, True]] * 16

    logp_np = tp.as_token_column(seq_logp[0]).detach().numpy()
    old_np = tp.as_token_column(old_logp[0]).numpy()
    adv_np = advantages[0].numpy()
    mask_np = mask.numpy()
    kw = dict(eps_low=tp.CLIP_EPS, eps_high=tp.CLIP_EPS)
    if loss == "pg":
        expected = oracle.pg_token_loss(logp_np, adv_np, mask_np)
    else:
        expected = oracle.ppo_token_loss(logp_np, old_np, adv_np, mask_np, **kw)
    np.testing.assert_allclose(token_loss.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    assert np.all(expected[:, 0] == 0)

    # the batch loss: token_mean over the 16 valid positions = the mean of the per-sequence terms
    total = tp.batch_loss(refimpl, loss, seq_logp, advantages, old_logp if loss == "ppo" else None)
    o_total = oracle.aggregate(expected, mask_np, mode="token_mean")
    assert float(total.detach()) == pytest.approx(float(o_total), rel=1e-12, abs=1e-12)
    assert float(o_total) == pytest.approx(float(expected[:, 1].mean()), rel=1e-12, abs=1e-12)

    # gradients: refimpl autograd vs the oracle's vector-Jacobian products
    total.backward()
    upstream = oracle.aggregate_grad(expected, mask_np, 1.0, mode="token_mean")
    if loss == "pg":
        g_logp = oracle.pg_token_loss_grad(logp_np, adv_np, mask_np, upstream)
    else:
        g_logp = oracle.ppo_token_loss_grad(logp_np, old_np, adv_np, mask_np, upstream, **kw)
    assert np.all(g_logp[:, 0] == 0)
    np.testing.assert_allclose(seq_logp.grad[0].numpy(), g_logp[:, 1], rtol=1e-10, atol=1e-12)
    g_table = _table_grad_from_seq_grad(table[0].numpy(), seqs[0].numpy(), g_logp[:, 1])
    np.testing.assert_allclose(leaf.grad[0].numpy(), g_table, rtol=1e-10, atol=1e-12)

    if loss == "ppo":  # the batch exercises both branches of the clip
        ratio = np.exp(logp_np[:, 1] - old_np[:, 1])
        outside = (ratio < 1 - tp.CLIP_EPS) | (ratio > 1 + tp.CLIP_EPS)
        assert outside.any() and (~outside).any()
        assert (g_logp[:, 1] == 0).any() and (g_logp[:, 1] != 0).any()


# --------------------------------------------------------------------------------------------------
# facts derivable by hand


def test_enumeration_is_a_distribution():
    g = torch.Generator().manual_seed(0)
    tables = torch.cat([torch.zeros(1, tp.ROWS, tp.V), torch.randn(2, tp.ROWS, tp.V, generator=g)])
    probs = tp.exact_distribution(tables.to(torch.float64))
    assert probs.shape == (3, tp.V**tp.LENGTH) == (3, 512)
    np.testing.assert_allclose(probs.sum(dim=1).numpy(), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(probs[0].numpy(), 1 / 512, rtol=1e-12)
    assert len({tuple(s) for s in tp.all_sequences().tolist()}) == 512


def test_zero_table_expected_matches_and_exact_gradient():
    zero = torch.zeros(1, tp.ROWS, tp.V, dtype=torch.float64)
    target = torch.tensor([[3, 0, 5]])
    assert float(tp.expected_reward(zero, target)) == pytest.approx(3 / 8, abs=1e-12)
    assert float(tp.expected_reward(zero, target, tp.OFFSET)) == pytest.approx(10 + 3 / 8, abs=1e-12)
    grad = tp.exact_gradient(zero, target)[0].numpy()
    # each token's match probability is 1/8 whatever the earlier tokens, so dJ/dz[row] is
    # P(row's prefix) * (1/8) * (e_target - 1/8): 1/8, 1/64 and 1/512 times (e - 1/8)
    def expected_row(weight, t):
        row = np.full(tp.V, -weight / 8)
        row[t] += weight
        return row

    np.testing.assert_allclose(grad[0], expected_row(1 / 8, 3), atol=1e-15)
    for a in range(tp.V):
        np.testing.assert_allclose(grad[1 + a], expected_row(1 / 64, 0), atol=1e-15)
        for b in range(tp.V):
            np.testing.assert_allclose(grad[1 + tp.V + a * tp.V + b], expected_row(1 / 512, 5), atol=1e-15)
    # the offset adds nothing to the exact gradient: the probabilities sum to 1
    np.testing.assert_allclose(tp.exact_gradient(zero, target, tp.OFFSET)[0].numpy(), grad, atol=1e-14)


def test_sampler_follows_the_policy():
    g = torch.Generator().manual_seed(3)
    table = 1.5 * torch.randn(1, tp.ROWS, tp.V, generator=g, dtype=torch.float64)
    seqs = tp.sample_sequences(table, torch.rand(1, 100_000, tp.LENGTH, generator=g, dtype=torch.float64))
    index = (seqs[0] * torch.tensor([tp.V * tp.V, tp.V, 1])).sum(dim=1)
    freq = torch.bincount(index, minlength=512).to(torch.float64) / seqs.shape[1]
    tv = 0.5 * float((freq - tp.exact_distribution(table)[0]).abs().sum())
    assert tv < 0.03


def test_prefix_rows_are_distinct():
    rows = tp.prefix_rows(tp.all_sequences())
    assert rows[:, 0].unique().tolist() == [0]
    assert rows[:, 1].unique().tolist() == list(range(1, 1 + tp.V))
    assert rows[:, 2].unique().tolist() == list(range(1 + tp.V, tp.ROWS))


def test_same_first_batch_for_every_learner_and_seeds_independent(refimpl):
    first = {
        name: tp.train_learner(name, lr=0.1, seeds=[4, 5], updates=1, losses=refimpl).batch_matches[:, 0]
        for name in tp.LEARNER_NAMES
    }
    for name in tp.LEARNER_NAMES:
        np.testing.assert_array_equal(first[name], first["REINFORCE"])
    # vectorising over seeds changes nothing: seed 5 alone trains exactly as next to seed 4
    both = tp.train_learner("PPO", lr=0.1, seeds=[4, 5], updates=12, losses=refimpl)
    alone = tp.train_learner("PPO", lr=0.1, seeds=[5], updates=12, losses=refimpl)
    np.testing.assert_array_equal(both.batch_matches[1], alone.batch_matches[0])
    np.testing.assert_array_equal(both.ratio_count.sum(), 2 * alone.ratio_count.sum())


def test_checkpoints():
    assert tp.checkpoints_for(300) == (10, 50, 100, 200, 300)
    assert tp.checkpoints_for(30) == (10, 30)
    assert tp.checkpoints_for(5) == (5,)
    assert tp.checkpoints_for(250) == (10, 50, 100, 200, 250)


# --------------------------------------------------------------------------------------------------
# (b) the reduced run


def test_reduced_run_json_schema(reduced):
    doc = json.loads(json.dumps(tp.to_json(reduced)))  # what --json writes
    cps = [str(c) for c in tp.checkpoints_for(REDUCED["updates"])]
    assert set(doc["lr"]) == {"0.1"}
    assert list(doc["lr"]["0.1"]) == list(tp.LEARNER_NAMES) == [
        "REINFORCE", "REINFORCE, no offset", "REINFORCE + baseline", "baseline, 4 passes", "PPO",
    ]
    for name, entry in doc["lr"]["0.1"].items():
        assert set(entry) == {"curve", "solved"}
        assert list(entry["curve"]) == cps
        for value in entry["curve"].values():
            assert math.isfinite(value) and 0 <= value <= 3
            assert (value * 16 * REDUCED["seeds"]) == pytest.approx(round(value * 32))  # 1/32 steps
        assert isinstance(entry["solved"], int) and 0 <= entry["solved"] <= REDUCED["seeds"]
    assert set(doc["ppo_clip_fraction"]) == {"0.1"}
    assert 0 <= doc["ppo_clip_fraction"]["0.1"] <= 1
    by_pass = doc["ppo_clip_fraction_by_pass"]["0.1"]
    assert len(by_pass) == 4 and by_pass[0] == 0.0  # pass 1: the ratio is exactly 1
    assert doc["ppo_clip_fraction"]["0.1"] == pytest.approx(sum(by_pass[1:]) / 3)
    assert set(doc["cosine"]) == {"offset", "no_offset", "baseline"}
    for value in doc["cosine"].values():
        assert math.isfinite(value) and -1 <= value <= 1
    assert doc["cosine_batches"] == REDUCED["cosine_batches"]
    assert doc["config"]["seeds"] == [0, 1] and doc["config"]["updates"] == REDUCED["updates"]


def test_reduced_run_facts(reduced):
    for name in tp.LEARNER_NAMES:
        run = reduced.run(0.1, name)
        assert run.batch_matches.shape == (2, REDUCED["updates"])
        assert np.all(run.ratio_outside[:, 0] == 0)  # pass 1 of every update: ratio == 1 exactly
        if run.passes == 1:
            assert run.outside_fraction() == 0.0  # no later pass
    # per-batch cosines are cosines; the +10 drowns the signal, the batch-mean baseline restores it
    for variant in ("offset", "no_offset", "baseline"):
        cos = reduced.cosine.cosines[variant]
        assert cos.shape == (REDUCED["cosine_batches"],)
        assert np.all(np.abs(cos) <= 1 + 1e-12)
    assert reduced.cosine.mean("offset") < reduced.cosine.mean("no_offset")
    assert reduced.cosine.mean("offset") < reduced.cosine.mean("baseline")
    text = tp.format_tables(reduced)
    for name in tp.LEARNER_NAMES:
        assert name in text
    assert "Adam lr = 0.1" in text and "cosine" in text.lower()


def test_cli_writes_json_and_plot(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "tiny.json", tmp_path / "tiny.png"
    rc = run_command([
        "--seeds", "1", "--updates", "12", "--lrs", "0.1,0.03",
        "--cosine-batches", "20", "--json", str(out), "--plot", str(png), "--quiet",
    ])
    assert rc == 0
    doc = json.loads(out.read_text())
    assert set(doc["lr"]) == {"0.1", "0.03"} and set(doc["ppo_clip_fraction"]) == {"0.1", "0.03"}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "REINFORCE + baseline" in capsys.readouterr().out


def test_plot_without_matplotlib_says_how_to_install(monkeypatch, tmp_path, capsys):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    with pytest.raises(tp.MissingPlotDependency, match=r"rlspec\[plot\]"):
        tp.require_matplotlib()
    rc = run_command(["--updates", "1", "--plot", str(tmp_path / "x.png"), "--quiet"])
    assert rc == 2
    assert "pip install 'rlspec[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
