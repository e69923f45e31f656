"""Times torch F.rms_norm forward and backward, and the copy bandwidth, on
the same shapes as rmsnorm_bench, for the comparison in the same run.

    python3 bench/rmsnorm_peer.py --shapes 16384x4096,16384x8192 --out peer.json
"""
import argparse
import json

import torch
import torch.nn.functional as F


def median_ms(fn, reps, warmup=10, inner=10):
    """Median ms per call over samples of `inner` calls enqueued back to back,
    as rmsnorm_bench times tilejit."""
    for i in range(warmup):
        fn(i)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    times = []
    for i in range(reps):
        start.record()
        for j in range(inner):
            fn(i * inner + j)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / inner)
    times.sort()
    return times[len(times) // 2]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default="16384x4096,16384x8192")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--out", default="rmsnorm_peer.json")
    a = p.parse_args()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[a.dtype]
    dev = torch.device("cuda")
    result = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "shapes": []}

    n = 1 << 29  # 1 GiB of bf16
    src = torch.randn(n, device=dev, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    ms = median_ms(lambda i: dst.copy_(src), 30)
    result["copy_tbs"] = 2 * src.numel() * 2 / (ms * 1e-3) / 1e12
    del src, dst

    for shape in a.shapes.split(","):
        rows, cols = (int(v) for v in shape.split("x"))
        xs = [torch.randn(rows, cols, device=dev, dtype=dtype) for _ in range(2)]
        dys = [torch.randn(rows, cols, device=dev, dtype=dtype) for _ in range(2)]
        w = torch.randn(cols, device=dev, dtype=dtype)
        fwd = median_ms(lambda i: F.rms_norm(xs[i & 1], (cols,), w, 1e-5), a.reps)
        # Backward alone: the graph is built once per input set, then replayed.
        xr = [x.clone().requires_grad_(True) for x in xs]
        wr = w.clone().requires_grad_(True)
        outs = [F.rms_norm(x, (cols,), wr, 1e-5) for x in xr]

        def bwd(i):
            torch.autograd.grad(outs[i & 1], (xr[i & 1], wr), dys[i & 1], retain_graph=True)

        bwd_ms = median_ms(bwd, a.reps)
        elems = rows * cols * xs[0].element_size()
        result["shapes"].append({
            "shape": shape, "dtype": a.dtype,
            "fwd_ms": fwd, "fwd_tbs": 2 * elems / (fwd * 1e-3) / 1e12,
            "bwd_ms": bwd_ms, "bwd_tbs": 3 * elems / (bwd_ms * 1e-3) / 1e12,
        })
        print(f"torch rms_norm {shape} {a.dtype}: fwd {fwd:.4f} ms, bwd {bwd_ms:.4f} ms")
    with open(a.out, "w") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
