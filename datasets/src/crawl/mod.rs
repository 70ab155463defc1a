//! A documentation site as a plain-text corpus for a character model.
//!
//! [`crawl`] starts at an address and follows links inside its directory ([`scope`]), obeying
//! robots.txt ([`robots`]), pausing between requests and stopping at a number of pages and of
//! bytes, and fetching nothing from an address that is not on the public internet ([`guard`]).
//! Each HTML page is cut into tokens ([`scan`]) and turned into markdown-ish text, its links
//! collected from the whole page and its text only from the part that is not site furniture
//! ([`extract`]). Pages are deduplicated by the hash of their text; `print.html` and `all.html`
//! are passed over by name. The whole corpus is then cleaned for a character model ([`clean`]):
//! typography mapped onto ASCII, characters too rare to train dropped. [`Corpus::write`] puts the
//! text in `<name>.txt` and its provenance in `<name>.txt.crawl.json` ([`manifest`]).
//!
//! A crawler that someone else can point at a stranger's server should be boring; every limit
//! here has a default and every decision is recorded.

pub mod clean;
pub mod entities;
pub mod extract;
pub mod fetch;
pub mod guard;
pub mod manifest;
pub mod robots;
pub mod scan;
pub mod scope;

use crate::download::sha256_hex;
use crate::text::write_atomic;
use crate::{DataError, Result};
use fetch::{Failure, Fetcher};
use guard::Guard;
use manifest::{Letter, Manifest, Options, Page, Reason, RobotsRecord, Skip, Stop, TextRecord};
use robots::Robots;
use scope::{Scope, whole_site_page, without_fragment};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use url::Url;

/// The crawler's `User-Agent`.
pub const USER_AGENT: &str = concat!("nervus/", env!("CARGO_PKG_VERSION"), " (docs crawler)");

/// The most a robots.txt may be; a longer one is read up to here.
const ROBOTS_BYTES: u64 = 512 * 1024;

/// What to crawl and how politely.
#[derive(Clone, Debug)]
pub struct CrawlConfig {
    /// The starting address; its directory is the scope.
    pub start: String,
    /// Widen the scope from the start's directory to its whole host.
    pub same_host: bool,
    /// The pause before each request after the first (a longer `Crawl-delay` in robots.txt wins).
    pub delay: Duration,
    /// The most pages requested (robots.txt and redirect hops not counted).
    pub max_pages: usize,
    /// The most bytes of response bodies read, robots.txt included.
    pub max_bytes: u64,
    /// Non-ASCII characters seen fewer times than this in the corpus are dropped.
    pub min_char_count: usize,
    /// Where `<name>.txt` and `<name>.txt.crawl.json` go.
    pub out_dir: PathBuf,
    /// Set only by [`CrawlConfig::allow_loopback`].
    allow_loopback: bool,
}

impl CrawlConfig {
    /// A crawl of `start` with the defaults: 1 s between requests, at most 1000 pages and
    /// 100 MB, characters kept from 10 occurrences, output in the current directory.
    pub fn new(start: impl Into<String>) -> Self {
        Self {
            start: start.into(),
            same_host: false,
            delay: Duration::from_secs(1),
            max_pages: 1000,
            max_bytes: 100_000_000,
            min_char_count: clean::MIN_CHAR_COUNT,
            out_dir: PathBuf::from("."),
            allow_loopback: false,
        }
    }

    /// Lets the crawl fetch from 127.0.0.0/8 and `::1`, and from nothing else the guard refuses:
    /// for a site served from this machine (the tests' servers; the book `cargo xtask rust-book`
    /// builds). The manifest records it. No flag of the crawl example reaches it, so a user's
    /// crawl of a public site can never be redirected onto this machine.
    pub fn allow_loopback(mut self) -> Self {
        self.allow_loopback = true;
        self
    }

    fn options(&self) -> Options {
        Options {
            same_host: self.same_host,
            delay_seconds: self.delay.as_secs_f64(),
            max_pages: self.max_pages,
            max_bytes: self.max_bytes,
            min_char_count: self.min_char_count,
            user_agent: USER_AGENT.to_string(),
            loopback_allowed: self.allow_loopback,
        }
    }
}

