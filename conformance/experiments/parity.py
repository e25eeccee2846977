"""Engine-trainer parity: the mismatch metrics (spec ``metric.mismatch``) between an inference engine's
log-probs of the tokens it sampled and the trainer's forward of the same weights (``rlspec parity``).

The engine generates from seeded prompts (``conformance/frameworks/vllm/adapter.py``; one engine per dtype and
``logprobs_mode``); the trainer scores the same sequences with transformers (float32, or bfloat16) and the refimpl,
in the semantics the engine reports: ``processed_logprobs`` against ``sampling_logprobs`` of the request's
sampling parameters (the trainer re-applies the engine's support, the "keep sampling mask" of DeepSeek-V3.2),
``raw_logprobs`` against ``token_logprobs`` at temperature 1 (what vLLM's raw mode reports). Every metric is
``refimpl.mismatch_metric`` / ``refimpl.sequence_mismatch_metric`` of (trainer, engine) log-probs on the sampled
tokens; a token the trainer's support excludes (the engine's and the trainer's cuts disagree) is counted apart
and left out of the metrics.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from conformance.experiments.tiny_policy import MissingPlotDependency, require_matplotlib

TOKEN_METRICS = ("kl", "k3_kl", "chi2_token", "token_mult_prob_error", "logprob_abs_diff")
SEQUENCE_METRICS = ("log_ppl_diff", "log_ppl_abs_diff", "ppl_ratio", "chi2_seq")


@dataclass
class ParityResult:
    """One engine configuration against the trainer: the metrics, the per-token differences, the settings."""

    engine: str
    engine_dtype: str
    trainer_dtype: str
    logprobs_mode: str
    sampling: dict[str, Any]
    n_prompts: int
    n_tokens: int
    outside_support: int
    metrics: dict[str, float]
    max_abs_diff: float
    deltas: list[float] = field(default_factory=list)  # trainer − engine per compared token


def _prompts(n: int, vocab: int, seed: int, prompts_file: Path | None, folder: Path) -> list[list[int]]:
    if prompts_file is None:
        rng = np.random.default_rng(seed)
        return [rng.integers(0, vocab, size=int(rng.integers(3, 11))).tolist() for _ in range(n)]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = [json.loads(line) for line in prompts_file.read_text().splitlines() if line.strip()]
    if not rows or any("prompt" not in r for r in rows):
        raise ValueError(f"parity: --prompts: expected JSON lines with a 'prompt' text, got {prompts_file}")
    return [tokenizer(r["prompt"])["input_ids"] for r in rows[:n]]


def run_parity(*, model: str | None, engine_dtype: str, trainer_dtype: str, logprobs_mode: str,
               temperature: float, top_k: int, top_p: float, min_p: float, n_prompts: int, max_tokens: int,
               seed: int, prompts_file: Path | None = None) -> ParityResult:
    """Generate with vLLM and score with the trainer; see the module docstring."""
    import torch

    import refimpl
    from conformance.frameworks.vllm import model as tiny
    from conformance.runner.loading import load_adapter

    adapter = load_adapter("vllm")
    with tempfile.TemporaryDirectory(prefix="rlspec-parity-") as tmp:
        folder = Path(model) if model else tiny.build(Path(tmp) / "model")
        from transformers import AutoConfig

        vocab = int(AutoConfig.from_pretrained(folder).vocab_size)
        prompt_ids = _prompts(n_prompts, vocab, seed, prompts_file, folder)
        sampling = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "min_p": min_p}
        out = adapter.generate(str(folder), prompt_ids, dtype=engine_dtype, logprobs_mode=logprobs_mode,
                               max_tokens=max_tokens, seed=seed, **sampling)
        sequences = [p + [int(t) for t in ids] for p, ids in zip(prompt_ids, out["token_ids"])]
        logits = tiny.forward_logits(folder, sequences, compute=trainer_dtype)
    L = max(len(s) for s in sequences)
    B = len(sequences)
    z = np.zeros((B, L, logits[0].shape[1]))
    ids = np.zeros((B, L), dtype=np.int64)
    mask = np.zeros((B, L), dtype=bool)
    engine = np.zeros((B, L))
    for i, (seq, p) in enumerate(zip(sequences, prompt_ids)):
        z[i, : len(seq)] = logits[i]
        ids[i, : len(seq)] = seq
        mask[i, len(p): len(seq)] = True
        engine[i, len(p): len(seq)] = out["logprobs"][i]
    zt, idt, mt = torch.from_numpy(z), torch.from_numpy(ids), torch.from_numpy(mask)
    if logprobs_mode == "processed_logprobs":
        trainer = refimpl.sampling_logprobs(zt, idt, mt, **sampling).numpy()
    else:
        trainer = refimpl.token_logprobs(zt, idt, mt).numpy()
    outside = mask & ~np.isfinite(trainer)
    compared = mask & ~outside
    old, roll, m = torch.from_numpy(np.where(compared, trainer, 0.0)), torch.from_numpy(engine), torch.from_numpy(compared)
    metrics: dict[str, float] = {}
    for name in TOKEN_METRICS:
        metrics[name] = float(refimpl.mismatch_metric(old, roll, m, metric=name))
        metrics[f"{name}[seq_mean_token_mean]"] = float(
            refimpl.mismatch_metric(old, roll, m, metric=name, agg="seq_mean_token_mean"))
    for name in SEQUENCE_METRICS:
        metrics[name] = float(refimpl.sequence_mismatch_metric(old, roll, m, metric=name))
    deltas = (trainer - engine)[compared]
    return ParityResult(engine=f"vllm {adapter.version}", engine_dtype=engine_dtype, trainer_dtype=trainer_dtype,
                        logprobs_mode=logprobs_mode, sampling=sampling, n_prompts=B, n_tokens=int(compared.sum()),
                        outside_support=int(outside.sum()), metrics=metrics,
                        max_abs_diff=float(np.max(np.abs(deltas))) if deltas.size else 0.0,
                        deltas=[float(x) for x in deltas])


def format_results(results: list[ParityResult]) -> str:
    """One column per engine configuration, one row per metric."""
    head = [f"{r.engine_dtype} engine / {r.trainer_dtype} trainer" for r in results]
    names = list(results[0].metrics)
    width = max(len(n) for n in names + ["tokens compared"])
    lines = [f"{'':<{width}}  " + "  ".join(f"{h:>28}" for h in head)]
    lines.append(f"{'tokens compared':<{width}}  " + "  ".join(f"{r.n_tokens:>28d}" for r in results))
    lines.append(f"{'outside trainer support':<{width}}  " + "  ".join(f"{r.outside_support:>28d}" for r in results))
    lines.append(f"{'max |trainer - engine|':<{width}}  " + "  ".join(f"{r.max_abs_diff:>28.3g}" for r in results))
    for n in names:
        lines.append(f"{n:<{width}}  " + "  ".join(f"{r.metrics[n]:>28.4g}" for r in results))
    return "\n".join(lines)


def plot_histogram(results: list[ParityResult], path: Path) -> None:
    """PNG: the histogram of trainer − engine log-prob per compared token, one panel per configuration."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.5), squeeze=False)
    for ax, r in zip(axes[0], results):
        ax.hist(r.deltas, bins=40, color="#3b6ea5")
        ax.set_title(f"{r.engine_dtype} engine vs {r.trainer_dtype} trainer ({r.logprobs_mode})", fontsize=9)
        ax.set_xlabel("log π_trainer − log π_engine per token")
        ax.set_yscale("log")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def to_json(results: list[ParityResult]) -> str:
    return json.dumps([asdict(r) for r in results], indent=1)


__all__ = ["ParityResult", "run_parity", "format_results", "plot_histogram", "to_json", "MissingPlotDependency"]
