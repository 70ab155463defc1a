//! A language model's byte-level BPE `tokenizer.json` on arbitrary bytes: loading it is an error
//! or a tokenizer, and a tokenizer that loads encodes and decodes text without panicking.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nervus_datasets::bpe::Bpe;

fuzz_target!(|data: &[u8]| {
    let path = std::env::temp_dir().join(format!("nervus-fuzz-bpe-{}.json", std::process::id()));
    std::fs::write(&path, data).expect("the temporary file");
    if let Ok(bpe) = Bpe::load(&path)
        && let Ok(ids) = bpe.encode("It is a truth universally acknowledged.")
    {
        std::hint::black_box(bpe.decode(&ids).ok());
    }
});
