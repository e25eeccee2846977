"""vLLM rows: the log-probs the engine reports, judged against the spec.

``model.build`` writes a tiny random-weight Llama (``model.py``); the engine generates ``MAX_TOKENS`` tokens from
each of ``N_PROMPTS`` seeded prompts with one setting of (temperature, top-k, top-p, min-p) per request batch
(``adapter.generate``; request ``i`` seeded ``seed + i``). The same requests run on three engines, one per
``logprobs_mode`` (an engine setting), and sample the same tokens (checked: a row whose engines disagree on the
tokens is an error). Two kinds of rows, semantics apart from precision:

- ``vllm.logprobs[<mode>,<dtype>,<setting>]`` (semantics): the reported log-prob of every sampled token against
  the spec evaluated by the oracle (float64) on **the engine's own logits** at that step (``raw_logits`` mode
  with ``logprobs=-1``: every token's raw logit, the values the sampler starts from), so the engine's
  precision does not enter and a float32 tolerance applies at either engine dtype (vLLM's sampler works in
  float32). Canonical: ``sampling_logprobs`` of the setting, the log-prob under the distribution the token was
  drawn from (spec ``logprob.sampling``; at T = 1 without truncation ``token_logprobs``, spec ``logprob.token``).
  vLLM's default ``raw_logprobs`` mode is the variant ``token_logprobs(temperature=1)``: the log-softmax of the
  raw logits, before temperature and truncation (``v1/sample/sampler.py:86-89``, before ``apply_temperature``
  at :279), as documented ("the values before applying any logit processors", ``config/model.py:287-296``).
  Each message says which contrasts this batch tells apart: the raw log-softmax, and the tempered log-softmax
  without the truncation (``token_logprobs(temperature=T)``: log S missing).
- ``vllm.forward[raw_logprobs,<dtype>]`` and ``vllm.prompt_logprobs[<mode>,<dtype>]`` (precision and the prompt
  convention): the engine's raw log-probs at T = 1, and its prompt log-probs, against ``token_logprobs`` of
  **the trainer's forward** of the same weights (transformers, float32; for a bfloat16 engine on the weights
  rounded to bfloat16). A float32 engine is held to the spec's float32 class; a bfloat16 engine to twice the
  gap between the trainer's own bfloat16 forward and its float32 one on the same sequences (the tolerance is
  that measurement, stated in the message): an engine no less precise than a bfloat16 trainer passes. Prompt
  tokens go through no sampling processor in either mode (``config/model.py:294-295``): canonical
  ``token_logprobs(temperature=1)``, the tempered one the contrast.

A sampled token within ``MARGIN`` of a cut (the k-th logit, the top-p mass, the min-p threshold, relative:
``records/sampling.py::support_margin``) is left out of a semantic row and counted in its message: there
float32 rounding decides the support. So is one whose top-p cut falls inside a group of tied probabilities
(``tie_at_top_p``; frequent with a bfloat16 engine): the spec keeps the whole tie, vLLM the smallest set, cut
by sort position (``v1/sample/ops/topk_topp_sampler.py:494-511``; the finding ``vllm-top-p-splits-ties``). Entry point: ``extra_rows(adapter, seed) -> list[RowResult]``.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any

import numpy as np

import oracle
from conformance.frameworks.vllm import model
from conformance.records.pieces import fmt
from conformance.records.sampling import support_margin
from conformance.runner.composite import Candidate, composition_row
from conformance.runner.rows import RowResult, error_row
from conformance.tolerances import Tol, tolerance

if TYPE_CHECKING:  # the adapter whose extra_rows call these (imported for the annotations only)
    from conformance.frameworks.vllm.adapter import VllmAdapter

N_PROMPTS = 6
MAX_TOKENS = 12
MARGIN = 1e-4
# (dtype, logprobs_mode) -> the settings run; the raw_logits engine runs the union of a dtype's settings
GRID: dict[tuple[str, str], tuple[dict[str, Any], ...]] = {
    ("float32", "raw_logprobs"): (
        {"temperature": 1.0},
        {"temperature": 0.7},
        {"temperature": 0.7, "top_k": 5, "top_p": 0.9},
    ),
    ("float32", "processed_logprobs"): (
        {"temperature": 1.0},
        {"temperature": 0.7},
        {"temperature": 1.0, "top_k": 5},
        {"temperature": 1.0, "top_p": 0.8},
        {"temperature": 0.7, "top_k": 8, "top_p": 0.9},
        {"temperature": 1.3, "min_p": 0.1},
        {"temperature": 0.7, "top_k": 5, "top_p": 0.9, "min_p": 0.05},
        {"temperature": 0.7, "top_k": 1},  # a one-token support: vLLM reports 0.0
    ),
    ("bfloat16", "raw_logprobs"): ({"temperature": 1.0}, {"temperature": 0.7}),
    ("bfloat16", "processed_logprobs"): ({"temperature": 0.7}, {"temperature": 0.7, "top_k": 5, "top_p": 0.9}),
}
PROMPT_SETTING = {"temperature": 0.7}  # the setting whose prompt log-probs get a row, per mode and dtype
FULL = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}


def prompts(seed: int) -> list[list[int]]:
    """``N_PROMPTS`` seeded prompts of 3 to 10 token ids."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, model.VOCAB, size=int(rng.integers(3, 11))).tolist() for _ in range(N_PROMPTS)]


