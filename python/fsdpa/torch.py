"""fsdpa as a PyTorch operator: ``torch.ops.fsdpa.attention``.

Registered with ``torch.library.custom_op`` and a fake (meta) implementation,
so ``torch.compile(fullgraph=True)`` sees one opaque node instead of a graph
break, and CUDA-graph capture (``mode="reduce-overhead"``, ``torch.cuda.graph``)
records its launch: the op allocates its outputs and workspace from torch's
allocator and launches on torch's current stream without synchronizing.
``attention()`` and the faces below call the operator when traced and its
implementation directly in eager mode (the operator's eager dispatch costs
more than the launch).

Three familiar faces over it:

- ``scaled_dot_product_attention(query, key, value, attn_mask, dropout_p,
  is_causal, scale, enable_gqa)``: torch.nn.functional's signature and
  semantics, including its *top-left* ``is_causal`` when Lq != Lk (fsdpa's
  own default is bottom-right).
- ``flash_attn_func(q, k, v, dropout_p, softmax_scale, causal, window_size,
  softcap, ...)``: FlashAttention's, on [batch, seq, heads, dim] tensors, with
  its bottom-right causal alignment.
- ``flash_attn_with_kvcache(q, k_cache, v_cache, cache_seqlens=...,
  block_table=..., ...)``: FlashAttention's decode entry on a dense or paged
  KV cache with per-sequence lengths (the cache is read, never appended to).

The operator also takes ``block_table`` and ``seq_lens_k`` (paged caches and
ragged batches, as ``fsdpa.attention``).

fsdpa has no backward yet: inputs that require grad raise
``fsdpa.Unsupported`` (under ``torch.no_grad()`` or ``inference_mode()`` they
run).
"""

from __future__ import annotations

import torch

from . import _api
from ._errors import InvalidArgument, Unsupported

__all__ = ["attention", "flash_attn_func", "flash_attn_with_kvcache",
           "scaled_dot_product_attention"]

_LAYOUTS = ("bhsd", "bshd")


def _attention_eager(q, k, v, mask, sinks, scale, causal, causal_align, window_left, softcap,
                     policy, return_lse, out_layout, block_table=None, seq_lens_k=None):
    """The operator's implementation: outputs from torch's allocator, the
    launch on torch's current stream (fsdpa.attention's fast path). Returns
    (out, lse), lse None unless return_lse."""
    out = None
    if out_layout == "bshd":  # [B, Lq, H, Dv] storage, viewed as [B, H, Lq, Dv]
        batch, heads, len_q = q.shape[:3]
        out = torch.empty((batch, len_q, heads, v.shape[3]), dtype=q.dtype,
                          device=q.device).transpose(1, 2)
    result = _api.attention(q, k, v, mask=mask, sinks=sinks, scale=scale, causal=causal,
                            causal_align=causal_align, window_left=window_left,
                            softcap=softcap or None, policy=policy, return_lse=return_lse,
                            out=out, block_table=block_table, seq_lens_k=seq_lens_k)
    if return_lse:
        out, lse = result
    else:
        out, lse = result, None
    if out_layout == "bshd":
        out = out.transpose(1, 2)
    return out, lse


