"""attention(), plan(), prepare(), support_matrix(), version(): the public
functions."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import numbers
import operator
import sys
from typing import Any

from . import _arrays, _capi
from ._errors import InvalidArgument, Unsupported

_CAUSAL_ALIGN = {
    "bottom_right": _capi.CAUSAL_ALIGN_BOTTOM_RIGHT,
    "bottom-right": _capi.CAUSAL_ALIGN_BOTTOM_RIGHT,
    "top_left": _capi.CAUSAL_ALIGN_TOP_LEFT,
    "top-left": _capi.CAUSAL_ALIGN_TOP_LEFT,
}
_POLICY = {
    None: _capi.POLICY_DEFAULT,
    "auto": _capi.POLICY_AUTO,
    "fused": _capi.POLICY_FUSED,
    "unfused": _capi.POLICY_UNFUSED,
}
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _check_bool(name, value, note=""):
    """bool or numpy.bool_, nothing else (no ints, no strings)."""
    kind = type(value)
    if kind is not bool and not (kind.__module__ == "numpy" and kind.__name__ == "bool_"):
        raise InvalidArgument(f"fsdpa: {name}: expected a bool, got {value!r}{note}")


def _options(scale, causal, causal_align, window_left, policy, allow_tf32, softcap=None):
    o = _capi.Options()
    o.policy = _capi.POLICY_DEFAULT
    if scale is not None:
        try:
            o.scale = float(scale)
        except (TypeError, ValueError):
            raise InvalidArgument(f"fsdpa: scale: expected a number, got {scale!r}") from None
        o.has_scale = 1
    # A string here was once taken as True: causal="top_left" ran bottom-right.
    _check_bool("causal", causal, " (the alignment is causal_align)")
    o.causal = 1 if causal else 0
    if not isinstance(causal_align, str) or causal_align not in _CAUSAL_ALIGN:
        raise InvalidArgument(
            f"fsdpa: causal_align: expected 'bottom_right' or 'top_left', got {causal_align!r}")
    o.causal_align = _CAUSAL_ALIGN[causal_align]
    if window_left is not None:
        try:
            window = operator.index(window_left)
        except TypeError:
            raise InvalidArgument(
                f"fsdpa: window_left: expected an integer, got {window_left!r}") from None
        if not _INT64_MIN <= window <= _INT64_MAX:
            raise InvalidArgument(f"fsdpa: window_left: {window} does not fit in 64 bits")
        o.has_window = 1
        o.window_left = window
    if not (policy is None or isinstance(policy, str)) or policy not in _POLICY:
        raise InvalidArgument(
            f"fsdpa: policy: expected 'auto', 'fused', 'unfused' or None, got {policy!r}")
    o.policy = _POLICY[policy]
    _check_bool("allow_tf32", allow_tf32)
    o.allow_tf32 = 1 if allow_tf32 else 0
    if softcap is not None:
        if isinstance(softcap, bool) or not isinstance(softcap, numbers.Real):
            raise InvalidArgument(f"fsdpa: softcap: expected a number, got {softcap!r}")
        o.softcap = float(softcap)
    return o


class _Call:
    """The fsdpa_tensors of one call, with every array it points into kept
    alive, and the outputs (allocated here unless given)."""

    def __init__(self, q, k, v, mask, sinks, out, return_lse, block_table=None, seq_lens_k=None):
        _check_bool("return_lse", return_lse)
        self.q = _arrays.view("q", q)
        k_view = _arrays.view("k", k)
        v_view = _arrays.view("v", v)
        if out is None:
            # When q or v has the wrong rank the library names it before it
            # looks at out, so any placeholder shape will do.
            four_d = len(q.shape) == 4 and len(v.shape) == 4
            shape = (*q.shape[:3], v.shape[3]) if four_d else (0, 0, 0, 0)
            out = _arrays.empty_like_kind(q, shape, like_view=self.q)
        self.out = out
        out_view = _arrays.view("out", out, writable=True)
        self.lse = None
        self.views = [self.q, k_view, v_view, out_view]
        self.struct = _capi.Tensors(self.q.struct, k_view.struct, v_view.struct, out_view.struct)
        if mask is not None:
            mask_view = _arrays.view("mask", mask, rank_at_least=4)
            self.views.append(mask_view)
            self.struct.mask = ctypes.pointer(mask_view.struct)
        if sinks is not None:
            sinks_view = _arrays.view("sinks", sinks)
            self.views.append(sinks_view)
            self.struct.sinks = ctypes.pointer(sinks_view.struct)
        for name, array in (("block_table", block_table), ("seq_lens_k", seq_lens_k)):
            if array is not None:
                index_view = _arrays.view(name, array)
                self.views.append(index_view)
                setattr(self.struct, name, ctypes.pointer(index_view.struct))
        if return_lse:
            shape = tuple(q.shape[:3]) if len(q.shape) == 4 else (0, 0, 0)
            self.lse = _arrays.empty_like_kind(q, shape, float32=True, like_view=self.q)
            lse_view = _arrays.view("lse", self.lse, writable=True)
            self.views.append(lse_view)
            self.struct.lse = ctypes.pointer(lse_view.struct)


def _check_no_grad(arrays):
    """Raises when torch would record these inputs for autograd: fsdpa has no
    backward yet, and an output silently without a gradient is worse."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.is_grad_enabled():
        return
    for name, array in arrays:
        if isinstance(array, torch.Tensor) and array.requires_grad:
            raise Unsupported(
                f"fsdpa: autograd: {name} requires grad, and fsdpa has no backward yet; run it "
                "under torch.no_grad() or torch.inference_mode(), or pass detached tensors")


