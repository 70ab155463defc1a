//! From a page's HTML to markdown-ish plain text, and the links to follow from it.
//!
//! The text keeps what a reader of the page would call its content, in a shape a character model
//! can learn structure from: `#` × level for headings, a blank line between paragraphs, `- item`
//! and `1. item` for lists (two spaces deeper per nested list), table rows as cells joined by
//! ` | `, and code blocks fenced with ```` ```lang ```` and kept verbatim. Inline code is its text.
//!
//! Furniture is dropped with everything inside it, by token:
//! - the elements [`DROPPED_ELEMENTS`] (`<nav>`, `<footer>`, `<aside>`, scripts, styles, forms'
//!   controls, embedded frames and pictures), and `<header>` when it is the site's header, that is
//!   outside every `<main>` and `<article>` (inside one it usually holds the article's title);
//! - any element whose `id`, or one of whose classes, is in [`FURNITURE`], or whose `role` is in
//!   [`FURNITURE_ROLES`], or that is `hidden` or `aria-hidden="true"`;
//! - links whose class is in [`ANCHOR_CLASSES`]: the `§` and `¶` self-links that rustdoc and
//!   Sphinx put beside headings.
//!
//! Names are matched whole, never as substrings, and `<html>`, `<body>`, `<main>`, `<article>` and
//! the headings are never furniture whatever their classes say. Both rules exist because of one
//! bug: with `header` in the list, mdBook's `<a class="header">`, which wraps the text of every
//! heading it writes, took every heading of the book with it. Docusaurus marks its headings with
//! `class="anchor"` in the same way, which is why that class counts only on `<a>`.
//!
//! Links are collected from the whole document, furniture included: a book's table of contents is
//! its sidebar, and a crawler that dropped the sidebar before looking for links would fetch one
//! page and stop.

use super::entities::decode;
use super::scan::{Tag, Token, tokens};

/// Elements dropped with their contents wherever they are.
pub const DROPPED_ELEMENTS: &[&str] = &[
    "nav", "footer", "aside", "script", "style", "noscript", "template", "svg", "button", "select",
    "textarea", "iframe", "object", "canvas", "dialog",
];

/// Ids and class names of site furniture: sidebars, menus, tables of contents, breadcrumbs,
/// search boxes, page-to-page navigation, cookie banners, screen-reader-only skip links. Includes
/// the names mdBook and rustdoc use. `header` is deliberately absent (see the module comment).
pub const FURNITURE: &[&str] = &[
    "sidebar",
    "sidebar-elems",
    "sidebar-scrollbox",
    "src-sidebar",
    "menu",
    "menu-bar",
    "menubar",
    "navbar",
    "nav",
    "navigation",
    "nav-wrapper",
    "nav-wide-wrapper",
    "nav-chapters",
    "mobile-nav-chapters",
    "toc",
    "table-of-contents",
    "breadcrumb",
    "breadcrumbs",
    "rustdoc-breadcrumbs",
    "site-header",
    "site-footer",
    "masthead",
    "skip-link",
    "skip-to-content",
    "sr-only",
    "search",
    "search-form",
    "search-wrapper",
    "searchbar",
    "settings",
    "theme-popup",
    "cookie-banner",
    "cookie-consent",
    "pagination",
    "out-of-band",
    "hideme",
    // mdBook's hidden lines of a listing (`# fn main() {` in the source): there for the compiler,
    // hidden from the reader by a script.
    "boring",
];

/// ARIA roles of furniture.
pub const FURNITURE_ROLES: &[&str] = &[
    "navigation",
    "banner",
    "contentinfo",
    "complementary",
    "search",
    "menu",
    "menubar",
    "toolbar",
];

/// Classes of self-links beside headings (`§`, `¶`); furniture on `<a>` only.
pub const ANCHOR_CLASSES: &[&str] = &["anchor", "headerlink", "hash-link"];

/// Never furniture, whatever their attributes say.
const STRUCTURAL: &[&str] = &[
    "html", "body", "main", "article", "h1", "h2", "h3", "h4", "h5", "h6",
];

/// Elements that never have content or an end tag.
const VOID: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr",
];

/// Elements that end the line of text before them and start a new block.
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "blockquote",
    "body",
    "caption",
    "center",
    "dd",
    "details",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "form",
    "header",
    "hgroup",
    "hr",
    "html",
    "legend",
    "main",
    "p",
    "section",
    "summary",
    "tbody",
    "tfoot",
    "thead",
];