/// Progress, as it happens.
#[derive(Clone, Debug)]
pub enum Event {
    /// robots.txt was read (or found missing, or unreachable).
    Robots { url: String, outcome: String },
    /// A page was kept.
    Page {
        url: String,
        status: u16,
        bytes: u64,
        chars: usize,
        /// Pages kept so far, and bytes read so far.
        pages: usize,
        total_bytes: u64,
    },
    /// Something was not used.
    Skipped(Skip),
    /// The crawl ended.
    Stopped(Stop),
}

/// A crawled, cleaned corpus and its manifest, not yet written.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// `<name>` of `<name>.txt`, from the start address (see [`scope::corpus_name`]).
    pub name: String,
    pub text: String,
    pub manifest: Manifest,
}

/// Where [`Corpus::write`] put things.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    pub text: PathBuf,
    pub manifest: PathBuf,
}

impl Corpus {
    /// Writes `<dir>/<name>.txt` and `<dir>/<name>.txt.crawl.json`, each atomically.
    pub fn write(&self, dir: &Path) -> Result<Written> {
        let text = dir.join(format!("{}.txt", self.name));
        let manifest = dir.join(format!("{}.txt.crawl.json", self.name));
        write_atomic(&text, self.text.as_bytes())?;
        let json = serde_json::to_string_pretty(&self.manifest)
            .map_err(|e| DataError::format(&manifest, format!("cannot serialise: {e}")))?;
        write_atomic(&manifest, json.as_bytes())?;
        Ok(Written { text, manifest })
    }
}

/// Crawls, cleans and writes into `config.out_dir`: the one call the command line makes.
pub fn crawl_to_files(
    config: &CrawlConfig,
    on_event: &mut dyn FnMut(&Event),
) -> Result<(Corpus, Written)> {
    let corpus = crawl(config, on_event)?;
    let written = corpus.write(&config.out_dir)?;
    Ok((corpus, written))
}

fn crawl_error(url: &str, problem: impl Into<String>) -> DataError {
    DataError::Crawl {
        url: url.to_string(),
        problem: problem.into(),
    }
}

/// Pages kept so far, found duplicates by the hash of their text.
#[derive(Default)]
struct Pages {
    kept: Vec<(Page, String)>,
    by_hash: HashMap<String, String>,
}

impl Pages {
    /// Keeps `text` unless a page with the same text was kept; then returns that page's address.
    fn keep(&mut self, mut page: Page, text: String) -> Result<(), String> {
        let hash = sha256_hex(text.as_bytes());
        if let Some(first) = self.by_hash.get(&hash) {
            return Err(first.clone());
        }
        self.by_hash.insert(hash.clone(), page.url.clone());
        page.sha256 = hash;
        self.kept.push((page, text));
        Ok(())
    }
}

/// What robots.txt rules are matched against: the path and its query.
fn robots_path(url: &Url) -> String {
    match url.query() {
        Some(q) => format!("{}?{q}", url.path()),
        None => url.path().to_string(),
    }
}

/// State of one crawl.
struct Crawler<'a> {
    start: Url,
    scope: Scope,
    robots: Robots,
    fetcher: Fetcher,
    queue: VecDeque<(Url, Option<String>)>,
    /// Every address queued, fetched or skipped: each is considered once.
    seen: HashSet<String>,
    pages: Pages,
    skipped: Vec<Skip>,
    requested: usize,
    bytes: u64,
    on_event: &'a mut dyn FnMut(&Event),
}

