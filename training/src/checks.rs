//! A user's numbers, checked before any work: each rule names the flag that sets the value, so a
//! run refuses `--batch 0` or `--lr nan` in one line instead of crashing or training on nonsense.

use nervus_inference::generate::SampleOptions;

/// A value out of its range, named by the command-line flag that sets it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{flag} {value}: {rule}")]
pub struct BadValue {
    pub flag: &'static str,
    pub value: String,
    pub rule: &'static str,
}

fn bad(flag: &'static str, value: impl ToString, rule: &'static str) -> BadValue {
    BadValue {
        flag,
        value: value.to_string(),
        rule,
    }
}

/// A count that must be at least 1 (a batch, a number of steps, a width).
pub fn at_least_one(flag: &'static str, v: usize) -> Result<(), BadValue> {
    if v == 0 {
        return Err(bad(flag, v, "must be at least 1"));
    }
    Ok(())
}

/// A finite number above 0 (a learning rate).
pub fn positive(flag: &'static str, v: f64) -> Result<(), BadValue> {
    if !(v.is_finite() && v > 0.0) {
        return Err(bad(flag, v, "must be a number above 0"));
    }
    Ok(())
}

/// A finite number, 0 or above (a decay, a clipping threshold where 0 means off).
pub fn non_negative(flag: &'static str, v: f64) -> Result<(), BadValue> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(bad(flag, v, "must be a number, 0 or above"));
    }
    Ok(())
}

/// A share in [0, 1] (a dropout, the floor a cosine decays to).
pub fn share(flag: &'static str, v: f64) -> Result<(), BadValue> {
    if !(0.0..=1.0).contains(&v) {
        return Err(bad(flag, v, "must be a share between 0 and 1"));
    }
    Ok(())
}

/// Whether one training step's attention fits the memory this machine has free (Linux's
/// `MemAvailable`): the backward pass keeps `layers × batch × heads × context²` attention
/// probabilities, of at least 2 bytes each, a floor under what a step holds. `--context 100000`
/// asked for a 1.28 TB buffer at once, and the allocation failure aborted the process. A machine
/// that does not say what is free is not checked.
pub fn attention_fits(
    context: usize,
    batch: usize,
    heads: usize,
    layers: usize,
) -> Result<(), BadValue> {
    let Some(free) = available_memory() else {
        return Ok(());
    };
    let need = 2.0 * layers as f64 * batch as f64 * heads as f64 * (context as f64).powi(2);
    if need > free as f64 {
        let gb = |b: f64| format!("{:.1} GB", b / 1e9);
        return Err(bad(
            "--context",
            format!(
                "{context} (a training step would keep at least {} of attention; {} is free)",
                gb(need),
                gb(free as f64)
            ),
            "lower --context or --batch",
        ));
    }
    Ok(())
}

/// Bytes of memory free for new work (`MemAvailable` of /proc/meminfo), where the system says.
fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Any finite number.
pub fn finite(flag: &'static str, v: f64) -> Result<(), BadValue> {
    if !v.is_finite() {
        return Err(bad(flag, v, "must be a finite number"));
    }
    Ok(())
}

/// The threads a batch is cut across: at least 1 and no more than the batch has items.
pub fn parts(parts: usize, batch: usize) -> Result<(), BadValue> {
    at_least_one("--parts", parts)?;
    if parts > batch {
        return Err(bad(
            "--parts",
            parts,
            "must not exceed --batch (each part takes at least one item)",
        ));
    }
    Ok(())
}

/// What the shared training numbers must be: steps, batch and parts, the schedule, clipping,
/// weight decay and the distance between evaluations. (Any warm-up is usable: one longer than the
/// run never reaches the peak rate.)
#[allow(clippy::too_many_arguments)]
pub fn schedule(
    steps: usize,
    batch: usize,
    parts_: usize,
    lr: f64,
    decay_to: f64,
    clip: Option<f64>,
    weight_decay: f64,
    eval_every: usize,
) -> Result<(), BadValue> {
    at_least_one("--steps", steps)?;
    at_least_one("--batch", batch)?;
    parts(parts_, batch)?;
    positive("--lr", lr)?;
    share("--decay-to", decay_to)?;
    if let Some(c) = clip {
        positive("--clip", c)?;
    }
    non_negative("--weight-decay", weight_decay)?;
    at_least_one("--eval-every", eval_every)
}

