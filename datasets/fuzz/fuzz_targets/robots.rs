//! robots.txt on arbitrary text: parsing and deciding a path must return, whatever the input.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nervus_datasets::crawl::robots::Robots;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // The last line is used as a path to decide, so paths vary with the input too.
    let path = text.lines().last().unwrap_or("/").to_string();
    let robots = Robots::parse(&text, "nervus");
    std::hint::black_box(robots.allowed(&path));
    std::hint::black_box(robots.allowed("/"));
});
