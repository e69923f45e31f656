"""Merges attn_bench's and attn_peer.py's results into a markdown table and a
chart of TFLOP/s per case: tilejit, torch SDPA with cuDNN, with flash.

    python3 bench/attn_report.py tilejit.json peer.json --name attn_h200 --outdir bench/results

With --default (attn_bench's results with default configs, same run) the
first file is the tuned run (attn_bench --db): the table shows both, and
--tune-walls ('name|milliseconds' lines) each case's tuning wall time.
"""
import argparse
import json
import os

from report_common import geomean, tune_walls

# cuDNN's result (packed: O, or dQ in the backward) farther than this from flash's, relative to
# flash's largest element, is wrong: bf16's rounding alone gives about 1e-2.
WRONG = 2e-2


def repeat_lines(peer_rows):
    """The backward peers' repeatability (attn_peer.py's `*_repeatable`): for each back end,
    in how many cases its gradients came out bitwise equal over three runs, and which
    differed; then where it did not run, and why."""
    out = []
    for label, what in (("cudnn", "cuDNN"), ("flash", "flash")):
        seen = [r for r in peer_rows if label + "_repeatable" in r]
        if seen:
            differed = [r["name"] for r in seen if not r[label + "_repeatable"]]
            out.append(f"{what}'s gradients bitwise equal over three runs in "
                       f"{len(seen) - len(differed)} of {len(seen)} cases" +
                       (f"; they differed at {', '.join(differed)}." if differed else "."))
        # (A back end's failures grouped by their message.)
        failed = {}
        for r in peer_rows:
            if label + "_error" in r:
                failed.setdefault(r[label + "_error"], []).append(r["name"])
        for why, names in failed.items():
            where = (f"any of the {len(names)} cases" if len(names) == len(peer_rows)
                     else ", ".join(names))
            out.append(f"{what} did not run at {where}: {why}.")
    return out


def agreement_lines(peer_rows):
    """Packed peers: how far cuDNN's output (the backward: dQ) lay from flash's in each case
    (attn_peer.py's `cudnn_vs_flash`), and where it lay past bf16's rounding."""
    seen = [r for r in peer_rows if "cudnn_vs_flash" in r]
    if not seen:
        return []
    far = [f"{r['name']} ({r['cudnn_vs_flash']:.2g})" for r in seen if r["cudnn_vs_flash"] > WRONG]
    worst = max(r["cudnn_vs_flash"] for r in seen)
    return [f"cuDNN's result against flash's, the largest difference relative to flash's "
            f"largest element: at most {worst:.2g} over {len(seen)} cases" +
            (f"; past {WRONG:g} (more than bf16's rounding) at {', '.join(far)}: cuDNN's "
             "result is wrong there, its column marked so and left out of the geometric mean "
             "against it." if far else ".")]


