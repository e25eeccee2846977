"""torchrl operations for the subprocess worker (``conformance/frameworks/subprocess_worker.py``).

Runs inside the torchrl environment (``rlspec frameworks install torchrl``); imports only torch, NumPy,
tensordict and torchrl. Every op calls the installed torchrl and returns what torchrl returns, in
torchrl's conventions (a ``TensorDict`` with ``("tokens", "full")``, ``("log_probs", "full")``,
``"advantage"`` ``[B, T, 1]``, ``("next", "ref_log_probs", "full")``; time-major ``[B, T, 1]`` trajectories
with ``done`` / ``terminated`` for the value functions; one-step trajectories with a group id for
``MCAdvantage``). The conversion to spec conventions happens in ``conformance/frameworks/torchrl/adapter.py``.

What is called (torchrl 0.14.1, tensordict 0.14.3; paths relative to the package root ``torchrl/``):

| op | torchrl |
|---|---|
| ``grpo_loss`` | ``objectives/llm/grpo.py``: ``GRPOLoss`` (:361), ``DAPO`` (:985) or ``CISPOLoss`` (:995), built with the given keyword arguments and called on the batch (``forward``, :664): ``_log_weight`` (:918), ``_compute_policy_objective`` (:769 / :1008), the entropy bonus (:735), ``_aggregate_loss_value`` (:784), ``_kl_to_ref`` (:868). Every field of the ``LLMLossOutput`` it returns. The actor is one of the two below |
| ``log_probs`` | the actor's ``LLMWrapperBase._get_rlhf_dist`` (``modules/llm/policies/common.py``:1513 -> :1332): ``LLMMaskedCategorical`` (``modules/distributions/discrete.py``:708), its ``log_prob`` (:831, ``F.cross_entropy`` with ``ignore_index``) and ``entropy`` (:894) |
| ``aggregate`` | ``GRPOLoss(aggregation=...)._aggregate_loss_value`` (grpo.py:784; token_mean through ``LossModule._reduce_loss``, ``objectives/common.py``:340-377) |
| ``kl_to_ref`` | ``GRPOLoss._kl_to_ref`` (grpo.py:868-916) on the batch, or (``per_token``) on each valid token alone (a batch of one token: its mean is its value) |
| ``value_function`` | ``objectives/value/functional.py``: ``generalized_advantage_estimate`` (:120), ``vec_generalized_advantage_estimate`` (:271), ``td_lambda_return_estimate`` (:791), ``vec_td_lambda_return_estimate`` (:1057), with Python float ``gamma`` / ``lmbda`` as a caller passes them |
| ``value_estimator`` | ``objectives/value/advantages.py``: the ``GAE`` (:1960) and ``TDLambdaEstimator`` (:1620) modules without a value network (``state_value`` and ``("next", "state_value")`` in the batch) |
| ``mc_advantage`` | ``objectives/llm/grpo.py::MCAdvantage`` (:1019): one ``inv`` call per one-step trajectory (the LLM collector's single-turn layout), group id ``b // grpo_size``; the advantages it writes when a group completes (:1500-1514, or :1565-1587 with ``trajectory_return``) |

The two actors (``actor`` parameter of ``grpo_loss``). GRPOLoss needs an actor with ``get_dist``
(:620-660); torchrl's LLM wrappers need a model server or transformers. Both actors are rlspec's own
test doubles; everything between the actor and the loss value is torchrl's:

- ``"logits"`` / ``"tiny"``: :class:`Policy`, a subclass of torchrl's ``LLMWrapperBase`` (``generate=False``,
  ``pad_output=True``) around a tiny causal model: ``"logits"`` returns the given ``logits`` ``[B, T, V]``
  (a leaf the worker differentiates), ``"tiny"`` is an embedding + linear head over a small vocabulary
  with seeded random weights (the op returns its logits and, with ``backward``, the gradient of the
  summed loss terms w.r.t. them after ``backward()``). The model's output at position t predicts token
  t + 1; the wrapper exposes it token-aligned (position t holds the logits that score token t, zeros at
  position 0), the layout torchrl's ``TransformersWrapper`` gives its distribution, and the masks torchrl's
  ``_get_dist_with_*`` read (``("masks", "all_assistant_mask")`` for ``masking_strategy="rlhf"``,
  ``("masks", "all_attention_mask")`` for ``"generic"``; ``"sft"``, the default, reads the batch's
  ``("tokens", "prompt")`` and ``("masks", "all_attention_mask")``). torchrl builds the
  ``LLMMaskedCategorical`` and every log-prob and entropy itself.
- ``"log_probs"``: :class:`LogProbActor`, an actor whose ``get_dist`` (the fallback path of
  ``_get_cur_log_prob``, grpo.py:636-640) returns a distribution holding given per-token log-probs (its
  ``log_prob`` returns them whatever the tokens), the mask, and given entropies (zeros when none): the
  real ``forward`` on exact log-probs, for the spec functions whose input is ``logp``.
"""

