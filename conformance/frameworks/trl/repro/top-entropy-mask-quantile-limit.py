"""The top-entropy mask raises beyond 2^24 valid tokens over all ranks (trl 1.16.0, finding top-entropy-mask-quantile-limit).

With top_entropy_quantile < 1, _compute_loss calls get_high_entropy_mask (trl/trainer/grpo_trainer.py:3049-3052),
which gathers every rank's valid entropies and takes torch.quantile of the pool (:1397-1413).
torch.quantile refuses an input of more than 2^24 = 16,777,216 elements, so a micro-batch step whose
ranks hold more valid completion tokens together raises RuntimeError. The script calls the method on a
stand-in holding only the accelerator it reads, simulating two ranks (rank 0 with 2^24 tokens, this rank
with 3).

Run: pip install trl==1.16.0; python top-entropy-mask-quantile-limit.py

Expected (spec entropy.top_mask, by hand): the pool is k/2^24 (k < 2^24) plus 0.25, 0.5, 0.875: n =
2^24 + 3, q = 0.5, p = q·(n - 1) = 2^23 + 1, and the sorted pool's element 2^23 + 1 is 0.5 (0.25 and 0.5
each appear twice), so tau = 0.5 and the mask is [[0, 0, 1, 1]] (0.5 and 0.875 kept). With 2^24 - 4
tokens on rank 0 the pool has 2^24 - 1 elements, p = 2^23 - 1 and tau = (2^23 - 2)/2^24, just below 0.5:
again [[0, 0, 1, 1]].

Actual:
    RuntimeError: quantile() input tensor is too large
    with 2^24 - 4 tokens on rank 0, mask: [[0, 0, 1, 1]]
"""

import types
import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402
from trl import GRPOTrainer  # noqa: E402


class TwoRanks:
    """accelerate's pad_across_processes and gather as rank 1 of two data-parallel ranks, rank 0 holding
    `other` (its entropies[mask].float()): the only attribute get_high_entropy_mask reads."""

    def __init__(self, other):
        self.other = other

    def pad_across_processes(self, tensor, dim=0, pad_index=0):
        self.n, self.pad = max(len(tensor), len(self.other)), pad_index
        return torch.cat([tensor, tensor.new_full((self.n - len(tensor),), pad_index)])

    def gather(self, tensor):
        other = torch.cat([self.other, self.other.new_full((self.n - len(self.other),), self.pad)])
        return torch.cat([other, tensor])


n = 2**24
other = torch.arange(n, dtype=torch.float32) / n  # rank 0: 2^24 valid tokens, entropies k / 2^24
entropies = torch.tensor([[0.0, 0.25, 0.5, 0.875]])
mask = torch.tensor([[0, 1, 1, 1]])
# top_entropy_quantile = 0.5: _compute_loss passes threshold 1 - 0.5 (grpo_trainer.py:3049-3052); the method
# reads only self.accelerator, so a namespace holding one stands in for the trainer
stand_in = types.SimpleNamespace(accelerator=TwoRanks(other))
try:
    print("mask:", GRPOTrainer.get_high_entropy_mask(stand_in, entropies, mask, 0.5).int().tolist())
except RuntimeError as exc:
    print(f"RuntimeError: {exc}")
stand_in = types.SimpleNamespace(accelerator=TwoRanks(other[: n - 4]))  # 2^24 - 1 in the pool: accepted
print("with 2^24 - 4 tokens on rank 0, mask:", GRPOTrainer.get_high_entropy_mask(stand_in, entropies, mask, 0.5).int().tolist())
