"""PyTorch custom ops over libtilejit.so, registered once in the `tilejit`
namespace, each with a fake (meta) implementation for torch.compile and
export, and autograd where it has a gradient. Kernels launch on the current
CUDA stream; outputs come from PyTorch's allocator; nothing synchronizes.
"""
import ctypes
from typing import Optional, Tuple

import torch

from . import _lib

_CODE = {torch.bfloat16: "bf16", torch.float16: "f16", torch.float32: "f32"}


def _dt(t):
    try:
        return _lib.dtype_code(_CODE[t])
    except KeyError:
        raise _lib.TilejitError(f"tilejit: dtype {t} is not bf16, f16 or f32") from None


def _stream(device):
    return torch.cuda.current_stream(device).cuda_stream


def _engine(device):
    return _lib.engine(device.index if device.index is not None else torch.cuda.current_device())


# ---- RMSNorm ---------------------------------------------------------------

@torch.library.custom_op("tilejit::rms_norm_fwd", mutates_args=())
def rms_norm_fwd(x: torch.Tensor, weight: torch.Tensor, eps: float,
                 zero_centered_gamma: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """y = x * rstd * g (g = w, or 1 + w) and rstd = 1/sqrt(mean(x^2) + eps), f32 per row."""
    h = x.shape[-1]
    xc = x.contiguous()
    wc = weight.contiguous()
    y = torch.empty_like(xc)
    rstd = torch.empty(xc.shape[:-1], dtype=torch.float32, device=x.device)
    rows = xc.numel() // h if h else 0
    _lib.check(_lib.lib().tj_rms_norm_fwd(
        _engine(x.device), _dt(x.dtype), _dt(weight.dtype), xc.data_ptr(), wc.data_ptr(),
        y.data_ptr(), rstd.data_ptr(), rows, h, float(eps), int(zero_centered_gamma),
        _stream(x.device)))
    return y, rstd


@rms_norm_fwd.register_fake
def _(x, weight, eps, zero_centered_gamma):
    return torch.empty_like(x), x.new_empty(x.shape[:-1], dtype=torch.float32)


@torch.library.custom_op("tilejit::rms_norm_bwd", mutates_args=())
def rms_norm_bwd(dy: torch.Tensor, x: torch.Tensor, rstd: torch.Tensor, weight: torch.Tensor,
                 zero_centered_gamma: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """dx and dw (reduced over rows in f32, in a fixed order)."""
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


def rms_norm(x, weight, eps=1e-6, zero_centered_gamma=False):
    """y = x * rstd * g along the last dimension; differentiable."""
    return rms_norm_fwd(x, weight, float(eps), bool(zero_centered_gamma))[0]


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


def _mm_into(a, b, c, d, alpha, beta):
    la, lb = _operand(a), _operand(b)
    if la is None:
        a = a.contiguous()
        la = (False, a.shape[1])
    if lb is None:
        b = b.contiguous()
        lb = (False, b.shape[1])
    m, k = a.shape
    n = b.shape[1]
    _lib.check(_lib.lib().tj_gemm(
        _engine(a.device), _dt(a.dtype), _dt(d.dtype), int(la[0]), int(lb[0]), m, n, k,
        a.data_ptr(), la[1], b.data_ptr(), lb[1], None if c is None else c.data_ptr(),
        d.data_ptr(), float(alpha), float(beta), _stream(a.device)))


@torch.library.custom_op("tilejit::mm", mutates_args=())
def mm(a: torch.Tensor, b: torch.Tensor, out_dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """a @ b for 2-D bf16/f16 tensors (row-major or transposed views), f32
    accumulation, result in out_dtype (default: a's)."""
    d = torch.empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype, device=a.device)
    _mm_into(a, b, None, d, 1.0, 0.0)
    return d


@mm.register_fake
def _(a, b, out_dtype=None):
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype or a.dtype)


def _mm_setup(ctx, inputs, output):
    a, b, _ = inputs
    ctx.save_for_backward(a, b)


def _mm_backward(ctx, grad):
    a, b = ctx.saved_tensors
    g = grad.to(a.dtype)
    da = mm(g, b.t()) if ctx.needs_input_grad[0] else None
    db = mm(a.t(), g) if ctx.needs_input_grad[1] else None
    return da, db, None


mm.register_autograd(_mm_backward, setup_context=_mm_setup)


@torch.library.custom_op("tilejit::mm_accumulate_", mutates_args=("c",))
def mm_accumulate_(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, alpha: float = 1.0,
                   beta: float = 1.0) -> None:
    """c = alpha * a @ b + beta * c in place (c f32 for gradient accumulation
    into a main_grad, bf16 or f16 otherwise)."""
    if not c.is_contiguous():
        raise _lib.TilejitError("tilejit: mm_accumulate_ needs a contiguous c")
    _mm_into(a, b, c, c, alpha, beta)


@mm_accumulate_.register_fake
def _(a, b, c, alpha=1.0, beta=1.0):
    return None


def linear(x, weight, bias=None):
    """F.linear through tilejit: x @ weight^T (+ bias)."""
    shape = x.shape
    y = mm(x.reshape(-1, shape[-1]), weight.t())
    if bias is not None:
        y = y + bias
    return y.reshape(*shape[:-1], weight.shape[0])
