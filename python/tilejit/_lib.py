"""libtilejit.so through ctypes: one build serves every Python version.

The library is $TILEJIT_LIB, else libtilejit.so beside this package (where
`pip install` puts a copy), else the build tree's (build/service/).
"""
import ctypes
import os
import threading

_DTYPES = {"bf16": 0, "f16": 1, "f32": 2}

# The libtilejit.so this package's ctypes declarations are written for: the
# C interface may change between minor versions before 1.0.
ABI_VERSION = "0.6.0"


class TilejitError(RuntimeError):
    """A tilejit call failed; the message names what was wrong."""


def _find():
    env = os.environ.get("TILEJIT_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "libtilejit.so"),
                 os.path.join(here, "..", "..", "build", "service", "libtilejit.so")):
        if os.path.exists(cand):
            return cand
    raise TilejitError("libtilejit.so not found: set TILEJIT_LIB, or install the package with the "
                       "library beside it")


_lib = None
_lock = threading.Lock()


def lib():
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is None:
            path = _find()
            l = ctypes.CDLL(path)
            c = ctypes
            vp, i64, i32, f32 = c.c_void_p, c.c_int64, c.c_int, c.c_float
            l.tj_version.restype = c.c_char_p
            l.tj_last_error.restype = c.c_char_p
            found = l.tj_version().decode(errors="replace")
            if found != ABI_VERSION:
                raise TilejitError(f"{path} is libtilejit {found}; this package is written for "
                                   f"{ABI_VERSION} (the C interface changed): build or install "
                                   "the matching library")
            l.tj_engine_create.argtypes = [i32, c.POINTER(vp)]
            l.tj_engine_destroy.argtypes = [vp]
            l.tj_engine_device.argtypes = [vp, c.POINTER(i32), c.POINTER(i32)]
            l.tj_engine_set_sm_margin.argtypes = [vp, i32]
            l.tj_engine_set_deterministic.argtypes = [vp, i32]
            l.tj_engine_set_allow_nondeterministic.argtypes = [vp, i32]
            l.tj_engine_release_scratch.argtypes = [vp, c.c_uint64, c.POINTER(c.c_uint64)]
            l.tj_explain.argtypes = [vp, c.c_char_p, c.c_char_p, i64, c.POINTER(i64)]
            l.tj_attn_explain.argtypes = [vp, i32, i32, i32, i64, i64, i64, i64, i64, i64, i32,
                                          c.c_char_p, i64, c.POINTER(i64)]
            l.tj_rms_norm_prepare.argtypes = [vp, i32, i32, i32, i64, i64, i32]
            l.tj_gemm_prepare.argtypes = [vp, i32, i32, i32, i32, i64, i64, i64, i64, i64, i64, i64,
                                          i32, i32, i32]
            l.tj_attn_fwd_prepare.argtypes = [vp, i32, i32, i64, i64, i64, i64, i64, i64, i32]
            l.tj_attn_bwd_prepare.argtypes = [vp, i32, i32, i64, i64, i64, i64, i64, i64, i32]
            l.tj_rms_norm_fwd.argtypes = [vp, i32, i32, vp, vp, vp, vp, i64, i64, f32, i32, vp]
            l.tj_rms_norm_bwd_workspace.argtypes = [vp, i32, i32, i64, i64, i32, c.POINTER(i64)]
            l.tj_rms_norm_bwd.argtypes = [vp, i32, i32, vp, vp, vp, vp, vp, vp, vp, i64, i64, i32,
                                          vp]
            l.tj_gemm.argtypes = [vp, i32, i32, i32, i32, i64, i64, i64, vp, i64, vp, i64, vp, i64,
                                  vp, vp, i64, f32, f32, i32, vp]
            l.tj_attn_fwd.argtypes = [vp, i32, i32, i64, i64, i64, i64, i64, i64, i32, f32, vp, vp,
                                      vp, vp, vp, vp]
            l.tj_attn_bwd_workspace_size.argtypes = [vp, i64, i64, i64, i64, i64, i64,
                                                c.POINTER(i64)]
            l.tj_attn_bwd.argtypes = [vp, i32, i32, i64, i64, i64, i64, i64, i64, i32, f32,
                                      vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, i64, vp]
            # (b, max_sq, max_sk, total_q, total_k, hq, hkv, d, causal, scale,
            # cu_seqlens_q, cu_seqlens_k, then the tensors as tj_attn_fwd / _bwd's)
            l.tj_attn_varlen_fwd.argtypes = [vp, i32, i64, i64, i64, i64, i64, i64, i64, i64, i32,
                                             f32, vp, vp, vp, vp, vp, vp, vp, vp]
            l.tj_attn_varlen_bwd.argtypes = [vp, i32, i64, i64, i64, i64, i64, i64, i64, i64, i32,
                                             f32, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp,
                                             i64, vp]
            for fn in ("tj_engine_create", "tj_engine_device", "tj_engine_set_sm_margin",
                       "tj_engine_set_deterministic", "tj_engine_set_allow_nondeterministic",
                       "tj_engine_release_scratch",
                       "tj_rms_norm_prepare", "tj_gemm_prepare",
                       "tj_explain", "tj_attn_explain",
                       "tj_rms_norm_fwd", "tj_rms_norm_bwd_workspace", "tj_rms_norm_bwd",
                       "tj_gemm", "tj_attn_fwd_prepare", "tj_attn_fwd", "tj_attn_bwd_prepare",
                       "tj_attn_bwd_workspace_size", "tj_attn_bwd", "tj_attn_varlen_fwd",
                       "tj_attn_varlen_bwd"):
                getattr(l, fn).restype = i32
            _lib = l
        return _lib


def check(status):
    if status != 0:
        raise TilejitError(lib().tj_last_error().decode(errors="replace"))


def version():
    return lib().tj_version().decode()


_engines = {}


_deterministic = [None]  # a callable telling whether the caller asks for determinism


def engine(device):
    """The engine of CUDA device `device` (one per device, made at first use;
    settings from TILEJIT_* at that moment)."""
    e = _engines.get(device)
    if e is None:
        handle = ctypes.c_void_p()
        # (TILEJIT_DETERMINISTIC as the engine reads it now: torch's flag
        # below only adds to it.)
        env_on = os.environ.get("TILEJIT_DETERMINISTIC") == "1"
        check(lib().tj_engine_create(device, ctypes.byref(handle)))
        with _lock:
            e = _engines.setdefault(device, handle)
            _env_deterministic.setdefault(device, env_on)
    if _deterministic[0] is not None:
        on = bool(_deterministic[0]()) or _env_deterministic.get(device, False)
        if _det_state.get(device) != on:
            check(lib().tj_engine_set_deterministic(e, int(on)))
            _det_state[device] = on
    return e


_det_state = {}
_env_deterministic = {}  # device: TILEJIT_DETERMINISTIC=1 when its engine was made


def dtype_code(name):
    return _DTYPES[name]
