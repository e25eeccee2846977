"""SkyRL's response-level layout (skyrl 0.3.0): where its trainer puts a batch's responses, for the adapter and
the framework rows that call SkyRL's advantage estimators as its trainer does (``TR`` = ``skyrl/train/trainer.py``,
``S`` = ``skyrl/backends/skyrl_train/utils/ppo_utils.py``)."""

from __future__ import annotations

import numpy as np


class ResponseLayout:
    """SkyRL's response-level layout of a spec mask (``response_layout``): each row's response right-aligned
    in the ``[B, T]`` window, ``response_mask`` 1 over the whole response (first to last valid token, the
    masked tool or observation tokens inside included), 0 on the leading padding."""

    def __init__(self, mask: np.ndarray) -> None:
        B, T = mask.shape
        self.shift = np.zeros(B, dtype=int)
        self.response_mask = np.zeros((B, T), dtype=bool)
        self._span = np.zeros((B, T), dtype=bool)  # the response in the spec's columns
        for b in range(B):
            valid = np.flatnonzero(mask[b])
            if valid.size:
                first, last = int(valid[0]), int(valid[-1])
                self.shift[b] = T - 1 - last
                self._span[b, first:last + 1] = True
                self.response_mask[b, first + self.shift[b]:] = True

    def place(self, x: np.ndarray, *, inside: bool = False) -> np.ndarray:
        """`x` moved into the layout. With ``inside``, only the response's positions are kept (its masked
        ones included: the critic's value at a tool token) and the leading padding holds 0 (it feeds no
        response position of the backward recursion); else `x` moves as given (the caller zeroes what SkyRL
        holds at 0, e.g. the rewards off the last token, TR:1086-1091)."""
        out = np.zeros_like(x)
        for b in range(x.shape[0]):
            s = int(self.shift[b])
            row = np.where(self._span[b], x[b], 0) if inside else x[b]
            out[b, s:] = row[:x.shape[1] - s]
        return out

    def back(self, y: np.ndarray) -> np.ndarray:
        """`y` in the layout moved back to the spec's columns (0 where nothing maps)."""
        out = np.zeros_like(y)
        for b in range(y.shape[0]):
            s = int(self.shift[b])
            out[b, :y.shape[1] - s] = y[b, s:]
        return out


def response_layout(mask: np.ndarray) -> ResponseLayout:
    """Where SkyRL's trainer puts a batch's responses: ``convert_prompts_responses_to_batch_tensors``
    (``skyrl/train/dataset/preprocess.py:60-80``, :130) right-aligns every response-level tensor and sets
    ``response_mask`` to 1 on every response token (``TR:917``, the mask GAE gets at :1168-1170); the loss mask
    (the spec's mask) marks the tool and observation tokens inside a response 0. So the last valid token sits
    in the last column, whose next value is 0 (``S:1275``), and a masked token inside a response is a step."""
    return ResponseLayout(mask)


__all__ = ["ResponseLayout", "response_layout"]
