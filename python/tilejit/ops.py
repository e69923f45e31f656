"""PyTorch custom ops over libtilejit.so, registered once in the `tilejit`
namespace, each with a fake (meta) implementation for torch.compile and
export, and autograd where it has a gradient. Kernels launch on the current
CUDA stream; outputs come from PyTorch's allocator; nothing synchronizes.
"""
import ctypes
from typing import Optional, Tuple

import torch
from torch.utils import _python_dispatch

from . import _lib

_CODE = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}


def _dt(t):
    try:
        return _lib.dtype_code(_CODE[t])
    except KeyError:
        raise _lib.TilejitError(f"tilejit: dtype {t} is not bf16, f16 or f32") from None


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _index(device):
    return device.index if device.index is not None else torch.cuda.current_device()


def _stream(device):
    if _raw_stream is not None:
        return _raw_stream(_index(device))
    return torch.cuda.current_stream(device).cuda_stream


def _engine(device):
    return _lib.engine(_index(device))


def _on_gpu(op, cuda=True, **tensors):
    """Every tensor on one CUDA device: a CPU tensor's address must never
    reach a kernel (cuda False: on one device, of any type, as the fake
    kernels see them)."""
    dev = None
    for name, t in tensors.items():
        if cuda and not t.is_cuda:
            raise ValueError(f"tilejit.{op}: {name} is on {t.device}; tilejit runs on CUDA tensors")
        if dev is None:
            dev = t.device
        elif t.device != dev:
            raise ValueError(f"tilejit.{op}: {name} is on {t.device}, the others on {dev}")


_CODES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}


def _rms_check(op, x, weight):
    # The common case in one test; the names of what is wrong after.
    dev = x.get_device()  # -1 on the CPU
    if dev >= 0 and weight.get_device() == dev and x.dim() >= 1 and \
            weight.shape == x.shape[-1:] and x.dtype in _CODES and weight.dtype in _CODES:
        return dev
    _on_gpu(op, x=x, weight=weight)
    if x.dim() < 1 or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"tilejit.{op}: weight of shape {tuple(weight.shape)} does not match "
                         f"the last dimension of x {tuple(x.shape)}")
    for name, t in (("x", x), ("weight", weight)):
        if t.dtype not in _CODE:
            raise ValueError(f"tilejit.{op}: {name} is {t.dtype}; bf16, f16 or f32 only")
    return x.get_device()


_lib._deterministic[0] = torch.are_deterministic_algorithms_enabled


# ---- RMSNorm ---------------------------------------------------------------

# Where a forward that nobody differentiates writes its rstd: one f32 buffer
# per device, grown and never freed (a CUDA graph captured earlier may still
# write into an older one). Launches on several streams may write it at once;
# nobody reads it.
_rstd_scratch = {}
_rstd_kept = []


def _scratch_rstd(dev, rows):
    s = _rstd_scratch.get(dev)
    if s is None or s[1] < rows:
        n = max(rows, 4096, 2 * s[1] if s is not None else 0)
        t = torch.empty(n, device=torch.device("cuda", dev), dtype=torch.float32)
        _rstd_kept.append(t)
        s = _rstd_scratch[dev] = (t.data_ptr(), n)
    return s[0]


def _rms_fwd_impl(x, weight, eps, zero_centered_gamma, want_rstd=True):
    """(y, rstd); rstd is None when not wanted (it then goes to a scratch
    buffer: one allocation fewer on the inference path)."""
    dev = _rms_check("rms_norm_fwd", x, weight)
    shape = x.shape
    h = shape[-1]
    xc = x.contiguous()
    wc = weight.contiguous()
    y = torch.empty_like(xc)
    rows = xc.numel() // h if h else 0
    if want_rstd:
        rstd = xc.new_empty(shape[:-1], dtype=torch.float32)
        rstd_ptr = rstd.data_ptr()
    else:
        rstd, rstd_ptr = None, _scratch_rstd(dev, rows)
    status = _lib.lib().tj_rms_norm_fwd(
        _lib.engine(dev), _CODES[x.dtype], _CODES[weight.dtype], xc.data_ptr(), wc.data_ptr(),
        y.data_ptr(), rstd_ptr, rows, h, eps, zero_centered_gamma,
        _raw_stream(dev) if _raw_stream is not None else _stream(x.device))
    if status:
        _lib.check(status)
    return y, rstd


@torch.library.custom_op("tilejit::rms_norm_fwd", mutates_args=())
def rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 zero_centered_gamma: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """y = x * rstd * g (g = w, or 1 + w) and rstd = 1/sqrt(mean(x^2) + eps), f32 per row."""
    return _rms_fwd_impl(x, weight, eps, zero_centered_gamma)


@rms_norm_fwd.register_fake
def _(x, weight, eps, zero_centered_gamma):
    return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)


def _rms_bwd_impl(dy, x, rstd, weight, zero_centered_gamma):
    _rms_check("rms_norm_bwd", x, weight)
    _on_gpu("rms_norm_bwd", dy=dy, x=x, rstd=rstd)
    if dy.shape != x.shape or rstd.shape != x.shape[:-1] or rstd.dtype != torch.float32:
        raise ValueError(f"tilejit.rms_norm_bwd: dy {tuple(dy.shape)}, x {tuple(x.shape)} and "
                         f"rstd {tuple(rstd.shape)} {rstd.dtype} do not fit (rstd: f32, one per row)")
    if dy.dtype != x.dtype:
        raise ValueError(f"tilejit.rms_norm_bwd: dy is {dy.dtype}, x {x.dtype}")
    h = x.shape[-1]
    xc, dyc, wc, rc = x.contiguous(), dy.contiguous(), weight.contiguous(), rstd.contiguous()
    rows = xc.numel() // h if h else 0
    eng = _engine(x.device)
    n = ctypes.c_int64()
    _lib.check(_lib.lib().tj_rms_norm_bwd_workspace(eng, _dt(x.dtype), _dt(weight.dtype), rows, h,
                                                   int(zero_centered_gamma), ctypes.byref(n)))
    ws = torch.empty(max(n.value, 4), dtype=torch.uint8, device=x.device)
    dx = torch.empty_like(xc)
    dw = torch.empty_like(wc)
    _lib.check(_lib.lib().tj_rms_norm_bwd(
        eng, _dt(x.dtype), _dt(weight.dtype), dyc.data_ptr(), xc.data_ptr(), rc.data_ptr(),
        wc.data_ptr(), dx.data_ptr(), dw.data_ptr(), ws.data_ptr(), rows, h,
        int(zero_centered_gamma), _stream(x.device)))
    return dx, dw


