"""Merges gemm_bench's and gemm_peer.py's results into a markdown table and a
chart of tilejit's TFLOP/s over cuBLAS's, shape by shape.

    python3 bench/gemm_report.py tilejit.json peer.json --name gemm_h200 --outdir bench/results
"""
import argparse
import json
import math
import os


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tilejit")
    ap.add_argument("peer")
    ap.add_argument("--name", default="gemm")
    ap.add_argument("--outdir", default="bench/results")
    ap.add_argument("--command", default="bench/run_gemm.sh")
    a = ap.parse_args()
    tj = json.load(open(a.tilejit))
    peer = json.load(open(a.peer))
    by = {r["name"]: r for r in peer["results"]}
    rows = []
    for r in tj["results"]:
        p = by.get(r["name"])
        ratio = r["tflops"] / p["tflops"] if p else None
        rows.append(dict(r, peer_tflops=p["tflops"] if p else None, ratio=ratio))
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else None
    os.makedirs(a.outdir, exist_ok=True)
    json.dump({"gpu": tj["gpu"], "torch": peer.get("torch"), "geomean_ratio": geo,
               "rows": rows}, open(os.path.join(a.outdir, a.name + ".json"), "w"), indent=1)
    tuned = sum(1 for r in rows if r.get("tuned"))
    md = [f"# {a.name}: {tj['gpu']}", "",
          f"Command: `{a.command}`. Peer: cuBLAS through torch {peer.get('torch')} "
          "`torch.matmul`, same run, random bf16 inputs, bf16 output. tilejit's config is in "
          f"each row: {tuned} of {len(rows)} from tuning, the others its default config (changed "
          "by the command's --config where it has one).", "",
          "| shape | layout | M | N | K | tilejit TFLOP/s | cuBLAS TFLOP/s | ratio | config | check |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        pt = "n/a" if r["peer_tflops"] is None else f"{r['peer_tflops']:.0f}"
        ra = "n/a" if r["ratio"] is None else f"{r['ratio']:.2f}"
        chk = "ok" if r["check_bad"] == 0 else f"{r['check_bad']} of 64 wrong"
        md.append(f"| {r['name']} | {r['layout']} | {r['m']} | {r['n']} | {r['k']} | "
                  f"{r['tflops']:.0f} | {pt} | {ra} | `{r['config']}` | {chk} |")
    if geo:
        md += ["", f"Geometric mean of the ratio: {geo:.3f}; lowest {min(ratios):.3f}."]
    open(os.path.join(a.outdir, a.name + ".md"), "w").write("\n".join(md) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = [r["name"] for r in rows if r["ratio"]]
        fig, ax = plt.subplots(figsize=(12, 5))
        ax.bar(range(len(names)), ratios, color=["tab:blue" if x >= 1 else "tab:orange"
                                                 for x in ratios])
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, rotation=75, ha="right", fontsize=7)
        ax.set_ylabel("tilejit / cuBLAS (TFLOP/s)")
        ax.set_title(f"GEMM, {'tuned' if tuned else 'default'} configs, {tj['gpu']} "
                     f"(geomean {geo:.2f})")
        fig.tight_layout()
        fig.savefig(os.path.join(a.outdir, a.name + ".png"), dpi=110)
    except ImportError:
        print("gemm_report: no matplotlib; no chart drawn")
    print("\n".join(md))


if __name__ == "__main__":
    main()
