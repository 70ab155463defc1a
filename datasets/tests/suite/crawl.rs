//! The crawler against a small mdBook-like site served from a loopback socket by the test itself:
//! the exact text it makes, the manifest beside it, and every refusal of the address guard.
//! Nothing here touches the network; the private addresses the site redirects to are refused
//! before any connection is attempted.

use nervus_datasets::crawl::manifest::{Manifest, Reason, Stop};
use nervus_datasets::crawl::{CrawlConfig, Event, crawl, crawl_to_files};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One canned answer.
#[derive(Clone)]
struct Reply {
    status: &'static str,
    headers: Vec<(&'static str, String)>,
    body: Vec<u8>,
}

fn html(body: &str) -> Reply {
    Reply {
        status: "200 OK",
        headers: vec![("Content-Type", "text/html; charset=utf-8".into())],
        body: body.as_bytes().to_vec(),
    }
}

fn redirect(status: &'static str, to: &str) -> Reply {
    Reply {
        status,
        headers: vec![("Location", to.into())],
        body: Vec::new(),
    }
}

fn typed(content_type: &str, body: &[u8]) -> Reply {
    Reply {
        status: "200 OK",
        headers: vec![("Content-Type", content_type.into())],
        body: body.to_vec(),
    }
}

/// Requests served, as `METHOD /path`.
type Log = Arc<Mutex<Vec<String>>>;

/// Serves `site(base)` on 127.0.0.1 (GET and HEAD; 404 for anything else), one connection at a
/// time, each closed after its answer. Returns the port and the request log.
fn serve(site: impl FnOnce(&str) -> HashMap<String, Reply>) -> (u16, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let routes = site(&format!("http://127.0.0.1:{port}"));
    let log: Log = Arc::default();
    let seen = log.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            if reader.read_line(&mut request).is_err() {
                continue;
            }
            loop {
                let mut line = String::new();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) if line == "\r\n" => break,
                    Ok(_) => {}
                }
            }
            let mut parts = request.split_whitespace();
            let method = parts.next().unwrap_or("").to_string();
            let path = parts.next().unwrap_or("/").to_string();
            seen.lock().unwrap().push(format!("{method} {path}"));
            let reply = match routes.get(&path) {
                Some(r) if method == "GET" || method == "HEAD" => r.clone(),
                _ => Reply {
                    status: "404 Not Found",
                    headers: vec![("Content-Type", "text/plain".into())],
                    body: b"not found".to_vec(),
                },
            };
            let mut head = format!("HTTP/1.1 {}\r\n", reply.status);
            for (k, v) in &reply.headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str(&format!(
                "Content-Length: {}\r\nConnection: close\r\n\r\n",
                reply.body.len()
            ));
            let _ = stream.write_all(head.as_bytes());
            if method != "HEAD" {
                let _ = stream.write_all(&reply.body);
            }
        }
    });
    (port, log)
}

const INDEX: &str = r##"<!DOCTYPE html>
<html lang="en" class="light sidebar-visible">
<head>
<meta charset="utf-8">
<title>Introduction - The Test Book</title>
<style>body > nav { color: red } a < b { }</style>
<script>var toc = 1; if (toc < 2 && toc > 0) { document.write("<p>not text</p>"); }</script>
</head>
<body>
<nav id="sidebar" class="sidebar" aria-label="Table of contents">
<ol class="chapter">
<li><a href="index.html">Introduction</a></li>
<li><a href="ch01/intro.html">1. Getting started</a></li>
<li><a href="ch02.html#code">2. Code</a></li>
<li><a href="relocated.html">3. A moved chapter</a></li>
<li><a href="print.html">Print this book</a></li>
<li><a href="private/secret.html">Secret</a></li>
</ol>
</nav>
<div id="menu-bar" class="menu-bar"><h1 class="menu-title">The Test Book</h1></div>
<div id="content" class="content">
<main>
<h1 id="introduction"><a class="header" href="#introduction">Introduction</a></h1>
<p>This book’s examples are “small”, and that’s
   the point.</p>
<p>Read it&nbsp;slowly — or don’t.</p>
</main>
<nav class="nav-wrapper"><a rel="next" href="ch01/intro.html">Next</a></nav>
</div>
<footer>© 2024 The Test Book</footer>
</body>
</html>
"##;