@torch.library.custom_op("tilejit::rms_norm_bwd", mutates_args=())
def rms_norm_bwd(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor,
                 zero_centered_gamma: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """dx and dw (reduced over rows in f32, in a fixed order)."""
    return _rms_bwd_impl(dy, x, rstd, weight, zero_centered_gamma)


@rms_norm_bwd.register_fake
def _(dy, x, rstd, weight, zero_centered_gamma):
    return torch.empty_like(x), torch.empty_like(weight)


def _rms_setup(ctx, inputs, output):
    x, weight, eps, zcg = inputs
    _, rstd = output
    ctx.save_for_backward(x, weight, rstd)
    ctx.zcg = zcg


def _rms_backward(ctx, dy, drstd):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_bwd(dy, x, rstd, weight, ctx.zcg)
    return dx, dw, None, None


rms_norm_fwd.register_autograd(_rms_backward, setup_context=_rms_setup)


class _RmsNorm(torch.autograd.Function):
    """The eager path of rms_norm: the same kernels as the custom ops without
    the dispatcher's per-call cost (the custom ops serve torch.compile,
    export and torch.ops callers)."""

    @staticmethod
    def forward(ctx, x, weight, eps, zcg):
        y, rstd = _rms_fwd_impl(x, weight, eps, zcg)
        ctx.save_for_backward(x, weight, rstd)
        ctx.zcg = zcg
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dx, dw = _rms_bwd_impl(dy, x, rstd, weight, ctx.zcg)
        return dx, dw, None, None


_current_dispatch_mode = getattr(_python_dispatch, "_get_current_dispatch_mode", None)


def _dispatch_mode_active():
    """A TorchDispatchMode (FakeTensorMode, say) is on: its tensors have no
    memory of their own, so calls go through the custom ops it handles."""
    return _current_dispatch_mode is not None and _current_dispatch_mode() is not None


def _eager():
    """The kernels may be called directly (no custom op): not while
    torch.compile or torch.jit.trace records the call (the trace would hold
    the outputs' allocation and not the kernel) nor under a dispatch mode."""
    return not (torch.compiler.is_compiling() or torch.jit.is_tracing() or
                _dispatch_mode_active())


def rms_norm(x, weight, eps=1e-6, zero_centered_gamma=False):
    """y = x * rstd * g along the last dimension; differentiable."""
    eps, zcg = float(eps), bool(zero_centered_gamma)
    if not _eager():
        return rms_norm_fwd(x, weight, eps, zcg)[0]
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad):
        return _RmsNorm.apply(x, weight, eps, zcg)
    return _rms_fwd_impl(x, weight, eps, zcg, False)[0]


# ---- GEMM ------------------------------------------------------------------

def _operand(t):
    """(transposed, leading dimension) of a 2-D tensor stored row-major or as a
    transposed view of row-major storage, or None for any other strides."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    if s1 == 1 and (s0 >= cols or rows == 1):
        return False, max(s0, cols)
    if s0 == 1 and (s1 >= rows or cols == 1):
        return True, max(s1, rows)
    return None


def _mm_check(op, a, b, c=None):
    if c is None and a.is_cuda and b.is_cuda and a.get_device() == b.get_device() and \
            a.dim() == 2 and b.dim() == 2 and a.shape[1] == b.shape[0] and \
            (a.dtype is torch.bfloat16 or a.dtype is torch.float16) and b.dtype is a.dtype:
        return
    tensors = {"a": a, "b": b} if c is None else {"a": a, "b": b, "c": c}
    _on_gpu(op, **tensors)
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tilejit.{op}: a {tuple(a.shape)} and b {tuple(b.shape)} do not "
                         "multiply (2-D, a's columns = b's rows)")
    if a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype:
        raise ValueError(f"tilejit.{op}: a is {a.dtype} and b {b.dtype}; both bf16 or both f16")
    if c is not None and tuple(c.shape) != (a.shape[0], b.shape[1]):
        raise ValueError(f"tilejit.{op}: c is {tuple(c.shape)}, the product "
                         f"{(a.shape[0], b.shape[1])}")


def _bias_check(op, a, b, bias):
    """A bias the GEMM adds itself: n elements of a's dtype, contiguous, on a's
    device."""
    # The common case in one test; the names of what is wrong after.
    if bias is None or (bias.is_cuda and bias.get_device() == a.get_device() and
                        bias.dim() == 1 and bias.shape[0] == b.shape[1] and
                        bias.dtype is a.dtype and bias.is_contiguous()):
        return
    if not bias.is_cuda or bias.get_device() != a.get_device():
        raise ValueError(f"tilejit.{op}: bias is on {bias.device}, a on {a.device}")
    if bias.dim() != 1 or bias.shape[0] != b.shape[1]:
        raise ValueError(f"tilejit.{op}: bias is {tuple(bias.shape)}; it must be "
                         f"({b.shape[1]},), one value per column of the product")
    if bias.dtype != a.dtype:
        raise ValueError(f"tilejit.{op}: bias is {bias.dtype}; it must be a's dtype {a.dtype}")
    if not bias.is_contiguous():
        raise ValueError(f"tilejit.{op}: bias must be contiguous")


def _rows_ld(t):
    """The leading dimension of a 2-D tensor whose rows are dense (0: packed
    rows), or None."""
    rows, cols = t.shape
    s0, s1 = t.stride()
    if s1 != 1 and cols > 1:
        return None
    return 0 if s0 == cols or rows == 1 else (s0 if s0 > cols else None)


def _mm_into(a, b, c, d, alpha, beta, sm_margin=-1, bias=None):
    """d = alpha a b + beta c (+ bias); d (and c) with dense rows, any row
    stride the GEMM takes (_rows_ld)."""
    la, lb = _operand(a), _operand(b)
    if la is None:
        a = a.contiguous()
        la = (False, a.shape[1])
    if lb is None:
        b = b.contiguous()
        lb = (False, b.shape[1])
    m, k = a.shape
    n = b.shape[1]
    dev = a.get_device()
    ldd = 0 if d.is_contiguous() else _rows_ld(d)
    ldc = 0 if c is None or c is d else _rows_ld(c)
    status = _lib.lib().tj_gemm(
        _lib.engine(dev), _CODES[a.dtype], _CODES[d.dtype], la[0], lb[0], m, n, k,
        a.data_ptr(), la[1], b.data_ptr(), lb[1], None if c is None else c.data_ptr(),
        ldd if c is d else ldc, None if bias is None else bias.data_ptr(), d.data_ptr(), ldd,
        alpha, beta, sm_margin, _raw_stream(dev) if _raw_stream is not None else _stream(a.device))
    if status:
        _lib.check(status)


@torch.library.custom_op("tilejit::mm", mutates_args=())
def mm(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype] = None,
       sm_margin: int = -1, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """a @ b (+ bias) for 2-D bf16/f16 tensors (row-major or transposed views),
    f32 accumulation, result in out_dtype (default: a's). bias: one value per
    column, a's dtype, added in the GEMM's epilogue. sm_margin:
    multiprocessors to leave free for this call (-1: TILEJIT_SM_MARGIN or the
    engine's)."""
    return _mm_impl(a, b, out_dtype, sm_margin, bias)


def _mm_impl(a, b, out_dtype=None, sm_margin=-1, bias=None):
    _mm_check("mm", a, b)
    _bias_check("mm", a, b, bias)
    if bias is not None and bias.data_ptr() % (2 * bias.element_size()):
        bias = bias.clone()  # the kernel reads it two elements at a time
    d = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype, device=a.device)
    if d.numel() == 0:
        return d
    if a.shape[1] == 0:
        return d.copy_(bias.expand_as(d)) if bias is not None else d.zero_()
    _mm_into(a, b, None, d, 1.0, 0.0, sm_margin, bias)
    return d


@mm.register_fake
def _(a, b, out_dtype=None, sm_margin=-1, bias=None):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tilejit.mm: a {tuple(a.shape)} and b {tuple(b.shape)} do not multiply")
    if bias is not None and (bias.dim() != 1 or bias.shape[0] != b.shape[1]):
        raise ValueError(f"tilejit.mm: bias is {tuple(bias.shape)}, not ({b.shape[1]},)")
    if bias is not None and bias.dtype != a.dtype:
        raise ValueError(f"tilejit.mm: bias is {bias.dtype}; it must be a's dtype {a.dtype}")
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype)


