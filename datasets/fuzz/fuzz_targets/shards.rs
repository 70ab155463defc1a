//! A token corpus (`corpus.json` and its u16 shards, as the LM reads them) with one file replaced
//! by arbitrary bytes (the input's first byte picks which): opening a split is an error or a
//! corpus whose every id reads back, as many as it says it holds.

#![no_main]

use libfuzzer_sys::fuzz_target;
use nervus_datasets::shards::{Shards, Split};

static FILES: &[(&str, &[u8])] = &[
    (
        "corpus.json",
        include_bytes!("../fixtures/shards/corpus.json"),
    ),
    (
        "train/shard-00000.bin",
        include_bytes!("../fixtures/shards/train/shard-00000.bin"),
    ),
    (
        "train/shard-00001.bin",
        include_bytes!("../fixtures/shards/train/shard-00001.bin"),
    ),
    (
        "val/shard-00000.bin",
        include_bytes!("../fixtures/shards/val/shard-00000.bin"),
    ),
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("nervus-fuzz-shards-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (i, (name, bytes)) in FILES.iter().enumerate() {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("the scratch folder");
        let content = if i == pick as usize % FILES.len() {
            rest
        } else {
            bytes
        };
        std::fs::write(&path, content).expect("a scratch file");
    }
    for split in [Split::Train, Split::Val] {
        if let Ok(shards) = Shards::open(&dir, split) {
            let n = shards.len();
            assert_eq!(shards.iter_range(0..n).count(), n, "every id reads back");
            assert_eq!(shards.window(n / 2, n - n / 2).len(), n - n / 2);
        }
    }
});