/// Lists nested deeper than this are indented no further: the indentation of a list item is
/// written out for every item, so unbounded nesting would make the text quadratic in the page.
const MAX_INDENT: usize = 8;

/// What a page gave.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Extracted {
    /// The `<title>`, whitespace collapsed.
    pub title: Option<String>,
    /// The furniture-free text (empty when the page has none).
    pub text: String,
    /// Every `<a href>` and `<area href>` of the document, decoded and trimmed, in order.
    pub links: Vec<String>,
    /// The first `<base href>`, against which relative links resolve.
    pub base: Option<String>,
}

impl Extracted {
    /// The text, opening with a heading of its own: unchanged when it starts with one (of any
    /// level: mdBook opens most chapters with an `<h2>`), otherwise with `# <title>` (or
    /// `# <fallback>` when there is no title) put in front, so that every page of a corpus can be
    /// told from the one before it. Empty text stays empty.
    pub fn text_with_heading(&self, fallback: &str) -> String {
        if self.text.is_empty() || self.text.starts_with('#') {
            return self.text.clone();
        }
        let title = self.title.as_deref().unwrap_or(fallback);
        format!("# {title}\n\n{}", self.text)
    }
}

/// Extracts text and links from `html`.
pub fn extract(html: &str) -> Extracted {
    let normalised;
    let html = if html.contains('\r') {
        normalised = html.replace("\r\n", "\n").replace('\r', "\n");
        normalised.as_str()
    } else {
        html
    };
    let mut x = Extractor::default();
    for token in tokens(html) {
        match token {
            Token::Text(t) => x.text(t),
            Token::Start(tag) => x.start(&tag),
            Token::End(name) => x.end(&name),
            // A CDATA section is a comment in HTML content (and text only inside SVG and MathML,
            // which are dropped).
            Token::Comment(_) | Token::Doctype(_) | Token::Cdata(_) => {}
        }
    }
    x.finish()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Para,
    Heading,
    /// An item of the outermost list numbered so (so that two lists in a row stay apart).
    Item(usize),
    Row,
    Code,
}

struct Block {
    kind: Kind,
    text: String,
}

struct Pre {
    /// Nested `<pre>` inside it.
    depth: usize,
    lang: Option<String>,
    text: String,
}

struct List {
    ordered: bool,
    next: i64,
}

#[derive(Default)]
struct Extractor {
    blocks: Vec<Block>,
    /// The block being written, whitespace collapsed.
    line: String,
    /// Whitespace has been seen since the last character of `line`.
    space: bool,
    /// The furniture element being skipped, and how many of its name are open.
    drop: Option<(String, usize)>,
    in_title: bool,
    title: String,
    heading: Option<usize>,
    pre: Option<Pre>,
    lists: Vec<List>,
    /// Outermost lists opened so far.
    outer_lists: usize,
    /// The marker of a list item whose first line has not been written yet.
    item: Option<String>,
    tables: usize,
    in_cell: bool,
    row: Vec<String>,
    /// Open `<main>` and `<article>` elements.
    content: usize,
    links: Vec<String>,
    base: Option<String>,
}

fn heading_level(name: &str) -> Option<usize> {
    match name {
        "h1" => Some(1),
        "h2" => Some(2),
        "h3" => Some(3),
        "h4" => Some(4),
        "h5" => Some(5),
        "h6" => Some(6),
        _ => None,
    }
}

fn classes<'t>(tag: &'t Tag<'_>) -> impl Iterator<Item = String> + 't {
    tag.attrs
        .iter()
        .filter(|a| a.name == "class")
        .take(1)
        .flat_map(|a| a.value.split_ascii_whitespace())
        .map(|c| decode(c).to_ascii_lowercase())
}