@torch.library.custom_op("fsdpa::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  mask: torch.Tensor | None, sinks: torch.Tensor | None, scale: float | None,
                  causal: bool, causal_align: str, window_left: int | None, softcap: float,
                  policy: str | None, return_lse: bool, out_layout: str,
                  block_table: torch.Tensor | None = None,
                  seq_lens_k: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _attention_eager(q, k, v, mask, sinks, scale, causal, causal_align, window_left,
                                softcap, policy, return_lse, out_layout, block_table, seq_lens_k)
    if lse is None:  # the schema returns a tensor: an empty one
        lse = torch.empty((0,), dtype=torch.float32, device=q.device)
    return out, lse


@_attention_op.register_fake
def _attention_fake(q, k, v, mask, sinks, scale, causal, causal_align, window_left, softcap,
                    policy, return_lse, out_layout, block_table=None, seq_lens_k=None):
    # v is [B, Hkv, Lk, Dv], or a page pool [pages, page_size, Hkv, Dv]: Dv last either way.
    batch, heads, len_q = q.shape[:3]
    if out_layout == "bshd":
        out = q.new_empty((batch, len_q, heads, v.shape[3]))
    else:
        out = q.new_empty((batch, heads, len_q, v.shape[3]))
    lse = q.new_empty((batch, heads, len_q) if return_lse else (0,), dtype=torch.float32)
    return out, lse


def _check_inputs(*tensors):
    for name, tensor in tensors:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"fsdpa: {name}: expected a torch.Tensor, got {type(tensor).__name__}")
    _api._check_no_grad(tensors)  # the one autograd rule, shared with fsdpa.attention()


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float | None = None,
              causal: bool = False, causal_align: str = "bottom_right",
              window_left: int | None = None, mask: torch.Tensor | None = None,
              sinks: torch.Tensor | None = None, policy: str | None = None,
              softcap: float | None = None, return_lse: bool = False,
              out_layout: str = "bhsd", block_table: torch.Tensor | None = None,
              seq_lens_k: torch.Tensor | None = None):
    """fsdpa.attention() on torch tensors, through the registered operator
    (q [B, Hq, Lq, Dqk], k [B, Hkv, Lk, Dqk], v [B, Hkv, Lk, Dv], any strides;
    with block_table [B, max_pages] int32, k and v are page pools [pages,
    page_size, Hkv, D]; seq_lens_k [B] int32 gives each sequence's keys).
    out_layout "bhsd" returns out [B, Hq, Lq, Dv]; "bshd" returns it as
    [B, Lq, Hq, Dv], written in place without a transpose copy."""
    named = [("q", q), ("k", k), ("v", v)]
    named += [(n, t) for n, t in (("mask", mask), ("sinks", sinks), ("block_table", block_table),
                                  ("seq_lens_k", seq_lens_k)) if t is not None]
    _check_inputs(*named)
    _api._check_bool("causal", causal, " (the alignment is causal_align)")
    if out_layout not in _LAYOUTS:
        raise InvalidArgument(f"fsdpa: out_layout: expected 'bhsd' or 'bshd', got {out_layout!r}")
    args = (q, k, v, mask, sinks, None if scale is None else float(scale), causal, causal_align,
            window_left, float(softcap or 0.0), policy, return_lse, out_layout, block_table,
            seq_lens_k)
    # Traced (torch.compile), the call is the operator, one opaque node. In
    # eager mode the operator's dispatch would cost more than the launch
    # (tens of microseconds), so the same implementation runs directly; it
    # is just as capturable into a CUDA graph.
    if torch.compiler.is_compiling():
        out, lse = torch.ops.fsdpa.attention(*args)
    else:
        out, lse = _attention_eager(*args)
    return (out, lse) if return_lse else out


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:
    """torch.nn.functional.scaled_dot_product_attention on fsdpa's kernels:
    query [..., Hq, Lq, E], key [..., Hkv, Lk, E], value [..., Hkv, Lk, Ev]
    with one or two leading dims ([B, H, L, E] or [H, L, E]). As in torch,
    is_causal is top-left aligned (query i sees keys j <= i) and excludes
    attn_mask; attn_mask is bool (True = take part) or additive; Hq != Hkv
    needs enable_gqa=True. dropout_p must be 0 (no dropout in fsdpa)."""
    if dropout_p != 0.0:
        raise Unsupported(f"fsdpa: dropout_p: fsdpa has no dropout, got {dropout_p}")
    if is_causal and attn_mask is not None:
        raise InvalidArgument("fsdpa: attn_mask: must be None when is_causal is set (as in torch)")
    if query.dim() not in (3, 4):
        raise InvalidArgument(
            f"fsdpa: query: expected 3 or 4 dims ([H, L, E] or [B, H, L, E]), got {query.dim()}")
    unbatched = query.dim() == 3
    if unbatched:
        query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(0)
    if query.shape[1] != key.shape[1] and not enable_gqa:
        raise InvalidArgument(
            f"fsdpa: enable_gqa: query has {query.shape[1]} heads and key {key.shape[1]}; pass "
            "enable_gqa=True for grouped-query attention (as in torch)")
    out = attention(query, key, value, scale=scale, causal=is_causal, causal_align="top_left",
                    mask=attn_mask)
    return out.squeeze(0) if unbatched else out


def flash_attn_func(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False,
                    window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                    alibi_slopes: torch.Tensor | None = None, deterministic: bool = False,
                    return_attn_probs: bool = False) -> torch.Tensor:
    """FlashAttention's flash_attn_func on fsdpa's kernels: q [B, Lq, Hq, D],
    k [B, Lk, Hkv, D], v [B, Lk, Hkv, Dv] (any strides) -> out [B, Lq, Hq, Dv].
    causal and window_size are bottom-right aligned; window_size = (left,
    right), -1 for none, with right -1 or 0 (0 is causal). deterministic is accepted
    (fsdpa's forward is deterministic); dropout, ALiBi and the probabilities
    are not implemented and raise."""
    if dropout_p != 0.0:
        raise Unsupported(f"fsdpa: dropout_p: fsdpa has no dropout, got {dropout_p}")
    if alibi_slopes is not None:
        raise Unsupported("fsdpa: alibi_slopes: ALiBi is not implemented")
    if return_attn_probs:
        raise Unsupported("fsdpa: return_attn_probs: fsdpa never materializes the probabilities")
    causal, window_left = _flash_window(window_size, causal)
    _check_4d("[batch, seq, heads, dim]", ("q", q), ("k", k), ("v", v))
    return attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                     scale=softmax_scale, causal=causal, window_left=window_left,
                     softcap=softcap or None, out_layout="bshd")


