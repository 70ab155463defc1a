//! A tag scanner: HTML cut into tags, text, comments, doctypes and CDATA sections, with no tree
//! built and nothing repaired. A documentation site is one program's output from one template, so
//! a token stream is enough to find its headings, code and links, and a parser (or a dependency)
//! would buy nothing but size.
//!
//! What it copies from the HTML tokenizer is what matters for text: `<script>` and `<style>` (and
//! `<title>`, `<textarea>`) are raw text up to their own closing tag, so `if (a < b)` in JavaScript
//! is not a tag; a `<` that cannot start a tag is text; a tag cut off by the end of the input is
//! dropped, as browsers drop it. Every step consumes input and no search ever restarts behind
//! where the last one ended, so the scan is linear in the length of the document whatever it
//! contains: unterminated comments, quotes or tags run to the end once, they are not rescanned.

use std::borrow::Cow;

/// One piece of a document. Text and attribute values are raw: entities are not yet decoded (see
/// [`super::entities::decode`]), because most of them are never looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Token<'a> {
    Text(&'a str),
    Start(Tag<'a>),
    /// A closing tag's name, lowercased.
    End(String),
    Comment(&'a str),
    /// The inside of `<!DOCTYPE ...>`.
    Doctype(&'a str),
    Cdata(&'a str),
}

/// An opening tag.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tag<'a> {
    /// Lowercased.
    pub name: String,
    pub attrs: Vec<Attr<'a>>,
    /// Written `<br/>`; recorded, not acted on (HTML ignores it except on foreign elements).
    pub self_closing: bool,
}

/// An attribute: its lowercased name and its raw value (`""` when written without one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attr<'a> {
    pub name: String,
    pub value: &'a str,
}

impl Tag<'_> {
    /// The decoded value of the first attribute called `name` (a repeated attribute is ignored, as
    /// in browsers).
    pub fn attr(&self, name: &str) -> Option<Cow<'_, str>> {
        self.attrs
            .iter()
            .find(|a| a.name == name)
            .map(|a| super::entities::decode(a.value))
    }

    pub fn has_attr(&self, name: &str) -> bool {
        self.attrs.iter().any(|a| a.name == name)
    }
}

/// Elements whose content is text up to their own end tag.
const RAW_TEXT: [&str; 4] = ["script", "style", "title", "textarea"];

/// Tokens of `html`, in order.
pub fn tokens(html: &str) -> Scanner<'_> {
    Scanner {
        src: html,
        pos: 0,
        raw_until: None,
    }
}

/// The iterator behind [`tokens`].
pub struct Scanner<'a> {
    src: &'a str,
    pos: usize,
    /// Set after the start tag of a raw-text element: the name whose end tag ends the text.
    raw_until: Option<&'static str>,
}

fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0C')
}

/// The first index `>= from` where `needle` starts, or `None`.
fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    if from >= hay.len() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
}

fn find_byte(hay: &[u8], from: usize, needle: u8) -> Option<usize> {
    hay.get(from..)?
        .iter()
        .position(|&b| b == needle)
        .map(|i| i + from)
}

fn starts_with_ci(hay: &[u8], at: usize, prefix: &[u8]) -> bool {
    hay.get(at..at + prefix.len())
        .is_some_and(|s| s.eq_ignore_ascii_case(prefix))
}

