"""An overflowing ratio with a zero advantage gives a NaN loss (ms-swift 4.6.0, finding overflowing-ratio-zero-advantage-nan).

`GRPOTrainer._compute_loss_and_metrics` takes `coef_1 = torch.exp(log_importance_weights)` of the raw log-ratio
(swift/rlhf_trainers/grpo_trainer.py:1008-1025, no clamp) and then `-min(coef_1 * A, clip(coef_1) * A)`
(:1052-1058). In float32 a log-ratio above ~88.7 overflows to inf, and inf * 0 is NaN: one token with A = 0 (every
member of an all-equal reward group has A = 0) makes the step's loss and gradient NaN. The same holds for GSPO
(`importance_sampling_level="sequence"`, :1011-1015) when a row's mean log-ratio overflows. Reached with loss_type
grpo/bnpo/dr_grpo/dapo once the policy has moved since the rollout (num_iterations > 1, or steps_per_generation >
gradient_accumulation_steps; the old log-probs are computed at rollout time, :761-763).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python overflowing-ratio-zero-advantage-nan.py

Expected (spec ppo_token_loss / gspo_token_loss, by hand): a token with A = 0 contributes 0 whatever its ratio.
Token-level: token 0 has A = 0 (log-ratio 100), token 1 has r = 1 and A = 1, so its term is -A = -1; loss_type
"grpo" takes the row mean, -0.5, and the gradient w.r.t. logp is [0, -0.5]. GSPO: row 0 (A = 0, mean log-ratio
100) contributes 0 and row 1 (r = 1, A = 1) -1; the mean of the row means is -0.5.

Actual:
    token-level loss: nan
    token-level grad: [nan, -0.5]
    sequence-level (GSPO) loss: nan
"""

import tempfile
import types
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from swift.rl_core.data import GRPOBatch  # noqa: E402
from swift.rlhf_trainers.arguments import GRPOConfig  # noqa: E402
from swift.rlhf_trainers.grpo_trainer import GRPOTrainer  # noqa: E402


def trainer(batch_size, num_processes=1, grad_accum=1, **settings):
    """GRPOTrainer.__init__ needs a registered model, a template, datasets and a rollout engine, none of them loss
    math: a stand-in made with __new__ gets what __init__ would set, from ms-swift's own code where it computes it
    (GRPOConfig, _prepare_algorithm_params, _prepare_metrics); the rest as the mixins set it on a plain run."""
    args = GRPOConfig(output_dir=tempfile.mkdtemp(), use_cpu=True, report_to=[], num_generations=1,
                      per_device_train_batch_size=batch_size, gradient_accumulation_steps=grad_accum, **settings)
    t = GRPOTrainer.__new__(GRPOTrainer)
    t.args, t.beta = args, args.beta
    t._prepare_algorithm_params()
    t._prepare_metrics()
    t.num_generations, t.temperature = args.num_generations, args.temperature
    t.max_completion_length = args.max_completion_length
    t.disable_rollout_importance_sampling, t.dynamic_num_samples, t._has_teacher = False, False, False
    t.chord_sft_iterator, t.model_accepts_loss_kwargs, t.compute_loss_func = None, False, None
    t.model = torch.nn.Linear(1, 1).train()  # only model.training is read
    t.template = types.SimpleNamespace(padding_free=False, sequence_parallel_size=1)
    t.accelerator = types.SimpleNamespace(num_processes=num_processes, device=torch.device("cpu"),
                                          is_main_process=True, gather_for_metrics=lambda x: x)
    t.current_gradient_accumulation_steps = grad_accum
    return t


def loss(settings, logp, old, adv, mask=None, entropies=None, num_items=None, grad_accum=1, **batch_fields):
    """_compute_loss_and_metrics on one micro-batch; returns (loss, d loss / d logp)."""
    mask = torch.ones(logp.shape, dtype=torch.bool) if mask is None else mask
    t = trainer(logp.shape[0], grad_accum=grad_accum, **settings)
    logp = logp.clone().requires_grad_(True)
    # the model forward is replaced: it returns the log-probs the gradient is taken at (and the entropies)
    t._get_per_token_logps_and_entropies = lambda *a, **k: (logp, entropies)
    batch = GRPOBatch(completion_mask=mask, truncated_mask=torch.zeros(mask.shape[0], dtype=torch.bool),
                      seq_lengths=mask.sum(-1), old_per_token_logps=old, advantages=adv,
                      num_items_in_batch=mask.sum() if num_items is None else torch.tensor(float(num_items)),
                      **batch_fields)
    value, _ = t._compute_loss_and_metrics(t.model, {}, batch)
    value.backward()
    return value, logp.grad


def fmt(xs):
    return [round(float(x), 4) for x in xs]


value, grad = loss({"loss_type": "grpo"}, torch.tensor([[-1.0, -1.0]]), torch.tensor([[-101.0, -1.0]]),
                   torch.tensor([[0.0, 1.0]]))
print("token-level loss:", round(float(value), 4))
print("token-level grad:", fmt(grad[0]))
value, _ = loss({"loss_type": "grpo", "importance_sampling_level": "sequence"}, torch.full((2, 2), -1.0),
                torch.tensor([[-101.0, -101.0], [-1.0, -1.0]]), torch.tensor([[0.0, 0.0], [1.0, 1.0]]))
print("sequence-level (GSPO) loss:", round(float(value), 4))
