"""Host time of one warm call, Python to launch: tilejit's RMSNorm forward and
GEMM against torch's F.rms_norm and torch.matmul on tiny tensors (the GPU
finishes each kernel before the host issues the next, so the loop measures
the host). Median of 7 rounds of 5000 calls.

    TILEJIT_LIB=... python3 bench/python_overhead.py --out overhead.json
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

import tilejit


def per_call_us(fn, calls=5000, rounds=7):
    for _ in range(200):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        out.append(1e6 * (t1 - t0) / calls)
    out.sort()
    return out[len(out) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    a_ = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    b_ = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    bias_ = torch.randn(64, device="cuda", dtype=torch.bfloat16)
    res = {
        "tilejit.ops.rms_norm": per_call_us(lambda: tilejit.ops.rms_norm(x, w, 1e-5)),
        "torch F.rms_norm": per_call_us(lambda: F.rms_norm(x, (1024,), w, 1e-5)),
        "tilejit.ops.mm": per_call_us(lambda: tilejit.ops.mm(a_, b_)),
        "torch.matmul": per_call_us(lambda: torch.matmul(a_, b_)),
    }
    xg = x.clone().requires_grad_()
    res["tilejit.ops.rms_norm (autograd)"] = per_call_us(lambda: tilejit.ops.rms_norm(xg, w, 1e-5))
    res["torch F.rms_norm (autograd)"] = per_call_us(lambda: F.rms_norm(xg, (1024,), w, 1e-5))
    res["torch.ops.tilejit.rms_norm_fwd (dispatcher)"] = per_call_us(
        lambda: torch.ops.tilejit.rms_norm_fwd(x, w, 1e-5, False))
    # The pieces of a call.
    import ctypes
    from tilejit import _lib
    eng = _lib.engine(0)
    sms, cc = ctypes.c_int(), ctypes.c_int()
    res["piece: one ctypes call (tj_engine_device)"] = per_call_us(
        lambda: _lib.lib().tj_engine_device(eng, ctypes.byref(sms), ctypes.byref(cc)))
    res["piece: torch.empty_like"] = per_call_us(lambda: torch.empty_like(x))
    # The C call of a warm RMSNorm forward alone (engine lookup, launch and
    # ctypes' argument conversion), arguments made once: the rest of
    # tilejit.ops.rms_norm is Python and PyTorch.
    y, rstd = torch.empty_like(x), torch.empty(4, device="cuda", dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream
    args = (eng, 0, 0, x.data_ptr(), w.data_ptr(), y.data_ptr(), rstd.data_ptr(), 4, 1024, 1e-5,
            0, stream)
    fwd = _lib.lib().tj_rms_norm_fwd
    res["piece: tj_rms_norm_fwd through ctypes"] = per_call_us(lambda: fwd(*args))
    res["tilejit.ops.matmul with a bias"] = per_call_us(
        lambda: tilejit.ops.matmul(a_, b_, bias=bias_))
    for k, v in res.items():
        print(f"{k:34s} {v:7.2f} us per call")
    if a.out:
        json.dump({"torch": torch.__version__, "us_per_call": res}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