impl Crawler<'_> {
    fn skip(&mut self, skip: Skip) {
        (self.on_event)(&Event::Skipped(skip.clone()));
        self.skipped.push(skip);
    }

    fn skip_simple(&mut self, url: &Url, reason: Reason, detail: String, from: Option<String>) {
        self.skip(Skip {
            url: url.to_string(),
            reason,
            detail,
            from,
            status: None,
            redirects: Vec::new(),
        });
    }

    /// Why a page at `url` may not be fetched, or `None` when it may.
    fn refusal(&self, url: &Url) -> Option<(Reason, String)> {
        if !self.scope.contains(url) {
            return Some((Reason::OutOfScope, format!("outside {}", self.scope)));
        }
        if let Some(why) = whole_site_page(url) {
            return Some((Reason::PrintPage, why.to_string()));
        }
        if let Some(rule) = self.robots.deciding_rule(&robots_path(url))
            && !rule.allow
        {
            return Some((Reason::Robots, format!("robots.txt: {rule}")));
        }
        None
    }

    /// Queues the links of a page, recording the ones not followed.
    fn follow(&mut self, page: &Url, base: Option<&str>, links: &[String]) {
        let base = base
            .and_then(|b| page.join(b).ok())
            .unwrap_or_else(|| page.clone());
        for link in links {
            let Ok(url) = base.join(link) else { continue };
            if !matches!(url.scheme(), "http" | "https") {
                // mailto:, javascript: and the like are not pages.
                continue;
            }
            let url = without_fragment(url);
            if !self.seen.insert(url.to_string()) {
                continue;
            }
            match self.refusal(&url) {
                Some((reason, detail)) => {
                    self.skip_simple(&url, reason, detail, Some(page.to_string()));
                }
                None => self.queue.push_back((url, Some(page.to_string()))),
            }
        }
    }

    /// Reads the host's robots.txt once. Fails when the guard refuses the host or the host does
    /// not answer at all, since then no page of it could be fetched either (and "disallowed by
    /// robots.txt" would name the wrong cause).
    fn read_robots(&mut self, max_bytes: u64) -> Result<RobotsRecord, String> {
        let url = self
            .start
            .join("/robots.txt")
            .unwrap_or_else(|_| self.start.clone());
        let budget = ROBOTS_BYTES.min(max_bytes);
        // RFC 9309 lets robots.txt redirect anywhere; the guard still checks every hop.
        let attempt = self.fetcher.get(&url, &mut |_| Ok(()), false, budget);
        let (robots, status, outcome) = match attempt.result {
            Ok(response) => {
                self.bytes += response.body.len() as u64;
                let text = String::from_utf8_lossy(&response.body);
                let robots = Robots::parse(&text, robots::AGENT);
                let outcome = match robots.rules.len() {
                    1 => "read: 1 rule applies to us".to_string(),
                    n => format!("read: {n} rules apply to us"),
                };
                (robots, Some(response.status), outcome)
            }
            Err(Failure::Status(status, detail)) if (400..500).contains(&status) => (
                Robots::allow_all(),
                Some(status),
                format!("missing ({detail}): everything allowed"),
            ),
            Err(Failure::TooLarge(detail)) => (
                Robots::disallow_all(),
                None,
                format!("too large ({detail}): nothing allowed"),
            ),
            Err(Failure::Status(status, detail)) => (
                Robots::disallow_all(),
                Some(status),
                format!("unavailable ({detail}): nothing allowed, as RFC 9309 says"),
            ),
            Err(Failure::Refused(detail)) => return Err(detail),
            Err(Failure::Unreachable(detail)) => return Err(format!("{url}: {detail}")),
            Err(Failure::Redirect(_, detail) | Failure::NotHtml(detail)) => (
                Robots::disallow_all(),
                None,
                format!("unusable ({detail}): nothing allowed"),
            ),
        };
        (self.on_event)(&Event::Robots {
            url: url.to_string(),
            outcome: outcome.clone(),
        });
        let record = RobotsRecord {
            url: url.to_string(),
            status,
            outcome,
            rules: robots.rules.iter().map(ToString::to_string).collect(),
            crawl_delay: robots.crawl_delay,
        };
        self.robots = robots;
        Ok(record)
    }

    /// Fetches one queued page and keeps, skips or follows it.
    fn visit(&mut self, url: Url, from: Option<String>, max_bytes: u64) -> Option<Stop> {
        let budget = max_bytes.saturating_sub(self.bytes);
        self.requested += 1;
        // A redirect is followed only where a link would be, and never back to a page already
        // fetched (its text is already in hand).
        let (scope, robots_rules, seen) = (&self.scope, &self.robots, &self.seen);
        let start = &url;
        let mut hop_ok = |hop: &Url| -> Result<(), (Reason, String)> {
            if !scope.contains(hop) {
                return Err((Reason::OutOfScope, format!("outside {scope}")));
            }
            if let Some(why) = whole_site_page(hop) {
                return Err((Reason::PrintPage, why.to_string()));
            }
            if let Some(rule) = robots_rules.deciding_rule(&robots_path(hop))
                && !rule.allow
            {
                return Err((Reason::Robots, format!("robots.txt: {rule}")));
            }
            if hop != start && seen.contains(hop.as_str()) {
                return Err((Reason::Duplicate, "an address already met".to_string()));
            }
            Ok(())
        };
        let attempt = self.fetcher.get(&url, &mut hop_ok, true, budget);
        let chain: Vec<String> = attempt.chain.iter().map(ToString::to_string).collect();
        let redirects = chain[1..].to_vec();
        let response = match attempt.result {
            Ok(r) => r,
            Err(failure) => {
                let (reason, detail, stop) = match failure {
                    Failure::Refused(d) => (Reason::Refused, d, None),
                    Failure::Redirect(reason, d) => (reason, d, None),
                    Failure::Status(_, d) => (Reason::HttpError, d, None),
                    Failure::NotHtml(d) => (Reason::NotHtml, d, None),
                    Failure::Unreachable(d) => (Reason::Unreachable, d, None),
                    Failure::TooLarge(d) => (Reason::Limit, d, Some(Stop::MaxBytes)),
                };
                self.skip(Skip {
                    url: url.to_string(),
                    reason,
                    detail,
                    from,
                    status: attempt.status,
                    redirects,
                });
                return stop;
            }
        };
        self.bytes += response.body.len() as u64;
        self.seen.extend(chain.iter().cloned());
        let html = String::from_utf8_lossy(&response.body);
        let extracted = extract::extract(&html);
        self.follow(&response.url, extracted.base.as_deref(), &extracted.links);
        let text = extracted.text_with_heading(response.url.path());
        let skip = |reason, detail: String| Skip {
            url: response.url.to_string(),
            reason,
            detail,
            from: from.clone(),
            status: Some(response.status),
            redirects: redirects.clone(),
        };
        if text.is_empty() {
            let s = skip(Reason::Empty, "no text outside the site's furniture".into());
            self.skip(s);
            return None;
        }
        let chars = text.chars().count();
        let page = Page {
            url: response.url.to_string(),
            redirected_from: chain[..chain.len() - 1].to_vec(),
            status: response.status,
            bytes: response.body.len() as u64,
            heading: text.lines().next().unwrap_or("").to_string(),
            offset: 0,
            len: 0,
            sha256: String::new(),
        };
        match self.pages.keep(page, text) {
            Ok(()) => (self.on_event)(&Event::Page {
                url: response.url.to_string(),
                status: response.status,
                bytes: response.body.len() as u64,
                chars,
                pages: self.pages.kept.len(),
                total_bytes: self.bytes,
            }),
            Err(first) => {
                let s = skip(Reason::Duplicate, format!("the same text as {first}"));
                self.skip(s);
            }
        }
        None
    }
}

