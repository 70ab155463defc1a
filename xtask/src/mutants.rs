//! `cargo xtask mutants`: the mutation run that shows the gradient witnesses bite.
//!
//! cargo-mutants changes one thing at a time in the code (an operator, a constant, a function's
//! body) and runs the tests; a mutant the tests still pass is a survivor. The run is long (every
//! mutant rebuilds `nervus-models` and runs its tests), so it can be done in slices
//! (`--shard K/N`), and every slice's outcome is kept in `docs/mutants/<scope>/`; the summary, and
//! the README's line, are rebuilt from every slice recorded so far. A survivor is either killed by
//! a new test or explained in `docs/mutants/explained.tsv` (the mutant as cargo-mutants prints it,
//! a tab, why no test can or should catch it).

use crate::cargo::cargo;
use anyhow::{Context, Result, bail};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The cargo-mutants release this command installs when none is found.
const CARGO_MUTANTS_VERSION: &str = "27.1.0";
const DOCS: &str = "docs/mutants";
const EXPLAINED: &str = "docs/mutants/explained.tsv";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// The f64 twins: models/src/reference.
    Reference,
    /// The Burn layers: every other file of models/src.
    Layers,
}

impl Scope {
    fn name(self) -> &'static str {
        match self {
            Scope::Reference => "reference",
            Scope::Layers => "layers",
        }
    }

    /// Whether a source file (relative to the workspace) is mutated in this scope.
    fn contains(self, file: &str) -> bool {
        let reference = file.starts_with("models/src/reference/");
        match self {
            Scope::Reference => reference && file.ends_with(".rs"),
            Scope::Layers => {
                file.starts_with("models/src/")
                    && file.ends_with(".rs")
                    && !reference
                    && file != "models/src/testing.rs"
            }
        }
    }

    /// cargo-mutants' file filters for this scope.
    fn filters(self) -> Vec<String> {
        match self {
            Scope::Reference => vec!["--file".into(), "models/src/reference/**".into()],
            Scope::Layers => vec![
                "--file".into(),
                "models/src/**".into(),
                "--exclude".into(),
                "models/src/reference/**".into(),
                "--exclude".into(),
                "models/src/testing.rs".into(),
            ],
        }
    }
}

#[derive(clap::Args)]
pub struct MutantsArgs {
    /// What to mutate.
    #[arg(long, value_enum, default_value_t = Scope::Reference)]
    scope: Scope,
    /// One slice of the run, `K/N` (0-based): every N-th mutant from the K-th, as cargo-mutants'
    /// `--shard` cuts them. Without it, the whole scope.
    #[arg(long)]
    shard: Option<String>,
    /// List the mutants and stop.
    #[arg(long)]
    list: bool,
    /// Only rebuild the summary and the README line from the slices already recorded.
    #[arg(long)]
    summarise: bool,
    /// Per-mutant test timeout in seconds (cargo-mutants derives one from the baseline if unset).
    #[arg(long)]
    timeout: Option<u64>,
    /// Only the mutants of this one file (which must lie in the scope), recorded as a slice of its
    /// own: for a file added after the scope's shards were run, whose arrival shifts the shards.
    #[arg(long)]
    file: Option<String>,
    /// Mutate this checkout itself rather than a copy (cargo-mutants' `--in-place`): slices after
    /// the first then build incrementally from where the last one left off. Only in a checkout
    /// nobody is editing, e.g. a `git worktree` kept for the purpose.
    #[arg(long)]
    in_place: bool,
    /// Re-test only the scope's recorded survivors, with the tests as they are now, recorded as a
    /// slice `survivors-<commit>`: after new tests, this shows which survivors they kill without
    /// re-running every shard. (A survivor's name carries its line, so the files must not have
    /// moved since the slice that missed it.)
    #[arg(long)]
    survivors: bool,
}

