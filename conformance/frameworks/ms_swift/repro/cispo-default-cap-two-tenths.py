"""CISPO's default cap is an absolute 0.2 (ms-swift 4.6.0, finding cispo-default-cap-two-tenths).

loss_type "cispo" weights each token by `torch.clamp(coef_1, max=self.epsilon_high).detach()`
(swift/rlhf_trainers/grpo_trainer.py:1036-1038), an absolute cap on the ratio, and `epsilon_high` falls back to
`epsilon` = 0.2 when unset (:2139; rlhf_trainers/args_mixin.py:369 defaults it to None). So with the defaults every
on-policy token's weight is min(1, 0.2) = 0.2 and the gradient is a fifth of REINFORCE's; `epsilon_high=5.0` gives
weight 1. Reached with loss_type="cispo" and epsilon_high unset (TRL's bare default is the same cap).

Run: pip install ms-swift==4.6.0 trl==0.29.1 transformers==5.19.0 msgspec torch; python cispo-default-cap-two-tenths.py

Expected (spec cispo_token_loss, canonical relative bound, by hand): on-policy r = 1, the weight min(r, 1 + eps_high)
is 1, so the loss -sum(w A logp) / N over N = 2 tokens with A = [1, -2] has gradient -A / N = [-0.5, 1.0].
(The preset ms_swift, bound="absolute", eps_high=0.2, gives 0.2 * that: [-0.1, 0.2].)

Actual:
    default epsilon_high: 0.2
    grad, defaults: [-0.1, 0.2]
    grad, epsilon_high=5.0: [-0.5, 1.0]
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


lp, adv = torch.tensor([[-1.0, -2.0]]), torch.tensor([[1.0, -2.0]])
print("default epsilon_high:", trainer(1, loss_type="cispo").epsilon_high)
_, grad = loss({"loss_type": "cispo"}, lp, lp.clone(), adv)
print("grad, defaults:", fmt(grad[0]))
_, grad = loss({"loss_type": "cispo", "epsilon_high": 5.0}, lp, lp.clone(), adv)
print("grad, epsilon_high=5.0:", fmt(grad[0]))
