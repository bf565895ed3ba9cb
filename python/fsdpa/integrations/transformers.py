"""fsdpa as a Hugging Face transformers attention backend.

    import fsdpa.integrations.transformers as fsdpa_hf
    fsdpa_hf.register()
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fsdpa")

register() adds "fsdpa" to transformers' AttentionInterface and
AttentionMaskInterface. transformers applies its sdpa support check to any
name that contains "sdpa": for a model that opts out of sdpa (gpt-oss, whose
sinks sdpa cannot take) register another name, e.g.
register("fused_attention"), and load the model with that. The masks are the ones transformers makes for its
sdpa backend (boolean, True = attend, or None when the pattern is plain
causal), so padding, sliding windows and chunked layers mean exactly what they
mean for sdpa; on top of that fsdpa takes each layer's scaling, soft cap
(Gemma 2) and sinks (gpt-oss), reads grouped K/V heads without repeating them,
and writes the [batch, seq, heads, dim] output the model expects without a
transpose copy. Every call goes through torch.ops.fsdpa.attention, so a model
compiles and captures into CUDA graphs like with sdpa.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import torch as fsdpa_torch
from .._errors import Unsupported

__all__ = ["attention_forward", "register"]


def attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor,
                      value: torch.Tensor, attention_mask: torch.Tensor | None,
                      dropout: float = 0.0, scaling: float | None = None,
                      is_causal: bool | None = None, softcap: float | None = None,
                      s_aux: torch.Tensor | None = None, **_: Any):
    """transformers' attention-function signature: query [B, Hq, Lq, D], key
    and value [B, Hkv, Lk, D] (Hkv may divide Hq), attention_mask [B|1, 1|Hq,
    Lq, Lk] or None. Returns (out [B, Lq, Hq, Dv], None)."""
    if dropout and module.training:
        raise Unsupported(f"fsdpa: dropout: fsdpa has no dropout, got {dropout} in training")
    is_causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    # As sdpa does: no mask means the plain causal pattern (transformers drops
    # the mask only when Lq == Lk or Lq == 1) or none at all.
    causal = bool(query.shape[2] > 1 and attention_mask is None and is_causal)
    sinks = s_aux.to(torch.float32) if s_aux is not None else None
    out = fsdpa_torch.attention(query, key, value, scale=scaling, causal=causal,
                                causal_align="top_left", mask=attention_mask, sinks=sinks,
                                softcap=softcap or None, out_layout="bshd")
    return out, None


def register(name: str = "fsdpa") -> str:
    """Registers the backend under `name` (for attn_implementation=name) and
    returns the name."""
    from transformers import AttentionInterface  # noqa: PLC0415 (optional dependency)
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask  # noqa: PLC0415

    AttentionInterface.register(name, attention_forward)
    AttentionMaskInterface.register(name, sdpa_mask)
    return name
