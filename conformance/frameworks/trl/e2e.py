"""``rlspec e2e --trainer trl``: TRL's ``GRPOTrainer`` trained for a few steps on the same tiny Llama and
digit task as ``rlspec train``, with every step's batch captured and checked against the oracle.

How it is driven (trl 1.16.0; CPU, offline): the random-weight Llama of ``refimpl.trainer.task`` and its
locally built tokenizer are saved to a temporary folder and handed to ``GRPOTrainer`` by path; the
reward function scores the completion token ids TRL passes it with the task's reward. Three
instance-level wrappers capture, without changing what TRL computes:

- ``_generate_and_score_completions`` (``grpo_trainer.py:2324``): its output (prompt and completion ids
  and masks, advantages, old and reference per-token log-probs, ``num_items_in_batch``), plus the
  final hidden states of the policy and of the reference model on those sequences, computed right
  after it with the weights TRL used (no update happens in between);
- the reward function: the rewards TRL received for those completions;
- ``_compute_loss`` (``grpo_trainer.py:3020``): its inputs and loss, the final hidden states and the
  fused head's per-token log-probs of that forward (``retain_grad``), and the LM-head weight's gradient
  (a tensor hook, i.e. before gradient clipping) once the trainer has run the backward pass.

Checked per step (rows ``trl.grpo_step[k].<check>``, the table of ``rlspec check``):

- ``mask``: the completion mask covers exactly the completion tokens through the first EOS, the
  prompt mask exactly the (left-padded) prompt tokens, and the loss got that mask;
- ``rewards``: the rewards TRL used are the task's rewards of exactly the completions it sampled;
- ``advantages``: ``grpo_advantages`` of those rewards in the configured ``scale_rewards`` mode (TRL
  divides by ``std + 1e-4``: preset ``trl``);
- ``old_logp`` / ``ref_logp``: TRL's per-token log-probs of the sampling policy and of the reference
  model equal ``token_logprobs_from_hidden`` at the configured temperature, at the completion positions;
- ``logp``: the log-probs of the loss forward, the same way;
- ``loss``: the loss value and its gradients w.r.t. the per-token log-probs, the final hidden states
  and the LM-head weight equal the spec composition of the configured ``loss_type`` (through
  ``conformance.frameworks.trl.checks.compositions``). TRL's fused head never materialises the logits, so
  d loss/d logits is checked through its chain rule: d/d hidden = dz·W and d/d W = dzᵀ·h.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

import oracle
from conformance.frameworks.trl.checks import TOLERANCES, candidate, compositions, observed
from conformance.records.presets import preset_kwargs
from conformance.runner.composite import Candidate, composition_row
from conformance.runner.rows import RowResult, not_implemented_row
from conformance.tolerances import tolerance
from conformance.trainer_verify import expected_mask

DEFAULT_TRL_CONFIG: dict[str, Any] = dict(
    loss_type="dapo",  # TRL 1.16's default
    beta=0.04,  # exercises the reference model and the KL term
    num_iterations=2,  # each batch is used for two steps: TRL computes old log-probs, ratios move off 1
    temperature=0.7,  # exercises the temperature of sampling and scoring
    scale_rewards="group",
    num_generations=4,
    per_device_train_batch_size=8,  # 2 prompts x 4 completions per step
    learning_rate=1e-3,
    epsilon=0.2,
)


def _trl_env() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


@dataclass
class _Generation:
    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    advantages: torch.Tensor
    old_logp: torch.Tensor | None
    ref_logp: torch.Tensor | None
    hidden: torch.Tensor  # [B, T, D] policy, final norm output
    ref_hidden: torch.Tensor | None
    weight: torch.Tensor
    ref_weight: torch.Tensor | None
    rewards: list[float]
    reward_completion_ids: list[list[int]]
    prompts: list[str]


@dataclass
class _LossCapture:
    inputs: dict[str, Any]
    loss: torch.Tensor
    captured: dict[str, torch.Tensor] = field(default_factory=dict)


class TRLStepRun:
    """Builds the GRPOTrainer, trains it ``steps`` steps with the captures in place, and checks them."""

    def __init__(self, *, steps: int = 4, seed: int = 0, task_kind: str = "reverse", digits: int = 3,
                 **trl_config: Any) -> None:
        from refimpl.trainer.task import DigitTask

        self.steps = steps
        self.seed = seed
        self.task = DigitTask(task_kind, digits, digits)
        self.config = {**DEFAULT_TRL_CONFIG, **trl_config}
        self.config.setdefault("max_completion_length", digits + 2)
        self.generations: list[_Generation] = []
        self.losses: list[_LossCapture] = []
        self._reward_log: list[tuple[list[str], list[list[int]], list[float]]] = []
        self.trl_version = ""
        self.seconds = 0.0

    # -------------------------------------------------------------------------------------------
    def _reward(self, prompts: list[str], completions: list[str], completion_ids: list[list[int]], **_: Any) -> list[float]:
        rewards = []
        for p, ids in zip(prompts, completion_ids):
            digits = [int(x) for x in p.split() if x.isdigit()]
            rewards.append(float(self.task.score_tokens(digits, ids)[0]))
        self._reward_log.append((list(prompts), [list(c) for c in completion_ids], rewards))
        return rewards

    def run(self) -> "TRLStepRun":
        _trl_env()
        import datasets
        import transformers
        import trl
        from datasets import Dataset
        from trl import GRPOConfig, GRPOTrainer

        from refimpl.trainer.task import build_model, build_tokenizer

        transformers.utils.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
        datasets.disable_progress_bars()
        datasets.utils.logging.set_verbosity_error()
        self.trl_version = trl.__version__
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="rlspec-e2e-trl-") as tmp:
            model_dir = os.path.join(tmp, "tiny-llama")
            model = build_model(seed=self.seed, max_positions=64)
            tokenizer = build_tokenizer()
            model.save_pretrained(model_dir)
            tokenizer.save_pretrained(model_dir)
            G = self.config["num_generations"]
            prompts_per_step = self.config["per_device_train_batch_size"] // G
            n_prompts = max(prompts_per_step * self.steps, prompts_per_step)
            rng = np.random.default_rng(self.seed)
            texts = [self.task.prompt_text(d) for d in self.task.sample_prompts(n_prompts, rng)]
            args = GRPOConfig(
                output_dir=os.path.join(tmp, "run"), max_steps=self.steps, report_to=[], use_cpu=True, bf16=False,
                save_strategy="no", logging_strategy="no", disable_tqdm=True, seed=self.seed, **self.config,
            )
            trl_logger = logging.getLogger("trl")
            level = trl_logger.level
            trl_logger.setLevel(logging.ERROR)
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    trainer = GRPOTrainer(model=model_dir, reward_funcs=self._reward, args=args,
                                          train_dataset=Dataset.from_dict({"prompt": texts}), processing_class=tokenizer)
                    self._instrument(trainer)
                    with contextlib.redirect_stdout(io.StringIO()):  # the Trainer prints its log dicts
                        trainer.train()
            finally:
                trl_logger.setLevel(level)
            self.trainer_settings = {
                "temperature": float(trainer.temperature), "loss_type": trainer.loss_type,
                "generation": {k: trainer.generation_kwargs.get(k) for k in ("temperature", "top_k", "top_p", "min_p", "repetition_penalty")},
            }
        self.seconds = time.perf_counter() - t0
        return self

    def _instrument(self, trainer: Any) -> None:
        model = trainer.model
        weight = model.get_output_embeddings().weight
        state: dict[str, Any] = {"capture": None}

        def weight_grad(g: torch.Tensor) -> None:
            cap = state["capture"]
            if cap is not None and "grad_weight" not in cap.captured:
                cap.captured["grad_weight"] = g.detach().clone()

        weight.register_hook(weight_grad)
        original_gen = trainer._generate_and_score_completions
        original_loss = trainer._compute_loss

        def generate_and_score(inputs: Any) -> Any:
            n_log = len(self._reward_log)
            out = original_gen(inputs)
            prompts, comp_ids, rewards = self._reward_log[n_log] if len(self._reward_log) > n_log else ([], [], [])
            ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
            att = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
            with torch.no_grad():
                hidden = model.model(input_ids=ids, attention_mask=att).last_hidden_state
                ref_hidden = ref_w = None
                if trainer.ref_model is not None:
                    ref_hidden = trainer.ref_model.model(input_ids=ids, attention_mask=att).last_hidden_state
                    ref_w = trainer.ref_model.get_output_embeddings().weight.detach().clone()
            self.generations.append(_Generation(
                prompt_ids=out["prompt_ids"].detach().clone(), prompt_mask=out["prompt_mask"].detach().clone(),
                completion_ids=out["completion_ids"].detach().clone(), completion_mask=out["completion_mask"].detach().clone(),
                advantages=out["advantages"].detach().clone(),
                old_logp=None if out.get("old_per_token_logps") is None else out["old_per_token_logps"].detach().clone(),
                ref_logp=None if out.get("ref_per_token_logps") is None else out["ref_per_token_logps"].detach().clone(),
                hidden=hidden.detach().clone(), ref_hidden=None if ref_hidden is None else ref_hidden.detach().clone(),
                weight=weight.detach().clone(), ref_weight=ref_w, rewards=rewards, reward_completion_ids=comp_ids,
                prompts=prompts,
            ))
            return out

        def compute_loss(model_: Any, inputs: dict[str, Any]) -> torch.Tensor:
            cap = _LossCapture(inputs={k: (v.detach().clone() if isinstance(v, torch.Tensor) else v) for k, v in inputs.items()},
                               loss=torch.zeros(()))

            def keep_hidden(module: Any, args: Any, output: torch.Tensor) -> None:
                if output.requires_grad:
                    output.retain_grad()
                cap.captured["hidden"] = output

            def keep_per_token(module: Any, args: Any, output: Any) -> None:
                if getattr(output, "log_probs", None) is not None:
                    for name in ("log_probs", "entropy"):
                        t = getattr(output, name, None)
                        if t is not None:
                            if t.requires_grad:
                                t.retain_grad()
                            cap.captured[name] = t

            hooks = [model.model.norm.register_forward_hook(keep_hidden), model.register_forward_hook(keep_per_token)]
            state["capture"] = cap
            try:
                loss = original_loss(model_, inputs)
            finally:
                for h in hooks:
                    h.remove()
            cap.loss = loss
            cap.captured["weight"] = weight.detach().clone()
            self.losses.append(cap)
            return loss

        trainer._generate_and_score_completions = generate_and_score
        trainer._compute_loss = compute_loss

    # -------------------------------------------------------------------------------------------
    # checks
    # -------------------------------------------------------------------------------------------

    def rows(self) -> list[RowResult]:
        out: list[RowResult] = [self._sampling_row()]
        per_gen = self.config.get("num_iterations", 1) * self.config.get("steps_per_generation", 1) or 1
        for step, cap in enumerate(self.losses):
            gen_idx = step // per_gen
            gen = self.generations[gen_idx] if gen_idx < len(self.generations) else None
            if gen is not None:
                out += self._generation_rows(step, gen, fresh=step % per_gen == 0)
            out += self._loss_rows(step, cap)
        return out

    def _row(self, step: int, check: str, spec_id: str) -> RowResult:
        rid = f"trl.grpo_step[{step}].{check}"
        return RowResult(id=rid, spec_id=spec_id, function=rid, adapter="trl", status="pass", seeds=[self.seed], n_cases=1)

    def _compared(self, step: int, check: str, spec_id: str, got: Any, candidates: list[Candidate], tol: dict[str, Any],
                  note: str = "") -> RowResult:
        """A step's check by the runner's engine: TRL's values against the candidate compositions."""
        rid = f"trl.grpo_step[{step}].{check}"
        return composition_row(rid, spec_id, rid, "trl", got, candidates, tol, seed=self.seed, note=note)

    @staticmethod
    def _conventions(row: RowResult, ok_message: str, problems: list[str]) -> RowResult:
        """A check of the trainer's settings and masks (no numbers compared): FAIL listing what is off."""
        if problems:
            row.status = "fail"
            row.message = "\n".join(problems)
        else:
            row.message = ok_message
        return row

    def _sampling_row(self) -> RowResult:
        row = RowResult(id="trl.grpo.sampling", spec_id="logprob.token", function="trl.grpo.sampling", adapter="trl",
                        status="pass", seeds=[self.seed], n_cases=1)
        g = self.trainer_settings["generation"]
        tau = self.config["temperature"]
        problems = []
        if g.get("temperature") != tau or self.trainer_settings["temperature"] != tau:
            problems.append(f"temperature: generation {g.get('temperature')}, scoring {self.trainer_settings['temperature']}, configured {tau}")
        if g.get("top_k") not in (None, 0):
            problems.append(f"top_k={g['top_k']} truncates the sampling distribution")
        if g.get("top_p") not in (None, 1.0):
            problems.append(f"top_p={g['top_p']} truncates the sampling distribution")
        if g.get("min_p") not in (None, 0.0):
            problems.append(f"min_p={g['min_p']} truncates the sampling distribution")
        if g.get("repetition_penalty") not in (None, 1.0):
            problems.append(f"repetition_penalty={g['repetition_penalty']} changes the sampling distribution")
        return self._conventions(row, f"samples from softmax(z/{tau:g}) (no top-k/top-p/min-p/penalty): the distribution "
                                      "the log-probs describe", problems)

    def _spec_layout(self, x: torch.Tensor, P: int, mask: np.ndarray) -> np.ndarray:
        """[B, C] TRL completion array -> token-aligned [B, T] float64, 0 outside the mask."""
        B, T = mask.shape
        out = np.zeros((B, T))
        out[:, P:] = x.detach().to(torch.float64).numpy()
        return np.where(mask, out, 0.0)

    def _generation_rows(self, step: int, gen: _Generation, *, fresh: bool) -> list[RowResult]:
        from refimpl.trainer.task import EOS_ID, PAD_ID

        rows = []
        tau = float(self.config["temperature"])
        P = gen.prompt_ids.shape[1]
        ids = torch.cat([gen.prompt_ids, gen.completion_ids], dim=1).numpy()
        m = np.zeros(ids.shape, dtype=bool)
        m[:, P:] = gen.completion_mask.numpy().astype(bool)
        reused = "" if fresh else " (batch reused from the previous step's generation)"
        # --- masks ---------------------------------------------------------------------------
        row = self._row(step, "mask", "conventions")
        problems = []
        exp = expected_mask(ids, P, EOS_ID)
        if not np.array_equal(m, exp):
            b, t = np.argwhere(m != exp)[0]
            problems.append(f"completion_mask differs from the completion tokens through the first EOS at row {b}, position {t}")
        after = ~m & (np.arange(ids.shape[1]) >= P)
        if (ids[after] != PAD_ID).any():
            problems.append("a completion token after the first EOS is not padding")
        pm = gen.prompt_mask.numpy().astype(bool)
        if not np.array_equal(pm, gen.prompt_ids.numpy() != PAD_ID):
            problems.append("prompt_mask differs from the prompt's non-padding tokens")
        if (np.diff(pm.astype(int), axis=1) < 0).any():
            problems.append("prompt_mask is not left-padded")
        rows.append(self._conventions(row, f"completion mask = tokens through the first EOS; prompt mask = the left-padded "
                                           f"prompt{reused}", problems))
        # --- rewards -------------------------------------------------------------------------
        comp = gen.completion_ids.numpy()
        cm = gen.completion_mask.numpy().astype(bool)
        expected_rewards = []
        for b in range(comp.shape[0]):
            digits = [int(t) - 4 for t in gen.prompt_ids[b].tolist() if 4 <= t <= 13]
            expected_rewards.append(self.task.score_tokens(digits, comp[b][cm[b]].tolist())[0])
        if len(gen.rewards) != len(expected_rewards):
            rows.append(self._conventions(self._row(step, "rewards", "reward"), "",
                                          [f"{len(gen.rewards)} rewards for {len(expected_rewards)} completions"]))
        else:
            rows.append(self._compared(step, "rewards", "reward", lambda: {"rewards": np.float32(gen.rewards)},
                                       [Candidate("canonical", f"the task's rewards of the sampled completions (mean "
                                                  f"{np.mean(expected_rewards):.3f}){reused}",
                                                  lambda: {"rewards": expected_rewards})],
                                       {"value": tolerance("adv.grpo", "float32", "value")}))
        # --- advantages ------------------------------------------------------------------------
        r = np.asarray(gen.rewards, dtype=np.float32).astype(np.float64)
        G = int(self.config["num_generations"])
        scale = self.config["scale_rewards"]
        scale = {"true": "group", "false": "none", True: "group", False: "none"}.get(scale, scale)
        kw = preset_kwargs("trl", "grpo_advantages")
        formula = f"grpo_advantages(rewards, {G}, scale={scale!r}){reused}"
        rows.append(self._compared(
            step, "advantages", "adv.grpo", lambda: {"value": gen.advantages.to(torch.float64).numpy()},
            [Candidate("canonical", formula, lambda: {"value": oracle.grpo_advantages(r, G, scale=scale)}),
             Candidate(", ".join(f"{k}={v!r}" for k, v in kw.items()), formula,
                       lambda: {"value": oracle.grpo_advantages(r, G, scale=scale, **kw)}, preset="trl", kwargs=kw)],
            {"value": tolerance("adv.grpo", "float32", "value")}))
        # --- old / reference log-probs ------------------------------------------------------------
        for name, lp, hidden, W, spec in (("old_logp", gen.old_logp, gen.hidden, gen.weight, "logprob.fused"),
                                          ("ref_logp", gen.ref_logp, gen.ref_hidden, gen.ref_weight, "logprob.fused")):
            row = self._row(step, name, spec)
            if lp is None or hidden is None:
                row.status = "not_implemented"
                row.message = ("TRL computed none: beta = 0 (no reference model)" if name == "ref_logp"
                               else "TRL computed none: on-policy (num_iterations = 1), it uses the loss forward's own log-probs")
                rows.append(row)
                continue
            def expected(hidden: torch.Tensor = hidden, W: torch.Tensor = W) -> dict[str, Any]:
                return {"value": oracle.token_logprobs_from_hidden(hidden.to(torch.float64).numpy(),
                                                                   W.to(torch.float64).numpy(), ids, m, temperature=tau)}

            rows.append(self._compared(
                step, name, spec, lambda lp=lp: {"value": self._spec_layout(lp, P, m)},
                [Candidate("canonical", f"token_logprobs_from_hidden(temperature={tau:g}) at the completion tokens{reused}",
                           expected)],
                {"value": tolerance("logprob.fused", "float32", "value")}))
        return rows

    def _loss_rows(self, step: int, cap: _LossCapture) -> list[RowResult]:
        rows = []
        cfg = self.config
        tau = float(cfg["temperature"])
        inp = cap.inputs
        P, C = inp["prompt_ids"].shape[1], inp["completion_ids"].shape[1]
        B, T = inp["prompt_ids"].shape[0], P + C
        loss_mask = inp["completion_mask"] if inp.get("tool_mask") is None else inp["completion_mask"] * inp["tool_mask"]
        mask = np.zeros((B, T), dtype=bool)
        mask[:, P:] = loss_mask.numpy().astype(bool)
        ids = torch.cat([inp["prompt_ids"], inp["completion_ids"]], dim=1).numpy()
        cap_ = cap.captured
        hidden = cap_["hidden"].detach().to(torch.float64).numpy()
        W = cap_["weight"].to(torch.float64).numpy()

        def shifted(x: torch.Tensor | None) -> np.ndarray:
            out = np.zeros((B, T))
            if x is not None:
                out[:, 1:] = x.detach().to(torch.float64).numpy()
            return out

        logp = shifted(cap_["log_probs"]) * mask
        # --- current log-probs ---------------------------------------------------------------------
        rows.append(self._compared(
            step, "logp", "logprob.fused", lambda: {"value": logp},
            [Candidate("canonical", f"token_logprobs_from_hidden(temperature={tau:g}) in the loss forward",
                       lambda: {"value": oracle.token_logprobs_from_hidden(hidden, W, ids, mask, temperature=tau)})],
            {"value": tolerance("logprob.fused", "float32", "value")}))
        # --- loss ------------------------------------------------------------------------------------
        adv = inp["advantages"].detach().to(torch.float64).numpy()
        if adv.ndim == 2:
            adv = self._spec_layout(inp["advantages"], P, mask)
        old = inp.get("old_per_token_logps")
        on_policy = old is None
        old_logp = logp.copy() if on_policy else self._spec_layout(old, P, mask)
        ref = inp.get("ref_per_token_logps")
        eps = float(cfg.get("epsilon", 0.2))
        g_lp = cap_["log_probs"].grad
        g_ent = cap_["entropy"].grad if cap_.get("entropy") is not None else None
        g_h = cap_["hidden"].grad
        run = {
            "loss": float(cap.loss.detach()), "input_ids": ids, "mask": mask, "hidden": hidden, "weight": W,
            "logp": logp, "old_logp": old_logp, "ref_logp": None if ref is None else self._spec_layout(ref, P, mask),
            "advantages": adv, "num_items_in_batch": float(inp["num_items_in_batch"]),
            "grad_logp": shifted(g_lp) if g_lp is not None else np.zeros((B, T)),
            "grad_entropy": shifted(g_ent) if g_ent is not None else np.zeros((B, T)),
            "grad_hidden": np.zeros_like(hidden) if g_h is None else g_h.detach().to(torch.float64).numpy(),
            "grad_weight": cap_["grad_weight"].to(torch.float64).numpy() if "grad_weight" in cap_ else np.zeros_like(W),
            "temperature": tau, "epsilon_low": eps,
            "epsilon_high": float(cfg["epsilon_high"]) if cfg.get("epsilon_high") is not None else eps,
            "beta": float(cfg.get("beta", 0.0)), "loss_type": cfg.get("loss_type", "dapo"),
            "importance_sampling_level": cfg.get("importance_sampling_level", "token"), "delta": cfg.get("delta"),
            "entropy_coef": float(cfg.get("entropy_coef", 0.0) or 0.0),
            "max_completion_length": int(cfg["max_completion_length"]),
        }
        comps = compositions(run, on_policy=on_policy)
        if not comps:
            rid = f"trl.grpo_step[{step}].loss"
            rows.append(not_implemented_row(rid, "loss.*+agg", rid, "trl",
                                            f"no spec v1 composition for loss_type {run['loss_type']!r}"))
            return rows
        ratio = np.exp(np.where(mask, logp - old_logp, 0.0))[mask]
        ratios = f"(ratio in [{ratio.min():.3f}, {ratio.max():.3f}])" if ratio.size else "(no valid token)"
        rows.append(self._compared(step, "loss", comps[0].spec_id, lambda: observed(run),
                                   [candidate(run, c, comps) for c in comps], TOLERANCES, note=ratios))
        return rows


def run_trl_steps(*, steps: int = 4, seed: int = 0, **trl_config: Any) -> tuple[list[RowResult], TRLStepRun]:
    """Train TRL's GRPOTrainer ``steps`` steps with the captures and return (rows, the run)."""
    run = TRLStepRun(steps=steps, seed=seed, **trl_config).run()
    return run.rows(), run


__all__ = ["run_trl_steps", "TRLStepRun", "DEFAULT_TRL_CONFIG"]