impl<'a> Iterator for Scanner<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let bytes = self.src.as_bytes();
        if let Some(name) = self.raw_until.take() {
            let start = self.pos;
            let end = self.raw_text_end(name);
            self.pos = end;
            if end > start {
                return Some(Token::Text(&self.src[start..end]));
            }
        }
        if self.pos >= bytes.len() {
            return None;
        }
        if bytes[self.pos] != b'<' {
            return Some(self.text_to_next_lt(self.pos));
        }
        let at = self.pos;
        if bytes[at..].starts_with(b"<!--") {
            let (inner, next) = match find(bytes, at + 4, b"-->") {
                Some(k) => (&self.src[at + 4..k], k + 3),
                None => (&self.src[at + 4..], bytes.len()),
            };
            self.pos = next;
            return Some(Token::Comment(inner));
        }
        if starts_with_ci(bytes, at, b"<![CDATA[") {
            let (inner, next) = match find(bytes, at + 9, b"]]>") {
                Some(k) => (&self.src[at + 9..k], k + 3),
                None => (&self.src[at + 9..], bytes.len()),
            };
            self.pos = next;
            return Some(Token::Cdata(inner));
        }
        if bytes[at..].starts_with(b"<!") || bytes[at..].starts_with(b"<?") {
            // A doctype, or what HTML calls a bogus comment: everything up to the next `>`.
            let (inner, next) = match find_byte(bytes, at + 2, b'>') {
                Some(k) => (&self.src[at + 2..k], k + 1),
                None => (&self.src[at + 2..], bytes.len()),
            };
            self.pos = next;
            if starts_with_ci(bytes, at, b"<!doctype") {
                return Some(Token::Doctype(inner.get(7..).unwrap_or("").trim()));
            }
            return Some(Token::Comment(inner));
        }
        if bytes[at..].starts_with(b"</") {
            return match bytes.get(at + 2) {
                Some(b) if b.is_ascii_alphabetic() => self.end_tag(at),
                Some(b'>') => {
                    // `</>` is nothing at all; it is returned as an empty comment, which every
                    // reader ignores, rather than by scanning on (a recursion as deep as the
                    // input is long, on `</></></>...`).
                    self.pos = at + 3;
                    Some(Token::Comment(""))
                }
                _ => {
                    // `</` then not a letter: a bogus comment up to `>`.
                    let (inner, next) = match find_byte(bytes, at + 2, b'>') {
                        Some(k) => (&self.src[at + 2..k], k + 1),
                        None => (&self.src[at + 2..], bytes.len()),
                    };
                    self.pos = next;
                    Some(Token::Comment(inner))
                }
            };
        }
        match bytes.get(at + 1) {
            Some(b) if b.is_ascii_alphabetic() => self.start_tag(at),
            // A `<` that starts no tag is text (`a < b` in prose).
            _ => Some(self.text_to_next_lt(at + 1)),
        }
    }
}

