//! `cargo xtask rust-book --book DIR`: the vendored retrieval corpus, end to end. Builds a
//! checkout of github.com/rust-lang/book with mdbook, serves the HTML on a loopback port, crawls
//! it with the project's crawler, and writes `rust-book.txt`, its manifest (addresses moved to
//! where the book is published, https://doc.rust-lang.org/book/) and `SOURCE.md`.

use anyhow::{Context, Result, bail};
use nervus_datasets::crawl::{CrawlConfig, Event, crawl};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Where the book is published: the corpus cites its pages there.
const PUBLISHED: &str = "https://doc.rust-lang.org/book/";

#[derive(clap::Args)]
pub struct RustBookArgs {
    /// A checkout of https://github.com/rust-lang/book (MIT OR Apache-2.0).
    #[arg(long)]
    book: PathBuf,
    /// Where `rust-book.txt`, its manifest and SOURCE.md go.
    #[arg(long, default_value = "datasets/data/rust-book")]
    out: PathBuf,
    /// The mdbook to build with (`cargo install mdbook`; the book's CI uses 0.5.x).
    #[arg(long, default_value = "mdbook")]
    mdbook: String,
}

pub fn run(args: RustBookArgs) -> Result<()> {
    let book = args
        .book
        .canonicalize()
        .with_context(|| format!("--book {}", args.book.display()))?;
    if !book.join("book.toml").is_file() {
        bail!(
            "--book {}: no book.toml (a checkout of rust-lang/book?)",
            book.display()
        );
    }
    let version = output(Command::new(&args.mdbook).arg("--version")).with_context(|| {
        format!(
            "{} --version (install it: cargo install mdbook)",
            args.mdbook
        )
    })?;
    let commit = output(
        Command::new("git")
            .arg("-C")
            .arg(&book)
            .args(["rev-parse", "HEAD"]),
    )
    .unwrap_or_else(|_| "(not a git checkout)".into());
    let html = std::env::temp_dir().join(format!("nervus-rust-book-{}", std::process::id()));
    eprintln!(
        "building {} with {version} into {}",
        book.display(),
        html.display()
    );
    let status = Command::new(&args.mdbook)
        .arg("build")
        .arg("-d")
        .arg(&html)
        .current_dir(&book)
        .status()?;
    if !status.success() {
        bail!("{} build failed ({status})", args.mdbook);
    }
    let result = crawl_served(&html, &args.out, &version, &commit);
    let _ = std::fs::remove_dir_all(&html);
    result
}

fn output(c: &mut Command) -> Result<String> {
    let out = c.output()?;
    if !out.status.success() {
        bail!("{}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn crawl_served(html: &Path, out: &Path, version: &str, commit: &str) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let base = format!("http://{}/", listener.local_addr()?);
    let root = html.to_path_buf();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = serve(&root, stream);
        }
    });
    let mut config = CrawlConfig::new(&base).allow_loopback();
    // Our own server: no pause between requests.
    config.delay = Duration::ZERO;
    let mut pages = 0;
    let mut corpus = crawl(&config, &mut |e| {
        if let Event::Page { .. } = e {
            pages += 1;
            if pages % 20 == 0 {
                eprintln!("  {pages} pages");
            }
        }
    })?;
    corpus.manifest.rebase(&base, PUBLISHED);
    corpus.name = "rust-book".into();
    corpus.manifest.text.file = "rust-book.txt".into();
    std::fs::create_dir_all(out)?;
    let written = corpus.write(out)?;
    let m = &corpus.manifest;
    let source = format!(
        "# The Rust Programming Language, as a retrieval corpus\n\n\
         `rust-book.txt` is the text of *The Rust Programming Language* by Steve Klabnik, Carol\n\
         Nichols, Chris Krycho and contributions from the Rust community\n\
         (<https://github.com/rust-lang/book>, licensed MIT OR Apache-2.0: `LICENSE-MIT` and\n\
         `LICENSE-APACHE` of that repository), built from commit `{commit}` with {version}\n\
         (and the book's own preprocessors, `packages/mdbook-trpl`), served on a loopback port and\n\
         crawled by this project's crawler on {date}: {pages} pages, {bytes} bytes. The manifest\n\
         `rust-book.txt.crawl.json` cites each page where the book is published, {PUBLISHED}.\n\n\
         Made by `cargo xtask rust-book --book <checkout>`.\n",
        date = m.date,
        pages = m.pages.len(),
        bytes = m.text.bytes,
    );
    std::fs::write(out.join("SOURCE.md"), source)?;
    eprintln!(
        "wrote {} ({} pages, {} bytes) and {}",
        written.text.display(),
        m.pages.len(),
        m.text.bytes,
        written.manifest.display()
    );
    Ok(())
}

/// Answers one HTTP/1.1 request from the files under `root`.
fn serve(root: &Path, mut stream: TcpStream) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let path = path.split(['?', '#']).next().unwrap_or("/");
    let mut file = root.to_path_buf();
    let mut ok = true;
    for c in Path::new(path.trim_start_matches('/')).components() {
        match c {
            Component::Normal(p) => file.push(p),
            _ => ok = false,
        }
    }
    if file.is_dir() {
        file.push("index.html");
    }
    let body = if ok { std::fs::read(&file).ok() } else { None };
    let kind = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("svg") => "image/svg+xml",
        Some("png") => "image/png",
        _ => "application/octet-stream",
    };
    match body {
        Some(b) => {
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                b.len()
            )?;
            stream.write_all(&b)?;
        }
        None => {
            let b = b"not found";
            write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                b.len()
            )?;
            stream.write_all(b)?;
        }
    }
    stream.flush()
}