/// Whether `tag` opens furniture; `in_content` is whether a `<main>` or `<article>` is open.
fn is_furniture(tag: &Tag<'_>, in_content: bool) -> bool {
    let name = tag.name.as_str();
    if DROPPED_ELEMENTS.contains(&name) || (name == "header" && !in_content) {
        return true;
    }
    if STRUCTURAL.contains(&name) {
        return false;
    }
    if tag.has_attr("hidden")
        || tag
            .attr("aria-hidden")
            .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
    {
        return true;
    }
    if tag.attr("role").is_some_and(|r| {
        r.split_ascii_whitespace()
            .any(|r| FURNITURE_ROLES.contains(&r.to_ascii_lowercase().as_str()))
    }) {
        return true;
    }
    if tag
        .attr("id")
        .is_some_and(|id| FURNITURE.contains(&id.trim().to_ascii_lowercase().as_str()))
    {
        return true;
    }
    classes(tag).any(|c| {
        FURNITURE.contains(&c.as_str()) || (name == "a" && ANCHOR_CLASSES.contains(&c.as_str()))
    })
}

/// The language of a code block from `class="language-xxx"` (or `lang-xxx`): its leading run of
/// ASCII letters, digits and `+ - # . _` (`c++`, `c#`, `objective-c`), since whatever follows is
/// not a language and would break the fence it is written into.
fn language(tag: &Tag<'_>) -> Option<String> {
    classes(tag).find_map(|c| {
        let lang: String = c
            .strip_prefix("language-")
            .or_else(|| c.strip_prefix("lang-"))?
            .chars()
            .take_while(|ch| {
                ch.is_ascii_alphanumeric() || matches!(ch, '+' | '-' | '#' | '.' | '_')
            })
            .collect();
        (!lang.is_empty()).then_some(lang)
    })
}

impl Extractor {
    fn start(&mut self, tag: &Tag<'_>) {
        let name = tag.name.as_str();
        if matches!(name, "a" | "area")
            && let Some(href) = tag.attr("href")
            && !href.trim().is_empty()
        {
            self.links.push(href.trim().to_string());
        }
        if name == "base"
            && self.base.is_none()
            && let Some(href) = tag.attr("href")
        {
            self.base = Some(href.trim().to_string());
        }
        let void = VOID.contains(&name);
        if let Some((dropped, depth)) = &mut self.drop {
            if name == dropped && !void {
                *depth += 1;
            }
            return;
        }
        if is_furniture(tag, self.content > 0) {
            if !void {
                self.drop = Some((name.to_string(), 1));
            }
            return;
        }
        if let Some(pre) = &mut self.pre {
            match name {
                "pre" => pre.depth += 1,
                "code" if pre.lang.is_none() && pre.text.trim().is_empty() => {
                    pre.lang = language(tag);
                }
                "br" => pre.text.push('\n'),
                _ => {}
            }
            return;
        }
        if let Some(level) = heading_level(name) {
            if self.in_cell {
                self.space = true;
            } else {
                self.flush();
                self.heading = Some(level);
            }
            return;
        }
        match name {
            "title" => self.in_title = true,
            "main" | "article" => {
                self.content += 1;
                self.flush();
            }
            "ul" | "ol" | "menu" | "dir" => {
                self.flush();
                if self.lists.is_empty() {
                    self.outer_lists += 1;
                }
                let next = tag
                    .attr("start")
                    .and_then(|s| s.trim().parse().ok())
                    .unwrap_or(1);
                self.lists.push(List {
                    ordered: name == "ol",
                    next,
                });
            }
            "li" => {
                self.flush();
                let depth = self.lists.len().saturating_sub(1).min(MAX_INDENT);
                let marker = match self.lists.last_mut() {
                    Some(list) if list.ordered => {
                        let n = list.next;
                        list.next = list.next.saturating_add(1);
                        format!("{n}.")
                    }
                    _ => "-".to_string(),
                };
                self.item = Some(format!("{}{marker}", "  ".repeat(depth)));
            }
            "pre" => {
                self.flush();
                self.pre = Some(Pre {
                    depth: 1,
                    lang: language(tag),
                    text: String::new(),
                });
            }
            "table" => {
                self.flush();
                self.tables += 1;
            }
            "tr" if self.tables == 1 => self.end_row(),
            "td" | "th" if self.tables == 1 => {
                self.end_cell();
                self.flush();
                self.in_cell = true;
            }
            "br" => self.line_break(),
            _ if BLOCKS.contains(&name) => self.flush(),
            _ => {}
        }
    }

