"""torch's scaled_dot_product_attention on bench/attn_shapes.json, forward
(or with --backward the backward pass alone: the gradients of Q, K and V
from one saved forward), with its cuDNN and flash back ends, timed as
attn_bench times tilejit: random bf16 inputs ([b, h, s, d], torch's layout),
CUDA events, the median of 15 samples of 3 back-to-back calls. GQA cases
repeat K and V across the query heads first (outside the timing) where a
back end refuses enable_gqa.

The backward also runs each back end's gradients three more times outside
the timing and records whether they came out bitwise equal (`*_repeatable`:
a difference proves the adding order varies; equality over three runs does
not prove it cannot). With --deterministic the peers run under
torch.use_deterministic_algorithms(True), so a back end that has a
deterministic backward runs it, and one that has none reports its error.

With --packed (bench/attn_packed_shapes.json) each case is packed sequences
([tokens, h, d] with cu_seqlens: b of s rows, or a case's ragged "lengths"):
flash is FlashAttention-2's varlen kernels as torch exposes them
(aten::_flash_attention_forward and _backward with cum_seq_q and cum_seq_k),
cuDNN `F.scaled_dot_product_attention` on nested jagged tensors over the
same rows, timed by the device time of the work a call puts on the GPU
(torch's profiler: the call's host work outlasts its kernels, so events
would time the host; their time is kept as `cudnn_call_ms`); TFLOP/s sum
the sequences' work. `cudnn_vs_flash`: cuDNN's output (the backward: dQ)
against flash's, outside the timing, since neither peer is checked against
float64 here.

    python3 bench/attn_peer.py --shapes bench/attn_shapes.json --out peer.json [--backward]
        [--deterministic] [--packed]
"""
import argparse
import json
import warnings

import torch
import torch.nn.functional as F
import torch.utils.deterministic
from torch.nn.attention import SDPBackend, sdpa_kernel


