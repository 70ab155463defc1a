//! The bad-input table: every row runs an example binary, as a user would, on a bad file, a
//! damaged model directory or a nonsense number, and holds the rules: no panic and no backtrace,
//! exit status 1 (2 for a flag clap cannot parse), a first line that names the file or the value,
//! and a good model pointed at by a failing run left byte-identical. The table in
//! `docs/bad-input.md` is this suite's output: a row that changes fails the test until the table
//! is regenerated with `NERVUS_BLESS=1 cargo test --release --test bad_input`.
//!
//! The examples are built by `cargo test` before any test runs (`cargo test --test bad_input`
//! alone does not build them: the test says so).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The scratch directory every command runs in; paths in the table are relative to it.
fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("nervus-bad-input-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `target/<profile>/examples/<name>`, beside this test's own `deps/` directory.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let profile = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps/<test>");
    let bin = profile
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is not built: run the whole package's tests (`cargo test --release --workspace`), which build the examples first",
        bin.display()
    );
    bin
}

struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(dir: &Path, name: &str, args: &[&str]) -> Outcome {
    let out = Command::new(example(name))
        .args(args)
        .current_dir(dir)
        // Nothing from the user's cache, and Burn's TUI never (output is piped anyway).
        .env("NERVUS_DATA", dir.join("cache"))
        // The engine's model home: the trained model `good` and nothing else.
        .env("NERVUS_HOME", dir.join("home"))
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap_or_else(|e| panic!("starting {name}: {e}"));
    Outcome {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// Flags for a model small enough that a run takes a second.
const TINY: &[&str] = &[
    "--layers",
    "1",
    "--d-model",
    "8",
    "--heads",
    "2",
    "--context",
    "8",
    "--steps",
    "4",
    "--eval-every",
    "2",
    "--eval-windows",
    "4",
    "--batch",
    "4",
    "--length",
    "20",
    "--plain",
];

const LM_TINY: &[&str] = &[
    "--size",
    "tiny",
    "--steps",
    "2",
    "--eval-every",
    "2",
    "--eval-batches",
    "1",
    "--batch",
    "2",
    "--length",
    "5",
    "--plain",
];

/// Deterministic noise (the table must not change from run to run).
fn noise(n: usize) -> Vec<u8> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// An IDX file: `magic`, then the dimensions, then `data`.
fn idx(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut v = magic.to_be_bytes().to_vec();
    for d in dims {
        v.extend(d.to_be_bytes());
    }
    v.extend(data);
    v
}

/// The four MNIST files (one image each, unzipped), with `bad` in place of the training images.
fn mnist_dir(dir: &Path, bad: Vec<u8>) {
    std::fs::create_dir_all(dir).unwrap();
    let images = idx(0x803, &[1, 28, 28], &[0u8; 784]);
    let labels = idx(0x801, &[1], &[3]);
    for (name, bytes) in [
        ("train-images-idx3-ubyte", bad),
        ("train-labels-idx1-ubyte", labels.clone()),
        ("t10k-images-idx3-ubyte", images),
        ("t10k-labels-idx1-ubyte", labels),
    ] {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}

/// Everything the rows point at.
fn setup(dir: &Path) {
    let w = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    w(
        "tiny.txt",
        "the quick brown fox jumps over the lazy dog.\n"
            .repeat(100)
            .as_bytes(),
    );
    w(
        "docs.txt",
        (0..12)
            .map(|i| format!("story {i}: the quick brown fox jumps over the lazy dog.\n").repeat(8))
            .collect::<Vec<_>>()
            .join("<|endoftext|>\n")
            .as_bytes(),
    );
    w("empty.txt", b"");
    w("short.txt", b"abc\n");
    w("latin1.txt", b"caf\xe9 au lait\n");
    w("random.bin", &noise(3000));
    w(
        "unseen.txt",
        "the quick brown fox sees a ZEBRA.\n".repeat(50).as_bytes(),
    );
    w("afile", b"a regular file");

    let mut args = vec!["--data", "tiny.txt", "--save", "good/model"];
    args.extend(TINY);
    let o = run(dir, "gpt", &args);
    assert_eq!(o.code, 0, "the good model's run: {}{}", o.stdout, o.stderr);

    let good = dir.join("good/model");
    copy_dir(&good, &dir.join("home/models/good"));
    let damaged = |name: &str, change: &dyn Fn(&Path)| {
        let d = dir.join("damaged").join(name);
        copy_dir(&good, &d);
        change(&d);
    };
    damaged("truncated", &|d| {
        let f = d.join("model.safetensors");
        let bytes = std::fs::read(&f).unwrap();
        std::fs::write(&f, &bytes[..bytes.len() / 2]).unwrap();
    });
    damaged("random", &|d| {
        std::fs::write(d.join("model.safetensors"), noise(5000)).unwrap()
    });
    let edit = |d: &Path, from: &str, to: &str| {
        let f = d.join("config.json");
        let text = std::fs::read_to_string(&f).unwrap();
        assert!(text.contains(from), "{text}");
        std::fs::write(&f, text.replace(from, to)).unwrap();
    };
    damaged("wider", &|d| edit(d, "\"n_embd\": 8", "\"n_embd\": 16"));
    damaged("heads", &|d| edit(d, "\"n_head\": 2", "\"n_head\": 1"));
    damaged("huge", &|d| edit(d, "\"n_embd\": 8", "\"n_embd\": 1048576"));
    // A resume checkpoint damaged on the disk: the good run's checkpoints, the newest cut short.
    copy_dir(&good, &dir.join("rotten/model"));
    copy_dir(
        &dir.join("good/train/checkpoint"),
        &dir.join("rotten/train/checkpoint"),
    );
    std::fs::copy(
        dir.join("good/train/run.json"),
        dir.join("rotten/train/run.json"),
    )
    .unwrap();
    let newest = dir.join("rotten/train/checkpoint/model-2.mpk");
    let bytes = std::fs::read(&newest).unwrap();
    std::fs::write(&newest, &bytes[..bytes.len() / 2]).unwrap();
    damaged("not-json", &|d| {
        std::fs::write(d.join("config.json"), "{ not json").unwrap()
    });
    damaged("no-tokenizer", &|d| {
        std::fs::remove_file(d.join("tokenizer.json")).unwrap()
    });
    damaged("bad-tokenizer", &|d| {
        std::fs::write(d.join("tokenizer.json"), "[1, 2").unwrap()
    });

    // A full disk under the run's checkpoints: the first checkpoint file is written to /dev/full.
    let ckpt = dir.join("full/train/checkpoint");
    std::fs::create_dir_all(&ckpt).unwrap();
    #[cfg(target_os = "linux")]
    std::os::unix::fs::symlink("/dev/full", ckpt.join("model-1.mpk.partial")).unwrap();

    // A zip archive's first bytes where the IDX magic belongs.
    mnist_dir(
        &dir.join("idx-magic"),
        idx(0x504b_0304, &[1, 28, 28], &[0u8; 784]),
    );
    mnist_dir(
        &dir.join("idx-truncated"),
        idx(0x803, &[100, 28, 28], &[0u8; 784]),
    );
    std::fs::create_dir_all(dir.join("not-a-pipeline")).unwrap();

    // Search: the vendored corpus, a copy edited behind its manifest's back, and a corpus of no
    // pages (empty.txt, with a manifest that describes it).
    let book = Path::new(env!("CARGO_MANIFEST_DIR")).join("datasets/data/rust-book/rust-book.txt");
    let manifest = std::fs::read_to_string(book.with_extension("txt.crawl.json")).unwrap();
    let text = std::fs::read_to_string(&book).unwrap();
    std::fs::create_dir_all(dir.join("book")).unwrap();
    w("book/book.txt", text.as_bytes());
    w("book/book.txt.crawl.json", manifest.as_bytes());
    w(
        "book/edited.txt",
        text.replacen("closure", "lambda", 1).as_bytes(),
    );
    w("book/edited.txt.crawl.json", manifest.as_bytes());
    // Ask: the tiny Qwen2 fixture, without its chat template, and with a config of fewer ids
    // than its weights.
    let qwen = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tests/fixtures/qwen2-tiny");
    copy_dir(&qwen, &dir.join("qwen"));
    copy_dir(&qwen, &dir.join("qwen-base"));
    std::fs::remove_file(dir.join("qwen-base/chat_template.jinja")).unwrap();
    copy_dir(&qwen, &dir.join("qwen-small-vocab"));
    let config = std::fs::read_to_string(qwen.join("config.json")).unwrap();
    assert!(config.contains("\"vocab_size\": 320"));
    w(
        "qwen-small-vocab/config.json",
        config
            .replace("\"vocab_size\": 320", "\"vocab_size\": 100")
            .as_bytes(),
    );
    w(
        "empty.txt.crawl.json",
        br#"{"pages": [], "text": {"sha256": "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}"#,
    );

    let mut args = vec!["--data", "docs.txt", "--save", "lm/model"];
    args.extend(LM_TINY);
    let o = run(dir, "lm", &args);
    assert_eq!(o.code, 0, "the LM's run: {}{}", o.stdout, o.stderr);
}

struct Row {
    /// What is wrong.
    input: &'static str,
    example: &'static str,
    args: Vec<&'static str>,
    /// How many of `args` the table shows (the rest are [`TINY`]'s, shown as `…`).
    own: usize,
    code: i32,
    /// What the first line must say (for exit 0: a line of the output).
    says: &'static str,
    /// Files that must be byte-identical afterwards.
    keeps: Vec<&'static str>,
}

fn row(
    input: &'static str,
    example: &'static str,
    args: &[&'static str],
    code: i32,
    says: &'static str,
) -> Row {
    Row {
        input,
        example,
        args: args.to_vec(),
        own: args.len(),
        code,
        says,
        keeps: Vec::new(),
    }
}

/// `args`, then the [`TINY`] flags it does not give itself.
fn tiny(args: &[&'static str]) -> Vec<&'static str> {
    let mut v = args.to_vec();
    let mut i = 0;
    while i < TINY.len() {
        let flag = TINY[i];
        let takes_value = TINY.get(i + 1).is_some_and(|n| !n.starts_with("--"));
        let own = args
            .iter()
            .any(|a| *a == flag || a.starts_with(&format!("{flag}=")));
        if !own {
            v.push(flag);
            if takes_value {
                v.push(TINY[i + 1]);
            }
        }
        i += if takes_value { 2 } else { 1 };
    }
    v
}

fn rows() -> Vec<Row> {
    let gpt = |input, args: &[&'static str], says| Row {
        own: args.len(),
        ..row(input, "gpt", &tiny(args), 1, says)
    };
    let load = |input, dir: &'static str, says| {
        row(input, "gpt", &["--load", dir, "--steps", "0"], 1, says)
    };
    let good = "good/model/model.safetensors";
    vec![
        gpt(
            "text: empty file",
            &["--data", "empty.txt"],
            "empty.txt: empty",
        ),
        gpt(
            "text: missing file",
            &["--data", "nowhere.txt"],
            "nowhere.txt",
        ),
        gpt(
            "text: shorter than the context",
            &["--data", "short.txt"],
            "short.txt: 4 characters is too short",
        ),
        gpt(
            "text: invalid UTF-8 (Latin-1)",
            &["--data", "latin1.txt"],
            "latin1.txt: not UTF-8",
        ),
        gpt(
            "text: binary",
            &["--data", "random.bin"],
            "random.bin: not UTF-8",
        ),
        load(
            "model: directory missing",
            "missing/model",
            "missing/model/config.json",
        ),
        load(
            "model: weights truncated",
            "damaged/truncated",
            "damaged/truncated/model.safetensors",
        ),
        load(
            "model: weights random bytes",
            "damaged/random",
            "damaged/random/model.safetensors",
        ),
        load(
            "model: config of another width",
            "damaged/wider",
            "damaged/wider",
        ),
        load(
            "model: config promising a huge model (width 2^20)",
            "damaged/huge",
            "damaged/huge/model.safetensors",
        ),
        load(
            "model: config's head count edited",
            "damaged/heads",
            "was edited",
        ),
        load(
            "model: config not JSON",
            "damaged/not-json",
            "damaged/not-json/config.json",
        ),
        load(
            "model: tokenizer missing",
            "damaged/no-tokenizer",
            "damaged/no-tokenizer/tokenizer.json",
        ),
        load(
            "model: tokenizer corrupt",
            "damaged/bad-tokenizer",
            "damaged/bad-tokenizer/tokenizer.json",
        ),
        Row {
            keeps: vec![good],
            ..row(
                "continuation on text with an unseen character",
                "gpt",
                &[
                    "--load",
                    "good/model",
                    "--data",
                    "unseen.txt",
                    "--steps",
                    "2",
                ],
                1,
                "'Z'",
            )
        },
        row(
            "prompt with an unseen character",
            "gpt",
            &["--load", "good/model", "--steps", "0", "--prompt", "Zebra"],
            1,
            "--prompt: character 'Z'",
        ),
        gpt(
            "--batch 0",
            &["--data", "tiny.txt", "--batch", "0"],
            "--batch 0",
        ),
        gpt(
            "--lr nan",
            &["--data", "tiny.txt", "--lr", "nan"],
            "--lr NaN",
        ),
        gpt(
            "--lr negative",
            &["--data", "tiny.txt", "--lr=-1"],
            "--lr -1",
        ),
        gpt(
            "--decay-to negative",
            &["--data", "tiny.txt", "--decay-to=-2"],
            "--decay-to -2",
        ),
        gpt(
            "--heads not dividing --d-model",
            &["--data", "tiny.txt", "--heads", "3"],
            "not divisible by --heads 3",
        ),
        gpt(
            "--context 0",
            &["--data", "tiny.txt", "--context", "0"],
            "--context 0",
        ),
        gpt(
            "--layers 0",
            &["--data", "tiny.txt", "--layers", "0"],
            "--layers 0",
        ),
        gpt(
            "--eval-windows 0",
            &["--data", "tiny.txt", "--eval-windows", "0"],
            "--eval-windows 0",
        ),
        gpt(
            "--parts 0",
            &["--data", "tiny.txt", "--parts", "0"],
            "--parts 0",
        ),
        row(
            "--steps 0 with nothing to write with",
            "gpt",
            &["--steps", "0"],
            1,
            "give a model with --load",
        ),
        row(
            "--temperature negative",
            "gpt",
            &["--load", "good/model", "--steps", "0", "--temperature=-1"],
            1,
            "--temperature -1",
        ),
        row(
            "--temperature nan",
            "gpt",
            &[
                "--load",
                "good/model",
                "--steps",
                "0",
                "--temperature",
                "nan",
            ],
            1,
            "--temperature NaN",
        ),
        row(
            "--top-k 0",
            "gpt",
            &["--load", "good/model", "--steps", "0", "--top-k", "0"],
            1,
            "--top-k 0",
        ),
        row(
            "--d-model with --load",
            "gpt",
            &["--load", "good/model", "--d-model", "64"],
            1,
            "--d-model cannot change",
        ),
        row(
            "--batch -1",
            "gpt",
            &["--batch=-1"],
            2,
            "invalid value '-1'",
        ),
        Row {
            keeps: vec![good],
            ..gpt(
                "a fresh run onto a saved model",
                &["--data", "tiny.txt", "--save", "good/model", "--lr", "0.5"],
                "already holds a model",
            )
        },
        Row {
            keeps: vec![good],
            ..gpt(
                "--resume with other settings",
                &[
                    "--data",
                    "tiny.txt",
                    "--save",
                    "good/model",
                    "--resume",
                    "--lr",
                    "0.5",
                ],
                "lr 0.5 (saved run: 0.003)",
            )
        },
        Row {
            keeps: vec!["rotten/model/model.safetensors"],
            ..gpt(
                "--resume of a checkpoint damaged on the disk",
                &["--data", "tiny.txt", "--save", "rotten/model", "--resume"],
                "rotten/train/checkpoint/model-2.mpk",
            )
        },
        gpt(
            "--save under a regular file",
            &["--data", "tiny.txt", "--save", "afile/model"],
            "afile",
        ),
        gpt(
            "a full disk under the checkpoints",
            &["--data", "tiny.txt", "--save", "full/model"],
            "a checkpoint could not be written",
        ),
        row(
            "lm: --kv-heads not dividing --heads (before the tokenizer)",
            "lm",
            &["--data", "docs.txt", "--size", "tiny", "--kv-heads", "3"],
            1,
            "--kv-heads 3",
        ),
        row(
            "lm: --batch 0",
            "lm",
            &[
                "--data",
                "docs.txt",
                "--size",
                "tiny",
                "--batch",
                "0",
                "--save",
                "lm0/model",
            ],
            1,
            "--batch 0",
        ),
        row(
            "lm: --resume with nothing to resume",
            "lm",
            &[
                "--data",
                "docs.txt",
                "--size",
                "tiny",
                "--steps",
                "2",
                "--eval-every",
                "2",
                "--eval-batches",
                "1",
                "--batch",
                "2",
                "--length",
                "5",
                "--plain",
                "--save",
                "lm-new/model",
                "--resume",
            ],
            0,
            "nothing to resume",
        ),
        Row {
            keeps: vec!["lm/model/model.safetensors"],
            ..row(
                "lm: --resume with another width",
                "lm",
                &[
                    "--data",
                    "docs.txt",
                    "--size",
                    "tiny",
                    "--steps",
                    "2",
                    "--eval-every",
                    "2",
                    "--eval-batches",
                    "1",
                    "--batch",
                    "2",
                    "--plain",
                    "--save",
                    "lm/model",
                    "--resume",
                    "--d-model",
                    "64",
                ],
                1,
                "model.d_model 64 (saved run: 32)",
            )
        },
        row("dit: --batch 0", "dit", &["--batch", "0"], 1, "--batch 0"),
        row("dit: --patch 0", "dit", &["--patch", "0"], 1, "--patch 0"),
        row(
            "dit: --load of a directory that is no pipeline",
            "dit",
            &["--load", "not-a-pipeline"],
            1,
            "not-a-pipeline: not a diffusers pipeline",
        ),
        row(
            "video: --heads 0",
            "video",
            &["--heads", "0"],
            1,
            "--heads 0",
        ),
        row(
            "mnist: --batch 0",
            "mnist",
            &["--batch", "0"],
            1,
            "--batch 0",
        ),
        row(
            "mnist: --hidden 0",
            "mnist",
            &["--hidden", "0"],
            1,
            "--hidden 0",
        ),
        row(
            "mnist: --epochs 0",
            "mnist",
            &["--epochs", "0"],
            1,
            "--epochs 0",
        ),
        row(
            "mnist: --momentum 1",
            "mnist",
            &["--momentum", "1"],
            1,
            "--momentum 1",
        ),
        row(
            "IDX: wrong magic number",
            "mnist",
            &["--data-dir", "idx-magic"],
            1,
            "idx-magic/train-images-idx3-ubyte",
        ),
        row(
            "IDX: truncated",
            "mnist",
            &["--data-dir", "idx-truncated"],
            1,
            "idx-truncated/train-images-idx3-ubyte",
        ),
        row(
            "crawl: malformed URL",
            "crawl",
            &["not a url"],
            1,
            "not a url",
        ),
        row(
            "crawl: not HTTP",
            "crawl",
            &["ftp://example.com/docs/"],
            1,
            "ftp://example.com/docs/",
        ),
        row(
            "search: a corpus with no pages",
            "engine",
            &["search", "--corpus", "empty.txt", "closures"],
            1,
            "empty.txt: the corpus has no text",
        ),
        row(
            "search: a corpus without its manifest",
            "engine",
            &["search", "--corpus", "tiny.txt", "closures"],
            1,
            "tiny.txt.crawl.json",
        ),
        row(
            "search: a corpus edited after the crawl",
            "engine",
            &["search", "--corpus", "book/edited.txt", "closures"],
            1,
            "book/edited.txt is not the text",
        ),
        row(
            "search: a question with no word to look for",
            "engine",
            &["search", "--corpus", "book/book.txt", "? I & a"],
            1,
            "has no word to search for",
        ),
        row(
            "search: --k1 nan",
            "engine",
            &[
                "search",
                "--corpus",
                "book/book.txt",
                "--k1",
                "nan",
                "closures",
            ],
            1,
            "--k1 NaN",
        ),
        row(
            "search: --passages 0",
            "engine",
            &[
                "search",
                "--corpus",
                "book/book.txt",
                "--passages",
                "0",
                "closures",
            ],
            1,
            "--passages 0",
        ),
        row(
            "ask: a model directory that is not there",
            "engine",
            &[
                "ask",
                "--corpus",
                "book/book.txt",
                "--model",
                "nowhere",
                "closures",
            ],
            1,
            "nowhere/tokenizer.json",
        ),
        row(
            "ask: a model without a chat template (a base model)",
            "engine",
            &[
                "ask",
                "--corpus",
                "book/book.txt",
                "--model",
                "qwen-base",
                "closures",
            ],
            1,
            "no chat template",
        ),
        row(
            "ask: a config whose vocabulary the weights do not have",
            "engine",
            &[
                "ask",
                "--corpus",
                "book/book.txt",
                "--model",
                "qwen-small-vocab",
                "closures",
            ],
            1,
            "model.embed_tokens.weight",
        ),
        row(
            "engine run: a name that is no model",
            "engine",
            &["run", "--model", "nosuch", "--prompt", "a"],
            1,
            "no model \"nosuch\": not a directory, not trained here",
        ),
        row(
            "engine run: a corrupt checkpoint",
            "engine",
            &["run", "--model", "damaged/random", "--prompt", "a"],
            1,
            "damaged/random/model.safetensors",
        ),
        row(
            "engine run: a config that is not JSON",
            "engine",
            &["run", "--model", "damaged/not-json", "--prompt", "a"],
            1,
            "damaged/not-json/config.json",
        ),
        row(
            "engine run: the tokenizer missing",
            "engine",
            &["run", "--model", "damaged/no-tokenizer", "--prompt", "a"],
            1,
            "damaged/no-tokenizer/tokenizer.json",
        ),
        row(
            "engine run: a prompt longer than the context",
            "engine",
            &["run", "--model", "good", "--prompt", "abcabcabcabc"],
            1,
            "the prompt is 12 tokens but the model reads at most 8",
        ),
        row(
            "engine run: a prompt character outside the vocabulary",
            "engine",
            &["run", "--model", "good", "--prompt", "Zebra"],
            1,
            "character 'Z' (U+005A) at line 1, column 1",
        ),
        row(
            "engine run: a hub model not downloaded, offline",
            "engine",
            &["run", "--model", "openai-community/gpt2", "--prompt", "a"],
            1,
            "hub model openai-community/gpt2 is not here",
        ),
        row(
            "engine train: a name with ..",
            "engine",
            &[
                "train", "--data", "tiny.txt", "--name", "..", "--steps", "1",
            ],
            1,
            "model name \"..\"",
        ),
        row(
            "engine train: a name with /",
            "engine",
            &[
                "train", "--data", "tiny.txt", "--name", "a/b", "--steps", "1",
            ],
            1,
            "model name \"a/b\"",
        ),
        row(
            "engine rm: a name that does not exist",
            "engine",
            &["rm", "nosuch"],
            1,
            "no model \"nosuch\"",
        ),
        Row {
            keeps: vec!["home/models/good/model.safetensors"],
            ..row(
                "engine rm: a trained model without --yes",
                "engine",
                &["rm", "good"],
                1,
                "good is a model trained here and cannot be downloaded again",
            )
        },
        row(
            "ask: --max-tokens 0",
            "engine",
            &[
                "ask",
                "--corpus",
                "book/book.txt",
                "--model",
                "qwen",
                "--max-tokens",
                "0",
                "closures",
            ],
            1,
            "--max-tokens 0",
        ),
    ]
}

/// A table cell: pipes escaped, the scratch path out, and a measured loss (which the last digits
/// of another CPU's arithmetic may change) shown as `X`.
fn cell(text: &str, dir: &Path) -> String {
    let text = text
        .replace(&format!("{}/", dir.display()), "")
        .replace(&dir.display().to_string(), ".")
        .replace('|', "\\|");
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(at) = rest.find("loss ") {
        out += &rest[..at + 5];
        rest = &rest[at + 5..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
            .unwrap_or(rest.len());
        if end > 0 {
            out.push('X');
        }
        rest = &rest[end..];
    }
    out + rest
}

#[test]
fn every_bad_input_gets_one_clear_line_and_loses_nothing() {
    let dir = scratch();
    setup(&dir);
    let mut table = String::from(
        "| input | command | exit | first line (standard error; for exit 0, the line that answers) |\n|---|---|---|---|\n",
    );
    let mut failures = Vec::new();
    for r in rows() {
        let before: Vec<Vec<u8>> = r
            .keeps
            .iter()
            .map(|f| std::fs::read(dir.join(f)).unwrap())
            .collect();
        let o = run(&dir, r.example, &r.args);
        let first = if r.code == 0 {
            o.stdout
                .lines()
                .chain(o.stderr.lines())
                .find(|l| l.contains(r.says))
                .unwrap_or("")
                .to_string()
        } else {
            o.stderr.lines().next().unwrap_or("").to_string()
        };
        let mut wrong = Vec::new();
        if o.code != r.code {
            wrong.push(format!("exit {} (expected {})", o.code, r.code));
        }
        if o.stderr.contains("panicked") || o.stderr.contains("backtrace") {
            wrong.push("a panic".into());
        }
        if !first.contains(r.says) {
            wrong.push(format!("the line does not say `{}`", r.says));
        }
        if r.code == 1 && !first.starts_with("error: ") {
            wrong.push("the first line is not `error: ...`".into());
        }
        for (f, b) in r.keeps.iter().zip(&before) {
            if std::fs::read(dir.join(f)).ok().as_ref() != Some(b) {
                wrong.push(format!("{f} changed"));
            }
        }
        if !wrong.is_empty() {
            failures.push(format!(
                "{}: `{} {}`: {}\n  stderr: {}\n  stdout tail: {}",
                r.input,
                r.example,
                r.args.join(" "),
                wrong.join("; "),
                o.stderr.trim(),
                o.stdout
                    .lines()
                    .rev()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" / ")
            ));
        }
        let mut args: Vec<String> = r.args[..r.own]
            .iter()
            .map(|a| {
                if a.contains(' ') || a.is_empty() {
                    format!("\"{a}\"")
                } else {
                    a.to_string()
                }
            })
            .collect();
        if r.own < r.args.len() {
            args.push("…".into());
        }
        table += &format!(
            "| {} | `{} {}` | {} | {} |\n",
            cell(r.input, &dir),
            r.example,
            cell(&args.join(" "), &dir),
            o.code,
            cell(first.trim(), &dir)
        );
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/bad-input.md");
    let text = std::fs::read_to_string(&doc).unwrap_or_default();
    let (start, end) = ("<!-- bad-input -->\n", "<!-- /bad-input -->");
    let current = text
        .split_once(start)
        .and_then(|(_, rest)| rest.split_once(end))
        .map(|(t, _)| t);
    if std::env::var_os("NERVUS_BLESS").is_some() {
        let (head, tail) = match (text.split_once(start), text.split_once(end)) {
            (Some((h, _)), Some((_, t))) => (h.to_string(), t.to_string()),
            _ => (text.clone(), "\n".to_string()),
        };
        std::fs::write(&doc, format!("{head}{start}{table}{end}{tail}")).unwrap();
    } else {
        assert_eq!(
            current,
            Some(table.as_str()),
            "docs/bad-input.md differs from what the suite measured: regenerate it with \
             NERVUS_BLESS=1 cargo test --release --test bad_input"
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}
