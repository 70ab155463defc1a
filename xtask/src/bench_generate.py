"""transformers' generate on the CPU, timed as `cargo xtask bench generate` times the engine.

    python bench_generate.py --prompt 16 --new 128 --threads 2

A GPT2LMHeadModel of OpenAI's 124M shape with its own random weights (nothing downloaded), the
prompt's ids drawn as the Rust side draws them, greedy, KV cache on. Prints one JSON line: time to
the first new token (one forward pass over the prompt, as `generate` makes it) and tokens a second
of the whole `generate` call after that first token's time.
"""

import argparse
import json
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

p = argparse.ArgumentParser()
p.add_argument("--prompt", type=int, required=True)
p.add_argument("--new", type=int, required=True)
p.add_argument("--threads", type=int, required=True)
a = p.parse_args()
torch.set_num_threads(a.threads)
torch.manual_seed(0)
model = GPT2LMHeadModel(GPT2Config()).eval()
ids = torch.tensor([[(i * 7919) % 50257 for i in range(a.prompt)]])
with torch.inference_mode():
    model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
    t0 = time.perf_counter()
    model(ids, use_cache=True)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    out = model.generate(
        ids, max_new_tokens=a.new, min_new_tokens=a.new, do_sample=False, pad_token_id=0
    )
    total = time.perf_counter() - t0
assert out.shape[1] == a.prompt + a.new
print(json.dumps({"first_token_s": first, "tokens_per_s": (a.new - 1) / max(total - first, 1e-9)}))