/// Crawls `config.start` and returns the cleaned corpus, reporting progress to `on_event`.
///
/// Fails when the start address is not an http(s) URL, when its host is refused by the guard,
/// or when no page could be kept (the error then says why the start page was not).
pub fn crawl(config: &CrawlConfig, on_event: &mut dyn FnMut(&Event)) -> Result<Corpus> {
    let date = manifest::rfc3339(SystemTime::now());
    let start = Url::parse(config.start.trim())
        .map_err(|e| crawl_error(&config.start, format!("not an address: {e}")))?;
    let start = without_fragment(start);
    let scope = Scope::of(&start, config.same_host).map_err(|e| crawl_error(start.as_str(), e))?;
    let guard = Guard {
        allow_loopback: config.allow_loopback,
    };
    guard
        .check_url(&start)
        .map_err(|e| crawl_error(start.as_str(), e.to_string()))?;
    let fetcher = Fetcher::new(guard, config.delay, USER_AGENT)
        .map_err(|e| crawl_error(start.as_str(), e))?;
    let mut c = Crawler {
        start: start.clone(),
        scope,
        robots: Robots::allow_all(),
        fetcher,
        queue: VecDeque::new(),
        seen: HashSet::new(),
        pages: Pages::default(),
        skipped: Vec::new(),
        requested: 0,
        bytes: 0,
        on_event,
    };
    let robots_record = c
        .read_robots(config.max_bytes)
        .map_err(|refused| crawl_error(start.as_str(), refused))?;
    if let Some(d) = c.robots.crawl_delay {
        // Honoured up to a minute; a site asking for more is asking not to be crawled.
        let wanted = Duration::from_secs_f64(d.clamp(0.0, 60.0));
        if wanted > config.delay {
            c.fetcher.set_delay(wanted);
        }
    }
    c.seen.insert(start.to_string());
    match c.refusal(&start) {
        Some((reason, detail)) => c.skip_simple(&start, reason, detail, None),
        None => c.queue.push_back((start.clone(), None)),
    }
    let mut stop = Stop::Finished;
    while let Some((url, from)) = c.queue.pop_front() {
        let limit = if c.requested >= config.max_pages {
            Some(Stop::MaxPages)
        } else if c.bytes >= config.max_bytes {
            Some(Stop::MaxBytes)
        } else {
            None
        };
        if let Some(limit) = limit {
            stop = limit;
            c.queue.push_front((url, from));
            break;
        }
        if let Some(s) = c.visit(url, from, config.max_bytes) {
            stop = s;
            break;
        }
    }
    while let Some((url, from)) = c.queue.pop_front() {
        c.skip_simple(&url, Reason::Limit, stop.to_string(), from);
    }
    (c.on_event)(&Event::Stopped(stop));
    if c.pages.kept.is_empty() {
        let why = c
            .skipped
            .iter()
            .find(|s| s.url == start.as_str())
            .map(|s| format!("{}: {}", s.reason, s.detail))
            .unwrap_or_else(|| "nothing could be fetched".to_string());
        return Err(crawl_error(start.as_str(), format!("no page kept ({why})")));
    }
    let name = scope::corpus_name(&start);
    let (pages, texts): (Vec<Page>, Vec<String>) = c.pages.kept.into_iter().unzip();
    let cleaned = clean::clean(&texts, config.min_char_count);
    let mut text = String::new();
    let mut pages = pages;
    for (page, body) in pages.iter_mut().zip(&cleaned.pages) {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        page.offset = text.len();
        page.len = body.len();
        page.heading = body.lines().next().unwrap_or("").to_string();
        text.push_str(body);
    }
    text.push('\n');
    let mut counts: BTreeMap<char, usize> = BTreeMap::new();
    for ch in text.chars() {
        *counts.entry(ch).or_default() += 1;
    }
    let manifest = Manifest {
        tool: concat!("nervus-datasets ", env!("CARGO_PKG_VERSION")).to_string(),
        start: start.to_string(),
        scope: c.scope.to_string(),
        date,
        options: config.options(),
        robots: robots_record,
        stopped: stop,
        pages,
        skipped: c.skipped,
        cleaning: cleaned.report,
        text: TextRecord {
            file: format!("{name}.txt"),
            bytes: text.len(),
            chars: text.chars().count(),
            distinct: counts.len(),
            sha256: sha256_hex(text.as_bytes()),
        },
        alphabet: counts
            .into_iter()
            .map(|(ch, count)| Letter {
                char: ch,
                code: clean::code_point(ch),
                count,
            })
            .collect(),
    };
    Ok(Corpus {
        name,
        text,
        manifest,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(url: &str) -> Page {
        Page {
            url: url.into(),
            redirected_from: vec![],
            status: 200,
            bytes: 0,
            heading: String::new(),
            offset: 0,
            len: 0,
            sha256: String::new(),
        }
    }

    #[test]
    fn pages_are_deduplicated_by_the_hash_of_their_text() {
        let mut p = Pages::default();
        assert!(
            p.keep(page("http://x/book/"), "# Intro\n\nText".into())
                .is_ok()
        );
        assert_eq!(
            p.keep(
                page("http://x/book/title-page.html"),
                "# Intro\n\nText".into()
            ),
            Err("http://x/book/".to_string())
        );
        assert!(
            p.keep(page("http://x/book/ch01.html"), "# One".into())
                .is_ok()
        );
        assert_eq!(p.kept.len(), 2);
        assert_eq!(p.kept[0].0.sha256, sha256_hex(b"# Intro\n\nText"));
    }

    #[test]
    fn a_bad_start_address_is_an_error_naming_it() {
        let e = crawl(&CrawlConfig::new("not a url"), &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("not a url"), "{e}");
        let e = crawl(&CrawlConfig::new("ftp://example.com/x/"), &mut |_| {}).unwrap_err();
        assert!(e.to_string().contains("only http and https"), "{e}");
    }

    #[test]
    fn the_override_is_off_by_default() {
        assert!(!CrawlConfig::new("http://x/").options().loopback_allowed);
        assert!(
            CrawlConfig::new("http://x/")
                .allow_loopback()
                .options()
                .loopback_allowed
        );
    }
}
