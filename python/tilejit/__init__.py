"""tilejit: JIT-compiled, autotuned GEMM, RMSNorm and attention kernels for PyTorch.

    import tilejit
    y = tilejit.ops.linear(x, w)              # or tilejit.nn.Linear / RMSNorm
    o = tilejit.ops.attention(q, k, v, causal=True)  # forward only
    tilejit.enable()                           # F.linear, F.rms_norm, nn.RMSNorm,
                                               # F.scaled_dot_product_attention
    with tilejit.use(False): ...               # back to torch in a scope
    tilejit.warmup(linear=[(8192, 4096, 4096)])  # load kernels before a graph capture
    tilejit.set_sm_margin(8)                   # or TILEJIT_SM_MARGIN=8

Settings: TILEJIT_TUNE, TILEJIT_CACHE_DIR, TILEJIT_DETERMINISTIC (also on while
torch.are_deterministic_algorithms_enabled()), TILEJIT_ALLOW_NONDETERMINISTIC
(or set_allow_nondeterministic(): the attention backward may add dQ
atomically, where faster), TILEJIT_SM_MARGIN,
TILEJIT_LOG_LEVEL (the "tilejit" logger; lines carry the rank once
torch.distributed is up), TILEJIT_SERVER (kernels through a `tilejit serve`,
with TILEJIT_TOKEN, TILEJIT_CA and the rest of the README's settings table).

Registration happens once at import; enable() loads libtilejit.so (an error
says why it cannot) and flips a flag, use() only flips it.
A case tilejit does not take (device, dtype, layout, alignment) falls back to
torch's own, and says why at debug level (logger "tilejit").
"""
import contextlib
import logging
import os
import threading

from . import _lib
from ._lib import TilejitError, version  # noqa: F401

_log = logging.getLogger("tilejit")


class _RankFilter(logging.Filter):
    """Puts the torch.distributed rank in front of each line once it is up."""

    def filter(self, record):
        try:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                record.msg = f"[rank {dist.get_rank()}] {record.msg}"
        except Exception:  # noqa: BLE001 - logging must never fail a call
            pass
        return True


_log.addFilter(_RankFilter())
if os.environ.get("TILEJIT_LOG_LEVEL"):
    _level = os.environ["TILEJIT_LOG_LEVEL"]
    if _level.lower() not in ("debug", "info", "warning", "error", "critical"):
        raise ValueError(f"TILEJIT_LOG_LEVEL='{_level}' is not one of debug, info, warning, "
                         "error, critical")
    _log.setLevel(_level.upper())
    if not _log.handlers:
        _h = logging.StreamHandler()
        _h.setFormatter(logging.Formatter("tilejit %(levelname)s: %(message)s"))
        _log.addHandler(_h)
_state = threading.local()
_enabled = {"linear": False, "rms_norm": False, "sdpa": False}
_ALIASES = {"attention": "sdpa", "scaled_dot_product_attention": "sdpa"}
_originals = {}

try:
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    # (functorch's test for its wrapped tensors, where this torch has one.)
    _functorch_wrapped = getattr(getattr(torch._C, "_functorch", None),
                                 "is_functorch_wrapped_tensor", None)
    from . import nn, ops  # noqa: F401
    from .ops import (explain, release_scratch, set_allow_nondeterministic,  # noqa: F401
                      set_sm_margin, warmup)
except ImportError:  # the C interface alone (ctypes) without torch
    torch = None


def _fell_back(message, *args):
    """Logs why a routed call fell back to torch, except while torch.compile
    traces it (Dynamo does not trace a logger: the graph would break at every
    fallback)."""
    if not torch.compiler.is_compiling():
        _log.debug(message, *args)


def _active(name):
    scoped = getattr(_state, "on", None)
    return _enabled[name] if scoped is None else (scoped and _enabled[name])


def _linear(input, weight, bias=None):
    if _active("linear"):
        if nn._supported_linear(input, weight):
            return ops.linear(input, weight, bias)
        _fell_back("F.linear falls back to torch: %s %s on %s, last dim %d, weight contiguous %s",
                   input.dtype, weight.dtype, input.device, input.shape[-1],
                   weight.is_contiguous())
    return _originals["linear"](input, weight, bias)