def attention(q: Any, k: Any, v: Any, *, scale: float | None = None, causal: bool = False,
              causal_align: str = "bottom_right", window_left: int | None = None,
              mask: Any = None, sinks: Any = None, policy: str | None = None,
              allow_tf32: bool = False, softcap: float | None = None, return_lse: bool = False,
              out: Any = None, block_table: Any = None, seq_lens_k: Any = None) -> Any:
    """Scaled-dot-product attention (docs/design.md).

    q [B, Hq, Lq, Dqk], k [B, Hkv, Lk, Dqk], v [B, Hkv, Lk, Dv]: numpy arrays
    (float16, float32, ml_dtypes.bfloat16), torch tensors (float16, bfloat16,
    float32; CPU, or CUDA on torch's current stream) or any object with
    __dlpack__ and __dlpack_device__ (CuPy on its current stream, JAX, ...),
    any strides. mask: [B|1, Hq|1, Lq, Lk] (fewer dims broadcast), bool (True
    = keep) or additive float. sinks: [Hq] float32. softcap: a logit soft cap
    c > 0 (Gemma 2: s = c * tanh(s / c) after the scale, before masks); None
    or 0 for none. policy: "auto", "fused", "unfused" or None (the
    FSDPA_POLICY environment variable, else auto).

    A paged KV cache: k [num_pages, page_size, Hkv, Dqk] and v [num_pages,
    page_size, Hkv, Dv] page pools with block_table [B, max_pages] int32 (key
    j of sequence b is row j % page_size of page block_table[b, j //
    page_size]). seq_lens_k [B] int32 (paged or dense k/v): sequence b has
    that many keys, each at most Lk (max_pages * page_size when paged);
    causal alignment and windows use each sequence's own length.

    Returns out [B, Hq, Lq, Dv] in q's framework (written into `out` when
    given), or (out, lse) with lse [B, Hq, Lq] float32 when return_lse.

    A repeated call with the same shapes, strides, dtypes, devices, options
    and environment reuses its plan (a bounded cache) and only launches.
    """
    if type(return_lse) is not bool:
        _check_bool("return_lse", return_lse)
    if (scale is None and causal is False and window_left is None and policy is None
            and allow_tf32 is False and softcap is None and causal_align == "bottom_right"):
        options_key = _DEFAULT_OPTIONS_KEY
    else:
        options_key = (scale, type(scale), causal, type(causal), causal_align, window_left,
                       type(window_left), policy, allow_tf32, type(allow_tf32), softcap,
                       type(softcap))
    fast = _fast_attention(q, k, v, mask, sinks, out, return_lse, options_key, block_table,
                           seq_lens_k)
    if fast is not None:
        return fast
    options = _options(scale, causal, causal_align, window_left, policy, allow_tf32, softcap)
    _check_no_grad((("q", q), ("k", k), ("v", v)))
    call = _Call(q, k, v, mask, sinks, out, return_lse, block_table, seq_lens_k)
    lib = _capi.library()
    stream = _arrays.current_stream(call.q)
    _capi.check(lib.fsdpa_attention(ctypes.addressof(call.struct), ctypes.byref(options), stream))
    result = call.out if out is not None else _arrays.in_framework_of(q, call.out)
    if return_lse:
        return result, _arrays.in_framework_of(q, call.lse)
    return result