def _mm_setup(ctx, inputs, output):
    a, b, _, sm_margin, _bias = inputs
    ctx.save_for_backward(a, b)
    ctx.sm_margin = sm_margin


def _bias_grad(ctx, grad, index):
    """The bias's gradient: the sum of the output's gradient over rows (none
    where no bias was passed: the custom op's context then lists fewer
    inputs)."""
    needs = ctx.needs_input_grad
    if index >= len(needs) or not needs[index]:
        return None
    return grad.sum(0, dtype=torch.float32).to(ctx.saved_tensors[0].dtype)


def _mm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    g = grad.to(a.dtype)
    da = mm(g, b.t(), None, ctx.sm_margin) if ctx.needs_input_grad[0] else None
    db = mm(a.t(), g, None, ctx.sm_margin) if ctx.needs_input_grad[1] else None
    return da, db, None, None, _bias_grad(ctx, grad, 4)


mm.register_autograd(_mm_backward, setup_context=_mm_setup)


@torch.library.custom_op("tilejit::mm_accumulate_", mutates_args=("c",))
def mm_accumulate_(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, alpha: float = 1.0,
                   beta: float = 1.0) -> None:
    """c = alpha * a @ b + beta * c in place (c f32 for gradient accumulation
    into a main_grad, bf16 or f16 otherwise)."""
    _mm_accumulate_impl(a, b, c, alpha, beta)


def _mm_accumulate_impl(a, b, c, alpha=1.0, beta=1.0):
    _mm_check("mm_accumulate_", a, b, c)
    if c.dtype not in _CODE:
        raise ValueError(f"tilejit.mm_accumulate_: c is {c.dtype}; bf16, f16 or f32 only")
    ld = _rows_ld(c)
    if ld is None or (ld and (ld * c.element_size()) % 16) or \
            c.data_ptr() % (2 * c.element_size()):
        # Rows that are not dense or not 16 bytes apart, or a c off a
        # boundary of two elements: accumulate into a contiguous copy.
        tmp = c.clone(memory_format=torch.contiguous_format)
        _mm_into(a, b, tmp, tmp, alpha, beta)
        c.copy_(tmp)
        return
    _mm_into(a, b, c, c, alpha, beta)


@mm_accumulate_.register_fake
def _(a, b, c, alpha=1.0, beta=1.0):
    return None


class _Mm(torch.autograd.Function):
    """The eager path of matmul (see _RmsNorm)."""

    @staticmethod
    def forward(ctx, a, b, sm_margin, bias):
        ctx.save_for_backward(a, b)
        ctx.sm_margin = sm_margin
        return _mm_impl(a, b, None, sm_margin, bias)

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved_tensors
        g = grad.to(a.dtype)
        da = _mm_impl(g, b.t(), None, ctx.sm_margin) if ctx.needs_input_grad[0] else None
        db = _mm_impl(a.t(), g, None, ctx.sm_margin) if ctx.needs_input_grad[1] else None
        return da, db, None, _bias_grad(ctx, grad, 3)


def matmul(a, b, sm_margin=-1, bias=None):
    """a @ b (+ bias, one value per column, a's dtype, added by the GEMM)
    through tilejit (2-D, bf16/f16, row-major or transposed views);
    differentiable."""
    if not _eager():
        return mm(a, b, None, sm_margin, bias)
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad or
                                    (bias is not None and bias.requires_grad)):
        return _Mm.apply(a, b, sm_margin, bias)
    return _mm_impl(a, b, None, sm_margin, bias)


def _fused_bias(x, weight, bias):
    """Whether the GEMM adds `bias` itself (a contiguous vector of x's dtype
    on x's device)."""
    return bias is not None and bias.dtype == x.dtype and bias.dim() == 1 and \
        bias.shape[0] == weight.shape[0] and bias.is_contiguous() and bias.device == x.device


