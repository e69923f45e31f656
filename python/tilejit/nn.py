"""Drop-in modules: the parameters and state-dict keys of torch's own."""
import torch

from . import ops


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm over the last dimension, through tilejit on CUDA
    tensors of bf16/f16/f32 (torch elsewhere). zero_centered_gamma: the scale
    is 1 + weight (weight initialized to zeros)."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True,
                 zero_centered_gamma=False, device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        if len(self.normalized_shape) != 1:
            raise ValueError("tilejit.nn.RMSNorm normalizes the last dimension only")
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        self.zero_centered_gamma = zero_centered_gamma
        if elementwise_affine:
            init = torch.zeros if zero_centered_gamma else torch.ones
            self.weight = torch.nn.Parameter(init(self.normalized_shape, device=device,
                                                  dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def forward(self, x):
        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        w = self.weight
        if w is None:
            w = torch.zeros(self.normalized_shape, device=x.device, dtype=x.dtype) \
                if self.zero_centered_gamma else \
                torch.ones(self.normalized_shape, device=x.device, dtype=x.dtype)
        if x.is_cuda and x.dtype in ops._CODE and w.dtype in ops._CODE:
            return ops.rms_norm(x, w, eps, self.zero_centered_gamma)
        g = (1 + w.float()) if self.zero_centered_gamma else w.float()
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g).to(x.dtype)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, " \
               f"elementwise_affine={self.elementwise_affine}, " \
               f"zero_centered_gamma={self.zero_centered_gamma}"


class Linear(torch.nn.Linear):
    """torch.nn.Linear through tilejit's GEMM where the case is supported.
    With gradient_accumulation_fusion, the weight's gradient is added into
    weight.main_grad (f32, made on first use) by the GEMM itself, as
    Megatron-LM does, and weight.grad stays None."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None,
                 gradient_accumulation_fusion=False):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.gradient_accumulation_fusion = gradient_accumulation_fusion

    def forward(self, x):
        if not _supported_linear(x, self.weight):
            return torch.nn.functional.linear(x, self.weight, self.bias)
        if self.gradient_accumulation_fusion and self.weight.requires_grad:
            y = _LinearMainGrad.apply(x, self.weight)
            return y + self.bias if self.bias is not None else y
        return ops.linear(x, self.weight, self.bias)


def _supported_linear(x, w):
    return (x.is_cuda and w.is_cuda and x.dtype in (torch.bfloat16, torch.float16)
            and w.dtype == x.dtype and x.shape[-1] % 8 == 0 and w.is_contiguous()
            and x.numel() > 0)


class _LinearMainGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        x2 = x.reshape(-1, x.shape[-1])
        return ops._mm_impl(x2, w.t()).reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        g2 = grad.reshape(-1, grad.shape[-1]).to(x.dtype).contiguous()
        dx = ops._mm_impl(g2, w).reshape(x.shape) if ctx.needs_input_grad[0] else None
        if getattr(w, "main_grad", None) is None:
            w.main_grad = torch.zeros(w.shape, dtype=torch.float32, device=w.device)
        # main_grad (out x in, f32) += dY^T X, in one GEMM (TN).
        ops._mm_accumulate_impl(g2.t(), x.reshape(-1, x.shape[-1]), w.main_grad)
        return dx, None
