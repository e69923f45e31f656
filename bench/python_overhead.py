"""Host time of one warm call, Python to launch: tilejit's RMSNorm forward and
GEMM against torch's F.rms_norm and torch.matmul on tiny tensors (the GPU
finishes each kernel before the host issues the next, so the loop measures
the host). Every case is timed in turns, 15 rounds of 2000 calls each, so
that all see the same state of the host (its clocks and other load moved
single figures by up to 50 % between back-to-back runs); the median of the
rounds is the figure, the fastest round beside it.

    TILEJIT_LIB=... python3 bench/python_overhead.py --out overhead.json
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

import tilejit


def time_in_turns(cases, calls=2000, rounds=15):
    """{name: (median, min)} microseconds per call over `rounds` rounds, each
    round timing every case once, in order."""
    for fn in cases.values():
        for _ in range(200):
            fn()
    torch.cuda.synchronize()
    per = {name: [] for name in cases}
    for _ in range(rounds):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            t1 = time.perf_counter()
            torch.cuda.synchronize()
            per[name].append(1e6 * (t1 - t0) / calls)
    out = {}
    for name, xs in per.items():
        xs.sort()
        out[name] = (xs[len(xs) // 2], xs[0])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    x = torch.randn(4, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.ones(1024, device="cuda", dtype=torch.bfloat16)
    a_ = torch.randn(64, 256, device="cuda", dtype=torch.bfloat16)
    b_ = torch.randn(256, 64, device="cuda", dtype=torch.bfloat16)
    bias_ = torch.randn(64, device="cuda", dtype=torch.bfloat16)
    xg = x.clone().requires_grad_()
    import ctypes
    from tilejit import _lib
    eng = _lib.engine(0)
    sms, cc = ctypes.c_int(), ctypes.c_int()
    # The C call of a warm RMSNorm forward alone (engine lookup, launch and
    # ctypes' argument conversion), arguments made once: the rest of
    # tilejit.ops.rms_norm is Python and PyTorch.
    y, rstd = torch.empty_like(x), torch.empty(4, device="cuda", dtype=torch.float32)
    stream = torch.cuda.current_stream().cuda_stream
    args = (eng, 0, 0, x.data_ptr(), w.data_ptr(), y.data_ptr(), rstd.data_ptr(), 4, 1024, 1e-5,
            0, stream)
    fwd = _lib.lib().tj_rms_norm_fwd
    prep = _lib.lib().tj_rms_norm_prepare
    cases = {
        "tilejit.ops.rms_norm": lambda: tilejit.ops.rms_norm(x, w, 1e-5),
        "torch F.rms_norm": lambda: F.rms_norm(x, (1024,), w, 1e-5),
        "tilejit rms_norm allocating rstd too (as before the scratch)":
            lambda: tilejit.ops._rms_fwd_impl(x, w, 1e-5, False, True),
        "tilejit.ops.mm": lambda: tilejit.ops.mm(a_, b_),
        "torch.matmul": lambda: torch.matmul(a_, b_),
        "tilejit.ops.matmul with a bias": lambda: tilejit.ops.matmul(a_, b_, bias=bias_),
        "tilejit.ops.rms_norm (autograd)": lambda: tilejit.ops.rms_norm(xg, w, 1e-5),
        "torch F.rms_norm (autograd)": lambda: F.rms_norm(xg, (1024,), w, 1e-5),
        "torch.ops.tilejit.rms_norm_fwd (dispatcher)":
            lambda: torch.ops.tilejit.rms_norm_fwd(x, w, 1e-5, False),
        # The pieces of a call.
        "piece: one ctypes call (tj_engine_device)":
            lambda: _lib.lib().tj_engine_device(eng, ctypes.byref(sms), ctypes.byref(cc)),
        "piece: torch.empty_like": lambda: torch.empty_like(x),
        "piece: torch.empty(4) f32": lambda: torch.empty(4, device="cuda", dtype=torch.float32),
        "piece: tj_rms_norm_fwd through ctypes": lambda: fwd(*args),
        "piece: tj_rms_norm_prepare (spec, engine lookup; no launch)":
            lambda: prep(eng, 0, 0, 0, 4, 1024, 0),
    }
    res = time_in_turns(cases)
    print(f"{'us per call':60s} {'median':>7s} {'fastest':>8s}")
    for k, (med, best) in res.items():
        print(f"{k:60s} {med:7.2f} {best:8.2f}")
    if a.out:
        json.dump({"torch": torch.__version__, "method": "15 rounds of 2000 calls, cases in turns",
                   "us_per_call": {k: v[0] for k, v in res.items()},
                   "us_per_call_fastest_round": {k: v[1] for k, v in res.items()}},
                  open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
