"""bfloat16 log-softmax on the CPU path: a confident token's log-prob comes out as exactly 0 (trl 1.16.0, finding bf16-log-softmax-precision).

Without TRL's Triton kernel (CPU, or no Triton), selective_log_softmax runs F.log_softmax in the logits'
dtype for bfloat16 (trl/trainer/utils.py:582-595, "logsumexp approach is unstable with bfloat16"), and
entropy_from_logits does the same before -sum(p log p) (:637-639). PyTorch's bfloat16 log_softmax
subtracts a log-normaliser rounded to bfloat16 at the scale of the largest logit, so a log-prob smaller
in magnitude than half a bfloat16 ulp of that logit (0.0625 at z_max = 28.125) is returned as exactly 0,
and the entropy of a confident row loses that token's term. With a temperature, logits / temperature is
computed in bfloat16 first (utils.py:576-577; :702-703 in selective_log_softmax_and_entropy), which rounds
every scaled logit once more (relative 2^-9). The script calls selective_log_softmax_and_entropy (which
calls both helpers) and selective_log_softmax on one row of bfloat16-exact logits.

Run: pip install trl==1.16.0; python bf16-log-softmax-precision.py

Expected (spec logprob.token, logprob.entropy, by hand: log_softmax(z/T) and -sum p log p in float64 on the
same bfloat16 values z): T = 1: log p = [-0.000546, -37.625546], entropy 0.004834; T = 1.3: log p =
[-0.003384, -28.945692], entropy 0.024105. Rounding those outputs to bfloat16 gives [-0.000546, -37.75]
and [-0.003387, -29.0] (0.4% at most), what the spec's bfloat16 class allows; 0 for -0.000546, or an
entropy 11-14% low, is outside it. The float32 lines show TRL's float32 path on the same values.

Actual:
    T=1.0 bfloat16: log p [0.0, -37.5], entropy [0.004303]
    T=1.0 float32: log p [-0.000546, -37.625546], entropy [0.004834]
    T=1.0 float32 after the bf16 division: log p [-0.000546, -37.625546]
    T=1.3 bfloat16: log p [0.0, -29.0], entropy [0.02063]
    T=1.3 float32: log p [-0.003384, -28.945694], entropy [0.024105]
    T=1.3 float32 after the bf16 division: log p [-0.003357, -28.940857]
"""

import warnings

warnings.simplefilter("ignore")

import torch  # noqa: E402
from trl.trainer.utils import selective_log_softmax, selective_log_softmax_and_entropy  # noqa: E402


def fmt(x, digits=6):
    return "[" + ", ".join(str(round(float(v), digits) + 0.0) for v in x.flatten().tolist()) + "]"


z = torch.tensor([[28.125, 20.5, 18.375, 9.625, -6.4375, -9.25, -9.5]])  # every value exact in bfloat16
targets = torch.tensor([0, 6])  # the confident token, the least likely one
rows = z.expand(2, -1)  # one position per target
for T in (1.0, 1.3):
    for dtype in (torch.bfloat16, torch.float32):
        logp, entropy = selective_log_softmax_and_entropy(rows.to(dtype), targets, temperature=T)
        print(f"T={T} {str(dtype)[6:]}: log p {fmt(logp)}, entropy {fmt(entropy[:1])}")
    # the float32 log-softmax of z / T as TRL's bf16 division (utils.py:577) rounds it: the division's own share
    scaled = (rows.to(torch.bfloat16) / T).float()
    print(f"T={T} float32 after the bf16 division: log p {fmt(selective_log_softmax(scaled, targets))}")
