"""PyTorch eager on the shapes of `cargo xtask bench pytorch`: one workload, timed steps, one JSON line.

The same step as nervus measures: forward, backward, global-norm clipping at 1.0 and an AdamW
step (betas 0.9/0.999, eps 1e-8; decay on matrices only), on one fixed random batch.
- gpt-small / gpt-large: a GPT-2 (learned positions, LayerNorm, tanh GELU, biases, untied head
  without bias), vocabulary 65, batch 16, lr 1e-3, decay 0.1; attention through
  F.scaled_dot_product_attention, as a PyTorch user writes it (nanoGPT).
- dit: diffusers' DiTTransformer2DModel with the digits shape (28x28, patch 4, 4 layers, 4 heads
  of 32, 10 classes, adaLN-zero), the flow-matching loss, batch 64, no decay.
Run by the xtask with --threads set to nervus's thread count; prints {"rate": .., "unit": ..}.
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, c, heads):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(c)
        self.c_attn = nn.Linear(c, 3 * c)
        self.attn_proj = nn.Linear(c, c)
        self.ln_2 = nn.LayerNorm(c)
        self.c_fc = nn.Linear(c, 4 * c)
        self.mlp_proj = nn.Linear(4 * c, c)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, vocab, context, layers, heads, c):
        super().__init__()
        self.wte = nn.Embedding(vocab, c)
        self.wpe = nn.Embedding(context, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        self.lm_head = nn.Linear(c, vocab, bias=False)
        for p in self.parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, 0.0, 0.02)

    def loss(self, ids, targets):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def adamw(model, decay):
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.999), eps=1e-8), params


def gpt(shape, steps):
    layers, heads, c, context = shape
    batch, vocab = 16, 65
    model = Gpt(vocab, context, layers, heads, c)
    opt, params = adamw(model, 0.1)
    ids = torch.randint(0, vocab, (batch, context))
    targets = torch.randint(0, vocab, (batch, context))

    def step():
        opt.zero_grad(set_to_none=True)
        model.loss(ids, targets).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    return time_steps(step, steps) * batch * context, "characters/s", sum(p.numel() for p in params)


def dit(steps):
    from diffusers import DiTTransformer2DModel

    batch = 64
    model = DiTTransformer2DModel(
        num_attention_heads=4,
        attention_head_dim=32,
        in_channels=1,
        out_channels=1,
        num_layers=4,
        sample_size=28,
        patch_size=4,
        num_embeds_ada_norm=10,
        norm_type="ada_norm_zero",
        dropout=0.0,
    ).train()
    opt, params = adamw(model, 0.0)
    x = torch.rand(batch, 1, 28, 28) * 2 - 1
    noise = torch.randn(batch, 1, 28, 28)
    t = torch.rand(batch)
    labels = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        tt = t.view(-1, 1, 1, 1)
        xt = (1 - tt) * x + tt * noise
        pred = model(xt, timestep=t * 1000, class_labels=labels).sample
        F.mse_loss(pred, noise - x).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    return time_steps(step, steps) * batch, "images/s", sum(p.numel() for p in params)


def time_steps(step, steps):
    for _ in range(2):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps / (time.perf_counter() - start)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", required=True, choices=["gpt-small", "gpt-large", "dit"])
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--threads", type=int, required=True)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.workload == "gpt-small":
        rate, unit, n = gpt((2, 4, 64, 64), a.steps)
    elif a.workload == "gpt-large":
        rate, unit, n = gpt((6, 8, 256, 256), a.steps)
    else:
        rate, unit, n = dit(a.steps)
    assert math.isfinite(rate)
    print(json.dumps({"rate": rate, "unit": unit, "params": n, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
