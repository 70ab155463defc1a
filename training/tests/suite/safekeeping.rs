//! Nothing lost: a fresh run does not bury a saved model, a resume continues exactly and only the
//! run it was, a failed checkpoint write stops the run with an error, and a user's nonsense number
//! is refused before any work. Each test here failed before the fix it holds.

use burn::backend::Autodiff;
use burn::prelude::*;
use nervus_inference::generate::SampleOptions;
use nervus_models::gpt::{Gpt, GptConfig};
use nervus_models::named;
use nervus_training::gpt::{GptOptions, TextData, train};
use nervus_training::options::RunOptions;
use nervus_training::report::Reporter;
use nervus_training::run::TrainError;
use std::path::{Path, PathBuf};

// Flex: bit-reproducible from run to run (see gpt_training.rs).
type B = Autodiff<burn::backend::Flex>;
type I = burn::backend::Flex;

fn tiny(context: usize) -> GptConfig {
    GptConfig::new(2)
        .with_context(context)
        .with_layers(1)
        .with_heads(2)
        .with_d_model(8)
}

fn scratch(name: &str) -> PathBuf {
    let d = crate::scratch(&format!("safe-{name}"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn data() -> TextData {
    let text: String = (0..400)
        .map(|i| if (i * i + 3 * i) % 7 < 3 { 'a' } else { 'b' })
        .collect();
    TextData::new("ab", &text, None, 8).unwrap()
}

// Burn draws parameters lazily from one process-wide generator: make each model, and touch every
// parameter, under one lock.
use crate::INIT;

fn fresh(config: &GptConfig) -> Gpt<B> {
    let _held = INIT.lock().unwrap_or_else(|e| e.into_inner());
    let dev = Default::default();
    B::seed(&dev, 3);
    let model: Gpt<B> = config.init(&dev);
    let _ = named::export(&model);
    model
}

fn options(dir: &Path, steps: usize, every: usize) -> GptOptions {
    GptOptions {
        run: RunOptions {
            steps,
            batch: 4,
            parts: 1,
            lr: 1e-2,
            warmup: 0,
            decay_to: 1.0,
            clip: Some(1.0),
            weight_decay: 0.0,
            seed: 7,
            eval_every: every,
            save: Some(dir.join("model")),
            run_dir: dir.join("train"),
            continued_from: None,
            resume: false,
            overwrite: false,
            stop_after: None,
        },
        model: tiny(8),
        eval_windows: 8,
        sample: SampleOptions {
            length: 2,
            temperature: 0.0,
            top_k: None,
        },
        prompt: String::new(),
    }
}

fn weights(m: &Gpt<I>) -> Vec<(String, Vec<f32>)> {
    named::export(m)
        .into_iter()
        .map(|t| (t.name, t.data))
        .collect()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn a_fresh_run_refuses_to_replace_a_saved_model_unless_told_to() {
    let _beside = crate::beside_others();
    let dir = scratch("fresh");
    let data = data();
    let opts = options(&dir, 4, 2);
    train(&opts, &data, fresh(&opts.model), Reporter::silent()).unwrap();
    let file = dir.join("model/model.safetensors");
    let before = read(&file);

    let mut again = options(&dir, 2, 2);
    again.run.lr = 0.5;
    let err = train(&again, &data, fresh(&again.model), Reporter::silent()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, TrainError::Occupied(_)) && msg.contains("--overwrite"),
        "{msg}"
    );
    assert!(
        msg.contains("validation loss"),
        "the message gives the saved model's figures: {msg}"
    );
    assert_eq!(read(&file), before, "the saved model is byte-identical");

    again.run.overwrite = true;
    train(&again, &data, fresh(&again.model), Reporter::silent()).unwrap();
    assert_ne!(read(&file), before, "--overwrite replaces it");
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn nonsense_numbers_are_refused_before_any_step_naming_the_flag() {
    let _beside = crate::beside_others();
    let dir = scratch("numbers");
    let data = data();
    type Change = Box<dyn Fn(&mut GptOptions)>;
    let cases: Vec<(&str, Change)> = vec![
        ("--batch", Box::new(|o| o.run.batch = 0)),
        ("--steps", Box::new(|o| o.run.steps = 0)),
        ("--lr", Box::new(|o| o.run.lr = -1.0)),
        ("--lr", Box::new(|o| o.run.lr = f64::NAN)),
        ("--decay-to", Box::new(|o| o.run.decay_to = -2.0)),
        ("--eval-windows", Box::new(|o| o.eval_windows = 0)),
        ("--eval-every", Box::new(|o| o.run.eval_every = 0)),
        ("--temperature", Box::new(|o| o.sample.temperature = -1.0)),
        (
            "--temperature",
            Box::new(|o| o.sample.temperature = f64::NAN),
        ),
        ("--top-k", Box::new(|o| o.sample.top_k = Some(0))),
        ("--parts", Box::new(|o| o.run.parts = 5)),
        // One layer, two heads, batch 4, 2^20 positions: at least 2^44 bytes (17.6 TB) a step.
        (
            "--context",
            Box::new(|o| o.model = o.model.clone().with_context(1 << 20)),
        ),
    ];
    for (flag, change) in cases {
        let mut o = options(&dir, 4, 2);
        change(&mut o);
        let err = train(&o, &data, fresh(&o.model), Reporter::silent()).unwrap_err();
        assert!(
            matches!(&err, TrainError::BadValue(b) if b.flag == flag),
            "{flag}: {err}"
        );
        assert!(!dir.join("model").exists(), "{flag}: nothing was saved");
        assert!(!dir.join("train").exists(), "{flag}: no run was started");
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// The run killed after its second checkpoint (the third one's files gone, as a kill inside it
/// leaves them) and resumed ends on the weights of the run that was never stopped, to the bit.
#[test]
fn a_gpt_run_resumed_after_a_kill_is_the_run_that_never_stopped() {
    let _beside = crate::beside_others();
    let dir = scratch("resume");
    let data = data();
    let whole_opts = options(&dir.join("whole"), 6, 2);
    let (_, whole) = train(
        &whole_opts,
        &data,
        fresh(&whole_opts.model),
        Reporter::silent(),
    )
    .unwrap();

    let cut = dir.join("cut");
    let opts = options(&cut, 6, 2);
    train(&opts, &data, fresh(&opts.model), Reporter::silent()).unwrap();
    let ckpt = cut.join("train/checkpoint");
    // A kill inside the third checkpoint: its model file written, the other two not.
    std::fs::remove_file(ckpt.join("optim-3.mpk")).unwrap();
    std::fs::remove_file(ckpt.join("scheduler-3.mpk")).unwrap();
    let mut again = options(&cut, 6, 2);
    again.run.resume = true;
    // The model passed in is a fresh one: the checkpoint's weights must replace it.
    let (report, resumed) = train(&again, &data, fresh(&again.model), Reporter::silent()).unwrap();
    assert_eq!(
        report.checkpoints.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![6],
        "only the third epoch is trained again"
    );
    assert_eq!(weights(&resumed), weights(&whole));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn a_resume_with_another_shape_or_schedule_is_refused_and_changes_nothing() {
    let _beside = crate::beside_others();
    let dir = scratch("reshape");
    let data = data();
    let opts = options(&dir, 6, 2);
    train(&opts, &data, fresh(&opts.model), Reporter::silent()).unwrap();
    let ckpt = dir.join("train/checkpoint");
    std::fs::remove_file(ckpt.join("model-3.mpk")).unwrap();
    let file = dir.join("model/model.safetensors");
    let before = read(&file);

    let mut wider = options(&dir, 6, 2);
    wider.run.resume = true;
    wider.model = wider.model.with_d_model(16);
    let err = train(&wider, &data, fresh(&wider.model), Reporter::silent()).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("model.d_model 16 (saved run: 8)"), "{msg}");

    let mut longer = options(&dir, 6, 2);
    longer.run.resume = true;
    longer.run.steps = 8;
    let err = train(&longer, &data, fresh(&longer.model), Reporter::silent()).unwrap_err();
    assert!(err.to_string().contains("steps 8 (saved run: 6)"), "{err}");
    assert_eq!(read(&file), before, "the saved model is byte-identical");
    let _ = std::fs::remove_dir_all(dir);
}

/// A kill inside the first checkpoint leaves files of no whole epoch: a resume says so and starts
/// from the first step (and ends where the run that was never stopped ends); a resume with nothing
/// there at all says that.
#[test]
fn a_resume_of_a_broken_first_checkpoint_or_of_nothing_says_so_and_starts_over() {
    let _beside = crate::beside_others();
    let dir = scratch("broken");
    let data = data();
    let opts = options(&dir.join("whole"), 4, 2);
    let (_, whole) = train(&opts, &data, fresh(&opts.model), Reporter::silent()).unwrap();

    let cut = dir.join("cut");
    let ckpt = cut.join("train/checkpoint");
    std::fs::create_dir_all(&ckpt).unwrap();
    std::fs::copy(
        dir.join("whole/train/checkpoint/model-1.mpk"),
        ckpt.join("model-1.mpk"),
    )
    .unwrap();
    let mut again = options(&cut, 4, 2);
    again.run.resume = true;
    let log = dir.join("log.txt");
    let report = Reporter::new(nervus_training::report::Ui::Plain, Some(log.clone()));
    let (_, resumed) = train(&again, &data, fresh(&again.model), report.clone()).unwrap();
    report.flush();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains("no whole checkpoint") && text.contains("model-1.mpk"),
        "{text}"
    );
    assert_eq!(weights(&resumed), weights(&whole));

    let empty = dir.join("nothing");
    let mut first = options(&empty, 2, 2);
    first.run.resume = true;
    let log = dir.join("log2.txt");
    let report = Reporter::new(nervus_training::report::Ui::Plain, Some(log.clone()));
    train(&first, &data, fresh(&first.model), report.clone()).unwrap();
    report.flush();
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("nothing to resume"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A full disk under the checkpoints (here: the first checkpoint's model file is written through
/// /dev/full) stops the run with an error naming the file, instead of a run that ends early,
/// exits 0 and leaves an empty checkpoint renamed into place.
#[cfg(target_os = "linux")]
#[test]
fn a_checkpoint_that_cannot_be_written_stops_the_run_with_an_error() {
    let _beside = crate::beside_others();
    let dir = scratch("full");
    let data = data();
    let ckpt = dir.join("train/checkpoint");
    std::fs::create_dir_all(&ckpt).unwrap();
    std::os::unix::fs::symlink("/dev/full", ckpt.join("model-1.mpk.partial")).unwrap();
    let opts = options(&dir, 6, 2);
    let err = train(&opts, &data, fresh(&opts.model), Reporter::silent()).unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, TrainError::Checkpoint(_)) && msg.contains("model-1.mpk"),
        "{msg}"
    );
    assert!(
        !ckpt.join("model-1.mpk").exists(),
        "no empty file renamed into place"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// A `config.json` whose head count was edited still fits the weights (the heads only split the
/// width), so the loader alone would run it silently as another model; `training.json` catches it.
#[test]
fn a_saved_config_edited_afterwards_is_refused() {
    let _beside = crate::beside_others();
    let dir = scratch("edited");
    let data = data();
    let opts = options(&dir, 2, 2);
    train(&opts, &data, fresh(&opts.model), Reporter::silent()).unwrap();
    let model = dir.join("model");
    nervus_training::gpt::load_dir::<I>(&model, &Default::default()).unwrap();
    let path = model.join("config.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"n_head\": 2"), "{text}");
    std::fs::write(&path, text.replace("\"n_head\": 2", "\"n_head\": 1")).unwrap();
    let err = nervus_training::gpt::load_dir::<I>(&model, &Default::default()).unwrap_err();
    assert!(err.to_string().contains("was edited"), "{err}");
    // A head count that does not divide the width is refused by the loader itself.
    std::fs::write(&path, text.replace("\"n_head\": 2", "\"n_head\": 3")).unwrap();
    let err = nervus_training::gpt::load_dir::<I>(&model, &Default::default()).unwrap_err();
    assert!(err.to_string().contains("n_head 3"), "{err}");
    let _ = std::fs::remove_dir_all(dir);
}

/// A resume checkpoint damaged on the disk is an error naming the file, and the saved model is
/// left as it was. Burn's learner panicked on the first two damages here: a file cut short ("Can
/// load model checkpoint.") and a parameter id that no longer decodes (`ParamId::deserialize`:
/// "Invalid id.", found by `training/fuzz`'s record target); the third, a checkpoint of a model
/// twice as wide, Burn loaded without a word, and the first step failed on its shapes.
#[test]
fn a_damaged_resume_checkpoint_is_an_error_naming_the_file() {
    let _beside = crate::beside_others();
    let data = data();
    let wide = dir_of_a_wider_run(&data);
    for damage in ["cut short", "an id that does not decode", "a wider model's"] {
        let dir = scratch(&format!("damaged-{}", damage.len()));
        let opts = options(&dir, 6, 2);
        let model = fresh(&opts.model);
        let id = model.wte.weight.id.serialize();
        train(&opts, &data, model, Reporter::silent()).unwrap();
        let file = dir.join("train/checkpoint/model-3.mpk");
        let mut bytes = read(&file);
        if damage == "cut short" {
            bytes.truncate(bytes.len() / 2);
        } else if damage == "a wider model's" {
            bytes = read(&wide.join("train/checkpoint/model-3.mpk"));
        } else {
            let at = bytes
                .windows(id.len())
                .position(|w| w == id.as_bytes())
                .expect("the id is in the record");
            bytes[at..at + id.len()].fill(b'!');
        }
        std::fs::write(&file, &bytes).unwrap();
        let saved = read(&dir.join("model/model.safetensors"));
        let mut again = options(&dir, 6, 2);
        again.run.resume = true;
        let err = train(&again, &data, fresh(&again.model), Reporter::silent())
            .map(|_| ())
            .expect_err(damage);
        let msg = err.to_string();
        assert!(
            matches!(err, TrainError::Resume { .. }) && msg.contains("model-3.mpk"),
            "{damage}: {msg}"
        );
        assert_eq!(
            read(&dir.join("model/model.safetensors")),
            saved,
            "{damage}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
    let _ = std::fs::remove_dir_all(wide);
}

/// The directory of a finished run like [`options`]'s, of width 16.
fn dir_of_a_wider_run(data: &TextData) -> PathBuf {
    let dir = scratch("wider-run");
    let mut opts = options(&dir, 6, 2);
    opts.model = opts.model.with_d_model(16);
    train(&opts, data, fresh(&opts.model), Reporter::silent()).unwrap();
    dir
}

/// The record fuzz target's two crashes (`training/fuzz`), each a checkpoint of the fuzz crate's
/// GPT fixture: one whose parameter id does not decode (Burn panicked while decoding it), one
/// holding a tensor of another shape (Burn loaded it; the forward pass panicked). Both are errors.
#[test]
fn fuzz_regressions_damaged_records_are_errors() {
    let _beside = crate::beside_others();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (model, _, _) =
        nervus_training::gpt::load_dir::<I>(&root.join("fuzz/fixtures/gpt"), &Default::default())
            .unwrap();
    let dir = scratch("fuzz-regressions");
    for (name, says) in [
        ("record-undecodable-id", "Invalid id."),
        ("record-other-shape", "of shape"),
    ] {
        // Kept as `.record`: git holds no `.mpk`, and Burn reads only that extension.
        let file = dir.join(format!("{name}.mpk"));
        std::fs::copy(
            root.join("tests/fuzz-regressions")
                .join(format!("{name}.record")),
            &file,
        )
        .unwrap();
        let err = nervus_training::run::load_model_record(&model, &file)
            .map(|_| ())
            .expect_err(name)
            .to_string();
        assert!(err.contains(name) && err.contains(says), "{name}: {err}");
    }
    let _ = std::fs::remove_dir_all(dir);
}
