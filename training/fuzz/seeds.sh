#!/bin/sh
# Writes corpus/<target>/seed-<k>: the fixture of each target with its k-th file as the input
# (byte k, then the file), so every file starts from a real one. Run from this directory.
set -e
seed() {
    target=$1; shift
    mkdir -p "corpus/$target"
    k=0
    for f in "$@"; do
        { printf "\\$(printf '%03o' "$k")"; cat "fixtures/$f"; } > "corpus/$target/seed-$k"
        k=$((k + 1))
    done
}
seed gpt_dir gpt/config.json gpt/model.safetensors gpt/tokenizer.json gpt/training.json
seed lm_dir lm/config.json lm/model.safetensors lm/tokenizer.json lm/training.json
seed dit_dir dit/config.json dit/diffusion_pytorch_model.safetensors
seed video_dir video/config.json video/diffusion_pytorch_model.safetensors
mkdir -p corpus/record
cp fixtures/gpt-checkpoint.record corpus/record/seed-0
