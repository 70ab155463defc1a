//! The IDX reader (raw or gzip'd) on arbitrary bytes: an error or a value, never a panic, and
//! never more memory than the input justifies (a header that promises more data than the file
//! holds is an error before anything is allocated; a gzip stream inflates only so far).

#![no_main]

use libfuzzer_sys::fuzz_target;
use nervus_datasets::idx::parse_idx;

fuzz_target!(|data: &[u8]| {
    if let Ok(idx) = parse_idx(data, std::path::Path::new("fuzz.idx")) {
        let count: usize = idx.dims.iter().product();
        assert_eq!(idx.data.len(), count, "the data is what the dimensions promise");
    }
});
