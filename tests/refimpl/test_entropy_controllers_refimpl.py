"""refimpl: the spec v1.1 entropy terms and controllers beyond the oracle comparison of
test_differential.py (which runs every registry record): the kthvalue threshold against
torch.quantile, the pooled forms, 0-d tensor state, the bonus's gradient reaching the logits."""

from __future__ import annotations

import math

import pytest
import torch

import oracle
import refimpl


def _ragged(seed: int, B: int = 4, T: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    H = torch.empty(B, T, dtype=torch.float64).exponential_(1.0, generator=g)
    m = torch.rand(B, T, generator=g) < 0.7
    m[:, 0] = False
    return H, m


@pytest.mark.parametrize("rho", [0.0, 0.05, 0.2, 0.5, 0.8, 1.0])
def test_threshold_is_torch_quantile_linear(rho):
    """Below torch.quantile's size limit the kthvalue threshold is torch.quantile's (linear)."""
    for seed in range(5):
        H, m = _ragged(seed)
        tau = torch.quantile(H[m], 1.0 - rho)
        assert torch.equal(refimpl.entropy_top_mask(H, m, rho=rho), m & (H >= tau))


def test_pool_as_tensor_list_or_absent():
    H, m = _ragged(7)
    own = refimpl.entropy_top_mask(H, m, rho=0.3)
    assert torch.equal(refimpl.entropy_top_mask(H, m, rho=0.3, pooled_entropy=H[m]), own)
    assert torch.equal(refimpl.entropy_top_mask(H, m, rho=0.3, pooled_entropy=H[m].tolist()), own)
    assert torch.equal(refimpl.entropy_top_mask(H, m, rho=0.3, pooled_entropy=tuple(H[m].flip(0).tolist())), own)
    # a pool of another rank's high entropies pushes the threshold above every token here
    high = torch.cat([H[m], torch.full((3 * int(m.sum()),), 100.0, dtype=torch.float64)])
    assert not refimpl.entropy_top_mask(H, m, rho=0.5, pooled_entropy=high).any()


def test_half_precision_entropies_are_thresholded_exactly():
    """bfloat16 entropies convert exactly to float64: the mask is the oracle's on the rounded values."""
    H, m = _ragged(3)
    Hb = H.to(torch.bfloat16)
    for rho in (0.2, 0.5):
        expected = oracle.entropy_top_mask(Hb.double().numpy(), m.numpy(), rho=rho)
        assert refimpl.entropy_top_mask(Hb, m, rho=rho).numpy().tolist() == expected.tolist()


def test_bonus_gradient_reaches_the_logits():
    """entropy_bonus(token_entropy(logits)): the autograd gradient w.r.t. the logits is the oracle's chain
    token_entropy_grad(logits, mask, entropy_bonus_grad(H, mask, 1))."""
    g = torch.Generator().manual_seed(0)
    logits = (2 * torch.randn(3, 6, 5, generator=g, dtype=torch.float64)).requires_grad_()
    m = torch.tensor([[0, 1, 1, 1, 0, 0], [0, 0, 1, 1, 1, 1], [0, 1, 0, 0, 0, 0]], dtype=torch.bool)
    H = refimpl.token_entropy(logits, m)
    loss = refimpl.entropy_bonus(H, m, entropy_coef=0.05, mode="seq_mean_token_mean")
    (grad,) = torch.autograd.grad(loss, logits)
    Hn = oracle.token_entropy(logits.detach().numpy(), m.numpy())
    upstream = oracle.entropy_bonus_grad(Hn, m.numpy(), 1.0, entropy_coef=0.05, mode="seq_mean_token_mean")
    expected = oracle.token_entropy_grad(logits.detach().numpy(), m.numpy(), upstream)
    assert torch.allclose(grad, torch.from_numpy(expected), rtol=1e-10, atol=1e-13)


def test_controllers_take_0d_tensors():
    kl = torch.tensor(6.6, dtype=torch.float64)
    assert refimpl.kl_controller_update(0.1, kl, 1000, target=6.0, horizon=10000) == pytest.approx(0.101, rel=1e-14)
    assert refimpl.entropy_coef_update(torch.tensor(0.01), torch.tensor(0.15)) == pytest.approx(0.015, rel=1e-6)
    assert refimpl.entropy_coef_applied(0.05, torch.tensor(math.inf)) == 0.0
