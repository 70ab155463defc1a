# Greedy continuation of a prompt by transformers from a directory `cargo run --example gpt` saved:
#   python docs/hf/gpt2_greedy.py out/gpt/model "ROMEO:" 150
# Compare with: cargo run --release --example gpt -- --load out/gpt/model --steps 0 --prompt "ROMEO:" --temperature 0 --length 150
import sys, torch, json
from transformers import GPT2LMHeadModel, PreTrainedTokenizerFast
d = sys.argv[1]
prompt = sys.argv[2]
n = int(sys.argv[3])
tok = PreTrainedTokenizerFast(tokenizer_file=f"{d}/tokenizer.json")
model = GPT2LMHeadModel.from_pretrained(d).eval()
ids = tok.encode(prompt)
assert tok.decode(ids) == prompt, (tok.decode(ids), prompt)
x = torch.tensor([ids])
with torch.no_grad():
    for _ in range(n):
        logits = model(x[:, -model.config.n_positions:]).logits[0, -1]
        x = torch.cat([x, logits.argmax().view(1, 1)], dim=1)
print(tok.decode(x[0].tolist()), end="")
