//! Train the modern language model (byte-level BPE, RoPE, RMSNorm, SwiGLU, QK-norm, soft-capped
//! logits) on a corpus of documents, evaluate it deterministically in bits per byte, sample from it.
//!
//! ```text
//! cargo run --release --example lm                                   # Jane Austen, small preset
//! cargo run --release --example lm -- --doc-mask --steps 500
//! cargo run --release --example lm -- --resume                       # continue a killed run
//! cargo run --release --example lm -- --load out/lm/model --steps 0 --prompt "It is a truth"
//! cargo run --release --example lm -- --download tinystories-valid
//! ```

use anyhow::Result;
use clap::Parser;
use nervus_inference::generate::SampleOptions;
use nervus_training::backend;
use nervus_training::chosen;
use nervus_training::lm::LmRun;
use nervus_training::options::{RunArgs, parse_with_defaults};
use nervus_training::report::{Reporter, Ui};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(
    about = "Train a BPE language model with the modern recipe and write with it",
    after_help = "--batch is windows per micro-batch; --save defaults to out/lm/model, or to the --load directory (whose tokenizer is kept); --steps 0 with --load just writes."
)]
struct Args {
    #[command(flatten)]
    run: RunArgs,
    /// Train and write in bfloat16 where the backend offers it (flex, cuda): weights, activations
    /// and optimizer state alike, not mixed precision. Saved models are f32 either way.
    #[arg(long)]
    bf16: bool,
    /// Size preset: tiny (tests), small (4 layers, d 128, context 128), kalia-58m (10, 512, 1024; GPU).
    #[arg(long, default_value = "small")]
    size: String,
    /// Override the preset's number of blocks.
    #[arg(long)]
    layers: Option<usize>,
    /// Override the preset's attention heads.
    #[arg(long)]
    heads: Option<usize>,
    /// Key/value heads (grouped-query attention; must divide --heads).
    #[arg(long)]
    kv_heads: Option<usize>,
    /// Override the preset's width.
    #[arg(long)]
    d_model: Option<usize>,
    /// Override the preset's context (tokens).
    #[arg(long)]
    context: Option<usize>,
    /// BPE vocabulary size (default: the preset's).
    #[arg(long)]
    vocab: Option<usize>,
    /// GPT-2's architecture instead of the modern one (LayerNorm, learned positions, GELU, biases).
    #[arg(long)]
    gpt2: bool,
    /// Turn QK-norm off.
    #[arg(long)]
    no_qk_norm: bool,
    /// Logit soft-cap c in c·tanh(z/c) (0 = off).
    #[arg(long, default_value_t = 30.0)]
    softcap: f64,
    /// Block-diagonal attention inside each document.
    #[arg(long)]
    doc_mask: bool,
    /// Micro-batches per optimizer step (gradients averaged).
    #[arg(long, default_value_t = 1)]
    accumulate: usize,
    /// muon (Newton-Schulz-orthogonalised momentum for the matrices, AdamW for the rest: kalia's
    /// winner), or adamw (everything).
    #[arg(long, default_value = "muon", value_parser = ["adamw", "muon"])]
    optimizer: String,
    /// Muon's peak learning rate (with --optimizer muon; the schedule scales it like --lr).
    #[arg(long, default_value_t = 0.02)]
    muon_lr: f64,
    /// Evaluation batches (fixed windows from the held-out documents).
    #[arg(long, default_value_t = 20)]
    eval_batches: usize,
    /// Share of the documents held out for evaluation (taken from the end).
    #[arg(long, default_value_t = 0.1)]
    held_out: f64,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.8)]
    temperature: f64,
    /// Sample only from the k most likely tokens.
    #[arg(long, default_value_t = 200)]
    top_k: usize,
    /// Text the samples continue.
    #[arg(long, default_value = "")]
    prompt: String,
    /// Tokens to write after the prompt.
    #[arg(long, default_value_t = 120)]
    length: usize,
    /// Train on this UTF-8 file (documents separated by lines `<|endoftext|>`, else the whole
    /// file is one document) instead of the Austen that ships with the repo.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Fetch a corpus into the cache directory: tinystories (2.2 GB) or tinystories-valid (22 MB).
    #[arg(long)]
    download: Option<String>,
}

/// mimalloc, keeping freed memory (`NERVUS_ALLOCATOR=system` for the system's; see `alloc.rs`).
#[global_allocator]
static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;

fn main() -> std::process::ExitCode {
    nervus_training::report::exit(train())
}

fn train() -> Result<()> {
    let args: Args = parse_with_defaults(&[("steps", "1500")]);
    if args.bf16 {
        // Before any tensor exists: a device's float type is fixed at its first use.
        burn::tensor::backend::set_default_float_dtype::<backend::Infer>(
            &backend::device(),
            burn::tensor::DType::BF16,
        )
        .map_err(|e| anyhow::anyhow!("--bf16 on the {} backend: {e:?}", backend::NAME))?;
    }
    let run_options = args.run.options_beside("out/lm/model")?;
    let ui = Ui::plain_or_auto(args.run.plain);
    let report = Reporter::new(ui, Some(run_options.run_dir.join("log.txt")));
    let spec = LmRun {
        run: run_options,
        size: args.size,
        layers: args.layers,
        heads: args.heads,
        kv_heads: args.kv_heads,
        d_model: args.d_model,
        context: args.context,
        vocab: args.vocab,
        gpt2: args.gpt2,
        qk_norm: !args.no_qk_norm,
        softcap: args.softcap,
        doc_mask: args.doc_mask,
        accumulation: args.accumulate,
        optimizer: args.optimizer,
        muon_lr: args.muon_lr,
        eval_batches: args.eval_batches,
        held_out: args.held_out,
        sample: SampleOptions {
            length: args.length,
            temperature: args.temperature,
            top_k: Some(args.top_k),
        },
        prompt: args.prompt.clone(),
        download: args.download,
        data: args.data,
    };
    let out = chosen::lm(&spec, &report)?;
    out.print_writes(&args.prompt);
    Ok(())
}