# ------------------------------------------------------------------ fast path
# attention() on numpy arrays or torch tensors looks its call up by a key of
# everything the fsdpa_tensors struct depends on: per array its type, shape,
# strides, dtype, device and base address modulo 16 (the row alignment); and
# the options with their types (so that causal=1 is not served by the entry
# of causal=True). A hit calls fsdpa_attention_data on the entry's layout
# (its fsdpa_tensors) with the new arrays' data pointers: the library's own
# plan cache serves the plan (its key has the environment variables planning
# reads) and it allocates the workspace (stream-ordered on the GPU); it
# checks the tensors all the same. While torch captures a CUDA graph the
# workspace comes from torch's allocator instead (its graph pool) and the
# entry's plan for the current environment runs.
#
# Torch tensors go first to the compiled torch binding where it was built
# (_capi.torch_native): one call that reads the layouts, allocates the
# outputs and calls fsdpa_attention, with no key. What it hands back (graph
# capture, empty tensors, ...) takes the keyed path.

_CACHE_CAPACITY = 256
_plans: dict = {}
# attention()'s options_key for its default options (the common call).
_DEFAULT_OPTIONS_KEY = (None, type(None), False, bool, "bottom_right", None, type(None), None,
                        False, bool, None, type(None))


# The torch binding's options, by options_key: (fsdpa_options, its address).
# A call holds its pair while it runs, so dropping the dict's entries (when
# it outgrows the cache's capacity) frees none in use.
_native_options: dict = {}


def _options_of_key(options_key):
    """The fsdpa_options of attention()'s options_key (raising for bad ones)."""
    scale, _, causal, _, causal_align, window_left, _, policy, allow_tf32, _, softcap, _ = (
        options_key)
    return _options(scale, causal, causal_align, window_left, policy, allow_tf32, softcap)


def _new_native_options(options_key):
    options = _options_of_key(options_key)
    pair = (options, ctypes.addressof(options))
    if len(_native_options) >= _CACHE_CAPACITY:
        _native_options.clear()
    _native_options[options_key] = pair
    return pair


def _remember(key, entry):
    _plans[key] = entry
    while len(_plans) > _CACHE_CAPACITY:  # drop the oldest (dicts keep insertion order)
        try:
            _plans.pop(next(iter(_plans)), None)
        except (StopIteration, RuntimeError):  # emptied or resized by another thread
            break


def _fast_attention(q, k, v, mask, sinks, out, return_lse, options_key, block_table=None,
                    seq_lens_k=None):
    """attention() through the cache for numpy arrays or torch tensors only
    (exact types, no subclasses); None when the call takes the general path."""
    kind = type(q)
    if type(k) is not kind or type(v) is not kind:
        return None
    arrays = (q, k, v, mask, sinks, out, block_table, seq_lens_k)
    optional = (mask is not None or sinks is not None or out is not None
                or block_table is not None or seq_lens_k is not None)
    if optional:
        for array in arrays[3:]:
            if array is not None and type(array) is not kind:
                return None
    torch = sys.modules.get("torch")
    if torch is not None and kind is torch.Tensor:
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            return None  # the general path raises
        native = _capi.torch_native()
        if native is not None:
            options = _native_options.get(options_key) or _new_native_options(options_key)
            result = native.attention(q, k, v, options[1], return_lse, mask, sinks, out,
                                      block_table, seq_lens_k)
            if result is not None:
                return result  # else a case the binding hands back (_torch_native.cpp)
        # The device as three cheap reads rather than a torch.device object:
        # CPU (True, False, -1), cuda:n (False, True, n); any other type
        # matches no entry (the general path refuses it).
        q_pointer, k_pointer, v_pointer = q.data_ptr(), k.data_ptr(), v.data_ptr()
        parts = [kind, return_lse, options_key,
                 (q.shape, q.stride(), q.dtype, q.is_cpu, q.is_cuda, q.get_device(),
                  q_pointer & 15),
                 (k.shape, k.stride(), k.dtype, k.is_cpu, k.is_cuda, k.get_device(),
                  k_pointer & 15),
                 (v.shape, v.stride(), v.dtype, v.is_cpu, v.is_cuda, v.get_device(),
                  v_pointer & 15)]
        pointers = [q_pointer, k_pointer, v_pointer, 0, 0, 0, 0, 0, 0]
        if optional:
            for index in range(3, 8):
                array = arrays[index]
                if array is None:
                    parts.append(None)
                    continue
                pointer = array.data_ptr()
                parts.append((array.shape, array.stride(), array.dtype, array.is_cpu,
                              array.is_cuda, array.get_device(), pointer & 15))
                pointers[index] = pointer
    else:
        numpy = sys.modules.get("numpy")
        if numpy is None or kind is not numpy.ndarray:
            return None
        parts, pointers = [kind, return_lse, options_key], []
        for array in arrays:
            if array is None:
                parts.append(None)
                pointers.append(0)
                continue
            pointer = array.ctypes.data
            parts.append((array.shape, array.strides, array.dtype, pointer & 15,
                          array is out and array.flags.writeable))
            pointers.append(pointer)
        pointers.append(0)  # lse's, once run() allocates it
    key = tuple(parts)
    entry = _plans.get(key)
    if entry is None:
        entry = _Entry(q, k, v, mask, sinks, out, return_lse, block_table, seq_lens_k,
                       _options_of_key(options_key))
        _remember(key, entry)
    return entry.run(q, pointers, out)