def _rms_norm(input, normalized_shape, weight=None, eps=None):
    if _active("rms_norm"):
        shape = tuple(normalized_shape) if not isinstance(normalized_shape, int) \
            else (normalized_shape,)
        ok = (input.is_cuda and weight is not None and len(shape) == 1
              and input.shape[-1] == shape[0] and input.dtype in ops._CODE
              and weight.dtype in ops._CODE)
        if ok:
            return ops.rms_norm(input, weight, eps if eps is not None
                                else torch.finfo(input.dtype).eps)
        _fell_back("F.rms_norm falls back to torch: %s on %s, shape %s, weight %s", input.dtype,
                   input.device, shape, None if weight is None else weight.dtype)
    return _originals["rms_norm"](input, normalized_shape, weight, eps)


_SDPA_ARGS = ("attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
_SDPA_HEAD_DIMS = (64, 128, 256)
_capability = {}


def _sm90(device):
    index = device.index if device.index is not None else torch.cuda.current_device()
    cc = _capability.get(index)
    if cc is None:
        cc = _capability[index] = torch.cuda.get_device_capability(index)
    return cc == (9, 0), cc


def _sdpa_route(q, k, v, a):
    """(layout, (q, k, v) as stored) where tilejit takes this
    F.scaled_dot_product_attention call (arguments `a` by name), else
    (None, why not)."""
    why = _sdpa_unsupported(q, k, v, a)
    if why is not None:
        return None, why
    stored = ops.sdpa_layout(q, k, v)
    if stored is None:
        return None, (f"strides {q.stride()}, {k.stride()}, {v.stride()} (contiguous "
                      "[b, h, s, d], or [b, s, h, d] through .transpose(1, 2), the same for q, k "
                      "and v)")
    # PyTorch's allocator aligns every block, so the offset decides; memory
    # from elsewhere at an odd address is copied by the op. Not while
    # torch.compile traces (Dynamo does not trace storage_offset()): the op
    # copies an input it finds misaligned then.
    if not torch.compiler.is_compiling() and \
            any(t.storage_offset() * t.element_size() % 16 for t in (q, k, v)):
        return None, "an input not 16-byte aligned (its storage offset)"
    hopper, cc = _sm90(q.device)
    if not hopper:
        return None, f"the device is sm_{cc[0]}{cc[1]} (the attention kernel runs on sm_90)"
    return stored


def _sdpa_arguments_unsupported(a):
    """What in the call's arguments besides q, k and v tilejit does not take,
    or None."""
    unknown = set(a) - set(_SDPA_ARGS)
    if unknown:
        return f"arguments {sorted(unknown)}"
    if a["attn_mask"] is not None:
        return "an attn_mask"
    if a["dropout_p"] != 0.0:
        return f"dropout_p={a['dropout_p']}"
    scale = a["scale"]
    if scale is not None and not ops._f32_scale_fits(scale):
        return f"scale={scale} (positive and finite as a float32, at most 2.35e38, or None)"
    return None


def _sdpa_tensors_unsupported(q, k, v):
    """What in q, k and v's devices and dtypes tilejit does not take, or
    None."""
    if not (q.is_cuda and k.is_cuda and v.is_cuda) or not (q.device == k.device == v.device):
        return f"q, k, v on {q.device}, {k.device}, {v.device} (one CUDA device only)"
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or \
            v.dtype != q.dtype:
        return f"dtypes {q.dtype}, {k.dtype}, {v.dtype} (all bf16 or all f16 only)"
    return None


def _sdpa_heads_unsupported(hq, hkv, d, a):
    """What in the heads and head dim tilejit does not take, or None."""
    if d not in _SDPA_HEAD_DIMS:
        return f"head dim {d} (64, 128 or 256 only)"
    if hkv != hq and not (a["enable_gqa"] and hkv > 0 and hq % hkv == 0):
        return f"{hq} query heads and {hkv} kv heads (enable_gqa and kv heads dividing query heads)"
    return None


def _sdpa_unsupported(q, k, v, a):
    """What in the call's tensors or arguments tilejit does not take, or None."""
    why = _sdpa_arguments_unsupported(a)
    if why is not None:
        return why
    if not all(isinstance(t, torch.Tensor) for t in (q, k, v)):
        return "q, k and v are not all tensors"
    if q.is_nested or k.is_nested or v.is_nested:
        return "nested tensors mixed with dense ones"
    why = _sdpa_tensors_unsupported(q, k, v)
    if why is not None:
        return why
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        return f"shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)} (4-D only)"
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d:
        return f"k {tuple(k.shape)} and v {tuple(v.shape)} do not match q {tuple(q.shape)}"
    why = _sdpa_heads_unsupported(hq, hkv, d, a)
    if why is not None:
        return why
    if b * hq * hkv * sq * sk == 0:
        return f"an empty size (b={b}, hq={hq}, hkv={hkv}, sq={sq}, sk={sk})"
    if hq > 1024 or b > ops._MAX_BATCH or max(sq, sk) > ops._MAX_SEQ:
        return f"sizes past the kernel's (b={b}, hq={hq}, sq={sq}, sk={sk})"
    return None


def _max_seqlen(t):
    """The longest sequence of jagged tensor t: as it was made (max_seqlen),
    else from its offsets (a device-to-host copy)."""
    m = getattr(t, "_maybe_max_seqlen", None)
    if m is None:
        off = t.offsets()
        m = (off[1:] - off[:-1]).max() if off.numel() > 1 else 0
    return int(m)


def _sdpa_jagged(q, k, v, a):
    """F.scaled_dot_product_attention on nested jagged tensors, [b, h, j, d]
    as torch's own jagged path takes them (nested_tensor_from_jagged(values
    [tokens, h, d], offsets).transpose(1, 2)), through tilejit's kernels of
    packed sequences (attention_varlen on their values and offsets): (o, None)
    with o a jagged tensor as q (q's offsets), or (None, why not)."""
    why = _sdpa_arguments_unsupported(a)
    if why is not None:
        return None, why
    if not all(isinstance(t, torch.Tensor) and t.is_nested for t in (q, k, v)):
        return None, "nested tensors mixed with dense ones"
    if not all(t.layout == torch.jagged for t in (q, k, v)):
        return None, "nested tensors of the strided layout (torch.jagged only)"
    if any(t.dim() != 4 or getattr(t, "_ragged_idx", None) != 2 for t in (q, k, v)):
        return None, ("jagged tensors not [b, h, j, d] (nested_tensor_from_jagged of [tokens, h, "
                      "d] seen through .transpose(1, 2))")
    if any(t.lengths() is not None for t in (q, k, v)):
        return None, "jagged tensors with holes (lengths: not packed back to back)"
    why = _sdpa_tensors_unsupported(q, k, v)
    if why is not None:
        return None, why
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))  # [b, j, h, d]: values [tokens, h, d]
    qv, kv, vv = qt.values(), kt.values(), vt.values()
    b, hq, hkv, d = q.size(0), q.size(1), k.size(1), q.size(3)
    if k.size(0) != b or v.size(0) != b or v.size(1) != hkv or k.size(3) != d or \
            v.size(3) != d:
        return None, (f"k ({k.size(0)} sequences, {hkv} heads, head dim {k.size(3)}) and v "
                      f"({v.size(0)}, {v.size(1)}, {v.size(3)}) do not match q ({b}, {hq}, {d})")
    if not (k.offsets() is v.offsets() or torch.equal(k.offsets(), v.offsets())):
        return None, "k and v of other sequence lengths"
    why = _sdpa_heads_unsupported(hq, hkv, d, a)
    if why is not None:
        return None, why
    if qv.shape[0] == 0 or kv.shape[0] == 0:
        return None, f"an empty size ({qv.shape[0]} query rows, {kv.shape[0]} key rows)"
    if hq > 1024 or max(qv.shape[0], kv.shape[0]) >= (1 << 31):
        return None, (f"sizes past the kernel's (hq={hq}, {qv.shape[0]} query rows, "
                      f"{kv.shape[0]} key rows)")
    hopper, cc = _sm90(q.device)
    if not hopper:
        return None, f"the device is sm_{cc[0]}{cc[1]} (the attention kernel runs on sm_90)"
    if a["is_causal"] and not (kt.offsets() is qt.offsets() or
                               torch.equal(kt.offsets(), qt.offsets())):
        # (tilejit's mask is the upper-left diagonal of each sequence; where
        # queries and keys differ in length torch's jagged path may align it
        # otherwise.)
        return None, "is_causal with queries and keys of other sequence lengths"
    max_q, max_k = _max_seqlen(qt), _max_seqlen(kt)
    why = ops._varlen_sizes_unsupported(b, qv.shape[0], kv.shape[0], max_q, max_k)
    if why is not None:
        return None, why
    cu_q = qt.offsets().to(torch.int32)
    cu_k = cu_q if kt.offsets() is qt.offsets() else kt.offsets().to(torch.int32)
    o = ops.attention_varlen(qv, kv, vv, cu_q, cu_k, max_q, max_k, bool(a["is_causal"]),
                             a["scale"])
    out = torch.nested.nested_tensor_from_jagged(o, qt.offsets(), max_seqlen=max_q)
    return out.transpose(1, 2), None


