//! The tag scanner and the extractor on arbitrary input: they must return, without panicking and
//! in time linear in the input (libFuzzer reports a slow input as a timeout).

#![no_main]

use libfuzzer_sys::fuzz_target;
use nervus_datasets::crawl::{clean, extract, scan};

fuzz_target!(|data: &[u8]| {
    let html = String::from_utf8_lossy(data);
    // The scanner alone, so that a token it cannot produce is not hidden by the extractor.
    for token in scan::tokens(&html) {
        std::hint::black_box(token);
    }
    let got = extract::extract(&html);
    // What every page must satisfy, whatever its input.
    let text_with_heading = got.text_with_heading("/");
    assert!(text_with_heading.is_empty() || text_with_heading.starts_with('#'));
    assert!(
        text_with_heading
            .chars()
            .all(|c| c == '\n' || c == '\t' || !c.is_control()),
        "no carriage returns or other control characters in the text"
    );
    std::hint::black_box(clean::clean(&[got.text.as_str()], 2));
});