class _Block(ctypes.Structure):
    """An fsdpa_tensors with the optional views it points to, in one buffer."""

    _fields_ = [("tensors", _capi.Tensors), ("mask", _capi.Tensor), ("sinks", _capi.Tensor),
                ("lse", _capi.Tensor), ("block_table", _capi.Tensor),
                ("seq_lens_k", _capi.Tensor)]


# The same buffer as 8-byte words, for writing its pointers one by one: every
# pointer of it sits at a multiple of 8 (checked here, not by assert, which
# python -O drops).
_OPTIONAL_NAMES = ("mask", "sinks", "lse", "block_table", "seq_lens_k")
if not (all(getattr(_capi.Tensors, name).offset % 8 == 0 for name in _OPTIONAL_NAMES)
        and _capi.Tensor.data.offset % 8 == 0
        and ctypes.sizeof(_capi.Tensor) % 8 == 0 and ctypes.sizeof(_capi.Tensors) % 8 == 0):
    raise ImportError("fsdpa: internal: fsdpa_tensors pointers are not 8-byte aligned")
_Words = ctypes.c_uint64 * (ctypes.sizeof(_Block) // 8)


def _field_offset(*path):
    offset, struct = 0, _Block
    for name in path:
        field = getattr(struct, name)
        offset += field.offset
        struct = dict(struct._fields_)[name]
    return offset


_DATA = {name: _field_offset("tensors", name, "data") for name in ("q", "k", "v", "out")}
_OPTIONAL = {name: (_field_offset("tensors", name), _field_offset(name),
                    _field_offset(name, "data")) for name in _OPTIONAL_NAMES}
# Where _Entry.run finds each optional view's data pointer, and those of
# the views present, in fsdpa_attention_data's order.
_POINTER_INDEX = {"mask": 3, "sinks": 4, "lse": 8, "block_table": 6, "seq_lens_k": 7}
_Optional = ctypes.c_void_p * len(_OPTIONAL_NAMES)


class _Plan:
    """An fsdpa_plan handle, destroyed with its last reference (an entry
    dropped from the cache while another thread runs it stays alive)."""

    __slots__ = ("handle", "lib")

    def __init__(self, lib, struct_address, options):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        _capi.check(lib.fsdpa_plan_create(struct_address, ctypes.byref(options),
                                          ctypes.byref(self.handle)))

    def __del__(self):
        if self.handle:
            self.lib.fsdpa_plan_destroy(self.handle)


class _Entry:
    """One cached call: its options, its layout (an fsdpa_tensors whose data
    each run replaces, fsdpa_attention_data), how to allocate the outputs of
    new arrays of that layout; and, for runs under CUDA-graph capture, its
    plan."""

    __slots__ = ("planned", "options", "options_address", "block", "layout", "optional", "lib",
                 "new_out", "new_lse", "pointer_of", "stream", "capturing")

    def __init__(self, q, k, v, mask, sinks, out, return_lse, block_table, seq_lens_k,
                 options):
        self.lib = _capi.library()
        self.options = options
        self.options_address = ctypes.addressof(options)
        self.new_out = self.new_lse = None
        if len(q.shape) == 4 and len(v.shape) == 4:
            self.new_out, new_lse = _allocators(q, (*q.shape[:3], v.shape[3]))
            if return_lse:
                self.new_lse = new_lse
        if out is None and self.new_out is not None:
            out = self.new_out(q)  # the layout's out has the layout of every run's
        call = _Call(q, k, v, mask, sinks, out, return_lse, block_table, seq_lens_k)
        # The layout: the call's views in one buffer, its optional views'
        # pointers into that buffer.
        self.block = _Block()
        self.block.tensors = call.struct
        self.layout = ctypes.addressof(self.block)
        words = _Words.from_buffer(self.block)
        present = [name for name in _OPTIONAL_NAMES if getattr(call.struct, name)]
        for name in present:
            setattr(self.block, name, getattr(call.struct, name).contents)
            words[_OPTIONAL[name][0] // 8] = self.layout + _OPTIONAL[name][1]
        # Where run() finds the optional views' data (None: there are none).
        self.optional = (tuple(_POINTER_INDEX[name] if name in present else None
                               for name in _OPTIONAL_NAMES) if present else None)
        # Planned here, so that a call the library refuses raises before the
        # entry is cached; a plan is made for the environment it runs under.
        self.planned = self._plan(self.layout)
        self.stream = self.capturing = None
        if _arrays.is_torch(q):
            torch = sys.modules["torch"]
            self.pointer_of = torch.Tensor.data_ptr
            if q.is_cuda:
                raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
                self.stream = (functools.partial(raw, q.get_device()) if raw is not None else
                               functools.partial(_arrays.torch_stream, q.get_device()))
                self.capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing",
                                         torch.cuda.is_current_stream_capturing)
        else:
            self.pointer_of = _arrays.data_pointer

    def _plan(self, tensors_address):
        """(environment, plan, workspace bytes) for the environment now."""
        environment = _capi.environment()
        plan = _Plan(self.lib, tensors_address, self.options)
        return environment, plan, _plan_info(self.lib, plan.handle).workspace_bytes

    def run(self, q, pointers, out):
        """Launches on new arrays of the entry's layout: `pointers` are the
        data addresses of q, k, v, mask, sinks, out, block_table, seq_lens_k
        and lse (0 for absent ones; lse's and out's set here when run()
        allocates them)."""
        if out is None:
            out = self.new_out(q)
            pointers[5] = self.pointer_of(out)
        lse = None
        if self.new_lse is not None:
            lse = self.new_lse(q)
            pointers[8] = self.pointer_of(lse)
        optional = None
        if self.optional is not None:
            optional = _Optional(*[0 if i is None else pointers[i] for i in self.optional])
        if self.stream is None:
            stream = None
        else:
            stream = self.stream()
            if self.capturing():
                return self._run_captured(q, pointers, optional, stream, out, lse)
        status = self.lib.fsdpa_attention_data(self.layout, pointers[0], pointers[1],
                                               pointers[2], pointers[5], optional,
                                               self.options_address, stream)
        if status:
            _capi.check(status)
        return (out, lse) if lse is not None else out

    def _run_captured(self, q, pointers, optional, stream, out, lse):
        """A run while torch captures a CUDA graph: the plan of the current
        environment on the layout with this run's data, its workspace from
        torch's allocator (the graph's pool), fresh each run (runs of two
        CPU threads overlap)."""
        block = _Block.from_buffer_copy(self.block)
        words = _Words.from_buffer(block)
        base = ctypes.addressof(block)
        for name, index in zip(("q", "k", "v", "out"), (0, 1, 2, 5)):
            words[_DATA[name] // 8] = pointers[index]
        for i, name in enumerate(_OPTIONAL_NAMES):
            if optional is not None and self.optional[i] is not None:
                words[_OPTIONAL[name][0] // 8] = base + _OPTIONAL[name][1]
                words[_OPTIONAL[name][2] // 8] = optional[i] or 0
        planned = self.planned
        if planned[0] != _capi.environment():
            planned = self.planned = self._plan(base)
        _, plan, workspace_bytes = planned
        workspace = _arrays.empty_bytes_like_kind(q, workspace_bytes) if workspace_bytes else None
        _capi.check(self.lib.fsdpa_run(plan.handle, base,
                                       workspace.data_ptr() if workspace is not None else None,
                                       workspace_bytes, stream))
        return (out, lse) if lse is not None else out


def _row_major_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def _allocators(q, out_shape):
    """The fast path's allocators of out (`out_shape`, q's dtype) and lse
    ([B, Hq, Lq] float32) in q's framework and on its device, each a function
    of the call's q (whose layout the entry's key fixes). Where q is a
    row-major tensor of out's shape, a torch out is torch.empty_like(q) (the
    same row-major strides, and cheaper than torch.empty with a shape and a
    device)."""
    lse_shape = tuple(out_shape[:3])
    if _arrays.is_torch(q):
        torch = sys.modules["torch"]
        dtype, device = q.dtype, q.device
        if tuple(out_shape) == tuple(q.shape) and q.stride() == _row_major_strides(out_shape):
            new_out = torch.empty_like
        else:
            def new_out(_):
                return torch.empty(out_shape, dtype=dtype, device=device)

        def new_lse(_):
            return torch.empty(lse_shape, dtype=torch.float32, device=device)
        return new_out, new_lse
    if _arrays.is_numpy(q):
        numpy = sys.modules["numpy"]
        dtype = q.dtype

        def new_out(_):
            return numpy.empty(out_shape, dtype=dtype)

        def new_lse(_):
            return numpy.empty(lse_shape, dtype=numpy.float32)
        return new_out, new_lse
    return None, None


@dataclasses.dataclass(frozen=True)
class PlanInfo:
    """What fsdpa would run for a call (fsdpa::Plan). str() is the explanation."""

    backend: str  # "cpu" | "cuda"
    path: str  # "fused-prefill" | "fused-decode" | "unfused"
    kernel: str
    policy: str  # resolved: "auto" | "fused" | "unfused"
    dtype: str  # "f16" | "bf16" | "f32"
    device: str  # "cpu:0", "cuda:1", ...
    mask: str  # "none" | "additive" | "boolean"
    has_sinks: bool
    has_lse: bool
    batch: int
    heads_q: int
    heads_kv: int
    len_q: int
    len_k: int
    head_dim_qk: int
    head_dim_v: int
    head_dim_qk_bucket: int  # 0 where the path has no compiled bucket
    head_dim_v_bucket: int
    pad_ratio: float
    tile_q: int
    tile_k: int
    num_kv_splits: int
    page_size: int  # paged KV cache: keys per page; 0 when dense
    num_pages: int
    has_seq_lens_k: bool
    num_v_slices: int
    num_threads: int
    workspace_bytes: int
    scale: float  # resolved
    fallback_reason: str  # "" unless the plan fell back to the unfused path
    explain: str

    def __str__(self):
        return self.explain


def _plan_info(lib, handle):
    info = _capi.PlanInfo()
    _capi.check(lib.fsdpa_plan_get_info(handle, ctypes.byref(info)))
    explanation = lib.fsdpa_plan_explain(handle).decode("utf-8", "replace")
    return PlanInfo(
        backend=_capi.BACKEND_NAMES.get(info.backend, str(info.backend)),
        path=_capi.PATH_NAMES.get(info.path, str(info.path)),
        kernel=info.kernel.decode("utf-8", "replace"),
        policy=_capi.POLICY_NAMES.get(info.policy, str(info.policy)),
        dtype=_capi.DTYPE_NAMES.get(info.dtype, str(info.dtype)),
        device=f"{_capi.DEVICE_NAMES.get(info.device_type, info.device_type)}:{info.device_index}",
        mask=_capi.MASK_NAMES.get(info.mask, str(info.mask)),
        has_sinks=bool(info.has_sinks),
        has_lse=bool(info.has_lse),
        batch=info.batch,
        heads_q=info.heads_q,
        heads_kv=info.heads_kv,
        len_q=info.len_q,
        len_k=info.len_k,
        head_dim_qk=info.head_dim_qk,
        head_dim_v=info.head_dim_v,
        head_dim_qk_bucket=info.head_dim_qk_bucket,
        head_dim_v_bucket=info.head_dim_v_bucket,
        pad_ratio=info.pad_ratio,
        tile_q=info.tile_q,
        tile_k=info.tile_k,
        num_kv_splits=info.num_kv_splits,
        page_size=info.page_size,
        num_pages=info.num_pages,
        has_seq_lens_k=bool(info.has_seq_lens_k),
        num_v_slices=info.num_v_slices,
        num_threads=info.num_threads,
        workspace_bytes=info.workspace_bytes,
        scale=info.scale,
        fallback_reason=info.fallback_reason.decode("utf-8", "replace"),
        explain=explanation,
    )


def plan(q: Any, k: Any, v: Any, *, scale: float | None = None, causal: bool = False,
         causal_align: str = "bottom_right", window_left: int | None = None, mask: Any = None,
         sinks: Any = None, policy: str | None = None, allow_tf32: bool = False,
         softcap: float | None = None, return_lse: bool = False, out: Any = None,
         block_table: Any = None, seq_lens_k: Any = None) -> PlanInfo:
    """The plan attention() would run with the same arguments, as a PlanInfo.
    Nothing is computed (out is allocated when not given, to plan for its
    layout)."""
    options = _options(scale, causal, causal_align, window_left, policy, allow_tf32, softcap)
    call = _Call(q, k, v, mask, sinks, out, return_lse, block_table, seq_lens_k)
    lib = _capi.library()
    handle = ctypes.c_void_p()
    _capi.check(lib.fsdpa_plan_create(ctypes.addressof(call.struct), ctypes.byref(options),
                                      ctypes.byref(handle)))
    try:
        return _plan_info(lib, handle)
    finally:
        lib.fsdpa_plan_destroy(handle)


class Prepared:
    """One planned call, run many times: plan and workspace are made once, and
    each call of the object only launches (fsdpa_run), on torch's current
    stream for CUDA tensors, so it can be timed or captured in a CUDA graph.
    The arrays given to prepare() are the ones every run reads and writes."""

    def __init__(self, call, options):
        self._lib = _capi.library()
        self._call = call  # keeps every array the tensors point into alive
        self._handle = ctypes.c_void_p()
        _capi.check(self._lib.fsdpa_plan_create(ctypes.addressof(call.struct),
                                                ctypes.byref(options),
                                                ctypes.byref(self._handle)))
        self.info = _plan_info(self._lib, self._handle)
        self._workspace = _arrays.empty_bytes_like_kind(
            call.q.array, max(1, self.info.workspace_bytes), like_view=call.q)
        self._workspace_pointer = _arrays.data_pointer(self._workspace)
        self.out = call.out
        self.lse = call.lse

    def __call__(self) -> Any:
        stream = _arrays.current_stream(self._call.q)
        _capi.check(self._lib.fsdpa_run(self._handle, ctypes.addressof(self._call.struct),
                                        ctypes.c_void_p(self._workspace_pointer),
                                        ctypes.c_size_t(self.info.workspace_bytes), stream))
        return (self.out, self.lse) if self.lse is not None else self.out

    def __del__(self):
        handle = getattr(self, "_handle", None)
        if handle:
            self._lib.fsdpa_plan_destroy(handle)


def prepare(q: Any, k: Any, v: Any, *, scale: float | None = None, causal: bool = False,
            causal_align: str = "bottom_right", window_left: int | None = None, mask: Any = None,
            sinks: Any = None, policy: str | None = None, allow_tf32: bool = False,
            softcap: float | None = None, return_lse: bool = False, out: Any = None,
            block_table: Any = None, seq_lens_k: Any = None) -> Prepared:
    """Plans once and returns a Prepared call (same arguments as attention())."""
    options = _options(scale, causal, causal_align, window_left, policy, allow_tf32, softcap)
    return Prepared(_Call(q, k, v, mask, sinks, out, return_lse, block_table, seq_lens_k),
                    options)


def support_matrix() -> str:
    """The support matrix (markdown) derived from the selection table."""
    lib = _capi.library()
    text = lib.fsdpa_support_matrix()
    if not text:
        _capi.check(4)
    return text.decode("utf-8", "replace")


def version() -> str:
    """The library version, e.g. "0.1.0"."""
    return _capi.library().fsdpa_version().decode("ascii")


def backend_built(backend: str) -> bool:
    """Whether the backend ("cpu" or "cuda") is compiled into the library."""
    codes = {"cpu": _capi.BACKEND_CPU, "cuda": _capi.BACKEND_CUDA}
    if backend not in codes:
        raise InvalidArgument(f"fsdpa: backend: expected 'cpu' or 'cuda', got {backend!r}")
    return bool(_capi.library().fsdpa_backend_built(codes[backend]))


def library_path() -> str:
    """The path of the shared library this wrapper uses (or would load)."""
    return str(_capi.find_library())