def linear(x, weight, bias=None):
    """F.linear through tilejit: x @ weight^T (+ bias, added by the GEMM where
    it is a contiguous vector of x's dtype, else afterwards)."""
    shape = x.shape
    fused = _fused_bias(x, weight, bias)
    y = matmul(x.reshape(-1, shape[-1]), weight.t(), bias=bias if fused else None)
    if bias is not None and not fused:
        y = y + bias
    return y.reshape(*shape[:-1], weight.shape[0])


# ---- Attention ---------------------------------------------------------------

BSHD, BHSD = 0, 1  # how Q, K, V and O are stored: [b, s, h, d] or [b, h, s, d]
_ATTN_HEAD_DIMS = (64, 128, 256)
# Head dims the backward kernel takes: all of the forward's.
ATTN_BWD_HEAD_DIMS = _ATTN_HEAD_DIMS
_LAYOUTS = {"bshd": BSHD, "bhsd": BHSD, BSHD: BSHD, BHSD: BHSD}


def _layout_code(layout):
    code = _LAYOUTS.get(layout.lower() if isinstance(layout, str) else layout)
    if code is None:
        raise ValueError(f"tilejit: layout {layout!r} is not 'bshd' (0) or 'bhsd' (1)")
    return code


def sdpa_layout(q, k, v):
    """How the [b, h, s, d] tensors F.scaled_dot_product_attention gets are
    stored, without copying: (BHSD, (q, k, v)) when all three are contiguous,
    (BSHD, their .transpose(1, 2)) when all three are [b, s, h, d] storage seen
    through .transpose(1, 2), else None."""
    if q.is_contiguous() and k.is_contiguous() and v.is_contiguous():
        return BHSD, (q, k, v)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if qt.is_contiguous() and kt.is_contiguous() and vt.is_contiguous():
        return BSHD, (qt, kt, vt)
    return None


def _attn_dims(q, k, layout):
    """(b, sq, sk, hq, hkv, d) of q and k stored in `layout`."""
    if layout == BSHD:
        return q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3]
    return q.shape[0], q.shape[2], k.shape[2], q.shape[1], k.shape[1], q.shape[3]


def _attn_shapes(op, q, k, v, layout):
    if layout not in (BSHD, BHSD):
        raise ValueError(f"tilejit.{op}: layout must be 0 (BSHD: [b, s, h, d]) or 1 (BHSD: "
                         f"[b, h, s, d]), got {layout!r}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"tilejit.{op}: q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)} must be 4-D")
    b, sq, sk, hq, hkv, d = _attn_dims(q, k, layout)
    if k.shape != v.shape or k.shape[0] != b or k.shape[3] != d:
        raise ValueError(f"tilejit.{op}: k {tuple(k.shape)} and v {tuple(v.shape)} do not fit q "
                         f"{tuple(q.shape)} (same shape, q's batch and head dim)")
    return b, sq, sk, hq, hkv, d


def _attn_types(op, q, k, v, hq, hkv, d):
    """q, k and v all bf16 or all f16, a head dim the kernels take, kv heads
    dividing the query heads; else ValueError naming what is wrong."""
    if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or \
            v.dtype != q.dtype:
        raise ValueError(f"tilejit.{op}: q, k and v are {q.dtype}, {k.dtype} and {v.dtype}; all "
                         "bf16 or all f16")
    if d not in _ATTN_HEAD_DIMS:
        raise ValueError(f"tilejit.{op}: head dim {d}; 64, 128 or 256 only")
    if hkv < 1 or hq % hkv:
        raise ValueError(f"tilejit.{op}: {hkv} kv heads do not divide {hq} query heads")


def _attn_check(op, q, k, v, layout):
    _on_gpu(op, q=q, k=k, v=v)
    b, sq, sk, hq, hkv, d = _attn_shapes(op, q, k, v, layout)
    _attn_types(op, q, k, v, hq, hkv, d)
    if sk == 0 and b * sq * hq:
        raise ValueError(f"tilejit.{op}: no keys (sk = 0): softmax over an empty row")
    return b, sq, sk, hq, hkv, d


def _packed(t):
    """t contiguous at a 16-byte aligned address (the copy engine's rule),
    copied only where it is not."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _attn_fwd_impl(q, k, v, causal, scale, layout):
    _scale_check("attn_fwd", scale)
    b, sq, sk, hq, hkv, d = _attn_check("attn_fwd", q, k, v, layout)
    qc, kc, vc = _packed(q), _packed(k), _packed(v)
    o = torch.empty(qc.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if o.numel() == 0:
        return o, lse
    dev = q.get_device()
    status = _lib.lib().tj_attn_fwd(
        _lib.engine(dev), _CODES[q.dtype], layout, b, sq, sk, hq, hkv, d, int(causal), scale,
        qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), o.data_ptr(), lse.data_ptr(),
        _raw_stream(dev) if _raw_stream is not None else _stream(q.device))
    if status:
        _lib.check(status)
    return o, lse


@torch.library.custom_op("tilejit::attn_fwd", mutates_args=())
def attn_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float,
             layout: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """o = softmax(scale * q k^T + mask) v and lse, the f32 log-sum-exp of each
    row (natural log), for bf16/f16 q, k, v stored in `layout`: BSHD (0),
    q [b, sq, hq, d], or BHSD (1), q [b, hq, sq, d]; k and v the same with hkv
    heads (dividing hq) and sk rows; o as q; lse [b, hq, sq]. causal: row i
    sees keys 0..i (torch's is_causal); scale 0: 1/sqrt(d). Its gradient is
    tilejit::attn_bwd's (head dims 64, 128 and 256); lse is not differentiable."""
    return _attn_fwd_impl(q, k, v, causal, scale, layout)


@attn_fwd.register_fake
def _(q, k, v, causal, scale, layout):
    b, sq, _, hq, hkv, d = _attn_shapes("attn_fwd", q, k, v, layout)
    _attn_types("attn_fwd", q, k, v, hq, hkv, d)
    return q.new_empty(q.shape), q.new_empty((b, hq, sq), dtype=torch.float32)


def _grads_check(op, do, q, o, lse, lse_shape):
    """do and o as q, lse of `lse_shape` f32; else ValueError naming them."""
    if do.shape != q.shape or o.shape != q.shape or do.dtype != q.dtype or o.dtype != q.dtype:
        raise ValueError(f"tilejit.{op}: do {tuple(do.shape)} {do.dtype} and o "
                         f"{tuple(o.shape)} {o.dtype} must match q {tuple(q.shape)} {q.dtype}")
    if tuple(lse.shape) != lse_shape or lse.dtype != torch.float32:
        raise ValueError(f"tilejit.{op}: lse {tuple(lse.shape)} {lse.dtype} must be "
                         f"{lse_shape} float32")


def _attn_bwd_impl(do, q, k, v, o, lse, causal, scale, layout):
    _scale_check("attn_bwd", scale)
    b, sq, sk, hq, hkv, d = _attn_check("attn_bwd", q, k, v, layout)
    _on_gpu("attn_bwd", q=q, do=do, o=o, lse=lse)
    _grads_check("attn_bwd", do, q, o, lse, (b, hq, sq))
    qc, kc, vc, oc, doc, lsec = (_packed(t) for t in (q, k, v, o, do, lse))
    dq = torch.empty(qc.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(kc.shape, dtype=q.dtype, device=q.device)
    dv = torch.empty(vc.shape, dtype=q.dtype, device=q.device)
    if dq.numel() == 0 or dk.numel() == 0:
        return dq, dk.zero_(), dv.zero_()
    dev = q.get_device()
    lib, eng = _lib.lib(), _lib.engine(dev)
    need = ctypes.c_int64()
    _lib.check(lib.tj_attn_bwd_workspace_size(eng, b, sq, sk, hq, hkv, d, ctypes.byref(need)))
    ws = torch.empty(need.value, dtype=torch.uint8, device=q.device)
    status = lib.tj_attn_bwd(
        eng, _CODES[q.dtype], layout, b, sq, sk, hq, hkv, d, int(causal), scale,
        qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), oc.data_ptr(), lsec.data_ptr(),
        doc.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), ws.data_ptr(), need.value,
        _raw_stream(dev) if _raw_stream is not None else _stream(q.device))
    if status:
        _lib.check(status)
    return dq, dk, dv