/// What a diffusion run's own numbers must be (the image DiT's and the video DiT's), beside the
/// shared ones of [`schedule`]: a label dropout that is a share, and a drawing of at least one
/// step at a finite guidance.
pub fn diffusion(label_dropout: f64, sample_steps: usize, guidance: f64) -> Result<(), BadValue> {
    share("--label-dropout", label_dropout)?;
    at_least_one("--sample-steps", sample_steps)?;
    finite("--guidance", guidance)
}

/// Sampling: a temperature of 0 (greedy) or above, and `top_k` at least 1 where given.
pub fn sample(o: &SampleOptions) -> Result<(), BadValue> {
    non_negative("--temperature", o.temperature)?;
    if let Some(k) = o.top_k {
        at_least_one("--top-k", k)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_refuses_its_edge_and_nan_and_names_the_flag() {
        assert!(at_least_one("--batch", 1).is_ok());
        let e = at_least_one("--batch", 0).unwrap_err();
        assert_eq!(e.to_string(), "--batch 0: must be at least 1");
        for v in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(positive("--lr", v).is_err(), "{v}");
        }
        assert!(positive("--lr", 1e-9).is_ok());
        assert!(non_negative("--clip", 0.0).is_ok());
        for v in [-1e-9, f64::NAN, f64::NEG_INFINITY] {
            assert!(non_negative("--clip", v).is_err(), "{v}");
        }
        for v in [-0.1, 1.1, f64::NAN] {
            assert!(share("--decay-to", v).is_err(), "{v}");
        }
        assert!(share("--decay-to", 0.0).is_ok() && share("--decay-to", 1.0).is_ok());
        assert!(finite("--guidance", f64::NAN).is_err());
        assert!(parts(2, 2).is_ok());
        assert!(attention_fits(64, 16, 4, 2).is_ok());
        if available_memory().is_some() {
            // 2 × 2 × 16 × 4 × 10^12 bytes: 256 TB.
            let e = attention_fits(1_000_000, 16, 4, 2).unwrap_err();
            assert_eq!(e.flag, "--context");
            assert!(e.to_string().contains("256000.0 GB"), "{e}");
        }
        assert!(parts(3, 2).is_err() && parts(0, 2).is_err());
        let e = positive("--lr", -1.0).unwrap_err();
        assert_eq!(e.to_string(), "--lr -1: must be a number above 0");
    }

    #[test]
    fn the_schedule_names_the_first_bad_value() {
        let ok = schedule(10, 4, 2, 0.1, 0.1, Some(1.0), 0.1, 5);
        assert!(ok.is_ok());
        let e = schedule(10, 0, 1, 0.1, 0.1, None, 0.1, 5).unwrap_err();
        assert_eq!(e.flag, "--batch");
        let e = schedule(10, 4, 1, 0.1, -2.0, None, 0.1, 5).unwrap_err();
        assert_eq!(e.flag, "--decay-to");
        let e = schedule(10, 4, 1, 0.1, 0.1, Some(f64::NAN), 0.1, 5).unwrap_err();
        assert_eq!(e.flag, "--clip");
        let e = schedule(10, 4, 1, 0.1, 0.1, None, 0.1, 0).unwrap_err();
        assert_eq!(e.flag, "--eval-every");
    }

    #[test]
    fn sampling_refuses_a_negative_or_nan_temperature_and_top_k_0() {
        let o = |temperature, top_k| SampleOptions {
            length: 1,
            temperature,
            top_k,
        };
        assert!(sample(&o(0.0, None)).is_ok());
        assert!(sample(&o(0.8, Some(1))).is_ok());
        assert!(sample(&o(-1.0, None)).is_err());
        assert!(sample(&o(f64::NAN, None)).is_err());
        assert_eq!(sample(&o(1.0, Some(0))).unwrap_err().flag, "--top-k");
    }
}