const CH01: &str = r##"<html><head><title>Getting started - The Test Book</title></head>
<body>
<nav class="sidebar"><a href="../index.html">Introduction</a></nav>
<main>
<h2 id="getting-started"><a class="header" href="#getting-started">Getting Started</a></h2>
<p>Install it, then see <a href="../ch02.html#part-two">part two</a> or
<a href="../../other/page.html">another book</a>, <a href="http://example.com/elsewhere">elsewhere</a>.</p>
<ul>
<li>Download the installer</li>
<li>Run it 🦀 carefully</li>
</ul>
<ol><li>First</li><li>Second</li></ol>
<table>
<tr><th>Tool</th><th>Purpose</th></tr>
<tr><td><code>rustc</code></td><td>compiles</td></tr>
<tr><td><code>cargo</code></td><td>builds &amp; runs</td></tr>
</table>
<p>Links: <a href="../moved.html">moved</a>, <a href="../metadata.html">metadata</a>,
<a href="../logo.png">logo</a>, <a href="../missing.html">missing</a>,
<a href="mailto:someone@example.com">mail</a>.</p>
</main>
</body></html>
"##;

const CH02: &str = r##"<html><head><title>Code - The Test Book</title><script src="book.js"></script></head>
<body>
<main>
<h2 id="code"><a class="header" href="#code">Code</a></h2>
<p>Call <code>main</code> to start:</p>
<pre><code class="language-rust">fn main() {
    let (a, b) = (1, 2);
    if a &lt; b {
        println!("{a} &lt; {b}");
    }
}
</code></pre>
<h3 id="part-two"><a class="header" href="#part-two">Part two</a></h3>
<p>Entities: &amp; &lt;tag&gt; &#8220;numeric&#8221; &#x2014; hex.</p>
<h2 id="impls" class="section-header">Implementations<a href="#impls" class="anchor">§</a></h2>
<p>Done.</p>
</main>
</body></html>
"##;

const CH03: &str = "<title>Three</title><main><p>Reached by a redirect.</p></main>";

const ROBOTS: &str = "User-agent: *\nDisallow: /book/private/\n";

/// The text the site must give, exactly: the four pages in fetch order, the typography mapped,
/// the one emoji dropped, the headings kept at their levels.
const EXPECTED: &str = "\
# Introduction

This book's examples are \"small\", and that's the point.

Read it slowly -- or don't.

## Getting Started

Install it, then see part two or another book, elsewhere.

- Download the installer
- Run it carefully

1. First
2. Second

Tool | Purpose
rustc | compiles
cargo | builds & runs

Links: moved, metadata, logo, missing, mail.

## Code

Call main to start:

```rust
fn main() {
    let (a, b) = (1, 2);
    if a < b {
        println!(\"{a} < {b}\");
    }
}
```

### Part two

Entities: & <tag> \"numeric\" -- hex.

## Implementations

Done.

# Three

Reached by a redirect.
";

fn book(_base: &str, with_robots: bool) -> HashMap<String, Reply> {
    let mut site: HashMap<String, Reply> = [
        ("/book/", html(INDEX)),
        ("/book/index.html", html(INDEX)),
        ("/book/ch01/intro.html", html(CH01)),
        ("/book/ch02.html", html(CH02)),
        (
            "/book/relocated.html",
            redirect("301 Moved Permanently", "/book/ch03.html"),
        ),
        ("/book/ch03.html", html(CH03)),
        (
            "/book/moved.html",
            redirect("302 Found", "http://10.0.0.1/internal"),
        ),
        (
            "/book/metadata.html",
            redirect(
                "301 Moved Permanently",
                "http://169.254.169.254/latest/meta-data/",
            ),
        ),
        ("/book/logo.png", typed("image/png", b"\x89PNG\r\n\x1a\n")),
        ("/book/print.html", html(&format!("{INDEX}{CH01}{CH02}"))),
        (
            "/book/private/secret.html",
            html("<h1>Secret</h1><p>Kept out by robots.txt.</p>"),
        ),
        ("/other/page.html", html("<h1>Another book</h1>")),
    ]
    .into_iter()
    .map(|(p, r)| (p.to_string(), r))
    .collect();
    if with_robots {
        site.insert("/robots.txt".into(), typed("text/plain", ROBOTS.as_bytes()));
    }
    site
}

