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

    python3 bench/attn_peer.py --shapes bench/attn_shapes.json --out peer.json [--backward]
        [--deterministic]
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


def repeatable(fn, runs=3):
    """Whether fn's tensors come out bitwise equal (their bytes) over `runs` calls."""
    def bits(t):
        return t.contiguous().view(torch.uint8)

    first = [bits(t) for t in fn()]
    for _ in range(runs - 1):
        if not all(torch.equal(a, bits(b)) for a, b in zip(first, fn())):
            return False
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="bench/attn_shapes.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    ap.add_argument("--backward", action="store_true")
    ap.add_argument("--deterministic", action="store_true")
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
        b, hq, hkv, s, d, causal = c["b"], c["hq"], c["hkv"], c["s"], c["d"], c["causal"]
        dt = torch.bfloat16
        grad = a.backward
        q = torch.randn(b, hq, s, d, device="cuda", dtype=dt, requires_grad=grad)
        k = torch.randn(b, hkv, s, d, device="cuda", dtype=dt, requires_grad=grad)
        v = torch.randn(b, hkv, s, d, device="cuda", dtype=dt, requires_grad=grad)
        do = torch.randn(b, hq, s, d, device="cuda", dtype=dt)
        flops = 4.0 * b * hq * s * s * d / (2 if causal else 1) * (2.5 if grad else 1)
        row = {"name": c["name"]}
        for label, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),
                               ("flash", SDPBackend.FLASH_ATTENTION)):
            kk, vv, gqa = k, v, hq != hkv
            # (Warnings recorded: a back end's refusal under
            # use_deterministic_algorithms says why only in one.)
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                try:
                    with sdpa_kernel(backend):
                        try:
                            F.scaled_dot_product_attention(q, kk, vv, is_causal=causal,
                                                           enable_gqa=gqa)
                        except RuntimeError:
                            kk = k.detach().repeat_interleave(hq // hkv, dim=1).requires_grad_(grad)
                            vv = v.detach().repeat_interleave(hq // hkv, dim=1).requires_grad_(grad)
                            gqa = False
                        if grad:
                            out = F.scaled_dot_product_attention(q, kk, vv, is_causal=causal,
                                                                 enable_gqa=gqa)
                            grads = lambda: torch.autograd.grad(out, (q, kk, vv), do,
                                                                retain_graph=True)
                            ms = time_ms(grads)
                        else:
                            ms = time_ms(lambda: F.scaled_dot_product_attention(
                                q, kk, vv, is_causal=causal, enable_gqa=gqa))
                    row[label + "_ms"] = ms
                    row[label + "_tflops"] = flops / (ms * 1e-3) / 1e12
                except RuntimeError as e:
                    why = [str(w.message).splitlines()[0] for w in seen
                           if "determinis" in str(w.message)]
                    row[label + "_error"] = (str(e).splitlines()[0] +
                                             (f" ({'; '.join(dict.fromkeys(why))})" if why
                                              else ""))[:200]
                    continue
            if grad:
                try:
                    row[label + "_repeatable"] = repeatable(grads)
                except RuntimeError as e:
                    row[label + "_repeatable_error"] = str(e).splitlines()[0][:200]
                del out, grads
        print(json.dumps(row), flush=True)
        res.append(row)
        del q, k, v, do
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
               "pass": "backward" if a.backward else "forward",
               "deterministic": a.deterministic,
               "results": res}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