from __future__ import annotations

from typing import Any


def load() -> dict[str, Any]:
    import tensordict
    import torch
    import torch.nn.functional as F
    import torchrl
    import torchrl.objectives.llm.grpo as grpo_module
    from tensordict import TensorDict
    from torchrl.modules.llm import LLMWrapperBase
    from torchrl.objectives.llm.grpo import DAPO, CISPOLoss, GRPOLoss, MCAdvantage
    from torchrl.objectives.value import functional as value_functional
    from torchrl.objectives.value.advantages import GAE, TDLambdaEstimator

    losses = {"GRPOLoss": GRPOLoss, "DAPO": DAPO, "CISPOLoss": CISPOLoss}
    value_functions = ("generalized_advantage_estimate", "vec_generalized_advantage_estimate",
                       "td_lambda_return_estimate", "vec_td_lambda_return_estimate")

    class Given(torch.nn.Module):
        """A model whose output is the given logits ``[B, T, V]`` (position t predicts token t + 1)."""

        def __init__(self, logits: Any) -> None:
            super().__init__()
            self.logits = logits

        def forward(self, tokens: Any) -> Any:
            return self.logits

    class TinyLM(torch.nn.Module):
        """A tiny causal model: next-token logits from the current token (embedding, tanh, linear head)."""

        def __init__(self, vocab: int, hidden: int, seed: int, dtype: Any) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(seed)
            self.embed = torch.nn.Parameter(torch.randn(vocab, hidden, generator=g, dtype=dtype))
            self.head = torch.nn.Parameter(torch.randn(vocab, hidden, generator=g, dtype=dtype) * 1.5)

        def forward(self, tokens: Any) -> Any:
            return torch.tanh(self.embed[tokens.clamp_min(0)]) @ self.head.T

    class Policy(LLMWrapperBase):
        """torchrl's LLM wrapper interface around ``model``: token-aligned logits and the masks."""

        def __init__(self, model: Any, masks: dict[str, Any]) -> None:
            super().__init__()
            self.model = model
            self.generate = False
            self.pad_output = True
            self.in_keys = [("tokens", "full")]
            self.out_keys = ["logits"]
            self.masks = masks
            self.outputs: list[Any] = []

        def forward(self, tensordict: Any, *, tensordict_out: Any = None, logits_only: bool = False, **kwargs: Any) -> Any:
            raw = self.model(tensordict.get(("tokens", "full")))
            if raw.requires_grad:
                raw.retain_grad()
            self.outputs.append(raw)
            out = tensordict.copy() if tensordict_out is None else tensordict_out
            out.set("logits", F.pad(raw[:, :-1], (0, 0, 1, 0)))  # position t: the logits that score token t
            for key, value in self.masks.items():
                out.set(("masks", key), value)
            return out

    class GivenLogProbs(torch.distributions.Distribution):
        """A distribution that scores every action with the given per-token log-probs."""

        arg_constraints: dict[str, Any] = {}

        def __init__(self, log_probs: Any, mask: Any, entropy: Any) -> None:
            self._log_probs, self._mask, self._entropy = log_probs, mask, entropy
            super().__init__(batch_shape=log_probs.shape, validate_args=False)

        @property
        def mask(self) -> Any:
            return self._mask

        def log_prob(self, value: Any) -> Any:
            return self._log_probs

        def entropy(self) -> Any:
            return self._entropy

    class LogProbActor(torch.nn.Module):
        def __init__(self, log_probs: Any, mask: Any, entropy: Any) -> None:
            super().__init__()
            self.dist = GivenLogProbs(log_probs, mask, entropy)

        def get_dist(self, tensordict: Any, **kwargs: Any) -> Any:
            return self.dist

    def _masks(t: dict[str, Any]) -> dict[str, Any]:
        m = t["mask"].bool()
        return {"all_assistant_mask": m, "all_attention_mask": t.get("attention_mask", m).bool()}

    def grpo_loss(t: dict[str, Any], *, loss: str = "GRPOLoss", init: dict[str, Any] | None = None,
                  actor: str = "log_probs", tiny: dict[str, Any] | None = None, backward: bool = False) -> dict[str, Any]:
        init = dict(init or {})
        if isinstance(init.get("clip_epsilon"), list):
            init["clip_epsilon"] = tuple(init["clip_epsilon"])
        B, T = t["mask"].shape
        data: dict[Any, Any] = {("tokens", "full"): t["tokens"].long() if "tokens" in t else torch.zeros((B, T), dtype=torch.long),
                                ("log_probs", "full"): t["old_log_probs"], "advantage": t["advantage"].unsqueeze(-1)}
        if "ref_log_probs" in t:
            data[("next", "ref_log_probs", "full")] = t["ref_log_probs"]
        if "prompt" in t:  # masking_strategy="sft": the prompt tokens and the attention mask of the batch
            data[("tokens", "prompt")] = t["prompt"].long()
            data[("masks", "all_attention_mask")] = t["attention_mask"].bool()
        if actor == "log_probs":
            lp = t["log_probs"]
            h = t["entropy"] if "entropy" in t else torch.zeros_like(lp)
            net: Any = LogProbActor(lp, t["mask"].bool(), h)
        elif actor == "logits":
            net = Policy(Given(t["logits"]), _masks(t))
        elif actor == "tiny":
            model = TinyLM(int(tiny["vocab"]), int(tiny["hidden"]), int(tiny["seed"]), t["old_log_probs"].dtype)
            net = Policy(model, _masks(t))
        else:
            raise ValueError(f"unknown actor {actor!r}")
        module = losses[loss](net, **init)
        out = module(TensorDict(data, batch_size=[B]))
        result: dict[str, Any] = {}
        for key in ("loss_objective", "loss_entropy", "loss_kl_to_ref", "loss_kl_to_inference", "clip_fraction",
                    "kl_approx", "ESS", "entropy", "kl_to_ref", "kl_to_inference"):
            value = getattr(out, key, None)
            if value is not None:
                result[key] = value.squeeze(-1) if value.dim() == 3 else value
        if actor != "log_probs":
            result["model_logits"] = net.outputs[0].detach()
        if backward:  # one trainer step's backward: the summed loss terms, d/d(the model's logits)
            total = sum(v for k, v in result.items() if k.startswith("loss_"))
            total.backward()
            result["total"] = total.detach()
            result["grad_model_logits"] = net.outputs[0].grad
        result["clip_epsilon"] = [float(module.clip_epsilon_low), float(module.clip_epsilon_high)]
        result["clip_epsilon_dtype"] = str(module.clip_epsilon_low.dtype)
        return result

    def log_probs(t: dict[str, Any]) -> dict[str, Any]:
        B = t["mask"].shape[0]
        net = Policy(Given(t["logits"]), _masks(t))
        data = TensorDict({("tokens", "full"): t["tokens"].long()}, batch_size=[B])
        dist = net._get_rlhf_dist(data)
        return {"logp": dist.log_prob(t["tokens"].long()), "entropy": dist.entropy(), "dist": type(dist).__name__}

    def aggregate(t: dict[str, Any], *, aggregation: str) -> dict[str, Any]:
        module = GRPOLoss(None, aggregation=aggregation)
        return {"loss": module._aggregate_loss_value(t["value"].unsqueeze(-1), t["mask"].bool())}

    def kl_to_ref(t: dict[str, Any], *, per_token: bool = False, coeff: float = 1.0) -> dict[str, Any]:
        module = GRPOLoss(None, kl_to_ref_coeff=coeff)
        cur, ref, m = t["log_probs"], t["ref_log_probs"], t["mask"].bool()
        if not per_token:
            loss, kl = module._kl_to_ref(TensorDict({"_cur_log_prob": cur}, batch_size=[cur.shape[0]]),
                                         ref_log_prob=ref, mask=m)
            return {"loss": loss, "kl": kl}
        out = torch.zeros_like(cur)
        rows = []
        for b, s in m.nonzero().tolist():
            one = TensorDict({"_cur_log_prob": cur[b, s].reshape(1, 1)}, batch_size=[1])
            rows.append(module._kl_to_ref(one, ref_log_prob=ref[b, s].reshape(1, 1))[1])
        if rows:
            out = out.index_put(tuple(m.nonzero().T), torch.stack(rows))
        return {"kl": out}

    def value_function(t: dict[str, Any], *, name: str, gamma: float, lmbda: float) -> dict[str, Any]:
        if name not in value_functions:
            raise ValueError(f"unknown value function {name!r}")
        fn = getattr(value_functional, name)
        done, terminated = t["done"].bool(), t["terminated"].bool()
        if name.endswith("generalized_advantage_estimate"):
            adv, target = fn(gamma, lmbda, t["state_value"], t["next_state_value"], t["reward"], done, terminated)
            return {"advantage": adv, "value_target": target}
        ret = fn(gamma, lmbda, t["next_state_value"], t["reward"], done, terminated)
        return {"value_target": ret, "advantage": ret - t["state_value"]}

    def value_estimator(t: dict[str, Any], *, name: str, gamma: float, lmbda: float, vectorized: Any = None) -> dict[str, Any]:
        B, T = t["reward"].shape[:2]
        kw = {} if vectorized is None else {"vectorized": bool(vectorized)}
        module = (GAE if name == "GAE" else TDLambdaEstimator)(gamma=gamma, lmbda=lmbda, value_network=None, **kw)
        td = TensorDict({"state_value": t["state_value"],
                         "next": {"state_value": t["next_state_value"], "reward": t["reward"],
                                  "done": t["done"].bool(), "terminated": t["terminated"].bool()}}, batch_size=[B, T])
        module(td)
        return {"advantage": td["advantage"], "value_target": td["value_target"], "gamma_dtype": str(module.gamma.dtype),
                "vectorized": bool(module.vectorized)}

    def mc_advantage(t: dict[str, Any], *, grpo_size: int, trajectory_return: Any = None) -> dict[str, Any]:
        transform = MCAdvantage(grpo_size=grpo_size, prompt_key="group_id", trajectory_return=trajectory_return)
        rewards = t["rewards"]
        out = []
        for b in range(rewards.shape[0]):
            traj = TensorDict({"group_id": torch.tensor([b // grpo_size]),
                               "next": {"reward": rewards[b].reshape(1, 1), "done": torch.ones(1, 1, dtype=torch.bool)}},
                              batch_size=[1])
            written = transform.inv(traj)
            if written is not None:
                out.append(written["advantage"].reshape(-1))
        adv = torch.cat(out) if out else rewards.new_zeros((0,))
        return {"advantages": adv, "queued": transform.queued_trajectories}

    ops = {"grpo_loss": grpo_loss, "log_probs": log_probs, "aggregate": aggregate, "kl_to_ref": kl_to_ref,
           "value_function": value_function, "value_estimator": value_estimator, "mc_advantage": mc_advantage}
    info = {"grpo": grpo_module.__file__, "functional": value_functional.__file__,
            "tensordict": tensordict.__version__}
    return {"version": torchrl.__version__, "ops": ops, "info": info}