@torch.library.custom_op("tilejit::attn_bwd", mutates_args=())
def attn_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, o: torch.Tensor,
             lse: torch.Tensor, causal: bool, scale: float,
             layout: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of tilejit::attn_fwd(q, k, v, causal, scale, layout) = (o,
    lse) for the gradient do of o (stored as o). Head dims 64, 128 and 256.
    Deterministic (no atomics, the same inputs give the same bits) unless
    set_allow_nondeterministic() or TILEJIT_ALLOW_NONDETERMINISTIC=1 allowed
    otherwise."""
    return _attn_bwd_impl(do, q, k, v, o, lse, causal, scale, layout)


@attn_bwd.register_fake
def _(do, q, k, v, o, lse, causal, scale, layout):
    b, sq, _, hq, hkv, d = _attn_shapes("attn_bwd", q, k, v, layout)
    _attn_types("attn_bwd", q, k, v, hq, hkv, d)
    _grads_check("attn_bwd", do, q, o, lse, (b, hq, sq))
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attn_setup(ctx, inputs, output):
    q, k, v, causal, scale, layout = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse)
    ctx.causal, ctx.scale, ctx.layout = causal, scale, layout
    # lse is not differentiable (as torch's own attention kernels' log-sum-exp
    # is not): the backward kernel takes the gradient of o only.
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _attn_backward(ctx, do, dlse):
    q, k, v, o, lse = ctx.saved_tensors
    if do is None:
        return None, None, None, None, None, None
    dq, dk, dv = attn_bwd(do, q, k, v, o, lse, ctx.causal, ctx.scale, ctx.layout)
    return dq, dk, dv, None, None, None


attn_fwd.register_autograd(_attn_backward, setup_context=_attn_setup)


def attention(q, k, v, causal=False, scale=None, layout=BHSD):
    """Attention through tilejit; returns o (as q). q, k, v: bf16/f16,
    [b, h, s, d] (layout BHSD, torch's) or [b, s, h, d] (BSHD), d 64, 128 or
    256, kv heads dividing q heads. scale: None for 1/sqrt(d). Differentiable
    (tilejit::attn_bwd)."""
    layout = _layout_code(layout)
    scale = _scale_code("attention", scale)
    if _eager_without_grad(q, k, v):
        return _attn_fwd_impl(q, k, v, bool(causal), scale, layout)[0]
    return attn_fwd(q, k, v, bool(causal), scale, layout)[0]


def _f32_scale_fits(scale):
    """Whether `scale` is positive and finite as the kernels take it, a
    float32, and so is that float32 times log2(e) (1e-50 rounds to 0, which
    the C interface reads as 1/sqrt(d); 1e39 to inf; at most 2.35e38)."""
    inf = float("inf")
    s32 = ctypes.c_float(float(scale)).value
    return 0.0 < s32 < inf and ctypes.c_float(s32 * 1.4426950408889634).value < inf


def _scale_code(op, scale):
    """The ops' scale: 0.0 (their 1/sqrt(d)) for None, else positive and
    finite as a float32; ValueError naming it otherwise."""
    if scale is None:
        return 0.0
    if not _f32_scale_fits(scale):
        raise ValueError(f"tilejit.{op}: scale must be positive and finite as a float32, at "
                         f"most 2.35e38 (None: 1/sqrt(d)), got {scale}")
    return float(scale)


def _scale_check(op, scale):
    """The custom ops' scale: 0.0 (1/sqrt(d)) or one _scale_code takes."""
    if scale != 0.0:
        _scale_code(op, scale)


def _eager_without_grad(q, k, v):
    """An eager call whose output needs no gradient: the kernel is called
    directly (no custom op, no autograd node)."""
    return _eager() and not (torch.is_grad_enabled() and
                             (q.requires_grad or k.requires_grad or v.requires_grad))


# ---- Attention over packed sequences (THD, varlen) ------------------------

THD = 2  # q [total_q, hq, d], k and v [total_k, hkv, d]; sequences by cu_seqlens
_MAX_SEQ = 1 << 22  # the most rows a sequence may have (the C interface's bound)
_MAX_BATCH = 1 << 20  # the most sequences a call may have (likewise)


def _varlen_sizes_unsupported(b, tq, tk, max_sq, max_sk):
    """What in a packed call's sizes the kernels do not take (b sequences of
    at most 2^22 rows, the rows in all at most b times the longest), or
    None. Positive ints (or SymInts) assumed."""
    if b > _MAX_BATCH:
        return f"b={b} sequences, more than the {_MAX_BATCH} a call may have"
    for name, m, total, rows in (("max_seqlen_q", max_sq, tq, "q"),
                                 ("max_seqlen_k", max_sk, tk, "k")):
        if m > _MAX_SEQ:
            return f"{name}={m} is more than the {_MAX_SEQ} rows a sequence may have"
        if total > b * m:
            return f"{rows} has {total} rows, more than {b} sequences of at most {name}={m}"
    return None


def _varlen_check(op, q, k, v, cu_q, cu_k, max_sq, max_sk, on_gpu=True):
    """(b, total_q, total_k, hq, hkv, d) of a packed call, or ValueError naming
    what is wrong. The offsets' values stay on the device (not read here)."""
    _on_gpu(op, cuda=on_gpu, q=q, k=k, v=v, cu_seqlens_q=cu_q, cu_seqlens_k=cu_k)
    if q.dim() != 3 or k.dim() != 3 or v.dim() != 3:
        raise ValueError(f"tilejit.{op}: q {tuple(q.shape)}, k {tuple(k.shape)} and v "
                         f"{tuple(v.shape)} must be 3-D: [tokens, heads, head dim]")
    tq, hq, d = q.shape
    tk, hkv = k.shape[0], k.shape[1]
    if k.shape != v.shape or k.shape[2] != d:
        raise ValueError(f"tilejit.{op}: k {tuple(k.shape)} and v {tuple(v.shape)} do not fit q "
                         f"{tuple(q.shape)} (same shape, q's head dim)")
    for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_k", cu_k)):
        if cu.dtype != torch.int32 or cu.dim() != 1 or cu.shape[0] < 2:
            raise ValueError(f"tilejit.{op}: {name} {tuple(cu.shape)} {cu.dtype} must be int32 "
                             "[b + 1] (each sequence's first row, then the rows in all)")
    if cu_q.shape != cu_k.shape:
        raise ValueError(f"tilejit.{op}: cu_seqlens_q {tuple(cu_q.shape)} and cu_seqlens_k "
                         f"{tuple(cu_k.shape)} must name the same sequences")
    b = cu_q.shape[0] - 1
    for name, m in (("max_seqlen_q", max_sq), ("max_seqlen_k", max_sk)):
        # (A SymInt where torch.compile traces a changing length.)
        if isinstance(m, bool) or not isinstance(m, (int, torch.SymInt)) or m < 1:
            raise ValueError(f"tilejit.{op}: {name} must be a positive int (at least the "
                             f"longest sequence's rows), got {m!r}")
    why = _varlen_sizes_unsupported(b, tq, tk, max_sq, max_sk)
    if why is not None:
        raise ValueError(f"tilejit.{op}: {why}")
    _attn_types(op, q, k, v, hq, hkv, d)
    return b, tq, tk, hq, hkv, d


def _attn_varlen_fwd_impl(q, k, v, cu_q, cu_k, max_sq, max_sk, causal, scale):
    _scale_check("attn_varlen_fwd", scale)
    b, tq, tk, hq, hkv, d = _varlen_check("attn_varlen_fwd", q, k, v, cu_q, cu_k, max_sq, max_sk)
    qc, kc, vc = _packed(q), _packed(k), _packed(v)
    cq, ck = cu_q.contiguous(), cu_k.contiguous()
    o = torch.empty(qc.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, max_sq), dtype=torch.float32, device=q.device)
    if tq == 0:
        return o, lse
    if tk == 0:  # no sequence has keys
        return o.zero_(), lse.fill_(float("-inf"))
    dev = q.get_device()
    status = _lib.lib().tj_attn_varlen_fwd(
        _lib.engine(dev), _CODES[q.dtype], b, max_sq, max_sk, tq, tk, hq, hkv, d, int(causal),
        scale, cq.data_ptr(), ck.data_ptr(), qc.data_ptr(), kc.data_ptr(), vc.data_ptr(),
        o.data_ptr(), lse.data_ptr(),
        _raw_stream(dev) if _raw_stream is not None else _stream(q.device))
    if status:
        _lib.check(status)
    return o, lse


