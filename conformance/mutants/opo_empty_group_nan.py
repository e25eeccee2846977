"""OPO's length-weighted baseline divided without a guard: a group whose rows have no valid token
computes Σ l·r / Σ l = 0/0, and NaN advantages reach the batch. verl's ``opo`` does exactly this
(``(len_tensor * score_tensor).sum() / len_tensor.sum()``, core_algos.py:683, 0.9.1); the spec gives 0.

Bug-catalogue class 26 (empty mask → NaN); the vector ``opo_advantages/group-without-tokens`` shows it.
"""


from conformance.mutants.base import Mutant, upcast


def opo_advantages(rewards, group_size, mask, *, singleton="zero"):
    (r,), out_dtype = upcast(rewards)
    G = group_size
    if G == 1 and singleton == "raw":
        return rewards.clone()
    x = r.view(-1, G)
    lengths = mask.bool().sum(dim=1).to(x.dtype).view(-1, G)
    baseline = (lengths * x).sum(dim=1, keepdim=True) / lengths.sum(dim=1, keepdim=True)  # 0/0 = NaN
    return (x - baseline).reshape(-1).to(out_dtype)


MUTANT = Mutant(
    name="opo_empty_group_nan",
    bug_class="OPO baseline of a group without valid tokens divides 0 by 0 (NaN advantages)",
    catalogue=26,
    cites=("verl core_algos.py:683 (0.9.1)",),
    signature={"opo_advantages": ("property", "golden", "preset:verl")},
    replace={"opo_advantages": opo_advantages},
)