    fn end(&mut self, name: &str) {
        if let Some((dropped, depth)) = &mut self.drop {
            if name == dropped {
                *depth -= 1;
                if *depth == 0 {
                    self.drop = None;
                }
            }
            return;
        }
        if let Some(pre) = &mut self.pre {
            if name == "pre" {
                pre.depth -= 1;
                if pre.depth == 0 {
                    self.end_pre();
                }
            }
            return;
        }
        if heading_level(name).is_some() {
            self.end_heading();
            return;
        }
        match name {
            "title" => self.in_title = false,
            "main" | "article" => {
                self.content = self.content.saturating_sub(1);
                self.flush();
            }
            "ul" | "ol" | "menu" | "dir" => {
                self.flush();
                self.lists.pop();
                self.item = None;
            }
            "li" => {
                self.flush();
                self.item = None;
            }
            "td" | "th" if self.tables == 1 => self.end_cell(),
            "tr" if self.tables == 1 => self.end_row(),
            "table" => {
                if self.tables == 1 {
                    self.end_row();
                }
                self.tables = self.tables.saturating_sub(1);
                self.flush();
            }
            _ if BLOCKS.contains(&name) => self.flush(),
            _ => {}
        }
    }

    fn text(&mut self, raw: &str) {
        if self.drop.is_some() {
            return;
        }
        let text = decode(raw);
        if self.in_title {
            self.title.extend(text.chars().filter(|c| !c.is_control()));
            return;
        }
        if let Some(pre) = &mut self.pre {
            // Verbatim, but for control characters other than tab and newline.
            pre.text.extend(
                text.chars()
                    .filter(|&c| c == '\n' || c == '\t' || !c.is_control()),
            );
            return;
        }
        for c in text.chars() {
            if matches!(c, ' ' | '\t' | '\n' | '\x0C') {
                self.space = true;
            } else if !c.is_control() {
                if self.space && !self.line.is_empty() && !self.line.ends_with('\n') {
                    self.line.push(' ');
                }
                self.space = false;
                self.line.push(c);
            }
        }
    }

    fn line_break(&mut self) {
        if self.heading.is_some() || self.in_cell {
            self.space = true;
        } else if !self.line.is_empty() && !self.line.ends_with('\n') {
            self.line.push('\n');
            self.space = false;
        }
    }

    fn push(&mut self, kind: Kind, text: String) {
        self.blocks.push(Block { kind, text });
    }

    /// Ends the current block of text, if there is one.
    fn flush(&mut self) {
        if self.heading.is_some() || self.in_cell {
            // A block inside a heading or a cell is a space in its one line.
            self.space = true;
            return;
        }
        let text = self.line.trim_end();
        if !text.is_empty() {
            let (kind, text) = match self.item.take() {
                Some(marker) => (Kind::Item(self.outer_lists), format!("{marker} {text}")),
                None if !self.lists.is_empty() => (
                    Kind::Item(self.outer_lists),
                    format!("{}{text}", "  ".repeat(self.lists.len().min(MAX_INDENT))),
                ),
                None => (Kind::Para, text.to_string()),
            };
            self.push(kind, text);
        }
        self.line.clear();
        self.space = false;
    }

    fn end_heading(&mut self) {
        let Some(level) = self.heading.take() else {
            self.flush();
            return;
        };
        let text = self.line.trim().to_string();
        self.line.clear();
        self.space = false;
        if !text.is_empty() {
            self.push(Kind::Heading, format!("{} {text}", "#".repeat(level)));
        }
    }

    fn end_pre(&mut self) {
        let Some(pre) = self.pre.take() else { return };
        let code = pre.text.trim_start_matches('\n').trim_end();
        if !code.is_empty() {
            let lang = pre.lang.unwrap_or_default();
            self.push(Kind::Code, format!("```{lang}\n{code}\n```"));
        }
    }

    fn end_cell(&mut self) {
        if self.in_cell {
            self.row.push(self.line.trim().to_string());
            self.line.clear();
            self.space = false;
            self.in_cell = false;
        }
    }

    fn end_row(&mut self) {
        self.end_cell();
        if self.row.iter().any(|c| !c.is_empty()) {
            let row = self.row.join(" | ");
            self.push(Kind::Row, row);
        }
        self.row.clear();
    }