@torch.library.custom_op("tilejit::attn_varlen_fwd", mutates_args=())
def attn_varlen_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                    causal: bool, scale: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """Attention over b packed sequences (FlashAttention's varlen, Megatron's
    THD): q [total_q, hq, d], k and v [total_k, hkv, d], bf16/f16; sequence i's
    query rows are cu_seqlens_q[i]:cu_seqlens_q[i + 1] (int32 [b + 1], starting
    at 0, non-decreasing, ending at total_q; cu_seqlens_k likewise for k and
    v), and it attends to its own keys only. max_seqlen_q and max_seqlen_k: at
    least the longest sequence's rows, and total_q at most b times
    max_seqlen_q (total_k likewise; checked). The offsets stay on the device
    and are not checked: smaller maxima give wrong results, offsets past the
    tensors' rows are cut off there, and the kernels take each sequence's
    rows as at least 0 and at most the maxima whatever the offsets hold, so
    they end as a valid call's would.
    Returns o (as q) and lse [b, hq, max_seqlen_q] f32 (row r of sequence i at
    [i, :, r]; rows past a sequence's end unspecified). causal: a sequence's
    row r sees its keys 0..r (top-left, as torch's is_causal; FlashAttention
    aligns the diagonal bottom-right where a sequence's query and key lengths
    differ). scale 0: 1/sqrt(d). A sequence with queries and no keys gets
    o = 0, lse = -inf. Inputs must be finite: a key tile's rows past a
    sequence are the next one's, multiplied by zero probabilities, so an
    Inf or NaN there reaches this sequence. Its gradient is
    tilejit::attn_varlen_bwd's."""
    return _attn_varlen_fwd_impl(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                 causal, scale)


@attn_varlen_fwd.register_fake
def _(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, scale):
    b, _, _, hq, _, _ = _varlen_check("attn_varlen_fwd", q, k, v, cu_seqlens_q, cu_seqlens_k,
                                      max_seqlen_q, max_seqlen_k, on_gpu=False)
    return q.new_empty(q.shape), q.new_empty((b, hq, max_seqlen_q), dtype=torch.float32)


