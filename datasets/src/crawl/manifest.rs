//! `<name>.txt.crawl.json`, written beside the text: the start address, the scope, the date, the
//! options, every page in the order it was fetched (with where it sits in the text), what was
//! skipped and why, what cleaning changed, and the alphabet it ended with. In six months that is
//! the difference between "a corpus" and "this corpus, from here, on that day".

use super::clean::CleanReport;
use serde::{Deserialize, Serialize};
use std::time::{SystemTime, UNIX_EPOCH};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// What wrote it: `nervus-datasets <version>`.
    pub tool: String,
    pub start: String,
    /// `host[:port]/path/`.
    pub scope: String,
    /// When the crawl started, UTC, RFC 3339.
    pub date: String,
    pub options: Options,
    pub robots: RobotsRecord,
    /// Why the crawl ended.
    pub stopped: Stop,
    /// The pages in the text, in fetch order.
    pub pages: Vec<Page>,
    /// Everything not in the text, in the order it was met.
    pub skipped: Vec<Skip>,
    pub cleaning: CleanReport,
    pub text: TextRecord,
    /// Every character of the text and its count, in code-point order.
    pub alphabet: Vec<Letter>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Options {
    pub same_host: bool,
    pub delay_seconds: f64,
    pub max_pages: usize,
    pub max_bytes: u64,
    pub min_char_count: usize,
    pub user_agent: String,
    /// Loopback addresses were allowed: a site served from the crawling machine (the tests'; the
    /// Rust book `cargo xtask rust-book` built).
    #[serde(alias = "loopback_allowed_for_tests")]
    pub loopback_allowed: bool,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RobotsRecord {
    pub url: String,
    /// The HTTP status, when there was an answer.
    pub status: Option<u16>,
    /// What was made of it.
    pub outcome: String,
    /// The rules obeyed, as `Allow: /x` / `Disallow: /y`.
    pub rules: Vec<String>,
    pub crawl_delay: Option<f64>,
}

/// Why the crawl ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// Nothing left to fetch.
    Finished,
    MaxPages,
    MaxBytes,
}

impl std::fmt::Display for Stop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Stop::Finished => "finished: nothing left in scope",
            Stop::MaxPages => "stopped at the page limit",
            Stop::MaxBytes => "stopped at the byte limit",
        })
    }
}

/// A page of the text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    /// Where its text came from, without a fragment (after redirects).
    pub url: String,
    /// The addresses that redirected to it, first to last.
    pub redirected_from: Vec<String>,
    pub status: u16,
    /// Bytes of HTML received.
    pub bytes: u64,
    /// Its first line: the page's own heading.
    pub heading: String,
    /// Where its text starts in the `.txt`, in bytes, and how long it is (after cleaning).
    pub offset: usize,
    pub len: usize,
    /// sha256 of its text before cleaning, by which duplicates are found.
    pub sha256: String,
}

/// Why something was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Outside the crawl's scope, or a redirect out of it.
    OutOfScope,
    /// Disallowed by robots.txt.
    Robots,
    /// The same text as a page already kept.
    Duplicate,
    /// `print.html` or `all.html`: the whole site again.
    PrintPage,
    /// Not `text/html`.
    NotHtml,
    /// The address guard refused it.
    Refused,
    /// An error status.
    HttpError,
    /// No answer.
    Unreachable,
    /// HTML with no text in it.
    Empty,
    /// Left over when a limit stopped the crawl.
    Limit,
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Reason::OutOfScope => "out of scope",
            Reason::Robots => "robots.txt",
            Reason::Duplicate => "duplicate",
            Reason::PrintPage => "print page",
            Reason::NotHtml => "not html",
            Reason::Refused => "refused address",
            Reason::HttpError => "http error",
            Reason::Unreachable => "unreachable",
            Reason::Empty => "no text",
            Reason::Limit => "limit",
        })
    }
}

