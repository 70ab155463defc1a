//! Drawing with a saved video model, judged: the panel and its ceiling on real clips, then one
//! clip of each pair asked for, drawn plainly, pushed away from the pair's doubles, or the best
//! of several by the model's own check, read by the same panel.

use super::judge::{self, JudgeChoice};
use super::verdict::{PanelVerdict, ceiling};
use crate::checkpoint::{average_checkpoints, replace_dir};
use crate::checks::{BadValue, at_least_one};
use crate::report::Reporter;
use crate::run::TrainError;
use burn::tensor::backend::AutodiffBackend;
use nervus_datasets::mnist::Mnist;
use nervus_datasets::moving::{self, Clips};
use nervus_inference::drawing::DrawSettings;
use nervus_inference::video::{draw, draw_best_of, write_clips};
use nervus_models::video_pipeline;
use std::path::PathBuf;

/// What to draw, and with what.
#[derive(Clone, Debug)]
pub struct DrawOptions {
    /// The saved pipeline.
    pub load: PathBuf,
    /// Draw with the mean of these checkpoint files' weights instead (the learner's
    /// `model-N.mpk`, of the pipeline's architecture); the averaged pipeline is saved in
    /// `out/model-averaged`.
    pub average: Vec<PathBuf>,
    pub draw: DrawSettings,
    /// The pairs to draw, one clip each.
    pub pairs: Vec<(u8, u8)>,
    /// The noise set (0: the fixed set every run judges with; others are independent draws, for
    /// measuring how much a count owes to one draw).
    pub noise_set: u64,
    /// Weight of the push away from each pair's doubles (1: none).
    pub doubles: f64,
    /// Candidates drawn of each pair, the one the model itself scores best kept (1: the plain
    /// draw).
    pub best_of: usize,
    pub judges: JudgeChoice,
    /// Where the sheets and GIFs go.
    pub out: PathBuf,
}

impl DrawOptions {
    /// Refuses numbers out of their range, each named by its flag.
    pub fn check(&self) -> Result<(), TrainError> {
        at_least_one("--sample-steps", self.draw.steps)?;
        crate::checks::finite("--guidance", self.draw.guidance)?;
        self.draw.check()?;
        if !(self.doubles.is_finite() && self.doubles >= 1.0) {
            return Err(BadValue {
                flag: "--doubles",
                value: self.doubles.to_string(),
                rule: "a weight of at least 1 (1: no push)",
            }
            .into());
        }
        at_least_one("--best-of", self.best_of)?;
        at_least_one("--pairs", self.pairs.len())?;
        self.judges.check()?;
        Ok(())
    }

    /// The name the drawing's files carry: its settings where they differ from the plain ones.
    pub fn name(&self) -> String {
        let d = &self.draw;
        let mut name = format!("g{}-s{}", d.guidance, d.steps);
        if self.doubles != 1.0 {
            name += &format!("-doubles{}", self.doubles);
        }
        if d.guidance_below < 1.0 {
            name += &format!("-below{}", d.guidance_below);
            if d.guidance_above != 1.0 {
                name += &format!("-above{}", d.guidance_above);
            }
        }
        if self.best_of > 1 {
            name += &format!("-best{}", self.best_of);
        }
        if d.shift != 1.0 {
            name += &format!("-shift{}", d.shift);
        }
        if self.noise_set != 0 {
            name += &format!("-noise{}", self.noise_set);
        }
        name
    }
}

/// What a drawing was read as.
pub struct Drawn {
    pub verdict: PanelVerdict,
    /// The same pairs' real clips, read by the same panel.
    pub ceiling: PanelVerdict,
    pub sheet: PathBuf,
    pub gif: PathBuf,
}

/// Draws `opts.pairs` with the saved model and has the panel read them (the judges trained on
/// clips of `data` where none is loaded), reporting each step; the clips go to a sheet and a GIF
/// in `opts.out` named by [`DrawOptions::name`].
pub fn draw_saved<B: AutodiffBackend>(
    opts: &DrawOptions,
    data: &Mnist,
    report: &Reporter,
    device: &B::Device,
) -> Result<Drawn, TrainError> {
    opts.check()?;
    let mut model = video_pipeline::load_pipeline::<B::InnerBackend>(&opts.load, device)
        .map_err(|e| TrainError::read(format!("loading {}", opts.load.display()), e))?;
    let (train, test) = (Clips::new(&data.train), Clips::new(&data.test));
    let judges = judge::panel::<B>(&opts.judges, &train, &test, &opts.out, report, device)?;
    let (ceiling, _) = ceiling(&judges, &test, &opts.pairs, &opts.out, report)?;
    if let (Some(first), Some(last)) = (opts.average.first(), opts.average.last()) {
        model = average_checkpoints(model, &opts.average, device)
            .map_err(|e| TrainError::read("averaging the checkpoints", e))?;
        let saved = opts.out.join("model-averaged");
        replace_dir(&saved, |d| video_pipeline::save_pipeline(&model, d))
            .map_err(|e| TrainError::Checkpoint(format!("saving {}: {e}", saved.display())))?;
        report.line(format!(
            "drawing with the mean of {} checkpoints ({} … {}), saved in {}",
            opts.average.len(),
            first.display(),
            last.display(),
            saved.display()
        ));
    }
    let (pairs, set) = (&opts.pairs, opts.noise_set);
    let drawn = if opts.best_of > 1 {
        let best = draw_best_of(
            &model,
            pairs,
            opts.draw,
            opts.doubles,
            set,
            16,
            opts.best_of,
        );
        for (j, candidate) in best.candidates.iter().enumerate() {
            let v = PanelVerdict::of(&judges, candidate, pairs);
            let failures = v.median_judge().map(|m| m.failures()).unwrap_or_default();
            report.line(format!(
                "candidate {j}{}: {}; {failures}; chosen for {} pairs",
                if j == 0 { " (the plain draw)" } else { "" },
                v.summary(),
                best.chosen.iter().filter(|&&c| c == j).count()
            ));
        }
        best.clips
    } else {
        draw(&model, pairs, opts.draw, opts.doubles, set, 16)
    };
    let verdict = PanelVerdict::of(&judges, &drawn, pairs);
    let name = opts.name();
    let (sheet, gif) = (
        opts.out.join(format!("clips-{name}.png")),
        opts.out.join(format!("clips-{name}.gif")),
    );
    write_clips(&drawn, &sheet, &gif).map_err(TrainError::Hook)?;
    report.line(format!(
        "drawn: {}, flicker {:.3}; {} and {}",
        verdict.summary(),
        moving::flicker(&drawn.concat()),
        sheet.display(),
        gif.display()
    ));
    if let Some(median) = verdict.median_judge() {
        report.line(format!(
            "not mostly right, by the median judge: {}",
            median.failures()
        ));
    }
    Ok(Drawn {
        verdict,
        ceiling,
        sheet,
        gif,
    })
}