def _attn_varlen_bwd_impl(do, q, k, v, o, lse, cu_q, cu_k, max_sq, max_sk, causal, scale):
    _scale_check("attn_varlen_bwd", scale)
    b, tq, tk, hq, hkv, d = _varlen_check("attn_varlen_bwd", q, k, v, cu_q, cu_k, max_sq,
                                          max_sk)
    _on_gpu("attn_varlen_bwd", q=q, do=do, o=o, lse=lse)
    _grads_check("attn_varlen_bwd", do, q, o, lse, (b, hq, max_sq))
    qc, kc, vc, oc, doc, lsec = (_packed(t) for t in (q, k, v, o, do, lse))
    cq, ck = cu_q.contiguous(), cu_k.contiguous()
    dq = torch.empty(qc.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(kc.shape, dtype=q.dtype, device=q.device)
    dv = torch.empty(vc.shape, dtype=q.dtype, device=q.device)
    if tq == 0 or tk == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    dev = q.get_device()
    lib, eng = _lib.lib(), _lib.engine(dev)
    need = ctypes.c_int64()
    _lib.check(lib.tj_attn_bwd_workspace_size(eng, b, max_sq, max_sk, hq, hkv, d,
                                              ctypes.byref(need)))
    ws = torch.empty(need.value, dtype=torch.uint8, device=q.device)
    status = lib.tj_attn_varlen_bwd(
        eng, _CODES[q.dtype], b, max_sq, max_sk, tq, tk, hq, hkv, d, int(causal), scale,
        cq.data_ptr(), ck.data_ptr(), qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), oc.data_ptr(),
        lsec.data_ptr(), doc.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        ws.data_ptr(), need.value,
        _raw_stream(dev) if _raw_stream is not None else _stream(q.device))
    if status:
        _lib.check(status)
    return dq, dk, dv


@torch.library.custom_op("tilejit::attn_varlen_bwd", mutates_args=())
def attn_varlen_bwd(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                    o: torch.Tensor, lse: torch.Tensor, cu_seqlens_q: torch.Tensor,
                    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
                    causal: bool, scale: float) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dq, dk, dv of tilejit::attn_varlen_fwd for the gradient do of o.
    Deterministic (no atomics, the same inputs give the same bits) unless
    set_allow_nondeterministic() or TILEJIT_ALLOW_NONDETERMINISTIC=1 allowed
    otherwise."""
    return _attn_varlen_bwd_impl(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q,
                                 max_seqlen_k, causal, scale)


@attn_varlen_bwd.register_fake
def _(do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal,
      scale):
    b, _, _, hq, _, _ = _varlen_check("attn_varlen_bwd", q, k, v, cu_seqlens_q, cu_seqlens_k,
                                      max_seqlen_q, max_seqlen_k, on_gpu=False)
    _grads_check("attn_varlen_bwd", do, q, o, lse, (b, hq, max_seqlen_q))
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _attn_varlen_setup(ctx, inputs, output):
    q, k, v, cu_q, cu_k, max_sq, max_sk, causal, scale = inputs
    o, lse = output
    ctx.save_for_backward(q, k, v, o, lse, cu_q, cu_k)
    ctx.max_sq, ctx.max_sk, ctx.causal, ctx.scale = max_sq, max_sk, causal, scale
    ctx.mark_non_differentiable(lse)
    ctx.set_materialize_grads(False)


def _attn_varlen_backward(ctx, do, dlse):
    q, k, v, o, lse, cu_q, cu_k = ctx.saved_tensors
    if do is None:
        return (None,) * 9
    dq, dk, dv = attn_varlen_bwd(do, q, k, v, o, lse, cu_q, cu_k, ctx.max_sq, ctx.max_sk,
                                 ctx.causal, ctx.scale)
    return (dq, dk, dv) + (None,) * 6


attn_varlen_fwd.register_autograd(_attn_varlen_backward, setup_context=_attn_varlen_setup)


def attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                     causal=False, scale=None):
    """Attention over packed sequences through tilejit (FlashAttention's
    flash_attn_varlen_func's arguments; causal top-left); returns o (as q).
    See tilejit::attn_varlen_fwd for the arguments; scale None: 1/sqrt(d).
    Differentiable. The lse kept for the gradient is [b, hq, max_seqlen_q],
    and the backward's workspace grows the same way: with b times the
    longest sequence, not with the tokens (a pack of many short sequences
    and one long one takes b * max_seqlen_q * hq * 4 bytes of lse)."""
    args = (q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k),
            bool(causal), _scale_code("attention_varlen", scale))
    if _eager_without_grad(q, k, v):
        return _attn_varlen_fwd_impl(*args)[0]
    return attn_varlen_fwd(*args)[0]


def warmup(linear=(), rms_norm=(), attention=(), dtype=torch.bfloat16, device=None):
    """Loads the kernels of the given calls ahead of time (compiling, or tuning
    where TILEJIT_TUNE says so), so that the first step and CUDA graph captures
    find them loaded. linear: (tokens, in_features, out_features) of F.linear
    calls (their forward and both gradients), with a fourth item True where
    the layer has a bias; rms_norm: (rows, hidden);
    attention: (batch, seq_q, seq_k, heads_q, heads_kv, head_dim, causal,
    layout) of attention calls (forward and backward), layout "bhsd"
    (contiguous [b, h, s, d], as F.scaled_dot_product_attention usually gets
    them) or "bshd" ([b, s, h, d]
    storage seen through .transpose(1, 2))."""
    for call in attention:
        if len(call) != 8:
            raise ValueError(f"tilejit.warmup: attention call {call!r} is not (batch, seq_q, "
                             "seq_k, heads_q, heads_kv, head_dim, causal, 'bhsd' or 'bshd')")
        _layout_code(call[7])
    dev = torch.device(device) if device is not None else torch.device("cuda")
    eng = _engine(dev)
    code = _dt(dtype)
    lib = _lib.lib()
    for call in linear:
        if len(call) not in (3, 4):
            raise ValueError(f"tilejit.warmup: linear call {call!r} is not (tokens, "
                             "in_features, out_features[, bias])")
        m, k, n = call[:3]
        bias = int(len(call) == 4 and bool(call[3]))
        for ta, tb, mm_, nn_, kk, b in ((0, 1, m, n, k, bias), (0, 0, m, k, n, 0),
                                        (1, 0, n, k, m, 0)):
            _lib.check(lib.tj_gemm_prepare(eng, code, code, ta, tb, mm_, nn_, kk, 0, 0, 0, 0, 0,
                                           b, 1))
    for rows, hidden in rms_norm:
        for backward in (0, 1):
            _lib.check(lib.tj_rms_norm_prepare(eng, backward, code, code, rows, hidden, 0))
    for b, sq, sk, hq, hkv, d, causal, layout in attention:
        _lib.check(lib.tj_attn_fwd_prepare(eng, code, _layout_code(layout), b, sq, sk, hq, hkv, d,
                                           int(bool(causal))))
        _lib.check(lib.tj_attn_bwd_prepare(eng, code, _layout_code(layout), b, sq, sk, hq, hkv, d,
                                           int(bool(causal))))


def set_sm_margin(sm_margin, device=None):
    """Multiprocessors persistent kernels leave free from now on (0: none)."""
    dev = torch.device(device) if device is not None else torch.device("cuda")
    _lib.check(_lib.lib().tj_engine_set_sm_margin(_engine(dev), int(sm_margin)))


def set_allow_nondeterministic(allow=True, device=None):
    """From now on, kernels whose results are not bitwise repeatable may be
    used where they are faster (the attention backward's configs that add dQ
    atomically), as TILEJIT_ALLOW_NONDETERMINISTIC=1 says at start; never
    while torch.use_deterministic_algorithms(True) or TILEJIT_DETERMINISTIC=1
    holds. False (the default): the same inputs give the same bits. For
    `device`'s engine (the current CUDA device's when None); the variable
    covers every device's."""
    dev = torch.device(device) if device is not None else torch.device("cuda")
    _lib.check(_lib.lib().tj_engine_set_allow_nondeterministic(_engine(dev), int(bool(allow))))