def kernel_lines(peer_rows):
    """Peers timed by their kernels (attn_peer.py's kernel_ms): what each case's time was
    made of: the sum a call and its three longest kinds of device work."""
    out = []
    for r in peer_rows:
        parts = r.get("cudnn_kernels")
        if not parts:
            continue
        total = sum(p[1] for p in parts)
        top = "; ".join(f"`{p[0][:60]}` {p[1]:.0f} us x{p[2]:g}" for p in parts[:3])
        out.append(f"- {r['name']}: cuDNN's {total:.0f} us a call in {len(parts)} kinds of "
                   f"device work, the longest {top}.")
    return ["What cuDNN's kernel time is made of (torch's profiler, a mean of 10 calls):"] + out \
        if out else []


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tilejit")
    ap.add_argument("peer")
    ap.add_argument("--name", default="attn")
    ap.add_argument("--outdir", default="bench/results")
    ap.add_argument("--command", default="bench/run_attn.sh")
    ap.add_argument("--default", default="")
    ap.add_argument("--tune-walls", default="")
    a = ap.parse_args()
    dflt = ({r["name"]: r for r in json.load(open(a.default))["results"] if "skipped" not in r}
            if a.default else {})
    walls = tune_walls(a.tune_walls)
    tj = json.load(open(a.tilejit))
    peer = json.load(open(a.peer))
    by = {r["name"]: r for r in peer["results"]}
    rows = []
    skipped = [r for r in tj["results"] if "skipped" in r]
    for r in tj["results"]:
        if "skipped" in r:
            continue
        p = by.get(r["name"], {})
        cu, fl = p.get("cudnn_tflops"), p.get("flash_tflops")
        d = dflt.get(r["name"])
        # (Packed: cuDNN's result past bf16's rounding of flash's is a wrong one; its
        # speed is not a bar there, and the geometric mean leaves it out.)
        wrong = p.get("cudnn_vs_flash", 0.0) > WRONG
        rows.append(dict(r, cudnn_tflops=cu, flash_tflops=fl, cudnn_wrong=wrong,
                         vs_cudnn=r["tflops"] / cu if cu else None,
                         vs_flash=r["tflops"] / fl if fl else None,
                         default_tflops=d["tflops"] if d else None,
                         default_config=d["config"] if d else None,
                         default_check_bad=d["check_bad"] if d else 0,
                         default_vs_cudnn=d["tflops"] / cu if d and cu else None,
                         tune_wall_s=walls.get(r["name"])))
    right = [r for r in rows if not r["cudnn_wrong"]]
    gc, gf = geomean([r["vs_cudnn"] for r in right]), geomean([r["vs_flash"] for r in rows])
    gd = geomean([r["default_vs_cudnn"] for r in right])
    bwd = peer.get("pass") == "backward"
    # (The backward's mode: attn_bench --nondeterministic writes deterministic = false.)
    modes = {r.get("deterministic") for r in rows}
    mode = ("" if not bwd or len(modes) != 1 or None in modes else
            " in its deterministic mode (bitwise repeatable)" if True in modes else
            " in its fast mode (dQ added atomically)")
    what = ("Backward only (dQ, dK, dV from a saved forward), tilejit" + mode if bwd
            else "Forward only")
    os.makedirs(a.outdir, exist_ok=True)
    json.dump({"gpu": tj["gpu"], "torch": peer.get("torch"), "geomean_vs_cudnn": gc,
               "geomean_vs_flash": gf, "default_geomean_vs_cudnn": gd, "rows": rows,
               "skipped": skipped},
              open(os.path.join(a.outdir, a.name + ".json"), "w"), indent=1)
    f = lambda x, fmt="{:.0f}": "n/a" if x is None else fmt.format(x)
    vc = lambda r: f(r["vs_cudnn"], "{:.2f}") + (" (wrong)" if r["cudnn_wrong"] else "")
    calls = [r["cudnn_call_ms"] for r in peer["results"] if "cudnn_call_ms" in r]
    cudnn_calls = f"{min(calls):.1f} to {max(calls):.1f} ms" if calls else ""
    peers = (f"torch {peer.get('torch')}'s FlashAttention-2 varlen kernels "
             "(`aten::_flash_attention_forward`/`_backward` with cu_seqlens) and "
             "`F.scaled_dot_product_attention` with the cuDNN back end on nested jagged tensors, "
             "all on packed sequences ([tokens, h, d]); TFLOP/s sum each sequence's work; "
             + ("cuDNN's time is its kernels' device time alone (torch's profiler; no gaps "
                "between them), since a call's host work outlasts them (on events a call took "
                f"{cudnn_calls}); "
                if cudnn_calls else "") +
             "tilejit takes the same packing (THD) and runs "
             if peer.get("packed") else
             f"torch {peer.get('torch')} `F.scaled_dot_product_attention` with the cuDNN and the "
             "flash back ends ([b, h, s, d] inputs); tilejit takes [b, s, h, d] and runs ")
    md = [f"# {a.name}: {tj['gpu']}", "",
          f"Command: `{a.command}`. {what}, bf16, random inputs. Peers in the same run: " + peers
          + (f"the config `tilejit tune` chose ({sum(1 for r in rows if r.get('tuned'))} of "
             f"{len(rows)} cases; the others their default) beside its default config."
             if dflt else "its default config.")
          + " TFLOP/s count a causal mask as half the work"
          + (", and the backward pass as 2.5 times the forward." if bwd else ".")
          + (" The peers ran under `torch.use_deterministic_algorithms(True)` (attn_peer.py "
             "--deterministic)." if peer.get("deterministic") else ""), ""]
    if dflt:
        md += ["| case | tuned TFLOP/s | default | cuDNN | flash | tuned vs cuDNN | default vs "
               "cuDNN | tuned vs flash | tuned config | tuning s | check |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    else:
        md += ["| case | tilejit TFLOP/s | cuDNN | flash | vs cuDNN | vs flash | config | check |",
               "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        bad = r["check_bad"] + r["default_check_bad"]
        chk = "ok" if bad == 0 else f"{bad} wrong"
        if dflt:
            md.append(f"| {r['name']} | {r['tflops']:.0f} | {f(r['default_tflops'])} | "
                      f"{f(r['cudnn_tflops'])} | {f(r['flash_tflops'])} | "
                      f"{vc(r)} | {f(r['default_vs_cudnn'], '{:.2f}')}"
                      f"{' (wrong)' if r['cudnn_wrong'] else ''} | "
                      f"{f(r['vs_flash'], '{:.2f}')} | `{r['config']}` | "
                      f"{f(r['tune_wall_s'], '{:.1f}')} | {chk} |")
        else:
            md.append(f"| {r['name']} | {r['tflops']:.0f} | {f(r['cudnn_tflops'])} | "
                      f"{f(r['flash_tflops'])} | {vc(r)} | "
                      f"{f(r['vs_flash'], '{:.2f}')} | `{r['config']}` | {chk} |")
    blank = " |" * (9 if dflt else 6)
    md += [f"| {r['name']} | skipped: {r['skipped']} |{blank}" for r in skipped]
    nwrong = len(rows) - len(right)
    md += ["", f"Geometric mean{' (tuned)' if dflt else ''}: {f(gc, '{:.3f}')} x cuDNN"
           + (f" (over the {len(right)} cases where its result is right)" if nwrong else "")
           + f", {f(gf, '{:.3f}')} x flash"
           + (" (over the cases tilejit ran)." if skipped else ".")]
    if dflt:
        md += [f"Default configs: {f(gd, '{:.3f}')} x cuDNN."]
    md += (repeat_lines(peer["results"]) + agreement_lines(peer["results"]) +
           kernel_lines(peer["results"]))
    open(os.path.join(a.outdir, a.name + ".md"), "w").write("\n".join(md) + "\n")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        names = [r["name"] for r in rows]
        x = range(len(names))
        fig, ax = plt.subplots(figsize=(11, 5))
        bars = (("tflops", "tilejit tuned" if dflt else "tilejit"),) + \
            ((("default_tflops", "tilejit default"),) if dflt else ()) + \
            (("cudnn_tflops", "cuDNN"), ("flash_tflops", "flash (FA2)"))
        w = 0.8 / len(bars)
        for i, (key, label) in enumerate(bars):
            ax.bar([xi + (i - (len(bars) - 1) / 2) * w for xi in x], [r[key] or 0 for r in rows],
                   w, label=label)
        ax.set_xticks(list(x))
        ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("TFLOP/s")
        short = ("" if not mode else " (deterministic)" if True in modes else " (fast mode)")
        ax.set_title(f"Attention {'backward' + short if bwd else 'forward'}, bf16, {tj['gpu']}")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(a.outdir, a.name + ".png"), dpi=110)
    except ImportError:
        print("attn_report: no matplotlib; no chart drawn")
    print("\n".join(md))


if __name__ == "__main__":
    main()
