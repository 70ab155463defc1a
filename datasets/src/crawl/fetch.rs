//! Fetching one address: through the guarded resolver, with a pause before every request, a
//! byte budget, and redirects followed by hand.
//!
//! The HTTP client's own redirect handling is off, because every hop is a new address and must
//! be checked like the first: by the guard (an address in the URL is checked here, a name by the
//! resolver), and by the caller's rule for where a redirect may go (for pages, the crawl's scope
//! and robots.txt). At most [`MAX_REDIRECTS`] hops are followed. Proxies from the environment are
//! ignored: through a proxy, the name would be resolved by the proxy and the guard would check
//! nothing.

use super::guard::{Guard, GuardedResolver, refusal_in};
use super::manifest::Reason;
use super::scope::without_fragment;
use std::io::Read;
use std::sync::Arc;
use std::time::{Duration, Instant};
use url::Url;

pub const MAX_REDIRECTS: usize = 10;

/// The caller's rule for redirect targets: `Err` with the reason to record when one may not be
/// followed.
pub type HopRule<'a> = dyn FnMut(&Url) -> Result<(), (Reason, String)> + 'a;

/// A response that was read.
#[derive(Debug)]
pub struct Response {
    /// Where the body came from, after any redirects (fragment-free).
    pub url: Url,
    pub status: u16,
    pub content_type: Option<String>,
    pub body: Vec<u8>,
}

/// Why a fetch gave no body.
#[derive(Debug, PartialEq, Eq)]
pub enum Failure {
    /// The guard refused an address.
    Refused(String),
    /// A redirect went where the caller's rule does not allow, for this reason.
    Redirect(Reason, String),
    /// The server answered with an error status (or a redirect without a usable `Location`).
    Status(u16, String),
    /// The caller wanted HTML and got something else.
    NotHtml(String),
    /// No answer: connection refused, timeout, TLS failure.
    Unreachable(String),
    /// The body would not fit in the remaining byte budget.
    TooLarge(String),
}

/// An attempt: the requested address, then each redirect target (a refused one included, last),
/// and the outcome.
#[derive(Debug)]
pub struct Attempt {
    pub chain: Vec<Url>,
    /// The status of the last response received, if any was.
    pub status: Option<u16>,
    pub result: Result<Response, Failure>,
}

/// A client and the clock of the last request.
pub struct Fetcher {
    client: reqwest::blocking::Client,
    guard: Guard,
    delay: Duration,
    last: Option<Instant>,
    /// Requests sent so far (redirect hops included).
    pub requests: usize,
}

/// Whether a `Content-Type` is HTML.
pub fn is_html(content_type: &str) -> bool {
    let mime = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    mime == "text/html" || mime == "application/xhtml+xml"
}