fn config(start: String) -> CrawlConfig {
    let mut c = CrawlConfig::new(start).allow_loopback();
    c.delay = Duration::ZERO;
    c
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nervus-crawl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn requests(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

#[test]
fn the_test_site_becomes_exactly_this_text_and_manifest() {
    let (port, log) = serve(|b| book(b, true));
    let base = format!("http://127.0.0.1:{port}");
    let dir = scratch("site");
    let mut cfg = config(format!("{base}/book/"));
    cfg.out_dir = dir.clone();
    let mut events = Vec::new();
    let (corpus, written) = crawl_to_files(&cfg, &mut |e| events.push(e.clone())).unwrap();
    assert_eq!(corpus.text, EXPECTED);

    // The files: named after the start address, the text as returned, the manifest readable.
    assert_eq!(written.text, dir.join(format!("127.0.0.1-{port}-book.txt")));
    assert_eq!(
        written.manifest,
        dir.join(format!("127.0.0.1-{port}-book.txt.crawl.json"))
    );
    assert_eq!(std::fs::read_to_string(&written.text).unwrap(), EXPECTED);
    let json = std::fs::read_to_string(&written.manifest).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(value["start"], format!("{base}/book/"));
    assert_eq!(value["scope"], format!("127.0.0.1:{port}/book/"));
    assert_eq!(value["stopped"], "finished");
    assert_eq!(value["options"]["loopback_allowed"], true);
    assert_eq!(value["skipped"][0]["reason"], "print_page");
    let date = value["date"].as_str().unwrap();
    assert!(
        date.len() == 20 && date.ends_with('Z') && date.as_bytes()[10] == b'T',
        "{date}"
    );
    let m: Manifest = serde_json::from_str(&json).unwrap();
    assert_eq!(m, corpus.manifest);

    // Pages in fetch order, fragment-free, each starting with its own heading at its offset.
    let pages: Vec<(&str, u16, &[String])> = m
        .pages
        .iter()
        .map(|p| (p.url.as_str(), p.status, &p.redirected_from[..]))
        .collect();
    let u = |p: &str| format!("{base}{p}");
    assert_eq!(
        pages,
        [
            (u("/book/").as_str(), 200, &[][..]),
            (u("/book/ch01/intro.html").as_str(), 200, &[][..]),
            (u("/book/ch02.html").as_str(), 200, &[][..]),
            (
                u("/book/ch03.html").as_str(),
                200,
                &[u("/book/relocated.html")][..]
            ),
        ]
    );
    let headings: Vec<&str> = m.pages.iter().map(|p| p.heading.as_str()).collect();
    assert_eq!(
        headings,
        ["# Introduction", "## Getting Started", "## Code", "# Three"]
    );
    for p in &m.pages {
        let text = &corpus.text[p.offset..p.offset + p.len];
        assert!(text.starts_with(&p.heading), "{}: {text:?}", p.url);
    }
    assert_eq!(m.pages[0].bytes, INDEX.len() as u64);

    // Everything skipped, in the order it was met, with its reason.
    let skipped: Vec<(String, Reason, Option<u16>)> = m
        .skipped
        .iter()
        .map(|s| (s.url.clone(), s.reason, s.status))
        .collect();
    assert_eq!(
        skipped,
        [
            (u("/book/print.html"), Reason::PrintPage, None),
            (u("/book/private/secret.html"), Reason::Robots, None),
            (u("/book/index.html"), Reason::Duplicate, Some(200)),
            (u("/other/page.html"), Reason::OutOfScope, None),
            (
                "http://example.com/elsewhere".into(),
                Reason::OutOfScope,
                None
            ),
            (u("/book/moved.html"), Reason::Refused, Some(302)),
            (u("/book/metadata.html"), Reason::Refused, Some(301)),
            (u("/book/logo.png"), Reason::NotHtml, Some(200)),
            (u("/book/missing.html"), Reason::HttpError, Some(404)),
        ]
    );
    let detail = |i: usize| m.skipped[i].detail.as_str();
    assert_eq!(detail(1), "robots.txt: Disallow: /book/private/");
    assert_eq!(detail(2), format!("the same text as {base}/book/"));
    assert_eq!(detail(3), format!("outside 127.0.0.1:{port}/book/"));
    assert!(
        detail(5).contains("10.0.0.1") && detail(5).contains("private"),
        "{}",
        detail(5)
    );
    assert_eq!(m.skipped[5].redirects, ["http://10.0.0.1/internal"]);
    assert!(
        detail(6).contains("169.254.169.254") && detail(6).contains("cloud metadata"),
        "{}",
        detail(6)
    );
    assert_eq!(detail(7), "content type image/png");
    assert_eq!(detail(8), "HTTP 404 Not Found");
    assert_eq!(m.skipped[1].from.as_deref(), Some(u("/book/").as_str()));

    // What the server saw: robots.txt once, never print.html or the disallowed page.
    let get = |p: &str| format!("GET {p}");
    assert_eq!(
        requests(&log),
        [
            get("/robots.txt"),
            get("/book/"),
            get("/book/index.html"),
            get("/book/ch01/intro.html"),
            get("/book/ch02.html"),
            get("/book/relocated.html"),
            get("/book/ch03.html"),
            get("/book/moved.html"),
            get("/book/metadata.html"),
            get("/book/logo.png"),
            get("/book/missing.html"),
        ]
    );

    // Cleaning: what was mapped, what was dropped, and the alphabet that is left.
    let mapped: Vec<(char, &str, usize)> = m
        .cleaning
        .mapped
        .iter()
        .map(|x| (x.from, x.to.as_str(), x.count))
        .collect();
    assert_eq!(
        mapped,
        [
            ('’', "'", 3),
            ('—', "--", 2),
            ('“', "\"", 2),
            ('”', "\"", 2),
            ('\u{a0}', " ", 1),
        ]
    );
    let dropped: Vec<(char, usize)> = m
        .cleaning
        .dropped
        .iter()
        .map(|d| (d.char, d.count))
        .collect();
    assert_eq!(dropped, [('🦀', 1)]);
    assert!(m.alphabet.iter().all(|l| l.char.is_ascii()));
    assert_eq!(
        m.alphabet.iter().map(|l| l.count).sum::<usize>(),
        EXPECTED.len()
    );
    assert_eq!(m.text.chars, EXPECTED.len());
    assert_eq!(m.robots.rules, ["Disallow: /book/private/"]);

    // Progress: one event per page, per skip, for robots.txt and for the end.
    let pages_seen = events
        .iter()
        .filter(|e| matches!(e, Event::Page { .. }))
        .count();
    let skips_seen = events
        .iter()
        .filter(|e| matches!(e, Event::Skipped(_)))
        .count();
    assert_eq!((pages_seen, skips_seen), (4, 9));
    assert!(matches!(events.first(), Some(Event::Robots { .. })));
    assert!(matches!(
        events.last(),
        Some(Event::Stopped(Stop::Finished))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn loopback_is_refused_without_the_override() {
    let (port, log) = serve(|b| book(b, true));
    for (start, host) in [
        (format!("http://127.0.0.1:{port}/book/"), "127.0.0.1"),
        (format!("http://[::1]:{port}/book/"), "[::1]"),
        // A name: refused by our resolver, before any connection.
        (format!("http://localhost:{port}/book/"), "localhost"),
    ] {
        let mut cfg = CrawlConfig::new(start.clone());
        cfg.delay = Duration::ZERO;
        let e = crawl(&cfg, &mut |_| {}).unwrap_err().to_string();
        let prefix = format!("crawl of {start}: {host}: address ");
        assert!(
            e.starts_with(&prefix) && e.ends_with("is loopback: refused"),
            "{start}: {e}"
        );
    }
    assert!(requests(&log).is_empty(), "{:?}", requests(&log));
}

#[test]
fn the_override_admits_a_name_resolving_to_loopback() {
    let (port, _) = serve(|b| book(b, true));
    let corpus = crawl(
        &config(format!("http://localhost:{port}/book/ch03.html")),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(corpus.text, "# Three\n\nReached by a redirect.\n");
}

#[test]
fn ip_literals_are_refused_even_with_the_override() {
    let (port, log) = serve(|b| book(b, true));
    for (start, why) in [
        (
            format!("http://[::ffff:127.0.0.1]:{port}/book/"),
            "loopback",
        ),
        ("http://[::ffff:10.0.0.1]/book/".to_string(), "private"),
        ("http://10.0.0.1/book/".to_string(), "private"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "cloud metadata",
        ),
        ("http://[fe80::1]/".to_string(), "link-local"),
        ("http://100.64.0.1/".to_string(), "CGNAT"),
    ] {
        let e = crawl(&config(start.clone()), &mut |_| {})
            .unwrap_err()
            .to_string();
        assert!(e.contains(why) && e.contains("refused"), "{start}: {e}");
    }
    assert!(requests(&log).is_empty());
}

#[test]
fn a_redirect_into_a_private_address_is_refused_wherever_it_comes_from() {
    // robots.txt may redirect anywhere the guard allows; the guard still says no.
    let (port, log) = serve(|b| {
        let mut site = book(b, false);
        site.insert(
            "/robots.txt".into(),
            redirect("302 Found", "http://169.254.169.254/latest/meta-data/"),
        );
        site
    });
    let e = crawl(
        &config(format!("http://127.0.0.1:{port}/book/")),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("169.254.169.254") && e.contains("refused"),
        "{e}"
    );
    assert_eq!(requests(&log), ["GET /robots.txt"]);
}

#[test]
fn missing_robots_allows_everything_and_same_host_widens_the_scope() {
    let (port, log) = serve(|b| book(b, false));
    let mut cfg = config(format!("http://127.0.0.1:{port}/book/"));
    cfg.same_host = true;
    let corpus = crawl(&cfg, &mut |_| {}).unwrap();
    let m = &corpus.manifest;
    assert_eq!(m.robots.status, Some(404));
    assert!(
        m.robots.outcome.contains("everything allowed"),
        "{}",
        m.robots.outcome
    );
    assert_eq!(m.scope, format!("127.0.0.1:{port}/"));
    let urls: Vec<&str> = m.pages.iter().map(|p| p.url.as_str()).collect();
    assert!(urls.contains(&format!("http://127.0.0.1:{port}/book/private/secret.html").as_str()));
    assert!(urls.contains(&format!("http://127.0.0.1:{port}/other/page.html").as_str()));
    assert!(!requests(&log).contains(&"GET /book/print.html".to_string()));
}

#[test]
fn the_limits_stop_the_crawl_and_say_so() {
    let (port, _) = serve(|b| book(b, true));
    let start = format!("http://127.0.0.1:{port}/book/");

    let mut cfg = config(start.clone());
    cfg.max_pages = 2;
    let corpus = crawl(&cfg, &mut |_| {}).unwrap();
    let m = &corpus.manifest;
    assert_eq!(m.stopped, Stop::MaxPages);
    assert_eq!(
        m.pages.len(),
        1,
        "the second request was the duplicate index.html"
    );
    let limited: Vec<&str> = m
        .skipped
        .iter()
        .filter(|s| s.reason == Reason::Limit)
        .map(|s| s.url.as_str())
        .collect();
    assert_eq!(
        limited,
        [
            format!("{start}ch01/intro.html"),
            format!("{start}ch02.html"),
            format!("{start}relocated.html"),
        ]
    );

    // Room for robots.txt and the first page, not for the second copy of it.
    let mut cfg = config(start.clone());
    cfg.max_bytes = (ROBOTS.len() + INDEX.len() + 10) as u64;
    let corpus = crawl(&cfg, &mut |_| {}).unwrap();
    let m = &corpus.manifest;
    assert_eq!(m.stopped, Stop::MaxBytes);
    assert_eq!(m.pages.len(), 1);
    let last_fetch = m
        .skipped
        .iter()
        .find(|s| s.url == format!("{start}index.html"));
    assert_eq!(last_fetch.map(|s| s.reason), Some(Reason::Limit));
}

#[test]
fn a_start_page_that_gives_nothing_is_an_error_saying_why() {
    let (port, _) = serve(|b| book(b, true));
    let e = crawl(
        &config(format!("http://127.0.0.1:{port}/book/missing.html")),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("no page kept") && e.contains("404"), "{e}");
}

#[test]
fn a_host_that_does_not_answer_is_an_error_naming_it() {
    // A port that was just free: nothing listens there.
    let dead = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let e = crawl(
        &config(format!("http://127.0.0.1:{dead}/book/")),
        &mut |_| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains(&format!("127.0.0.1:{dead}/robots.txt")) && e.contains("onnect"),
        "{e}"
    );
}