def release_scratch(keep_bytes=0, device=None):
    """Returns tilejit's scratch memory (a fused attention backward's dQ sums,
    split-K's partial sums: a pool of its own, outside PyTorch's allocator,
    which keeps what it reserved between calls) to the system, down to
    `keep_bytes`, except what work still queued on a stream uses; the bytes
    the pool then holds. For `device` (the current CUDA device when None); the
    next call that needs scratch reserves it again. tilejit's counterpart of
    torch.cuda.empty_cache()."""
    dev = torch.device(device) if device is not None else torch.device("cuda")
    if int(keep_bytes) < 0:
        raise ValueError(f"keep_bytes must be >= 0, got {keep_bytes}")
    left = ctypes.c_uint64(0)
    keep = min(int(keep_bytes), 2 ** 64 - 1)  # (more than any pool holds: keep it all)
    _lib.check(_lib.lib().tj_engine_release_scratch(_engine(dev), keep, ctypes.byref(left)))
    return left.value


_NAMES = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}


def explain(op, *tensors, device=None, causal=False):
    """What a call would use, as text: the kernel loaded for it (its config and
    whether it came from the store, a tuning or the default), or what the first
    call would do. Never compiles or tunes.

        tilejit.explain("linear", x, weight)   # F.linear(x, weight)
        tilejit.explain("linear", x, weight, bias)
        tilejit.explain("mm", a, b)
        tilejit.explain("rms_norm", x, weight)
        tilejit.explain("sdpa", q, k, v, causal=True)  # F.scaled_dot_product_attention
        tilejit.explain("sdpa_bwd", q, k, v, causal=True)  # its backward

    The attention backward's spec (whether dQ may be added atomically) is the
    engine's to decide, as for the call itself (set_allow_nondeterministic,
    torch.use_deterministic_algorithms)."""
    need = ctypes.c_int64()
    buf = ctypes.create_string_buffer(4096)
    if op in ("linear", "mm"):
        bias = None
        if op == "linear":
            x, w, *rest = tensors
            a, b = x.reshape(-1, x.shape[-1]), w.t()
            bias = rest[0] if rest and _fused_bias(x, w, rest[0]) else None
        else:
            a, b = tensors
        la, lb = _operand(a) or (False, 0), _operand(b) or (False, 0)
        spec = (f"gemm ab={_NAMES[a.dtype]} out={_NAMES[a.dtype]} ta={int(la[0])} "
                f"tb={int(lb[0])} c=0 m={a.shape[0]} n={b.shape[1]} k={a.shape[1]} "
                f"bias={int(bias is not None)}")
        dev = a.device
    elif op in ("rms_norm", "rms_norm_bwd"):
        x, w = tensors
        h = x.shape[-1]
        rows = x.numel() // h if h else 0
        name = "rmsnorm_bwd" if op == "rms_norm_bwd" else "rmsnorm_fwd"
        align = 16
        while align > 1 and (h * x.element_size()) % align:
            align //= 2
        spec = (f"{name} dtype={_NAMES[x.dtype]} wdtype={_NAMES[w.dtype]} rows={max(rows, 1)} "
                f"cols={h} zcg=0 align={max(align, x.element_size())}")
        dev = x.device
    elif op in ("sdpa", "attention", "sdpa_bwd", "attention_bwd"):
        q, k, v = tensors  # [b, h, s, d], as F.scaled_dot_product_attention gets them
        stored = sdpa_layout(q, k, v)
        layout = stored[0] if stored is not None else BHSD
        b, hq, sq, d = q.shape
        # The spec is built in C, as the call's own (tj_attn_fwd_prepare's);
        # the engine follows torch's determinism setting (_lib.engine).
        spec = None
        attn = (int(op.endswith("_bwd")), _dt(q.dtype), layout, b, sq, k.shape[2], hq, k.shape[1],
                d, int(bool(causal)))
        dev = q.device
    else:
        raise ValueError(f"tilejit.explain: unknown op {op!r} (linear, mm, rms_norm, rms_norm_bwd, "
                         "sdpa, sdpa_bwd)")
    if device is not None:
        dev = torch.device(device)
    eng = _engine(dev)
    if spec is None:
        _lib.check(_lib.lib().tj_attn_explain(eng, *attn, buf, 4096, ctypes.byref(need)))
    else:
        _lib.check(_lib.lib().tj_explain(eng, spec.encode(), buf, 4096, ctypes.byref(need)))
    return buf.value.decode()
