//! Character references: `&amp;`, `&#8217;`, `&#x2019;`.
//!
//! The named ones are the few a documentation generator writes, not HTML's two thousand: the
//! markup escapes, the non-breaking space and the common typography (quotes, dashes, ellipsis,
//! arrows). An unknown name is left as written, so nothing is lost that a reader could recover.
//! Numeric references follow HTML: 0, surrogates and values past U+10FFFF become U+FFFD, and
//! 128–159 are read as the Windows-1252 characters that old pages meant by them.

use std::borrow::Cow;

/// Named references understood, with their characters.
pub const NAMED: &[(&str, char)] = &[
    ("amp", '&'),
    ("lt", '<'),
    ("gt", '>'),
    ("quot", '"'),
    ("apos", '\''),
    ("nbsp", '\u{a0}'),
    ("ensp", '\u{2002}'),
    ("emsp", '\u{2003}'),
    ("thinsp", '\u{2009}'),
    ("shy", '\u{ad}'),
    ("zwj", '\u{200d}'),
    ("zwnj", '\u{200c}'),
    ("ndash", '–'),
    ("mdash", '—'),
    ("minus", '−'),
    ("lsquo", '‘'),
    ("rsquo", '’'),
    ("sbquo", '‚'),
    ("ldquo", '“'),
    ("rdquo", '”'),
    ("bdquo", '„'),
    ("laquo", '«'),
    ("raquo", '»'),
    ("lsaquo", '‹'),
    ("rsaquo", '›'),
    ("prime", '′'),
    ("Prime", '″'),
    ("hellip", '…'),
    ("bull", '•'),
    ("middot", '·'),
    ("sect", '§'),
    ("para", '¶'),
    ("dagger", '†'),
    ("Dagger", '‡'),
    ("copy", '©'),
    ("reg", '®'),
    ("trade", '™'),
    ("deg", '°'),
    ("plusmn", '±'),
    ("times", '×'),
    ("divide", '÷'),
    ("micro", 'µ'),
    ("le", '≤'),
    ("ge", '≥'),
    ("ne", '≠'),
    ("larr", '←'),
    ("rarr", '→'),
    ("uarr", '↑'),
    ("darr", '↓'),
    ("harr", '↔'),
    ("lArr", '⇐'),
    ("rArr", '⇒'),
    ("hArr", '⇔'),
    ("euro", '€'),
    ("pound", '£'),
    ("yen", '¥'),
    ("cent", '¢'),
    ("iexcl", '¡'),
    ("iquest", '¿'),
];

/// What 128–159 meant on the Windows-1252 pages that wrote them as numbers (0 where it is
/// unassigned there too, and the number stands for itself).
const WINDOWS_1252: [u32; 32] = [
    0x20AC, 0, 0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160, 0x2039,
    0x0152, 0, 0x017D, 0, 0, 0x2018, 0x2019, 0x201C, 0x201D, 0x2022, 0x2013, 0x2014, 0x02DC,
    0x2122, 0x0161, 0x203A, 0x0153, 0, 0x017E, 0x0178,
];

/// The longest name in [`NAMED`], bounding how far a lookup reads.
const LONGEST_NAME: usize = 6;

/// `s` with its character references replaced. Borrowed when there are none.
pub fn decode(s: &str) -> Cow<'_, str> {
    if !s.contains('&') {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(amp) = rest.find('&') {
        out.push_str(&rest[..amp]);
        let after = &rest[amp + 1..];
        match reference(after) {
            Some((c, used)) => {
                out.push(c);
                rest = &after[used..];
            }
            None => {
                out.push('&');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    Cow::Owned(out)
}

/// The character of the reference at the start of `s` (just after its `&`) and how many bytes it
/// used, or `None` when `s` does not start with one.
fn reference(s: &str) -> Option<(char, usize)> {
    let bytes = s.as_bytes();
    if bytes.first() == Some(&b'#') {
        let (hex, start) = match bytes.get(1) {
            Some(b'x' | b'X') => (true, 2),
            _ => (false, 1),
        };
        let radix = if hex { 16 } else { 10 };
        let digits = bytes[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit() || (hex && b.is_ascii_hexdigit()))
            .count();
        if digits == 0 {
            return None;
        }
        // Saturates instead of overflowing: any value this large is out of range anyway.
        let value = bytes[start..start + digits].iter().fold(0u32, |v, &b| {
            let d = (b as char).to_digit(radix).unwrap_or(0);
            v.saturating_mul(radix).saturating_add(d)
        });
        let mut used = start + digits;
        // The `;` is optional for numbers (a parse error in HTML, but browsers accept it).
        if bytes.get(used) == Some(&b';') {
            used += 1;
        }
        return Some((numeric(value), used));
    }
    let name_len = bytes
        .iter()
        .take(LONGEST_NAME + 1)
        .take_while(|b| b.is_ascii_alphanumeric())
        .count();
    if name_len == 0 || bytes.get(name_len) != Some(&b';') {
        return None;
    }
    let name = &s[..name_len];
    NAMED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, c)| (c, name_len + 1))
}

fn numeric(value: u32) -> char {
    match value {
        0 => '\u{FFFD}',
        0x80..=0x9F => match WINDOWS_1252[(value - 0x80) as usize] {
            0 => char::from_u32(value).unwrap_or('\u{FFFD}'),
            mapped => char::from_u32(mapped).unwrap_or('\u{FFFD}'),
        },
        _ => char::from_u32(value).unwrap_or('\u{FFFD}'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_numeric_and_hex_references() {
        assert_eq!(
            decode("a &lt; b &amp;&amp; c &gt; d &quot;q&quot; &apos;s&apos;"),
            "a < b && c > d \"q\" 's'"
        );
        assert_eq!(
            decode("don&rsquo;t &ndash; &mdash; &hellip;"),
            "don’t – — …"
        );
        assert_eq!(decode("a&nbsp;b"), "a\u{a0}b");
        assert_eq!(decode("&#8217;&#x2019;&#X2019;&#39;"), "’’’'");
        assert_eq!(decode("&#128512;"), "😀");
    }

    #[test]
    fn what_is_not_a_reference_is_left_alone() {
        assert_eq!(decode("fish & chips"), "fish & chips");
        assert_eq!(
            decode("&unknown; &amp &; &#; &#x;"),
            "&unknown; &amp &; &#; &#x;"
        );
        assert_eq!(decode("a&&lt;"), "a&<");
        assert!(matches!(decode("no references"), Cow::Borrowed(_)));
    }

    #[test]
    fn out_of_range_numbers_become_the_replacement_character() {
        assert_eq!(
            decode("&#0;&#xD800;&#x110000;&#99999999999999999999;"),
            "\u{FFFD}".repeat(4)
        );
        assert_eq!(
            decode("&#150;&#146;&#129;"),
            "–’\u{81}",
            "Windows-1252 for 128–159"
        );
        assert_eq!(
            decode("&#65&#66;"),
            "AB",
            "the semicolon is optional for numbers"
        );
    }
}
