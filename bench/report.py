"""Merges rmsnorm_bench and rmsnorm_peer results into bench/results/<name>.json
and a markdown table (GPU, date, peer in the same run, the command).

    python3 bench/report.py tilejit.json peer.json --name rmsnorm --command "..."
"""
import argparse
import json
import os


def main():
    p = argparse.ArgumentParser()
    p.add_argument("tilejit")
    p.add_argument("peer")
    p.add_argument("--name", default="rmsnorm")
    p.add_argument("--outdir", default=os.path.join(os.path.dirname(__file__), "results"))
    p.add_argument("--command", default="bench/run_rmsnorm.sh")
    a = p.parse_args()
    tj = json.load(open(a.tilejit))
    peer = json.load(open(a.peer))
    by_shape = {s["shape"]: s for s in peer["shapes"]}
    rows = []
    for s in tj["shapes"]:
        q = by_shape.get(s["shape"], {})
        rows.append({
            "shape": s["shape"], "dtype": s["dtype"],
            "tilejit_fwd_tbs": s["fwd_tbs"], "torch_fwd_tbs": q.get("fwd_tbs"),
            "fwd_vs_copy": s["fwd_tbs"] / tj["copy_tbs"],
            "fwd_vs_torch": s["fwd_tbs"] / q["fwd_tbs"] if q else None,
            "tilejit_bwd_tbs": s["bwd_tbs"], "torch_bwd_tbs": q.get("bwd_tbs"),
            "bwd_vs_copy": s["bwd_tbs"] / tj["copy_tbs"],
            "bwd_vs_torch": s["bwd_tbs"] / q["bwd_tbs"] if q else None,
            "fwd_config": s["fwd_config"], "bwd_config": s["bwd_config"],
            "lookup_us": s["lookup_us"],
        })
    merged = {"gpu": tj["gpu"], "date": tj["date"], "command": a.command,
              "copy_tbs": tj["copy_tbs"], "torch_copy_tbs": peer.get("copy_tbs"),
              "torch": peer.get("torch"),
              "compile_first_ms": tj["compile_first_ms"],
              "compile_median_ms": tj["compile_median_ms"],
              "compile_mlir_ms": tj["compile_mlir_ms"],
              "backend": tj.get("backend", "cuda"),
              "compile_binary_ms": tj["compile_binary_ms"], "rows": rows}
    os.makedirs(a.outdir, exist_ok=True)
    with open(os.path.join(a.outdir, a.name + ".json"), "w") as f:
        json.dump(merged, f, indent=2)
    ptx = tj.get("backend", "cuda") != "cuda"
    md = [f"# {a.name}: {tj['gpu']}, {tj['date']}", "",
          f"Back end: {'NVPTX (LLVM, ptxas)' if ptx else 'CUDA C++ (NVRTC)'}.",
          f"Command: `{a.command}`. Peer: torch {peer.get('torch')} `F.rms_norm`, same run. "
          f"Copy bandwidth (D2D, read + write): {tj['copy_tbs']:.2f} TB/s.",
          f"Compile (spec to cubin, rmsnorm_fwd 4096): first {tj['compile_first_ms']:.1f} ms, "
          f"then median {tj['compile_median_ms']:.1f} ms (MLIR + {'LLVM' if ptx else 'C++'} "
          f"{tj['compile_mlir_ms']:.1f}, {'ptxas' if ptx else 'NVRTC'} "
          f"{tj['compile_binary_ms']:.1f}).", "",
          "| shape | dtype | fwd TB/s | torch fwd | fwd / copy | fwd / torch | bwd TB/s | torch bwd | bwd / copy | bwd / torch | lookup us |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        def f(v, fmt="{:.2f}"):
            return "n/a" if v is None else fmt.format(v)
        md.append(f"| {r['shape']} | {r['dtype']} | {f(r['tilejit_fwd_tbs'])} | {f(r['torch_fwd_tbs'])} | "
                  f"{f(r['fwd_vs_copy'], '{:.0%}')} | {f(r['fwd_vs_torch'])}x | {f(r['tilejit_bwd_tbs'])} | "
                  f"{f(r['torch_bwd_tbs'])} | {f(r['bwd_vs_copy'], '{:.0%}')} | {f(r['bwd_vs_torch'])}x | "
                  f"{f(r['lookup_us'], '{:.3f}')} |")
    md.append("")
    md.append("Configs: " + "; ".join(f"{r['shape']} fwd [{r['fwd_config']}] bwd [{r['bwd_config']}]" for r in rows))
    with open(os.path.join(a.outdir, a.name + ".md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
