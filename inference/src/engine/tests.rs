//! The engine end to end on OpenAI GPT-2's shape and tokenizer (the `gpt2-bpe` fixture, saved by
//! transformers), and the int8 cache's identity rules.

use super::*;
use nervus_models::gpt::GptConfig;
use std::path::PathBuf;

type B = burn_ndarray::NdArray<f32>;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("nervus-engine-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The fixture's model with GPT-2's two tokenizer files beside it, as a hub download of a repo
/// without tokenizer.json would be.
fn gpt2_dir(name: &str) -> PathBuf {
    let d = scratch(name);
    let fixture = repo("models/tests/fixtures/gpt2-bpe");
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(fixture.join(f), d.join(f)).unwrap();
    }
    let tok = repo("datasets/data/gpt2-tokenizer");
    for f in ["vocab.json", "merges.txt"] {
        std::fs::copy(tok.join(f), d.join(f)).unwrap();
    }
    d
}

fn reference() -> serde_json::Value {
    let text =
        std::fs::read_to_string(repo("models/tests/fixtures/gpt2-bpe/reference.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn ids(v: &serde_json::Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i.as_u64().unwrap() as u32)
        .collect()
}

fn greedy(n: usize) -> RunOptions {
    RunOptions {
        sample: SampleOptions {
            length: n,
            temperature: 0.0,
            top_k: None,
        },
        seed: 0,
        stop_at_eos: false,
    }
}

#[test]
fn gpt2_tokenizer_gives_openais_ids_and_transformers_pieces() {
    let dir = gpt2_dir("tok");
    let codec = Codec::load(&dir).unwrap();
    assert_eq!(codec.vocab_size(), 50257);
    assert_eq!(codec.encode("Hello world").unwrap(), [15496, 995]);
    for case in reference()["cases"].as_array().unwrap() {
        let prompt = case["prompt"].as_str().unwrap();
        let want = ids(&case["ids"]);
        assert_eq!(codec.encode(prompt).unwrap(), want, "{prompt:?}");
        assert_eq!(codec.decode(&want), prompt);
        // One id at a time: bytes cut inside a character decode to U+FFFD, as in transformers.
        for (id, piece) in want.iter().zip(case["pieces"].as_array().unwrap()) {
            assert_eq!(codec.decode(&[*id]), piece.as_str().unwrap(), "id {id}");
        }
    }
    // The same tokenizer written as tokenizer.json (what hub repos ship) reads back the same.
    let Codec::Hf(tok) = &codec else {
        panic!("GPT-2's tokenizer is not a character tokenizer")
    };
    let json_dir = scratch("tokjson");
    tok.save(json_dir.join("tokenizer.json"), false).unwrap();
    let again = Codec::load(&json_dir).unwrap();
    assert_eq!(again.encode("Hello world").unwrap(), [15496, 995]);
}

#[test]
fn greedy_text_equals_transformers_byte_for_byte_on_both_paths() {
    let dir = gpt2_dir("greedy");
    let r = reference();
    let n = r["new_tokens"].as_u64().unwrap() as usize;
    for cpu in [true, false] {
        let engine = Engine::<B>::load(&dir, Quant::F32, cpu, &Default::default()).unwrap();
        assert_eq!(matches!(engine.runner, Runner::Cpu(_)), cpu);
        assert!(
            engine.summary.starts_with("GPT-2: 2 layers"),
            "{}",
            engine.summary
        );
        for case in r["cases"].as_array().unwrap() {
            let mut streamed = String::new();
            let run = engine
                .run(case["prompt"].as_str().unwrap(), &greedy(n), |t| {
                    streamed.push_str(t)
                })
                .unwrap();
            assert_eq!(run.tokens, ids(&case["greedy"]), "cpu {cpu}: {case}");
            assert_eq!(run.text, case["text"].as_str().unwrap());
            assert_eq!(streamed, run.text, "the stream is the text");
        }
    }
}

#[test]
fn a_prompt_longer_than_the_context_is_refused_and_an_empty_one_too() {
    let dir = gpt2_dir("long");
    let engine = Engine::<B>::load(&dir, Quant::F32, true, &Default::default()).unwrap();
    let long = "word ".repeat(100);
    let e = engine.run(&long, &greedy(4), |_| {}).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("the prompt is 101 tokens but the model reads at most 64"),
        "{e}"
    );
    let e = engine.run("", &greedy(4), |_| {}).unwrap_err();
    assert!(matches!(e, EngineError::EmptyPrompt));
    // Generation itself may run past the context: the window slides.
    let run = engine.run("Hello world", &greedy(80), |_| {}).unwrap();
    assert_eq!(run.tokens.len(), 80);
}

/// A small GPT-2 directory with weights drawn from `seed`.
fn save_model(dir: &Path, seed: u64) {
    B::seed(&Default::default(), seed);
    let model = GptConfig::new(50257)
        .with_context(32)
        .with_layers(1)
        .with_heads(2)
        .with_d_model(16)
        .with_init_std(0.5)
        .init::<B>(&Default::default());
    nervus_models::gpt2::save(&model, dir).unwrap();
}

fn q8_tokens(dir: &Path) -> (Vec<u32>, String) {
    let e = Engine::<B>::load(dir, Quant::Q8, true, &Default::default()).unwrap();
    let run = e.run("ROMEO: But soft", &greedy(12), |_| {}).unwrap();
    (run.tokens, e.summary)
}

#[test]
fn the_int8_cache_follows_the_checkpoint_it_was_made_from() {
    let dir = scratch("stale");
    let tok = repo("datasets/data/gpt2-tokenizer");
    for f in ["vocab.json", "merges.txt"] {
        std::fs::copy(tok.join(f), dir.join(f)).unwrap();
    }
    save_model(&dir, 1);
    let (first, how) = q8_tokens(&dir);
    assert!(how.contains("quantised now, cached"), "{how}");
    let (again, how) = q8_tokens(&dir);
    assert!(how.contains("read from model.q8.safetensors"), "{how}");
    assert_eq!(first, again);
    // Retrained and saved over itself: the same size to the byte, other weights.
    let size = std::fs::metadata(dir.join("model.safetensors"))
        .unwrap()
        .len();
    save_model(&dir, 2);
    assert_eq!(
        std::fs::metadata(dir.join("model.safetensors"))
            .unwrap()
            .len(),
        size
    );
    let (second, how) = q8_tokens(&dir);
    assert!(
        how.contains("quantised now"),
        "a stale cache was used: {how}"
    );
    // What a fresh quantisation of the new weights writes, with no cache at all.
    std::fs::remove_file(dir.join(quant::CACHE)).unwrap();
    let (fresh, _) = q8_tokens(&dir);
    assert_eq!(second, fresh);
    assert_ne!(first, second, "the two models should write differently");
    // Another directory whose files are copies with the same modification times (and the same
    // last path component, under another parent) is another model to the cache.
    let other = scratch("stale-copy").join(dir.file_name().unwrap());
    std::fs::create_dir_all(&other).unwrap();
    for f in std::fs::read_dir(&dir).unwrap().flatten() {
        let to = other.join(f.file_name());
        std::fs::copy(f.path(), &to).unwrap();
        let mtime = f.metadata().unwrap().modified().unwrap();
        std::fs::File::options()
            .write(true)
            .open(&to)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
    }
    let (_, how) = q8_tokens(&other);
    assert!(how.contains("quantised now"), "{how}");
}

#[test]
fn bad_directories_are_one_line_errors_naming_the_file() {
    let dir = gpt2_dir("bad");
    std::fs::remove_file(dir.join("merges.txt")).unwrap();
    let e = Engine::<B>::load(&dir, Quant::F32, true, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("tokenizer.json: missing"), "{e}");
    // A vocabulary larger than the model's embedding table.
    let dir = scratch("vocab");
    B::seed(&Default::default(), 3);
    let small = GptConfig::new(300)
        .with_context(16)
        .with_layers(1)
        .with_heads(1)
        .with_d_model(8)
        .init::<B>(&Default::default());
    nervus_models::gpt2::save(&small, &dir).unwrap();
    let tok = repo("datasets/data/gpt2-tokenizer");
    for f in ["vocab.json", "merges.txt"] {
        std::fs::copy(tok.join(f), dir.join(f)).unwrap();
    }
    let e = Engine::<B>::load(&dir, Quant::F32, true, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("50257 tokens but the model only 300 rows"),
        "{e}"
    );
    // A corrupt checkpoint.
    std::fs::write(dir.join("model.safetensors"), b"not a checkpoint").unwrap();
    let e = Engine::<B>::load(&dir, Quant::F32, true, &Default::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("model.safetensors"), "{e}");
    assert!(!e.contains('\n'), "{e}");
}
