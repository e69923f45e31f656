"""tilejit: JIT-compiled, autotuned GEMM and RMSNorm kernels for PyTorch.

    import tilejit
    y = tilejit.ops.linear(x, w)              # or tilejit.nn.Linear / RMSNorm
    tilejit.enable()                           # F.linear, F.rms_norm, nn.RMSNorm
    with tilejit.use(False): ...               # back to torch in a scope
    tilejit.warmup(linear=[(8192, 4096, 4096)])  # load kernels before a graph capture
    tilejit.set_sm_margin(8)                   # or TILEJIT_SM_MARGIN=8

Settings: TILEJIT_TUNE, TILEJIT_CACHE_DIR, TILEJIT_DETERMINISTIC (also on while
torch.are_deterministic_algorithms_enabled()), TILEJIT_SM_MARGIN,
TILEJIT_LOG_LEVEL (the "tilejit" logger; lines carry the rank once
torch.distributed is up).

Registration happens once at import; enable() and use() only flip a flag.
A case tilejit does not take (device, dtype, layout, alignment) falls back to
torch's own, and says why at debug level (logger "tilejit").
"""
import contextlib
import logging
import os
import threading

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
    _log.setLevel(os.environ["TILEJIT_LOG_LEVEL"].upper())
    if not _log.handlers:
        _h = logging.StreamHandler()
        _h.setFormatter(logging.Formatter("tilejit %(levelname)s: %(message)s"))
        _log.addHandler(_h)
_state = threading.local()
_enabled = {"linear": False, "rms_norm": False}
_originals = {}

try:
    import torch
    from . import nn, ops  # noqa: F401
    from .ops import explain, set_sm_margin, warmup  # noqa: F401
except ImportError:  # the C interface alone (ctypes) without torch
    torch = None


def _active(name):
    scoped = getattr(_state, "on", None)
    return _enabled[name] if scoped is None else (scoped and _enabled[name])


def _linear(input, weight, bias=None):
    if _active("linear"):
        if nn._supported_linear(input, weight):
            return ops.linear(input, weight, bias)
        _log.debug("F.linear falls back to torch: %s %s on %s, last dim %d, weight contiguous %s",
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
        _log.debug("F.rms_norm falls back to torch: %s on %s, shape %s, weight %s", input.dtype,
                   input.device, shape, None if weight is None else weight.dtype)
    return _originals["rms_norm"](input, normalized_shape, weight, eps)


def enable(include=("linear", "rms_norm"), exclude=()):
    """Routes F.linear and F.rms_norm (so torch.nn.Linear and torch.nn.RMSNorm)
    to tilejit where supported, in this process."""
    if torch is None:
        raise TilejitError("tilejit.enable() needs torch")
    F = torch.nn.functional
    if not _originals:
        _originals["linear"] = F.linear
        _originals["rms_norm"] = F.rms_norm
        F.linear = _linear
        F.rms_norm = _rms_norm
    for name in _enabled:
        if name in include and name not in exclude:
            _enabled[name] = True
        elif name not in include:
            _enabled[name] = False
    for name in exclude:
        if name not in _enabled:
            raise ValueError(f"tilejit.enable: unknown op {name!r} (known: {sorted(_enabled)})")
    for name in include:
        if name not in _enabled:
            raise ValueError(f"tilejit.enable: unknown op {name!r} (known: {sorted(_enabled)})")


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
