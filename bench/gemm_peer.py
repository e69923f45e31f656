"""cuBLAS (through torch.matmul) on bench/gemm_shapes.json, timed as gemm_bench
times tilejit: random bf16 inputs stored as each layout stores them, CUDA
events, the median of 20 samples of 5 back-to-back products.

    python3 bench/gemm_peer.py --shapes bench/gemm_shapes.json --out peer.json
"""
import argparse
import json

import torch


def shapes(path):
    s = json.load(open(path))
    t = s.get("tokens", 8192)
    out = []
    for l in s["linears"]:
        nm = f"{l['model']} {l['name']}"
        out.append((nm + " fwd", "nt", t, l["out"], l["in"]))
        out.append((nm + " dgrad", "nn", t, l["in"], l["out"]))
        out.append((nm + " wgrad", "tn", l["out"], l["in"], t))
    for c in s["cubes"]:
        out.append((f"{c}^3", "nt", c, c, c))
    for x in s.get("shapes", []):
        out.append((x["name"], x["layout"], x["m"], x["n"], x["k"]))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="bench/gemm_shapes.json")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    torch.manual_seed(0)
    res = []
    for name, layout, m, n, k in shapes(a.shapes):
        if a.only and a.only not in name:
            continue
        dt = torch.bfloat16
        # Storage as the layout says; the product takes views.
        A = torch.randn(k, m, device="cuda", dtype=dt).t() if layout[0] == "t" else \
            torch.randn(m, k, device="cuda", dtype=dt)
        B = torch.randn(n, k, device="cuda", dtype=dt).t() if layout[1] == "t" else \
            torch.randn(k, n, device="cuda", dtype=dt)
        D = torch.empty(m, n, device="cuda", dtype=dt)
        for _ in range(5):
            torch.matmul(A, B, out=D)
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        ms = []
        for _ in range(20):
            e0.record()
            for _ in range(5):
                torch.matmul(A, B, out=D)
            e1.record()
            e1.synchronize()
            ms.append(e0.elapsed_time(e1) / 5)
        ms.sort()
        med = ms[len(ms) // 2]
        tf = 2.0 * m * n * k / (med * 1e-3) / 1e12
        print(f"{name:26s} {layout:3s} {m:6d} {n:6d} {k:6d}  {med:8.4f} {tf:8.1f}", flush=True)
        res.append({"name": name, "layout": layout, "m": m, "n": n, "k": k, "ms": med,
                    "tflops": tf})
        del A, B, D
        torch.cuda.empty_cache()
    json.dump({"torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
               "results": res}, open(a.out, "w"), indent=1)


if __name__ == "__main__":
    main()