def _sdpa_call_unsupported(q, k, v, args, kwargs):
    """What in how the call is made (besides its values) tilejit leaves to
    torch, or None: arguments torch would refuse (so that it does), tensor
    subclasses outside torch.compile (DTensor, functorch's wrapped tensors:
    no memory of their own, and no rule of theirs for tilejit's ops; fake
    tensors go through the ops' fake kernels), a trace of torch.jit.trace
    (kept portable), and torch's math back end chosen alone
    (sdpa_kernel([SDPBackend.MATH]): a reference run)."""
    if len(args) > 3:
        return ("more than 3 positional arguments after q, k, v (scale and enable_gqa are "
                "keyword-only)")
    given = set(_SDPA_ARGS[:len(args)]) & set(kwargs)
    if given:
        return f"arguments given twice: {sorted(given)}"
    if torch.compiler.is_compiling():
        return None
    if torch.jit.is_tracing():
        return "torch.jit.trace records the call"
    wrapped = _functorch_wrapped
    for t in (q, k, v):
        if not isinstance(t, torch.Tensor):
            return "q, k and v are not all tensors"
        if t.is_nested:
            continue
        if type(t) not in (torch.Tensor, torch.nn.Parameter, FakeTensor) or (
                wrapped is not None and wrapped(t)):
            return f"a tensor of type {type(t).__name__} (plain tensors only)"
    b = torch.backends.cuda
    if not (b.flash_sdp_enabled() or b.mem_efficient_sdp_enabled() or b.cudnn_sdp_enabled()):
        return "torch's math back end chosen alone"
    return None