    fn finish(mut self) -> Extracted {
        self.end_pre();
        self.end_heading();
        if self.tables > 0 {
            self.end_row();
        }
        self.flush();
        let mut text = String::new();
        let mut previous: Option<Kind> = None;
        for block in &self.blocks {
            if let Some(p) = previous {
                let tight = p == block.kind && matches!(p, Kind::Item(_) | Kind::Row);
                text.push_str(if tight { "\n" } else { "\n\n" });
            }
            text.push_str(&block.text);
            previous = Some(block.kind);
        }
        let title = self.title.split_whitespace().collect::<Vec<_>>().join(" ");
        Extracted {
            title: (!title.is_empty()).then_some(title),
            text,
            links: self.links,
            base: self.base,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mdbook_heading_anchor_is_kept_and_rustdoc_section_sign_is_not() {
        let page = "<main><h2 id=\"x\"><a class=\"header\" href=\"#x\">Title</a></h2>\
                    <h2 id=\"impl\" class=\"section-header\">Implementations\
                    <a href=\"#impl\" class=\"anchor\">§</a></h2>\
                    <h3 class=\"anchor anchorWithStickyNavbar\" id=\"d\">Docusaurus<a \
                    class=\"hash-link\" href=\"#d\">\u{200b}</a></h3></main>";
        let got = extract(page);
        assert_eq!(got.text, "## Title\n\n## Implementations\n\n### Docusaurus");
        assert_eq!(got.links, ["#x", "#impl", "#d"]);
    }

    #[test]
    fn nav_text_is_dropped_but_its_links_are_collected() {
        let page = "<nav id=\"sidebar\"><ol><li><a href=\"ch01.html\">One</a></li>\
                    <li><a href=\"ch02.html\">Two</a></li></ol></nav>\
                    <div class=\"page\"><p>Body <a href=\"ch03.html\">three</a>.</p></div>\
                    <div class=\"sidebar x\"><div><a href=\"ch04.html\">Four</a></div>Gone</div>\
                    <div role=\"navigation\">Also gone</div>After";
        let got = extract(page);
        assert_eq!(got.text, "Body three.\n\nAfter");
        assert_eq!(
            got.links,
            ["ch01.html", "ch02.html", "ch03.html", "ch04.html"]
        );
    }

    #[test]
    fn scripts_styles_and_site_header_are_dropped_article_header_is_not() {
        let page = "<header><h1>Site name</h1></header><style>p < q { }</style>\
                    <script>if (a < b) { document.write('<p>no</p>') }</script>\
                    <article><header><h1>Article</h1></header><p>Text</p></article>\
                    <footer>© 2024</footer>";
        assert_eq!(extract(page).text, "# Article\n\nText");
    }

    #[test]
    fn lists_nested_and_ordered() {
        let page = "<p>Steps:</p><ol start=\"3\"><li>three</li><li><p>four</p>\
                    <ul><li>a</li><li>b<br>more</li></ul></li></ol><ul><li>next list</li></ul>\
                    <p>end</p>";
        assert_eq!(
            extract(page).text,
            "Steps:\n\n3. three\n4. four\n  - a\n  - b\nmore\n\n- next list\n\nend"
        );
    }

    #[test]
    fn tables_are_rows_of_cells() {
        let page = "<table><thead><tr><th>Name</th><th>Size</th></tr></thead>\
                    <tbody><tr><td><code>u8</code></td><td>1 <em>byte</em></td></tr>\
                    <tr><td>u16<td>2</tr></tbody></table><p>after</p>";
        assert_eq!(
            extract(page).text,
            "Name | Size\nu8 | 1 byte\nu16 | 2\n\nafter"
        );
    }

    #[test]
    fn code_blocks_keep_language_and_whitespace() {
        let page = "<p>Use <code>let</code> here:</p><pre><code class=\"language-rust \
                    edition2021\">fn main() {\n    <span class=\"kw\">let</span> x = a &lt; b;\n\n\
                    \tprintln!(\"{x}\");\n}\n</code></pre><pre class=\"language-sh\">$ ls</pre>\
                    <pre>plain</pre>";
        assert_eq!(
            extract(page).text,
            "Use let here:\n\n```rust\nfn main() {\n    let x = a < b;\n\n\tprintln!(\"{x}\");\
             \n}\n```\n\n```sh\n$ ls\n```\n\n```\nplain\n```"
        );
    }

    #[test]
    fn a_listings_hidden_lines_stay_hidden() {
        let page = "<pre><code class=\"language-rust\"><span class=\"boring\">#![allow(unused)]\n\
                    fn main() {\n</span>let v = vec![1, 2];\n<span class=\"boring\">}</span></code></pre>";
        assert_eq!(extract(page).text, "```rust\nlet v = vec![1, 2];\n```");
    }

    #[test]
    fn whitespace_collapses_and_entities_decode() {
        let page = "<title> The\n Book </title><p>  one\n\t two &amp; <b>three</b>,\
                    four&nbsp;5</p>\r\n<p>x</p>";
        let got = extract(page);
        assert_eq!(got.title.as_deref(), Some("The Book"));
        assert_eq!(got.text, "one two & three,four\u{a0}5\n\nx");
    }

    #[test]
    fn a_page_without_a_heading_gets_its_title() {
        let got = extract("<title>Intro</title><p>Text</p>");
        assert_eq!(got.text_with_heading("/x"), "# Intro\n\nText");
        let got = extract("<p>Text</p>");
        assert_eq!(got.text_with_heading("/x"), "# /x\n\nText");
        let got = extract("<title>T</title><h2>Own</h2>");
        assert_eq!(got.text_with_heading("/x"), "## Own");
    }

    #[test]
    fn hidden_elements_and_base_href() {
        let page = "<base href=\"/docs/\"><p hidden>no</p><span aria-hidden=\"true\">icon</span>\
                    <p>yes</p>";
        let got = extract(page);
        assert_eq!(got.text, "yes");
        assert_eq!(got.base.as_deref(), Some("/docs/"));
    }

    /// Found by `cargo fuzz run extract`: control characters in a `language-` class went into the
    /// code fence, and so into the text.
    #[test]
    fn fuzz_regression_control_characters_in_a_language_class() {
        let crash = include_bytes!("fuzz-regressions/control-char-in-language.html");
        let got = extract(&String::from_utf8_lossy(crash));
        let page = got.text_with_heading("/");
        assert!(
            page.chars()
                .all(|c| c == '\n' || c == '\t' || !c.is_control()),
            "{page:?}"
        );
        let got = extract("<pre><code class=\"language-rust\x03\u{fffd}\">x</code></pre>");
        assert_eq!(got.text, "```rust\nx\n```");
        let got = extract("<pre><code class=\"language-\x03 language-c++\">x</code></pre>");
        assert_eq!(got.text, "```c++\nx\n```");
        let got = extract("<title>A\x01B</title><p>x</p>");
        assert_eq!(got.text_with_heading("/"), "# AB\n\nx");
    }

    /// Inputs built to make a scanner rescan or recurse, each a megabyte: all of them together
    /// take well under a second when the work is linear, and hours (or a stack overflow) when it
    /// is not.
    #[test]
    fn adversarial_megabytes_take_linear_time() {
        let n = 1 << 20;
        let fill = |unit: &str| unit.repeat(n / unit.len());
        let inputs = [
            fill("<"),
            fill("</>"),
            fill("</"),
            fill("<a"),
            fill("<a b"),
            fill("<!--"),
            fill("<!"),
            fill("<![CDATA["),
            format!("<script>{}", fill("</scrip")),
            format!("<title>{}", fill("&#x")),
            fill("&amp"),
            fill("<ul><li>x"),
            fill("<nav><div>"),
            fill("<pre>"),
            fill("<table><td>"),
            format!("<p class=\"{}\">x</p>", fill("a ")),
            fill("<h1>x"),
            fill("<a href=x>"),
        ];
        let started = std::time::Instant::now();
        for input in &inputs {
            let got = extract(input);
            std::hint::black_box(got);
        }
        let took = started.elapsed();
        assert!(
            took < std::time::Duration::from_secs(if cfg!(debug_assertions) { 60 } else { 5 }),
            "{took:?}"
        );
    }

    #[test]
    fn deep_lists_are_indented_only_so_far() {
        let got = extract(&"<ul><li>x".repeat(100));
        let widest = got.text.lines().map(str::len).max().unwrap();
        assert_eq!(widest, 2 * MAX_INDENT + 3, "{}", got.text);
    }

    #[test]
    fn unclosed_furniture_runs_to_the_end_and_nothing_panics() {
        assert_eq!(extract("<p>a</p><nav><div>b").text, "a");
        assert_eq!(extract("</nav></pre></li></table></h2>x").text, "x");
        assert_eq!(
            extract("<pre><pre>a</pre>b</pre>c").text,
            "```\nab\n```\n\nc"
        );
    }
}