def time_ms(fn):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ms = []
    for _ in range(15):
        e0.record()
        for _ in range(3):
            fn()
        e1.record()
        e1.synchronize()
        ms.append(e0.elapsed_time(e1) / 3)
    ms.sort()
    return ms[len(ms) // 2]


def kernel_ms(fn, calls=10):
    """The GPU time of the work one call of fn puts on the device (its kernels, copies and
    fills, summed; torch's profiler), a mean over `calls` calls after a warm-up, and what
    it is made of: [name, microseconds a call, launches a call] of each, longest first. For
    a path whose host work between its kernels outlasts them, where time_ms's events time
    the host: this counts no gap between kernels, which time_ms (and attn_bench) do."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    # (The device's rows alone, not user annotations; self_device_time_total since torch
    # 2.4, self_cuda_time_total before.)
    def device_us(e):
        t = getattr(e, "self_device_time_total", None)
        return getattr(e, "self_cuda_time_total", 0) if t is None else t
    rows = [e for e in prof.key_averages()
            if e.device_type == torch.autograd.DeviceType.CUDA
            and not getattr(e, "is_user_annotation", False)]
    us = sum(device_us(e) for e in rows)
    if us <= 0:
        raise RuntimeError("the profiler recorded no device time")
    parts = sorted(([e.key[:120], device_us(e) / calls, e.count / calls] for e in rows),
                   key=lambda p: -p[1])
    return us / 1e3 / calls, parts


def repeatable(fn, runs=3):
    """Whether fn's tensors come out bitwise equal (their bytes) over `runs` calls."""
    def bits(t):
        return t.contiguous().view(torch.uint8)

    first = [bits(t) for t in fn()]
    for _ in range(runs - 1):
        if not all(torch.equal(a, bits(b)) for a, b in zip(first, fn())):
            return False
    return True


def case_lengths(c):
    """A case's sequence lengths: its ragged "lengths", else b of s."""
    return list(c["lengths"]) if "lengths" in c else [c["s"]] * c["b"]


def flops_of(c, backward):
    """The work of a case as FlashAttention counts it, summed over its sequences."""
    per = 4.0 * c["hq"] * c["d"] / (2 if c["causal"] else 1) * (2.5 if backward else 1)
    return sum(per * n * n for n in case_lengths(c))


# What a back end's refusal raises (the jagged tensors' checks raise ValueError
# or NotImplementedError); anything else is a mistake here and stops the run.
REFUSED = (RuntimeError, ValueError, NotImplementedError)


def said(e):
    """The first line of what exception e says (its type where it says nothing)."""
    return (str(e).splitlines() or [type(e).__name__])[0]


def measure(row, label, grad, run, kernels=False):
    """Times `run()` (which returns the function to time and, with grad, the gradients'
    function) into row[label + "_ms"/"_tflops"], or records the back end's error. With
    `kernels` the time is the device's alone (kernel_ms; what it is made of in
    row[label + "_kernels"]), and the call's on events goes to row[label + "_call_ms"]."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            fn, grads = run()
            ms = time_ms(fn)
            if kernels:
                row[label + "_call_ms"] = ms
                ms, row[label + "_kernels"] = kernel_ms(fn)
            row[label + "_ms"] = ms
        except REFUSED as e:
            # (Warnings recorded: a back end's refusal under
            # use_deterministic_algorithms says why only in one.)
            why = [str(w.message).splitlines()[0] for w in seen if "determinis" in str(w.message)]
            row[label + "_error"] = (said(e) +
                                     (f" ({'; '.join(dict.fromkeys(why))})" if why else ""))[:200]
            return
    row[label + "_tflops"] = row["flops"] / (row[label + "_ms"] * 1e-3) / 1e12
    if grad:
        try:
            row[label + "_repeatable"] = repeatable(grads)
        except REFUSED as e:
            row[label + "_repeatable_error"] = said(e)[:200]


def sdpa_peer(q, k, v, do, causal, groups, grad, wrap=lambda x: x, unwrap=lambda o: o):
    """For measure(): F.scaled_dot_product_attention on q, k, v (each through `wrap`) under
    the back end in force, and its gradients from `do` (its output through `unwrap`). K and
    V are repeated over each group of `groups` query heads (dimension 1), outside the timing,
    where the back end refuses enable_gqa."""
    kk, vv, gqa = k, v, groups > 1
    # (The inputs wrapped once, outside the timing.)
    args = [wrap(x) for x in (q, kk, vv)]

    def sdpa():
        return F.scaled_dot_product_attention(*args, is_causal=causal, enable_gqa=gqa)

    try:
        sdpa()
    except REFUSED:
        if not gqa:
            raise
        kk, vv = (x.detach().repeat_interleave(groups, dim=1).requires_grad_(grad) for x in (k, v))
        gqa = False
        args = [wrap(x) for x in (q, kk, vv)]
        sdpa()
    if not grad:
        return sdpa, None
    out = unwrap(sdpa())
    grads = lambda: torch.autograd.grad(out, (q, kk, vv), do, retain_graph=True)
    return grads, grads


def padded_row(c, grad):
    """The peers on one case of b sequences of s rows ([b, h, s, d])."""
    b, hq, hkv, s, d, causal = c["b"], c["hq"], c["hkv"], c["s"], c["d"], c["causal"]
    dt = torch.bfloat16
    q = torch.randn(b, hq, s, d, device="cuda", dtype=dt, requires_grad=grad)
    k = torch.randn(b, hkv, s, d, device="cuda", dtype=dt, requires_grad=grad)
    v = torch.randn(b, hkv, s, d, device="cuda", dtype=dt, requires_grad=grad)
    do = torch.randn(b, hq, s, d, device="cuda", dtype=dt)
    row = {"name": c["name"], "flops": flops_of(c, grad)}
    for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                           ("flash", SDPBackend.FLASH_ATTENTION)):
        with sdpa_kernel(backend):
            measure(row, label, grad, lambda: sdpa_peer(q, k, v, do, causal, hq // hkv, grad))
    return row


def packed_row(c, grad):
    """The peers on one case as packed sequences (see the module's comment)."""
    lengths, hq, hkv, d, causal = case_lengths(c), c["hq"], c["hkv"], c["d"], c["causal"]
    tokens, longest = sum(lengths), max(lengths)
    dt = torch.bfloat16
    cu = torch.tensor([0] + lengths, device="cuda", dtype=torch.int64).cumsum(0)
    q = torch.randn(tokens, hq, d, device="cuda", dtype=dt)
    k = torch.randn(tokens, hkv, d, device="cuda", dtype=dt)
    v = torch.randn(tokens, hkv, d, device="cuda", dtype=dt)
    do = torch.randn(tokens, hq, d, device="cuda", dtype=dt)
    row = {"name": c["name"], "tokens": tokens, "flops": flops_of(c, grad)}
    cu32 = cu.to(torch.int32)

    def flash():
        fwd = lambda: torch.ops.aten._flash_attention_forward(
            q, k, v, cu32, cu32, longest, longest, 0.0, causal, False)
        if not grad:
            return fwd, None
        out, lse, seed, offset = fwd()[:4]
        bwd = lambda: torch.ops.aten._flash_attention_backward(
            do, q, k, v, out, lse, cu32, cu32, longest, longest, 0.0, causal, seed, offset)
        return bwd, bwd

    def jagged(x):
        return torch.nested.nested_tensor_from_jagged(
            x, cu, min_seqlen=min(lengths), max_seqlen=longest).transpose(1, 2)

    def cudnn():
        qg, kg, vg = (x.detach().requires_grad_(grad) for x in (q, k, v))
        return sdpa_peer(qg, kg, vg, do, causal, hq // hkv, grad, wrap=jagged,
                         unwrap=lambda o: o.transpose(1, 2).values())

    measure(row, "flash", grad, flash)
    # (cuDNN on jagged tensors: each call's host work outlasted its kernels many times
    # over, 46-77 ms a call whatever the size, bench/NOTES.md b30; timed by its kernels.)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        measure(row, "cudnn", grad, cudnn, kernels=True)
    # Whether the two peers compute the same thing on this packing: cuDNN's output (the
    # backward: dQ) against flash's, the largest difference relative to flash's largest
    # element (bf16 rounding alone gives about 1e-2). Outside the timing.
    if "flash_ms" in row and "cudnn_ms" in row:
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                got = cudnn()[0]()
            got = got[0] if isinstance(got, (tuple, list)) else got.transpose(1, 2).values()
            want = flash()[0]()[0].float()
            row["cudnn_vs_flash"] = ((got.float() - want).abs().max() / want.abs().max()).item()
        except REFUSED as e:
            row["cudnn_vs_flash_error"] = said(e)[:200]
    return row


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="bench/attn_shapes.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--packed", action="store_true")
    a = ap.parse_args()
    if a.deterministic and not a.backward:
        ap.error("--deterministic is for the backward (--backward): the forward adds in one order")
    if a.deterministic:
        torch.use_deterministic_algorithms(True)
        # (Only the choice of algorithm: no NaN fills of new tensors inside the timings.)
        torch.utils.deterministic.fill_uninitialized_memory = False
    torch.manual_seed(0)
    res = []
    for c in json.load(open(a.shapes))["cases"]:
        if a.only and a.only not in c["name"]:
            continue
        if "lengths" in c and not a.packed:
            continue  # (ragged: packed sequences only, as attn_bench)
        row = (packed_row if a.packed else padded_row)(c, a.backward)
        print(json.dumps(row), flush=True)
        res.append(row)
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
               "pass": "backward" if a.backward else "forward",
               "deterministic": a.deterministic, "packed": a.packed,
               "results": res}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