def _sdpa(query, key, value, *args, **kwargs):
    if _active("sdpa"):
        a = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None,
             "enable_gqa": False}
        a.update(zip(_SDPA_ARGS, args))
        a.update(kwargs)
        why = _sdpa_call_unsupported(query, key, value, args, kwargs)
        if why is not None:
            layout, how = None, why
        elif any(isinstance(t, torch.Tensor) and t.is_nested for t in (query, key, value)):
            layout = None
            o, how = _sdpa_jagged(query, key, value, a)
            if o is not None:
                return o
        else:
            layout, how = _sdpa_route(query, key, value, a)
        if layout is not None:
            q, k, v = how
            o = ops.attention(q, k, v, bool(a["is_causal"]), a["scale"], layout)
            return o if layout == ops.BHSD else o.transpose(1, 2)
        _fell_back("F.scaled_dot_product_attention falls back to torch: %s", how)
    return _originals["sdpa"](query, key, value, *args, **kwargs)


def enable(include=("linear", "rms_norm", "sdpa"), exclude=()):
    """Routes F.linear, F.rms_norm (so torch.nn.Linear and torch.nn.RMSNorm)
    and F.scaled_dot_product_attention ("sdpa", also "attention") to tilejit
    where supported, in this process."""
    if torch is None:
        raise TilejitError("tilejit.enable() needs torch")
    # (The library loads now, or the error says why: routed calls do not
    # fall back on a library that is missing or of another version.)
    _lib.lib()
    include = tuple(_ALIASES.get(n, n) for n in include)
    exclude = tuple(_ALIASES.get(n, n) for n in exclude)
    for name in exclude + include:
        if name not in _enabled:
            raise ValueError(f"tilejit.enable: unknown op {name!r} (known: {sorted(_enabled)}, "
                             f"and {sorted(_ALIASES)} for sdpa)")
    F = torch.nn.functional
    if not _originals:
        _originals["linear"] = F.linear
        _originals["rms_norm"] = F.rms_norm
        _originals["sdpa"] = F.scaled_dot_product_attention
        F.linear = _linear
        F.rms_norm = _rms_norm
        F.scaled_dot_product_attention = _sdpa
    for name in _enabled:
        _enabled[name] = name in include and name not in exclude


def disable():
    for name in _enabled:
        _enabled[name] = False


@contextlib.contextmanager
def use(on=True):
    """Within the scope, tilejit's routing is on (or off) for this thread."""
    prev = getattr(_state, "on", None)
    _state.on = on
    try:
        yield
    finally:
        _state.on = prev