pub fn run(args: MutantsArgs) -> Result<()> {
    if !args.summarise {
        ensure_installed()?;
        let mut cmd = cargo();
        cmd.args(["mutants", "--package", "nervus-models", "--no-shuffle"]);
        if args.survivors {
            if args.file.is_some() || args.shard.is_some() {
                bail!("--survivors is a slice of its own: not with --file or --shard");
            }
            let missed = tally(&Path::new(DOCS).join(args.scope.name())).missed;
            if missed.is_empty() {
                bail!("no recorded survivors in the `{}` scope", args.scope.name());
            }
            for m in &missed {
                cmd.args(["--re", &format!("^{}$", regex_escape(m))]);
            }
        }
        match &args.file {
            Some(f) => {
                if !args.scope.contains(f) {
                    bail!("--file {f} is not in the `{}` scope", args.scope.name());
                }
                if args.shard.is_some() {
                    bail!("--file and --shard do not go together: a file is a slice of its own");
                }
                cmd.args(["--file", f]);
            }
            None => {
                cmd.args(args.scope.filters());
            }
        }
        if args.list {
            let status = cmd.arg("--list").status()?;
            if !status.success() {
                bail!("cargo mutants --list failed ({status})");
            }
            return Ok(());
        }
        let slice = match &args.shard {
            Some(s) => {
                let (k, n) = parse_shard(s)?;
                cmd.args(["--shard", s]);
                format!("shard-{k}-of-{n}")
            }
            None => match &args.file {
                Some(f) => format!(
                    "file-{}",
                    f.trim_start_matches("models/src/").replace('/', "-")
                ),
                None if args.survivors => format!("survivors-{}", short_head()?),
                None => "all".to_string(),
            },
        };
        let out = PathBuf::from("target/mutants")
            .join(args.scope.name())
            .join(&slice);
        std::fs::create_dir_all(&out)?;
        cmd.arg("--output").arg(&out);
        if args.in_place {
            cmd.arg("--in-place");
        }
        if let Some(t) = args.timeout {
            cmd.args(["--timeout", &t.to_string()]);
        }
        // Build in the workspace's own target directory: the registry dependencies (Burn, built
        // optimised even in the test profile) are then reused, not rebuilt in cargo-mutants'
        // copy of the tree; the copy's own crates get artifacts of their own (another path).
        cmd.env("CARGO_TARGET_DIR", std::env::current_dir()?.join("target"));
        // A mutant changes one line of one crate: incremental compilation (off in this
        // workspace's profiles, for CI's clean builds) makes each rebuild a fraction of a full one.
        cmd.env("CARGO_INCREMENTAL", "1");
        eprintln!("running {:?}", cmd);
        let status = cmd.status()?;
        // cargo-mutants exits 2 when mutants were missed, 3 on timeouts: both are results.
        match status.code() {
            Some(0 | 2 | 3) => {}
            _ => bail!(
                "cargo mutants failed ({status}); its log is in {}",
                out.display()
            ),
        }
        let record = Path::new(DOCS).join(args.scope.name()).join(&slice);
        std::fs::create_dir_all(&record)?;
        for kind in ["caught", "missed", "timeout", "unviable"] {
            let from = out.join("mutants.out").join(format!("{kind}.txt"));
            let text = std::fs::read_to_string(&from).unwrap_or_default();
            std::fs::write(record.join(format!("{kind}.txt")), text)?;
        }
        // Which tree the slice mutated: slices of different commits add up only where the
        // mutants they list are the same, which the summary checks against the current list.
        let head = Command::new("git").args(["rev-parse", "HEAD"]).output()?;
        std::fs::write(record.join("commit.txt"), &head.stdout)?;
        eprintln!("recorded in {}", record.display());
    }
    summarise(args.scope)
}