class _Layout:
    """Prompt + completion of each request in the spec layout: [1, L] ids and masks of the completion
    positions (and of the prompt positions after the first), and [1, L, V] logits with the engine's logits of
    step ``j`` at row ``P + j - 1`` (the row that predicts completion token ``j``)."""

    def __init__(self, prompt_ids: list[list[int]], engine: dict[str, Any]) -> None:
        self.prompts, self.engine = prompt_ids, engine
        self.sequences = [p + [int(t) for t in ids] for p, ids in zip(prompt_ids, engine["token_ids"])]

    def completion(self, i: int, logits: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        P, L = len(self.prompts[i]), len(self.sequences[i])
        mask = np.zeros((1, L), dtype=bool)
        mask[0, P:] = True
        if logits is None:  # the engine's logits
            logits = np.zeros((L, self.engine["logits"].shape[2]))
            logits[P - 1:L - 1] = self.engine["logits"][i]
        return logits[None], np.asarray([self.sequences[i]]), mask

    def prompt(self, i: int, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        P, L = len(self.prompts[i]), len(self.sequences[i])
        mask = np.zeros((1, L), dtype=bool)
        mask[0, 1:P] = True
        return logits[None], np.asarray([self.sequences[i]]), mask

    def evaluate(self, fn: Any, part: str, logits: list[np.ndarray] | None = None, keep: np.ndarray | None = None,
                 **kw: Any) -> np.ndarray:
        values = []
        for i in range(len(self.prompts)):
            z, ids, m = self.completion(i, None if logits is None else logits[i]) if part == "completion" \
                else self.prompt(i, logits[i])
            values.append(fn(z, ids, m, **kw)[m])
        out = np.concatenate(values)
        return out if keep is None else out[keep]

    def steps(self) -> list[np.ndarray]:
        """The engine's logits of every sampled token, flattened like `evaluate`."""
        return [self.engine["logits"][i, j] for i in range(len(self.prompts)) for j in range(MAX_TOKENS)]


def tie_at_top_p(z: np.ndarray, kw: dict[str, Any]) -> bool:
    """The top-p cut of logits ``z`` [V] falls inside a group of tied probabilities: the spec keeps the whole
    tie, while a smallest set reaching ``top_p`` would drop some of it (vLLM's ascending cumulative sum does,
    by sort position; ``logprob.sampling.md``, "Ties")."""
    if kw["top_p"] >= 1.0:
        return False
    keep, _ = support_margin(z, {**kw, "top_p": 1.0})  # min-p and top-k
    a = z / kw["temperature"]
    q = np.where(keep, np.exp(a - a[keep].max()), 0.0)
    q /= q.sum()
    for v in np.flatnonzero(keep):
        tied = int(np.sum(keep & (q == q[v])))
        above = float(q[q > q[v]].sum())
        if tied > 1 and above < kw["top_p"] <= above + (tied - 1) * q[v]:
            return True
    return False


def _semantic_row(adapter: VllmAdapter, dtype: str, mode: str, kw: dict[str, Any], reported: dict[str, Any],
                  layout: _Layout, seed: int) -> RowResult:
    full = {**FULL, **kw}
    plain = full == {**FULL, "temperature": 1.0}
    spec_id, function = ("logprob.token", "token_logprobs") if plain else ("logprob.sampling", "sampling_logprobs")
    row_id = f"vllm.logprobs[{mode},{dtype},{fmt(kw)}]"
    if not np.array_equal(reported["token_ids"], layout.engine["token_ids"]):
        return error_row(row_id, spec_id, function, adapter.name,
                         f"the {mode} engine sampled other tokens than the raw_logits engine with the same seeds")
    steps = layout.steps()
    near = np.asarray([support_margin(z, full)[1] <= MARGIN for z in steps])
    tie = np.asarray([tie_at_top_p(z, full) for z in steps]) & ~near
    keep = ~(near | tie)
    got = reported["logprobs"].reshape(-1)[keep]

    def of(fn: Any, **k: Any):
        return lambda: {"value": layout.evaluate(fn, "completion", keep=keep, **k)}

    raw = Candidate("raw_logprobs", "token_logprobs(temperature=1): the log-softmax of the raw logits, before "
                    "temperature and truncation", of(oracle.token_logprobs))
    tempered = Candidate("tempered, not renormalised", f"token_logprobs(temperature={full['temperature']:g}): "
                         "log S of the truncation missing", of(oracle.token_logprobs, temperature=full["temperature"]))
    canonical = Candidate("canonical", f"sampling_logprobs({fmt(kw)}) of the engine's logits",
                          of(oracle.sampling_logprobs, **full), contrasts=[] if plain else [raw, tempered])
    candidates = [canonical] + ([raw] if mode == "raw_logprobs" and not plain else [])
    note = (f"{len(got)} sampled tokens of {N_PROMPTS} prompts"
            + (f"; {int(near.sum())} within {MARGIN:g} of a cut left out" if near.any() else "")
            + (f"; {int(tie.sum())} where the top-p cut falls inside a tie left out (vLLM keeps the smallest set, "
               "splitting the tie by sort position: finding vllm-top-p-splits-ties)" if tie.any() else ""))
    return composition_row(row_id, spec_id, function, adapter, lambda: {"value": got}, candidates,
                           {"value": tolerance(spec_id, "float32")}, seed=seed, note=note, n_cases=len(got))


class _Trainer:
    """The trainer's forwards of one layout's sequences, and the tolerance a `dtype` engine is held to."""

    def __init__(self, folder: str, layout: _Layout, dtype: str) -> None:
        self.logits = model.forward_logits(folder, layout.sequences, weights=dtype)
        self.dtype = dtype
        if dtype == "float32":
            self.tol = {"value": tolerance("logprob.token", "float32")}
            self.gap = ""
            return
        ref = np.concatenate([layout.evaluate(oracle.token_logprobs, part, self.logits) for part in ("completion", "prompt")])
        half = model.forward_logits(folder, layout.sequences, compute="bfloat16")
        own = np.concatenate([layout.evaluate(oracle.token_logprobs, part, half) for part in ("completion", "prompt")])
        gap = float(np.max(np.abs(own - ref)))
        self.tol = {"value": Tol(rtol=0.0, atol=2 * gap + 1e-5, reason=f"twice the trainer's own bfloat16 forward's "
                                 f"gap to its float32 one on these sequences ({gap:.3g})")}
        self.gap = f"; tolerance: twice the trainer's bfloat16-forward gap, {gap:.3g}"


def _forward_row(adapter: VllmAdapter, trainer: _Trainer, reported: dict[str, Any], layout: _Layout, seed: int,
                 part: str, mode: str) -> RowResult:
    if part == "completion":
        row_id = f"vllm.forward[raw_logprobs,{trainer.dtype},temperature=1.0]"
        got = reported["logprobs"].reshape(-1)
        what = f"{len(got)} sampled tokens"
        contrasts: list[Candidate] = []
    else:
        row_id = f"vllm.prompt_logprobs[{mode},{trainer.dtype},{fmt(PROMPT_SETTING)}]"
        got = np.concatenate([reported["prompt_logprobs"][i, 1:len(p)] for i, p in enumerate(layout.prompts)])
        what = f"{len(got)} prompt tokens"
        T = PROMPT_SETTING["temperature"]
        contrasts = [Candidate("tempered", f"token_logprobs(temperature={T:g})", lambda: {
            "value": layout.evaluate(oracle.token_logprobs, "prompt", trainer.logits, temperature=T)})]
    canonical = Candidate("canonical", "token_logprobs(temperature=1) of the trainer's float32 forward",
                          lambda: {"value": layout.evaluate(oracle.token_logprobs, part, trainer.logits)},
                          contrasts=contrasts)
    return composition_row(row_id, "logprob.token", "token_logprobs", adapter, lambda: {"value": got}, [canonical],
                           trainer.tol, seed=seed, note=f"{what} of {N_PROMPTS} prompts{trainer.gap}",
                           n_cases=len(got))


def extra_rows(adapter: VllmAdapter, seed: int) -> list[RowResult]:
    rows: list[RowResult] = []
    prompt_ids = prompts(seed)

    def generate(folder: str, dtype: str, mode: str, kw: dict[str, Any]) -> dict[str, Any]:
        return adapter.generate(folder, prompt_ids, dtype=dtype, logprobs_mode=mode, max_tokens=MAX_TOKENS,
                                seed=seed, **{**FULL, **kw})

    with tempfile.TemporaryDirectory(prefix="rlspec-vllm-model-") as folder:
        model.build(folder)
        for dtype in adapter.dtypes:
            settings = {fmt(kw): kw for mode in ("raw_logprobs", "processed_logprobs") for kw in GRID[(dtype, mode)]}
            layouts = {k: _Layout(prompt_ids, generate(folder, dtype, "raw_logits", kw)) for k, kw in settings.items()}
            plain = fmt({"temperature": 1.0})
            trainers: dict[str, _Trainer] = {}  # the trainer's forwards of a layout, computed once for both modes

            def trainer_of(key: str) -> _Trainer:
                if key not in trainers:
                    trainers[key] = _Trainer(folder, layouts[key], dtype)
                return trainers[key]

            for mode in ("raw_logprobs", "processed_logprobs"):
                for kw in GRID[(dtype, mode)]:
                    reported = generate(folder, dtype, mode, kw)
                    layout = layouts[fmt(kw)]
                    rows.append(_semantic_row(adapter, dtype, mode, kw, reported, layout, seed))
                    if mode == "raw_logprobs" and fmt(kw) == plain:
                        rows.append(_forward_row(adapter, trainer_of(plain), reported, layout, seed, "completion", mode))
                    if kw == PROMPT_SETTING:
                        rows.append(_forward_row(adapter, trainer_of(fmt(kw)), reported, layout, seed, "prompt", mode))
    return rows