impl<'a> Scanner<'a> {
    /// Text from `self.pos` up to the first `<` at or after `from` (or the end); `self.pos` moves
    /// there.
    fn text_to_next_lt(&mut self, from: usize) -> Token<'a> {
        let bytes = self.src.as_bytes();
        let end = find_byte(bytes, from, b'<').unwrap_or(bytes.len());
        let start = self.pos;
        self.pos = end;
        Token::Text(&self.src[start..end])
    }

    /// Where the raw text of a `name` element ends: at `</name` followed by a space, `/` or `>`
    /// (or the end of the input), case-insensitively.
    fn raw_text_end(&self, name: &str) -> usize {
        let bytes = self.src.as_bytes();
        let mut i = self.pos;
        while let Some(j) = find(bytes, i, b"</") {
            let after = j + 2 + name.len();
            if starts_with_ci(bytes, j + 2, name.as_bytes())
                && bytes
                    .get(after)
                    .is_none_or(|&b| is_space(b) || b == b'/' || b == b'>')
            {
                return j;
            }
            i = j + 1;
        }
        bytes.len()
    }

    /// A name from `i`: up to a space, `/` or `>` (or `=` for attribute names after the first
    /// character). Returns the end index.
    fn name_end(&self, mut i: usize, attribute: bool) -> usize {
        let bytes = self.src.as_bytes();
        let first = i;
        while let Some(&b) = bytes.get(i) {
            if is_space(b) || b == b'/' || b == b'>' || (attribute && b == b'=' && i > first) {
                break;
            }
            i += 1;
        }
        i
    }

    fn end_tag(&mut self, at: usize) -> Option<Token<'a>> {
        let bytes = self.src.as_bytes();
        let name_end = self.name_end(at + 2, false);
        let name = self.src[at + 2..name_end].to_ascii_lowercase();
        // Anything between the name and `>` is ignored, as browsers ignore it.
        match find_byte(bytes, name_end, b'>') {
            Some(k) => {
                self.pos = k + 1;
                Some(Token::End(name))
            }
            None => {
                // Cut off by the end of the input: dropped.
                self.pos = bytes.len();
                None
            }
        }
    }

    fn start_tag(&mut self, at: usize) -> Option<Token<'a>> {
        let bytes = self.src.as_bytes();
        let name_end = self.name_end(at + 1, false);
        let name = self.src[at + 1..name_end].to_ascii_lowercase();
        let mut attrs = Vec::new();
        let mut self_closing = false;
        let mut i = name_end;
        loop {
            // Between attributes: spaces and stray slashes.
            while let Some(&b) = bytes.get(i) {
                if is_space(b) {
                    i += 1;
                } else if b == b'/' {
                    self_closing = bytes.get(i + 1) == Some(&b'>');
                    i += 1;
                } else {
                    break;
                }
            }
            match bytes.get(i) {
                None => {
                    // A tag cut off by the end of the input is dropped.
                    self.pos = bytes.len();
                    return None;
                }
                Some(b'>') => {
                    i += 1;
                    break;
                }
                Some(_) => {}
            }
            self_closing = false;
            let n_end = self.name_end(i, true);
            let attr_name = self.src[i..n_end].to_ascii_lowercase();
            i = n_end;
            let mut j = i;
            while bytes.get(j).is_some_and(|&b| is_space(b)) {
                j += 1;
            }
            let mut value = "";
            if bytes.get(j) == Some(&b'=') {
                j += 1;
                while bytes.get(j).is_some_and(|&b| is_space(b)) {
                    j += 1;
                }
                match bytes.get(j) {
                    Some(&q) if q == b'"' || q == b'\'' => match find_byte(bytes, j + 1, q) {
                        Some(k) => {
                            value = &self.src[j + 1..k];
                            j = k + 1;
                        }
                        None => {
                            self.pos = bytes.len();
                            return None;
                        }
                    },
                    _ => {
                        let start = j;
                        while bytes.get(j).is_some_and(|&b| !is_space(b) && b != b'>') {
                            j += 1;
                        }
                        value = &self.src[start..j];
                    }
                }
                i = j;
            }
            attrs.push(Attr {
                name: attr_name,
                value,
            });
        }
        self.pos = i;
        self.raw_until = RAW_TEXT.iter().copied().find(|&r| r == name);
        Some(Token::Start(Tag {
            name,
            attrs,
            self_closing,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(name: &str, attrs: &[(&str, &'static str)]) -> Token<'static> {
        Token::Start(Tag {
            name: name.into(),
            attrs: attrs
                .iter()
                .map(|(n, v)| Attr {
                    name: n.to_string(),
                    value: v,
                })
                .collect(),
            self_closing: false,
        })
    }

    #[test]
    fn tags_attributes_text_comments_doctype_cdata() {
        let got: Vec<_> = tokens(
            "<!DOCTYPE html><P Class=\"a b\" id='x' hidden data-x=1>Hi<!-- c -->\
             <![CDATA[raw]]></p>",
        )
        .collect();
        assert_eq!(
            got,
            vec![
                Token::Doctype("html"),
                start(
                    "p",
                    &[
                        ("class", "a b"),
                        ("id", "x"),
                        ("hidden", ""),
                        ("data-x", "1")
                    ]
                ),
                Token::Text("Hi"),
                Token::Comment(" c "),
                Token::Cdata("raw"),
                Token::End("p".into()),
            ]
        );
    }

    #[test]
    fn script_is_raw_text_so_a_less_than_is_not_a_tag() {
        let got: Vec<_> =
            tokens("<script>if (a <b && c> d) { x = '</p>'; }</SCRIPT >after").collect();
        assert_eq!(
            got,
            vec![
                start("script", &[]),
                Token::Text("if (a <b && c> d) { x = '</p>'; }"),
                Token::End("script".into()),
                Token::Text("after"),
            ]
        );
        // `</scripts` does not close a script.
        let got: Vec<_> = tokens("<script>a</scripts>b</script>").collect();
        assert_eq!(got[1], Token::Text("a</scripts>b"));
    }

    #[test]
    fn a_lone_less_than_is_text() {
        let got: Vec<_> = tokens("1 < 2 <3 and <").collect();
        assert_eq!(
            got,
            vec![
                Token::Text("1 "),
                Token::Text("< 2 "),
                Token::Text("<3 and "),
                Token::Text("<")
            ]
        );
    }

    #[test]
    fn self_closing_and_unterminated_tags() {
        let got: Vec<_> = tokens("a<br/>b<img src=x.png />c<p class=\"open").collect();
        assert_eq!(got.len(), 5, "{got:?}");
        assert!(matches!(&got[1], Token::Start(t) if t.name == "br" && t.self_closing));
        assert!(matches!(&got[3], Token::Start(t) if t.name == "img" && t.self_closing));
        assert_eq!(
            got[4],
            Token::Text("c"),
            "a tag cut off by the end is dropped"
        );
    }

    #[test]
    fn unterminated_comment_and_raw_text_run_to_the_end() {
        let got: Vec<_> = tokens("x<!-- never closed <p>").collect();
        assert_eq!(
            got,
            vec![Token::Text("x"), Token::Comment(" never closed <p>")]
        );
        let got: Vec<_> = tokens("<style>p < q").collect();
        assert_eq!(got, vec![start("style", &[]), Token::Text("p < q")]);
    }

    #[test]
    fn an_empty_end_tag_is_an_empty_comment() {
        let got: Vec<_> = tokens("a</>b").collect();
        assert_eq!(
            got,
            vec![Token::Text("a"), Token::Comment(""), Token::Text("b")]
        );
    }

    #[test]
    fn multibyte_text_around_tags_is_sliced_on_char_boundaries() {
        let got: Vec<_> = tokens("blåbær<é>“q”<</ü>").collect();
        assert_eq!(
            got,
            vec![
                Token::Text("blåbær"),
                Token::Text("<é>“q”"),
                Token::Text("<"),
                Token::Comment("ü")
            ]
        );
    }
}