fn ensure_installed() -> Result<()> {
    let found = cargo()
        .args(["mutants", "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("installing cargo-mutants {CARGO_MUTANTS_VERSION} (once)");
        let status = cargo()
            .args([
                "install",
                "--locked",
                "cargo-mutants",
                "--version",
                CARGO_MUTANTS_VERSION,
            ])
            .status()?;
        if !status.success() {
            bail!("cargo install cargo-mutants failed ({status})");
        }
    }
    Ok(())
}

/// The current commit, abbreviated.
fn short_head() -> Result<String> {
    let out = Command::new("git")
        .args(["rev-parse", "--short=7", "HEAD"])
        .output()?;
    if !out.status.success() {
        bail!("git rev-parse HEAD failed");
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `text` as a regular expression that matches exactly it (cargo-mutants' `--re` takes regexes,
/// and mutant names hold `*`, `+`, `|`, `(`, `.`).
fn regex_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if "\\.+*?()|[]{}^$#&-~".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `K/N` with `K < N`.
fn parse_shard(s: &str) -> Result<(usize, usize)> {
    let parsed = s
        .split_once('/')
        .and_then(|(k, n)| Some((k.trim().parse().ok()?, n.trim().parse().ok()?)));
    match parsed {
        Some((k, n)) if k < n => Ok((k, n)),
        _ => bail!("--shard wants K/N with 0 ≤ K < N, e.g. 0/20; got `{s}`"),
    }
}

/// The outcomes of every recorded slice of a scope, each mutant counted once however many
/// slices tested it.
#[derive(Default, Debug, PartialEq)]
struct Tally {
    slices: Vec<String>,
    caught: usize,
    missed: Vec<String>,
    timeout: Vec<String>,
    unviable: usize,
    /// Every mutant any slice tested, whatever the outcome.
    tested: BTreeSet<String>,
}

impl Tally {
    /// Caught over caught and missed; timeouts are reported beside it, not counted either way.
    fn score(&self) -> f64 {
        let viable = self.caught + self.missed.len();
        if viable == 0 {
            f64::NAN
        } else {
            self.caught as f64 / viable as f64
        }
    }
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect()
}

fn tally(dir: &Path) -> Tally {
    let mut t = Tally::default();
    let mut slices: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_dir())
            .collect(),
        Err(_) => Vec::new(),
    };
    slices.sort();
    let (mut caught, mut missed, mut timeout, mut unviable) = (
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
        BTreeSet::new(),
    );
    for s in slices {
        t.slices
            .push(s.file_name().unwrap_or_default().to_string_lossy().into());
        caught.extend(lines(&s.join("caught.txt")));
        unviable.extend(lines(&s.join("unviable.txt")));
        missed.extend(lines(&s.join("missed.txt")));
        timeout.extend(lines(&s.join("timeout.txt")));
    }
    // A mutant caught by any slice (a later one, with more tests) is caught.
    missed.retain(|m| !caught.contains(m));
    timeout.retain(|m| !caught.contains(m) && !missed.contains(m));
    t.tested = caught
        .iter()
        .chain(&missed)
        .chain(&timeout)
        .chain(&unviable)
        .cloned()
        .collect();
    t.caught = caught.len();
    t.unviable = unviable.len();
    t.missed = missed.into_iter().collect();
    t.timeout = timeout.into_iter().collect();
    t
}

/// The scope's mutants in the current tree (`cargo mutants --list`), when cargo-mutants is
/// installed; `None` otherwise.
fn current_mutants(scope: Scope) -> Option<BTreeSet<String>> {
    let out = cargo()
        .args([
            "mutants",
            "--package",
            "nervus-models",
            "--no-shuffle",
            "--list",
        ])
        .args(scope.filters())
        .output()
        .ok()?;
    out.status.success().then(|| {
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    })
}

/// `docs/mutants/explained.tsv`: mutant → why it survives.
fn explanations() -> Result<BTreeMap<String, String>> {
    let mut map = BTreeMap::new();
    let text = match std::fs::read_to_string(EXPLAINED) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(map),
        Err(e) => return Err(e).context(EXPLAINED),
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((mutant, why)) = line.split_once('\t') else {
            bail!("{EXPLAINED}:{}: want `mutant<TAB>reason`", i + 1);
        };
        map.insert(mutant.trim().to_string(), why.trim().to_string());
    }
    Ok(map)
}

fn summarise(scope: Scope) -> Result<()> {
    let t = tally(&Path::new(DOCS).join(scope.name()));
    if t.slices.is_empty() {
        bail!(
            "nothing recorded for `{}` yet: run `cargo xtask mutants --scope {0}` (or a --shard)",
            scope.name()
        );
    }
    let explained = explanations()?;
    let unexplained: Vec<&String> = t
        .missed
        .iter()
        .filter(|m| !explained.contains_key(*m))
        .collect();
    let mut md = String::new();
    writeln!(md, "# Mutation run: `{}`\n", scope.name())?;
    writeln!(
        md,
        "Written by `cargo xtask mutants --scope {}`; slices recorded: {}.\n",
        scope.name(),
        t.slices.join(", ")
    )?;
    let coverage = current_mutants(scope).map(|now| {
        let untested: Vec<&String> = now.iter().filter(|m| !t.tested.contains(*m)).collect();
        (now.len(), untested.len())
    });
    let line = readme_line(scope, &t, unexplained.len(), coverage);
    writeln!(md, "{line}\n")?;
    writeln!(md, "## Survivors\n")?;
    if t.missed.is_empty() {
        writeln!(md, "None.")?;
    }
    for m in &t.missed {
        match explained.get(m) {
            Some(why) => writeln!(md, "- `{m}`: {why}")?,
            None => writeln!(md, "- `{m}`: **not explained yet**")?,
        }
    }
    if !t.timeout.is_empty() {
        writeln!(md, "\n## Timeouts\n")?;
        for m in &t.timeout {
            writeln!(md, "- `{m}`")?;
        }
    }
    let path = Path::new(DOCS).join(format!("{}.md", scope.name()));
    std::fs::write(&path, md)?;
    println!("{line}");
    println!("summary: {}", path.display());
    if !crate::tables::write_marked("mutants", scope.name(), &line)? {
        eprintln!(
            "no page has <!-- mutants:{} --> markers: the line is only in {}",
            scope.name(),
            path.display()
        );
    }
    Ok(())
}

/// `coverage`: how many mutants the current tree has in the scope, and how many of those no
/// recorded slice has tested.
fn readme_line(
    scope: Scope,
    t: &Tally,
    unexplained: usize,
    coverage: Option<(usize, usize)>,
) -> String {
    let covered = match coverage {
        Some((0, _)) | None => String::new(),
        Some((now, 0)) => format!("; every one of the current tree's {now} mutants tested"),
        Some((now, untested)) => {
            format!("; {untested} of the current tree's {now} mutants not tested yet")
        }
    };
    format!(
        "`{}`: {} of {} viable mutants caught ({:.1}%), {} missed ({} not yet explained), {} timed out, {} unviable{covered}; slices: {}",
        scope.name(),
        t.caught,
        t.caught + t.missed.len(),
        100.0 * t.score(),
        t.missed.len(),
        unexplained,
        t.timeout.len(),
        t.unviable,
        t.slices.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_shard("0/20").ok(), Some((0, 20)));
        assert_eq!(parse_shard("19/20").ok(), Some((19, 20)));
        for bad in ["20/20", "1", "a/b", "-1/3", ""] {
            assert!(parse_shard(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tally_adds_slices_and_scores_caught_over_viable() {
        let dir = std::env::temp_dir().join(format!("nervus-mutants-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (slice, caught, missed) in [("shard-0-of-2", 3, 1), ("shard-1-of-2", 5, 0)] {
            let d = dir.join(slice);
            std::fs::create_dir_all(&d).unwrap();
            let c: Vec<String> = (0..caught).map(|i| format!("{slice} caught {i}")).collect();
            std::fs::write(d.join("caught.txt"), c.join("\n")).unwrap();
            let m: Vec<String> = (0..missed).map(|i| format!("{slice} missed {i}")).collect();
            std::fs::write(d.join("missed.txt"), m.join("\n")).unwrap();
            std::fs::write(d.join("unviable.txt"), format!("{slice} u\n\n")).unwrap();
        }
        let t = tally(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(t.slices, ["shard-0-of-2", "shard-1-of-2"]);
        assert_eq!((t.caught, t.missed.len(), t.unviable), (8, 1, 2));
        assert!((t.score() - 8.0 / 9.0).abs() < 1e-12);
        // Nothing viable is not a perfect score.
        assert!(Tally::default().score().is_nan());
    }

    #[test]
    fn a_mutant_is_counted_once_and_caught_if_any_slice_caught_it() {
        let dir = std::env::temp_dir().join(format!("nervus-mutants-once-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for (slice, caught, missed) in [("a", "m1\nm2", "m3"), ("b", "m2\nm3", "m4")] {
            let d = dir.join(slice);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("caught.txt"), caught).unwrap();
            std::fs::write(d.join("missed.txt"), missed).unwrap();
        }
        let t = tally(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!((t.caught, t.missed.clone()), (3, vec!["m4".to_string()]));
        assert_eq!(t.tested.len(), 4);
        let line = readme_line(Scope::Reference, &t, 1, Some((6, 2)));
        assert!(
            line.contains("3 of 4 viable mutants caught (75.0%)"),
            "{line}"
        );
        assert!(
            line.contains("2 of the current tree's 6 mutants not tested yet"),
            "{line}"
        );
        assert!(readme_line(Scope::Reference, &t, 1, Some((4, 0))).contains("every one of"));
    }

    #[test]
    fn an_escaped_mutant_name_matches_itself_only() {
        let name = "models/src/gpt.rs:90:13: replace && with || in GptConfig::is_gpt2";
        assert_eq!(
            regex_escape(name),
            "models/src/gpt\\.rs:90:13: replace \\&\\& with \\|\\| in GptConfig::is_gpt2"
        );
        assert_eq!(
            regex_escape("a*b+c(d)[e]{f}^$?"),
            "a\\*b\\+c\\(d\\)\\[e\\]\\{f\\}\\^\\$\\?"
        );
    }

    #[test]
    fn files_belong_to_one_scope() {
        let r = "models/src/reference/modern_attention.rs";
        assert!(Scope::Reference.contains(r) && !Scope::Layers.contains(r));
        let l = "models/src/attention.rs";
        assert!(Scope::Layers.contains(l) && !Scope::Reference.contains(l));
        assert!(!Scope::Layers.contains("models/src/testing.rs"));
        assert!(!Scope::Layers.contains("training/src/lib.rs"));
    }
}
