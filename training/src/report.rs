//! Where a run's words go: straight to stdout in plain mode; collected while Burn's TUI owns the
//! terminal and printed when it closes. Either way every line is also appended to the run's
//! `log.txt`, which a resumed run extends and never replaces.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ui {
    /// Burn's terminal UI (progress bars, ETA, live metric plots).
    Tui,
    /// Plain lines: a progress line with an ETA now and then, a summary per epoch.
    Plain,
}

impl Ui {
    /// Plain lines where `plain` asks for them, else [`Ui::auto`] (the examples' `--plain`).
    pub fn plain_or_auto(plain: bool) -> Self {
        if plain { Ui::Plain } else { Ui::auto() }
    }

    /// The TUI when stdout is a terminal, plain lines otherwise (a pipe, a file, CI).
    pub fn auto() -> Self {
        use std::io::IsTerminal;
        if std::io::stdout().is_terminal() {
            Ui::Tui
        } else {
            Ui::Plain
        }
    }
}

/// A cloneable handle for printing from anywhere in a run.
#[derive(Clone)]
pub struct Reporter {
    ui: Ui,
    held: Arc<Mutex<Vec<String>>>,
    log: Option<PathBuf>,
    mute: bool,
}

impl Reporter {
    pub fn new(ui: Ui, log: Option<PathBuf>) -> Self {
        Self {
            ui,
            held: Arc::default(),
            log,
            mute: false,
        }
    }

    /// Plain output, no log file: for tests and tools.
    pub fn plain() -> Self {
        Self::new(Ui::Plain, None)
    }

    /// Prints nothing (a sub-run whose progress would only be noise, like training the judge).
    pub fn silent() -> Self {
        Self {
            mute: true,
            ..Self::new(Ui::Plain, None)
        }
    }

    pub fn ui(&self) -> Ui {
        self.ui
    }

    /// Prints (or holds) one line, and appends it to the log.
    pub fn line(&self, text: impl AsRef<str>) {
        let text = text.as_ref();
        if self.mute {
            return;
        }
        match self.ui {
            Ui::Plain => println!("{text}"),
            Ui::Tui => self.held.lock().expect("reporter").push(text.to_string()),
        }
        if let Some(path) = &self.log
            && let Ok(mut f) = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
        {
            let _ = writeln!(f, "{text}");
        }
    }

    /// Prints what was held while the TUI was up.
    pub fn flush(&self) {
        for line in self.held.lock().expect("reporter").drain(..) {
            println!("{line}");
        }
    }
}

/// The end of an example's `main`: a failure is one line on standard error, `error: ` and the
/// chain of causes joined by `: ` (no backtrace, no list of causes; a cause its parent already
/// quotes is not repeated), and exit status 1.
pub fn exit<E: Into<Box<dyn std::error::Error + Send + Sync>>>(
    result: Result<(), E>,
) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", one_line(e.into().as_ref()));
            std::process::ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line.
pub fn one_line(e: &(dyn std::error::Error + 'static)) -> String {
    let mut line = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        if !line.contains(&text) {
            line = format!("{line}: {text}");
        }
        cause = c.source();
    }
    line.replace('\n', " ")
}

/// `1h 02m`, `4m 05s`, `12s`.
pub fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "?".into();
    }
    if secs < 10.0 {
        return format!("{secs:.1}s");
    }
    let s = secs.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {:02}s", s / 60, s % 60),
        _ => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn durations_read_naturally() {
        assert_eq!(super::duration(12.4), "12s");
        assert_eq!(super::duration(0.31), "0.3s");
        assert_eq!(super::duration(245.0), "4m 05s");
        assert_eq!(super::duration(3720.0), "1h 02m");
        assert_eq!(super::duration(f64::NAN), "?");
    }
}