impl Fetcher {
    pub fn new(guard: Guard, delay: Duration, user_agent: &str) -> Result<Self, String> {
        let client = reqwest::blocking::Client::builder()
            .dns_resolver(Arc::new(GuardedResolver { guard }))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(15))
            .timeout(Duration::from_secs(60))
            .user_agent(user_agent)
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(Self {
            client,
            guard,
            delay,
            last: None,
            requests: 0,
        })
    }

    pub fn set_delay(&mut self, delay: Duration) {
        self.delay = delay;
    }

    fn pause(&self) {
        if let Some(last) = self.last {
            let wait = self.delay.saturating_sub(last.elapsed());
            if !wait.is_zero() {
                std::thread::sleep(wait);
            }
        }
    }

    /// GETs `url`, following redirects that `hop_ok` accepts (it returns why not otherwise), and
    /// reads at most `budget` bytes of body. With `html_only`, a response that is not HTML is
    /// refused before its body is read.
    pub fn get(
        &mut self,
        url: &Url,
        hop_ok: &mut HopRule<'_>,
        html_only: bool,
        budget: u64,
    ) -> Attempt {
        let mut chain = vec![url.clone()];
        let mut status = None;
        let result = self.get_inner(&mut chain, &mut status, hop_ok, html_only, budget);
        Attempt {
            chain,
            status,
            result,
        }
    }

    fn get_inner(
        &mut self,
        chain: &mut Vec<Url>,
        last_status: &mut Option<u16>,
        hop_ok: &mut HopRule<'_>,
        html_only: bool,
        budget: u64,
    ) -> Result<Response, Failure> {
        loop {
            let url = chain.last().cloned().ok_or_else(|| {
                Failure::Unreachable("internal: an empty redirect chain".to_string())
            })?;
            self.guard
                .check_url(&url)
                .map_err(|r| Failure::Refused(r.to_string()))?;
            self.pause();
            self.requests += 1;
            let sent = self.client.get(url.as_str()).send();
            self.last = Some(Instant::now());
            let response = sent.map_err(|e| match refusal_in(&e) {
                Some(r) => Failure::Refused(r.to_string()),
                None => Failure::Unreachable(error_chain(&e)),
            })?;
            let status = response.status().as_u16();
            *last_status = Some(status);
            if response.status().is_redirection() {
                let location = response
                    .headers()
                    .get(reqwest::header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .ok_or_else(|| {
                        Failure::Status(status, format!("HTTP {status} without a Location"))
                    })?;
                let next = url.join(location.trim()).map_err(|e| {
                    Failure::Status(
                        status,
                        format!("HTTP {status} to a bad Location {location:?}: {e}"),
                    )
                })?;
                let next = without_fragment(next);
                if chain.len() > MAX_REDIRECTS {
                    return Err(Failure::Status(
                        status,
                        format!("more than {MAX_REDIRECTS} redirects"),
                    ));
                }
                // Recorded before it is judged, so that a refused hop still says where it went.
                chain.push(next.clone());
                if !matches!(next.scheme(), "http" | "https") {
                    return Err(Failure::Redirect(
                        Reason::OutOfScope,
                        format!("redirect to {next}: not http or https"),
                    ));
                }
                // The guard first: a hop to a forbidden address is refused as that, whatever
                // else is wrong with it.
                self.guard
                    .check_url(&next)
                    .map_err(|r| Failure::Refused(format!("redirect to {next}: {r}")))?;
                if let Err((reason, why)) = hop_ok(&next) {
                    return Err(Failure::Redirect(
                        reason,
                        format!("redirect to {next}: {why}"),
                    ));
                }
                continue;
            }
            if !response.status().is_success() {
                let reason = response.status().canonical_reason().unwrap_or("");
                return Err(Failure::Status(
                    status,
                    format!("HTTP {status} {reason}").trim_end().to_string(),
                ));
            }
            let content_type = response
                .headers()
                .get(reqwest::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            if html_only && !content_type.as_deref().is_some_and(is_html) {
                return Err(Failure::NotHtml(match &content_type {
                    Some(t) => format!("content type {t}"),
                    None => "no content type".to_string(),
                }));
            }
            if let Some(length) = response.content_length()
                && length > budget
            {
                return Err(Failure::TooLarge(format!(
                    "{length} bytes, {budget} left in the byte budget"
                )));
            }
            let mut body = Vec::new();
            let read = response
                .take(budget.saturating_add(1))
                .read_to_end(&mut body);
            self.last = Some(Instant::now());
            read.map_err(|e| Failure::Unreachable(format!("reading the body: {e}")))?;
            if body.len() as u64 > budget {
                return Err(Failure::TooLarge(format!(
                    "more than the {budget} bytes left in the byte budget"
                )));
            }
            return Ok(Response {
                url,
                status,
                content_type,
                body,
            });
        }
    }
}

/// An error and its sources, joined with `: `.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_content_types() {
        assert!(is_html("text/html"));
        assert!(is_html("text/html; charset=utf-8"));
        assert!(is_html("Text/HTML"));
        assert!(is_html("application/xhtml+xml"));
        assert!(!is_html("text/plain"));
        assert!(!is_html("image/png"));
    }
}
