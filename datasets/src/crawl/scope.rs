//! Which addresses belong to a crawl, and what a page's address is.
//!
//! The scope is the starting address's directory, not its domain. This is the decision the
//! crawler turns on: the Rust book at `doc.rust-lang.org/book/` links into `/std/` on nearly every
//! page, and a crawl that stayed on the domain would come back with the whole standard library's
//! API reference, which is not what anyone meant by "the book". Both `/book/` and
//! `/book/ch03-00.html` give the scope `/book/`; `same_host` widens it to `/` for sites that are
//! one book at their root. The directory is taken as written: `/book` (no slash) is the page
//! `book` in `/`.
//!
//! A host is its name and its port, where a scheme's default port counts as none, so that a site
//! moving from `http` to `https` stays in scope and one on another port does not.

use url::Url;

/// The part of the web a crawl may fetch from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub host: String,
    /// `None` for the scheme's default port.
    pub port: Option<u16>,
    /// Starts and ends with `/`.
    pub path: String,
}

/// The directory part of a URL path: everything up to and including its last `/`.
pub fn directory(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[..=i],
        None => "/",
    }
}

fn is_http(url: &Url) -> bool {
    matches!(url.scheme(), "http" | "https")
}

impl Scope {
    /// The scope of a crawl starting at `start`.
    pub fn of(start: &Url, same_host: bool) -> Result<Scope, String> {
        if !is_http(start) {
            return Err(format!(
                "only http and https addresses can be crawled, not {}:",
                start.scheme()
            ));
        }
        let host = start
            .host_str()
            .ok_or_else(|| "the address has no host".to_string())?;
        Ok(Scope {
            host: host.to_string(),
            port: start.port(),
            path: if same_host {
                "/".into()
            } else {
                directory(start.path()).to_string()
            },
        })
    }

    pub fn same_host(&self, url: &Url) -> bool {
        is_http(url) && url.host_str() == Some(self.host.as_str()) && url.port() == self.port
    }

    /// Whether `url` is in scope. The directory itself without its slash (`/book` for `/book/`)
    /// counts, since servers answer it with a redirect into the directory.
    pub fn contains(&self, url: &Url) -> bool {
        let path = url.path();
        self.same_host(url)
            && (path.starts_with(&self.path)
                || self.path.strip_suffix('/') == Some(path) && !path.is_empty())
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.port {
            Some(p) => write!(f, "{}:{p}{}", self.host, self.path),
            None => write!(f, "{}{}", self.host, self.path),
        }
    }
}

/// Pages passed over by name, because each is a whole site again on one page: mdBook's
/// `print.html` (the entire book) and rustdoc's `all.html` (every item of a crate). Returns the
/// reason, or `None` for an ordinary page.
pub fn whole_site_page(url: &Url) -> Option<&'static str> {
    match url.path_segments().and_then(|mut s| s.next_back()) {
        Some("print.html") => Some("print.html is the whole book on one page"),
        Some("all.html") => Some("all.html lists every item of the crate"),
        _ => None,
    }
}

/// `url` without its `#fragment`: a page is one page however it was linked to, and must not be
/// cited by a heading halfway down itself.
pub fn without_fragment(mut url: Url) -> Url {
    url.set_fragment(None);
    url
}

/// The corpus name for a crawl starting at `start`: the host (and a port other than the
/// default), then the path segments, joined with `-`, with a trailing slash and `.html` dropped.
/// `https://doc.rust-lang.org/book/` gives `doc.rust-lang.org-book`. Characters other than ASCII
/// letters, digits, `.`, `_` and `-` become `_`.
pub fn corpus_name(start: &Url) -> String {
    let mut parts: Vec<String> = vec![start.host_str().unwrap_or("site").to_string()];
    if let Some(port) = start.port() {
        parts.push(port.to_string());
    }
    if let Some(segments) = start.path_segments() {
        for s in segments.filter(|s| !s.is_empty()) {
            let s = s
                .strip_suffix(".html")
                .or_else(|| s.strip_suffix(".htm"))
                .unwrap_or(s);
            if !s.is_empty() {
                parts.push(s.to_string());
            }
        }
    }
    parts
        .join("-")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap()
    }

    #[test]
    fn scope_is_the_directory_of_the_start() {
        let a = Scope::of(&url("https://doc.rust-lang.org/book/"), false).unwrap();
        let b = Scope::of(&url("https://doc.rust-lang.org/book/ch03-00.html"), false).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.path, "/book/");
        assert_eq!(a.to_string(), "doc.rust-lang.org/book/");
        assert!(a.contains(&url("https://doc.rust-lang.org/book/ch01/intro.html")));
        assert!(
            a.contains(&url("http://doc.rust-lang.org/book/x.html")),
            "http or https"
        );
        assert!(a.contains(&url("https://doc.rust-lang.org/book")));
        assert!(!a.contains(&url("https://doc.rust-lang.org/std/vec/struct.Vec.html")));
        assert!(!a.contains(&url("https://doc.rust-lang.org/bookish/")));
        assert!(!a.contains(&url("https://example.com/book/")));
        assert!(!a.contains(&url("https://doc.rust-lang.org:8443/book/")));
        assert!(!a.contains(&url("ftp://doc.rust-lang.org/book/")));
        let root = Scope::of(&url("https://doc.rust-lang.org/book"), false).unwrap();
        assert_eq!(root.path, "/", "without a slash, book is a page in /");
    }

    #[test]
    fn same_host_widens_to_the_whole_host() {
        let s = Scope::of(&url("http://127.0.0.1:8080/book/"), true).unwrap();
        assert_eq!(s.to_string(), "127.0.0.1:8080/");
        assert!(s.contains(&url("http://127.0.0.1:8080/other/page.html")));
        assert!(!s.contains(&url("http://127.0.0.1:8081/other/page.html")));
        assert!(Scope::of(&url("file:///etc/passwd"), false).is_err());
    }

    #[test]
    fn print_and_all_pages_are_passed_over_by_name() {
        assert!(whole_site_page(&url("https://x/book/print.html")).is_some());
        assert!(whole_site_page(&url("https://x/std/all.html?x")).is_some());
        assert!(whole_site_page(&url("https://x/book/printing.html")).is_none());
        assert!(whole_site_page(&url("https://x/book/")).is_none());
    }

    #[test]
    fn fragments_are_stripped() {
        let u = without_fragment(url("https://x/book/ch02.html#part-two"));
        assert_eq!(u.as_str(), "https://x/book/ch02.html");
    }

    #[test]
    fn corpus_names() {
        assert_eq!(
            corpus_name(&url("https://doc.rust-lang.org/book/")),
            "doc.rust-lang.org-book"
        );
        assert_eq!(
            corpus_name(&url("https://doc.rust-lang.org/book/ch03-00.html")),
            "doc.rust-lang.org-book-ch03-00"
        );
        assert_eq!(corpus_name(&url("https://example.com/")), "example.com");
        assert_eq!(
            corpus_name(&url("http://127.0.0.1:8080/a%20b/c/")),
            "127.0.0.1-8080-a_20b-c"
        );
    }
}