def _flash_window(window_size, causal):
    """FlashAttention's (left, right) window as fsdpa's (causal, window_left):
    right 0 is causal, -1 none; left -1 none."""
    left, right = window_size
    if right == 0:  # keys up to the diagonal: what causal means
        causal = True
    elif right != -1:
        raise Unsupported(
            f"fsdpa: window_size: a right window other than -1 (none) or 0 (causal) is not "
            f"implemented, got {window_size!r}")
    return causal, None if left < 0 else left


def _check_4d(layout, *named):
    """Each (name, tensor) has 4 dims, laid out as `layout` says."""
    for name, tensor in named:
        if isinstance(tensor, torch.Tensor) and tensor.dim() != 4:
            raise InvalidArgument(f"fsdpa: {name}: expected 4 dims {layout}, got {tensor.dim()}")


def flash_attn_with_kvcache(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
                            k: torch.Tensor | None = None, v: torch.Tensor | None = None,
                            rotary_cos: torch.Tensor | None = None,
                            rotary_sin: torch.Tensor | None = None,
                            cache_seqlens: torch.Tensor | int | None = None,
                            cache_batch_idx: torch.Tensor | None = None,
                            cache_leftpad: torch.Tensor | None = None,
                            block_table: torch.Tensor | None = None,
                            softmax_scale: float | None = None, causal: bool = False,
                            window_size: tuple[int, int] = (-1, -1), softcap: float = 0.0,
                            rotary_interleaved: bool = True,
                            alibi_slopes: torch.Tensor | None = None, num_splits: int = 0,
                            return_softmax_lse: bool = False):
    """FlashAttention's flash_attn_with_kvcache on fsdpa's kernels, reading
    the cache: q [B, Lq, Hq, D]; k_cache / v_cache [B, Lk, Hkv, D] (dense) or,
    with block_table [B, max_blocks] int32, page pools [num_blocks,
    block_size, Hkv, D]; cache_seqlens (an int, or [B] int32) the keys of
    each sequence (default: all Lk, or the table's capacity). causal and
    window_size are bottom-right aligned to each sequence's own length.
    Returns out [B, Lq, Hq, Dv] (and the softmax LSE [B, Hq, Lq] float32 with
    return_softmax_lse). Appending new keys (k, v), rotary embedding,
    cache_batch_idx, cache_leftpad and ALiBi are not implemented and raise;
    num_splits must be 0 (fsdpa plans its own key splits)."""
    for name, value in (("k", k), ("v", v), ("rotary_cos", rotary_cos),
                        ("rotary_sin", rotary_sin), ("cache_batch_idx", cache_batch_idx),
                        ("cache_leftpad", cache_leftpad), ("alibi_slopes", alibi_slopes)):
        if value is not None:
            raise Unsupported(f"fsdpa: {name}: not implemented by flash_attn_with_kvcache "
                              "(fsdpa reads the cache as given; append to it before the call)")
    if num_splits != 0:
        raise Unsupported(f"fsdpa: num_splits: fsdpa plans its own key splits, pass 0 (got "
                          f"{num_splits!r})")
    causal, window_left = _flash_window(window_size, causal)
    _check_4d("[batch, seq, heads, dim]", ("q", q))
    _check_4d("[batch, seq, heads, dim] (paged: [blocks, block_size, heads, dim])",
              ("k_cache", k_cache), ("v_cache", v_cache))
    seq_lens_k = cache_seqlens
    if isinstance(cache_seqlens, int):
        seq_lens_k = torch.full((q.shape[0],), cache_seqlens, dtype=torch.int32, device=q.device)
    paged = block_table is not None
    # Page pools are fsdpa's layout already; a dense cache is viewed as [B, Hkv, Lk, D].
    k_view = k_cache if paged else k_cache.transpose(1, 2)
    v_view = v_cache if paged else v_cache.transpose(1, 2)
    return attention(q.transpose(1, 2), k_view, v_view, scale=softmax_scale, causal=causal,
                     window_left=window_left, softcap=softcap or None, out_layout="bshd",
                     return_lse=return_softmax_lse, block_table=block_table,
                     seq_lens_k=seq_lens_k)
