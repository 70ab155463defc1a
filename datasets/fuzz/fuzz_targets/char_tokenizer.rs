//! A character model's `tokenizer.json` on arbitrary bytes: loading it is an error or a
//! tokenizer, and a tokenizer that loads encodes and decodes its own characters.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nervus_datasets::text::CharTokenizer;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("nervus-fuzz-char-{}.json", std::process::id()));
    std::fs::write(&path, data).expect("the temporary file");
    if let Ok(tok) = CharTokenizer::load(&path) {
        let all: String = tok.chars().iter().collect();
        let ids = tok.encode(&all, "fuzz").expect("its own characters encode");
        assert_eq!(tok.decode(&ids), all);
    }
});
