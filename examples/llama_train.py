"""A small Llama-style decoder trained twice from the same seed: once in plain
PyTorch, once with tilejit.enable() routing every linear layer (F.linear),
RMSNorm (F.rms_norm) and attention (F.scaled_dot_product_attention: GQA,
causal, forward and backward) through tilejit's kernels. Prints both loss
curves and step times, and which kernel each op used; writes JSON and a chart.

    python3 examples/llama_train.py --steps 200 --out /tmp/llama
"""
import argparse
import copy
import json
import math
import os
import time

import torch
import torch.nn.functional as F

import tilejit


class Attention(torch.nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.q = torch.nn.Linear(hidden, hidden, bias=False)
        self.kv = torch.nn.Linear(hidden, 2 * kv_heads * self.dim, bias=False)
        self.o = torch.nn.Linear(hidden, hidden, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.heads, self.dim).transpose(1, 2)
        k, v = self.kv(x).view(b, s, 2, self.kv_heads, self.dim).unbind(2)
        # q and k leave rope contiguous as [b, h, s, d]; v is made so too (the
        # three in one layout, as tilejit's attention takes them).
        k, v = k.transpose(1, 2), v.transpose(1, 2).contiguous()
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(y.transpose(1, 2).reshape(b, s, -1))


def rope(x, cos, sin):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), -1).to(x.dtype)


class Block(torch.nn.Module):
    def __init__(self, hidden, ffn, heads, kv_heads):
        super().__init__()
        self.n1 = torch.nn.RMSNorm(hidden, eps=1e-5)
        self.attn = Attention(hidden, heads, kv_heads)
        self.n2 = torch.nn.RMSNorm(hidden, eps=1e-5)
        self.gate_up = torch.nn.Linear(hidden, 2 * ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.n1(x), cos, sin)
        g, u = self.gate_up(self.n2(x)).chunk(2, -1)
        return x + self.down(F.silu(g) * u)


class Decoder(torch.nn.Module):
    def __init__(self, vocab=8192, hidden=1024, ffn=2816, layers=2, heads=16, kv_heads=4):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, hidden)
        self.blocks = torch.nn.ModuleList(Block(hidden, ffn, heads, kv_heads)
                                          for _ in range(layers))
        self.norm = torch.nn.RMSNorm(hidden, eps=1e-5)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)
        self.head_dim = hidden // heads

    def forward(self, tokens):
        s = tokens.shape[1]
        pos = torch.arange(s, device=tokens.device, dtype=torch.float32)
        inv = 1.0 / (10000 ** (torch.arange(0, self.head_dim, 2, device=tokens.device) /
                               self.head_dim))
        ang = torch.outer(pos, inv)
        cos, sin = ang.cos(), ang.sin()
        x = self.embed(tokens)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.head(self.norm(x))


def batches(steps, batch, seq, vocab, seed, device):
    """Synthetic sequences with structure to learn: each token follows from
    the one before it by a fixed map, with 10 % noise."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    table = torch.randperm(vocab, generator=g)
    for _ in range(steps):
        t = torch.empty(batch, seq + 1, dtype=torch.long)
        t[:, 0] = torch.randint(vocab, (batch,), generator=g)
        for i in range(1, seq + 1):
            nxt = table[t[:, i - 1]]
            noise = torch.rand(batch, generator=g) < 0.1
            t[:, i] = torch.where(noise, torch.randint(vocab, (batch,), generator=g), nxt)
        yield t.to(device)


def train(model, steps, batch, seq, seed, label):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    losses, times = [], []
    data = list(batches(steps, batch, seq, model.head.out_features, seed, "cuda"))
    for step, t in enumerate(data):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        logits = model(t[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), t[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
        if step % 20 == 0 or step == steps - 1:
            print(f"{label:8s} step {step:4d} loss {losses[-1]:.4f} "
                  f"step time {1e3 * times[-1]:.2f} ms", flush=True)
    return losses, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default="llama_train_out")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    base = Decoder().cuda().to(torch.bfloat16)
    plain_model, tj_model = copy.deepcopy(base), copy.deepcopy(base)

    torch.manual_seed(a.seed)
    plain, plain_t = train(plain_model, a.steps, a.batch, a.seq, a.seed, "pytorch")
    tilejit.enable()
    torch.manual_seed(a.seed)
    tj, tj_t = train(tj_model, a.steps, a.batch, a.seq, a.seed, "tilejit")
    # What each routed op ran (a kernel loaded for it, or what a first call
    # would do if it never reached tilejit).
    attn = tj_model.blocks[0].attn
    s = a.seq - 1
    bf = dict(device="cuda", dtype=torch.bfloat16)
    q = torch.empty(a.batch, attn.heads, s, attn.dim, **bf)
    kv = torch.empty(a.batch, attn.kv_heads, s, attn.dim, **bf)
    x = torch.empty(a.batch * s, attn.heads * attn.dim, **bf)
    routes = {"sdpa": tilejit.explain("sdpa", q, kv, kv, causal=True),
              "linear (o)": tilejit.explain("linear", x, attn.o.weight),
              "rms_norm": tilejit.explain("rms_norm", x, tj_model.blocks[0].n1.weight)}
    for name, text in routes.items():
        print(f"{name}:\n  " + "\n  ".join(text.strip().splitlines()))
    tilejit.disable()

    def steady(ts):
        ts = sorted(ts[10:])
        return ts[len(ts) // 2]
    rel = abs(tj[-1] - plain[-1]) / plain[-1]
    summary = {"steps": a.steps, "tokens_per_step": a.batch * a.seq,
               "final_loss_pytorch": plain[-1], "final_loss_tilejit": tj[-1],
               "final_loss_rel_diff": rel,
               "step_ms_median_pytorch": 1e3 * steady(plain_t),
               "step_ms_median_tilejit": 1e3 * steady(tj_t),
               "first_step_ms_pytorch": 1e3 * plain_t[0], "first_step_ms_tilejit": 1e3 * tj_t[0],
               "loss_pytorch": plain, "loss_tilejit": tj, "tilejit_kernels": routes}
    os.makedirs(a.out, exist_ok=True)
    json.dump(summary, open(os.path.join(a.out, "llama_train.json"), "w"), indent=1)
    print(f"final loss: pytorch {plain[-1]:.4f}, tilejit {tj[-1]:.4f} "
          f"({100 * rel:.2f} % apart)")
    print(f"median step (after 10): pytorch {summary['step_ms_median_pytorch']:.2f} ms, "
          f"tilejit {summary['step_ms_median_tilejit']:.2f} ms; first step "
          f"{summary['first_step_ms_pytorch']:.0f} / {summary['first_step_ms_tilejit']:.0f} ms "
          "(tilejit's compiles its kernels)")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 4.5))
        ax.plot(plain, label="PyTorch", linewidth=1.2)
        ax.plot(tj, label="tilejit (linears, RMSNorm, attention)", linewidth=1.2, linestyle="--")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss")
        ax.set_yscale("log")
        ax.set_title(f"2-layer decoder, hidden 1024, {a.batch}x{a.seq} tokens a step")
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(a.out, "llama_train.png"), dpi=110)
    except ImportError:
        print("no matplotlib: no chart")
    if not math.isfinite(tj[-1]):
        raise SystemExit("tilejit's loss is not finite")


if __name__ == "__main__":
    main()