/// Something not in the text.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skip {
    /// Without a fragment.
    pub url: String,
    pub reason: Reason,
    pub detail: String,
    /// The page whose link led here (`None` for the start address).
    pub from: Option<String>,
    /// When it was fetched: the status of the last answer (a redirect's, when the redirect was
    /// not followed), and the addresses redirected to, a refused one included.
    pub status: Option<u16>,
    pub redirects: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextRecord {
    pub file: String,
    pub bytes: usize,
    pub chars: usize,
    pub distinct: usize,
    pub sha256: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Letter {
    pub char: char,
    pub code: String,
    pub count: usize,
}

impl Manifest {
    /// Every address under `from` (`http://127.0.0.1:8000/`) moved under `to`
    /// (`https://doc.rust-lang.org/book/`), and the scope with them: for a site crawled where it
    /// was built and cited where it is published. Addresses elsewhere are left alone.
    pub fn rebase(&mut self, from: &str, to: &str) {
        let move_one = |u: &mut String| {
            if let Some(rest) = u.strip_prefix(from) {
                *u = format!("{to}{rest}");
            }
        };
        let scheme_less = |u: &str| {
            u.split_once("://")
                .map_or(u.to_string(), |(_, r)| r.to_string())
        };
        let (scope_from, scope_to) = (scheme_less(from), scheme_less(to));
        if let Some(rest) = self.scope.strip_prefix(&scope_from) {
            self.scope = format!("{scope_to}{rest}");
        }
        move_one(&mut self.start);
        move_one(&mut self.robots.url);
        for p in &mut self.pages {
            move_one(&mut p.url);
            p.redirected_from.iter_mut().for_each(move_one);
        }
        for s in &mut self.skipped {
            move_one(&mut s.url);
            s.from.iter_mut().for_each(move_one);
            s.redirects.iter_mut().for_each(move_one);
        }
    }
}

/// `time` as RFC 3339 in UTC, to the second: `2024-05-01T12:00:00Z`. (Times before 1970 are
/// written as 1970.)
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn rebase_moves_every_address_under_the_old_base_and_nothing_else() {
        let page = |url: &str| Page {
            url: url.into(),
            redirected_from: vec!["http://127.0.0.1:9/old.html".into()],
            status: 200,
            bytes: 1,
            heading: "# A".into(),
            offset: 0,
            len: 1,
            sha256: String::new(),
        };
        let mut m = Manifest {
            tool: "t".into(),
            start: "http://127.0.0.1:9/".into(),
            scope: "127.0.0.1:9/".into(),
            date: "d".into(),
            options: Options {
                same_host: false,
                delay_seconds: 0.0,
                max_pages: 1,
                max_bytes: 1,
                min_char_count: 1,
                user_agent: "u".into(),
                loopback_allowed: true,
            },
            robots: RobotsRecord {
                url: "http://127.0.0.1:9/robots.txt".into(),
                status: Some(404),
                outcome: "o".into(),
                rules: vec![],
                crawl_delay: None,
            },
            stopped: Stop::Finished,
            pages: vec![page("http://127.0.0.1:9/ch01.html")],
            skipped: vec![Skip {
                url: "https://example.org/x".into(),
                reason: Reason::OutOfScope,
                detail: String::new(),
                from: Some("http://127.0.0.1:9/ch01.html".into()),
                status: None,
                redirects: vec![],
            }],
            cleaning: CleanReport::default(),
            text: TextRecord {
                file: "f".into(),
                bytes: 0,
                chars: 0,
                distinct: 0,
                sha256: String::new(),
            },
            alphabet: vec![],
        };
        m.rebase("http://127.0.0.1:9/", "https://doc.rust-lang.org/book/");
        assert_eq!(m.start, "https://doc.rust-lang.org/book/");
        assert_eq!(m.scope, "doc.rust-lang.org/book/");
        assert_eq!(m.robots.url, "https://doc.rust-lang.org/book/robots.txt");
        assert_eq!(m.pages[0].url, "https://doc.rust-lang.org/book/ch01.html");
        assert_eq!(
            m.pages[0].redirected_from[0],
            "https://doc.rust-lang.org/book/old.html"
        );
        assert_eq!(m.skipped[0].url, "https://example.org/x");
        assert_eq!(
            m.skipped[0].from.as_deref(),
            Some("https://doc.rust-lang.org/book/ch01.html")
        );
    }

    #[test]
    fn rfc3339_dates() {
        let at = |s: u64| rfc3339(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(at(1_709_210_096), "2024-02-29T12:34:56Z");
        assert_eq!(at(4_102_444_799), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn reasons_serialise_in_snake_case() {
        assert_eq!(
            serde_json::to_string(&Reason::OutOfScope).unwrap(),
            "\"out_of_scope\""
        );
        assert_eq!(
            serde_json::to_string(&Stop::MaxBytes).unwrap(),
            "\"max_bytes\""
        );
    }
}
