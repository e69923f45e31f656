"""Merges gemm_bench's and gemm_peer.py's results into a markdown table and a
chart of tilejit's TFLOP/s over cuBLAS's, shape by shape.

    python3 bench/gemm_report.py tilejit.json peer.json --name gemm_h200 --outdir bench/results
"""
import argparse
import json
import os

from report_common import geomean, tune_walls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tilejit")
    ap.add_argument("peer")
    ap.add_argument("--name", default="gemm")
    ap.add_argument("--outdir", default="bench/results")
    ap.add_argument("--command", default="bench/run_gemm.sh")
    ap.add_argument("--default", default="",
                    help="gemm_bench's results with default configs, from the same run: a column "
                         "and a ratio beside the tuned ones")
    ap.add_argument("--tune-walls", default="",
                    help="'name|milliseconds' lines: each shape's tuning wall time")
    a = ap.parse_args()
    tj = json.load(open(a.tilejit))
    peer = json.load(open(a.peer))
    by = {r["name"]: r for r in peer["results"]}
    rows = []
    for r in tj["results"]:
        p = by.get(r["name"])
        ratio = r["tflops"] / p["tflops"] if p else None
        rows.append(dict(r, peer_tflops=p["tflops"] if p else None, ratio=ratio))
    dflt = {r["name"]: r for r in json.load(open(a.default))["results"]} if a.default else {}
    walls = tune_walls(a.tune_walls)
    for r in rows:
        d = dflt.get(r["name"])
        r["default_tflops"] = d["tflops"] if d else None
        r["default_config"] = d["config"] if d else None
        r["default_check_bad"] = d["check_bad"] if d else None
        r["default_ratio"] = (d["tflops"] / r["peer_tflops"]
                              if d and r["peer_tflops"] else None)
        r["tune_wall_s"] = walls.get(r["name"])

    ratios = [r["ratio"] for r in rows if r["ratio"]]
    geo = geomean(ratios)
    dratios = [r["default_ratio"] for r in rows if r["default_ratio"]]
    dgeo = geomean(dratios)
    os.makedirs(a.outdir, exist_ok=True)
    json.dump({"gpu": tj["gpu"], "torch": peer.get("torch"), "geomean_ratio": geo,
               "default_geomean_ratio": dgeo, "rows": rows}, open(os.path.join(a.outdir, a.name + ".json"), "w"), indent=1)
    tuned = sum(1 for r in rows if r.get("tuned"))
    md = [f"# {a.name}: {tj['gpu']}", "",
          f"Command: `{a.command}`. Peer: cuBLAS through torch {peer.get('torch')} "
          "`torch.matmul`, same run, random bf16 inputs, bf16 output. tilejit's config is in "
          f"each row: {tuned} of {len(rows)} from tuning, the others its default config (changed "
          "by the command's --config where it has one).", "",
          ]
    if dflt:
        md += ["| shape | layout | M | N | K | tuned TFLOP/s | default TFLOP/s | cuBLAS TFLOP/s "
               "| tuned ratio | default ratio | tuned config | tuning s | check |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    else:
        md += ["| shape | layout | M | N | K | tilejit TFLOP/s | cuBLAS TFLOP/s | ratio | config "
               "| check |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]

    def num(x, f):
        return "n/a" if x is None else format(x, f)

    for r in rows:
        bad, dbad = r["check_bad"], r["default_check_bad"] or 0
        chk = "ok" if bad + dbad == 0 else \
            "; ".join(f"{n} {what} wrong" for n, what in ((bad, "sampled elements"),
                                                          (dbad, "with the default config"))
                      if n)
        if dflt:
            md.append(f"| {r['name']} | {r['layout']} | {r['m']} | {r['n']} | {r['k']} | "
                      f"{r['tflops']:.0f} | {num(r['default_tflops'], '.0f')} | "
                      f"{num(r['peer_tflops'], '.0f')} | {num(r['ratio'], '.2f')} | "
                      f"{num(r['default_ratio'], '.2f')} | `{r['config']}` | "
                      f"{num(r['tune_wall_s'], '.1f')} | {chk} |")
        else:
            md.append(f"| {r['name']} | {r['layout']} | {r['m']} | {r['n']} | {r['k']} | "
                      f"{r['tflops']:.0f} | {num(r['peer_tflops'], '.0f')} | "
                      f"{num(r['ratio'], '.2f')} | `{r['config']}` | {chk} |")
    if geo:
        md += ["", f"Geometric mean of the ratio{' (tuned)' if dflt else ''}: {geo:.3f}; "
               f"lowest {min(ratios):.3f}."]
    if dgeo:
        md += [f"Default configs: geometric mean {dgeo:.3f}; lowest {min(dratios):.3f}."]
    tw = [r["tune_wall_s"] for r in rows if r["tune_wall_s"] is not None]
    if tw:
        md += [f"Tuning wall time per shape (`tilejit tune gemm --max-configs 48`, process start "
               f"to exit, compile included): median {sorted(tw)[len(tw) // 2]:.1f} s, "
               f"longest {max(tw):.1f} s."]
    open(os.path.join(a.outdir, a.name + ".md"), "w").write("\n".join(md) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = [r["name"] for r in rows if r["ratio"]]
        fig, ax = plt.subplots(figsize=(12, 5))
        if dflt:
            xs = range(len(names))
            dr = [r["default_ratio"] or 0 for r in rows if r["ratio"]]
            ax.bar([x - 0.2 for x in xs], ratios, width=0.4, color="tab:blue",
                   label=f"tuned (geomean {geo:.2f})")
            ax.bar([x + 0.2 for x in xs], dr, width=0.4, color="tab:gray",
                   label=f"default (geomean {dgeo:.2f})" if dgeo else "default")
            ax.legend()
        else:
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
