//! The downloader against a loopback HTTP server started by the test: a good file, a corrupt one,
//! a 404, a truncated transfer, a cached copy that has gone bad, and a mirror that is down.
//! Nothing here touches the network.

use nervus_datasets::DataError;
use nervus_datasets::download::{
    Checksum, Fetched, Remote, fetch, fetch_recorded, record_path, sha256_hex,
};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

const GOOD: &[u8] = b"the published bytes of a small file, repeated enough to matter";

/// Serves `/good`, `/corrupt`, `/truncated` (promises more than it sends) and 404 for the rest.
/// Returns the base address and a counter of requests served.
fn serve() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut request = String::new();
            reader.read_line(&mut request).unwrap();
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                    break;
                }
            }
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
            let (status, body, claimed) = match path.as_str() {
                "/good" => ("200 OK", GOOD.to_vec(), GOOD.len()),
                "/corrupt" => {
                    let mut b = GOOD.to_vec();
                    b[3] ^= 1;
                    ("200 OK", b, GOOD.len())
                }
                "/truncated" => ("200 OK", GOOD[..10].to_vec(), GOOD.len()),
                _ => ("404 Not Found", b"no such file".to_vec(), 12),
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {claimed}\r\nConnection: close\r\n\r\n"
            );
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(&body);
        }
    });
    (format!("http://{addr}"), hits)
}

fn client() -> reqwest::blocking::Client {
    // No proxy: a proxy set in the environment must not intercept the loopback server.
    reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("nervus-dl-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn remote(urls: Vec<String>, dest: PathBuf) -> Remote {
    Remote {
        what: "test file".into(),
        urls,
        dest,
        checksum: Some(Checksum::Sha256(sha256_hex(GOOD))),
    }
}

fn leftovers(dir: &PathBuf) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn good_file_is_verified_then_served_from_cache() {
    let (base, hits) = serve();
    let dir = scratch("good");
    let r = remote(vec![format!("{base}/good")], dir.join("f"));
    let mut seen = 0;
    let got = fetch(&client(), &r, &mut |d, _| seen = d).unwrap();
    assert_eq!(
        got,
        Fetched::Downloaded {
            bytes: GOOD.len() as u64,
            sha256: sha256_hex(GOOD)
        }
    );
    assert_eq!(seen, GOOD.len() as u64, "progress reached the end");
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), GOOD);
    assert_eq!(
        fetch(&client(), &r, &mut |_, _| {}).unwrap(),
        Fetched::Cached
    );
    assert_eq!(
        hits.load(Ordering::SeqCst),
        1,
        "a verified copy is not fetched again"
    );
}

#[test]
fn corrupt_file_is_refused_and_nothing_is_left_behind() {
    let (base, _) = serve();
    let dir = scratch("corrupt");
    let r = remote(vec![format!("{base}/corrupt")], dir.join("f"));
    let e = fetch(&client(), &r, &mut |_, _| {}).unwrap_err();
    assert!(matches!(e, DataError::Checksum { .. }), "{e}");
    assert!(e.to_string().contains("checksum mismatch"), "{e}");
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn not_found_names_the_address_and_status() {
    let (base, _) = serve();
    let dir = scratch("404");
    let r = remote(vec![format!("{base}/missing")], dir.join("f"));
    let e = fetch(&client(), &r, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("/missing") && e.contains("404"), "{e}");
    assert!(leftovers(&dir).is_empty());
}

#[test]
fn truncated_transfer_is_refused() {
    let (base, _) = serve();
    let dir = scratch("trunc");
    let r = remote(vec![format!("{base}/truncated")], dir.join("f"));
    let e = fetch(&client(), &r, &mut |_, _| {})
        .unwrap_err()
        .to_string();
    assert!(e.contains("truncated") || e.contains("broke"), "{e}");
    assert!(leftovers(&dir).is_empty(), "{:?}", leftovers(&dir));
}

#[test]
fn a_bad_cached_copy_is_replaced_not_trusted() {
    let (base, hits) = serve();
    let dir = scratch("stale");
    std::fs::write(dir.join("f"), b"half a file").unwrap();
    let r = remote(vec![format!("{base}/good")], dir.join("f"));
    assert!(matches!(
        fetch(&client(), &r, &mut |_, _| {}).unwrap(),
        Fetched::Downloaded { .. }
    ));
    assert_eq!(std::fs::read(dir.join("f")).unwrap(), GOOD);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[test]
fn a_dead_mirror_falls_through_and_all_dead_means_offline() {
    let (base, _) = serve();
    // A port that was just free: nothing listens there.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let dir = scratch("mirror");
    let r = remote(
        vec![format!("{dead}/good"), format!("{base}/good")],
        dir.join("f"),
    );
    assert!(matches!(
        fetch(&client(), &r, &mut |_, _| {}).unwrap(),
        Fetched::Downloaded { .. }
    ));
    let r = remote(vec![format!("{dead}/good")], dir.join("g"));
    let e = fetch(&client(), &r, &mut |_, _| {}).unwrap_err();
    assert!(matches!(e, DataError::Offline { .. }), "{e}");
    let msg = e.to_string();
    assert!(
        msg.starts_with("offline")
            && msg.contains("by hand")
            && msg.contains(" g)")
            && msg.contains("same command again"),
        "{msg}"
    );
}

#[test]
fn mnist_download_writes_the_four_files_it_verified() {
    // The real md5 sums cannot be met by a test server, so this checks the refusal path of the
    // MNIST wrapper: every file is asked for by its published name and none is kept unverified.
    let (base, _) = serve();
    let dir = scratch("mnist");
    let e = nervus_datasets::mnist::download(
        &client(),
        &dir,
        &[&format!("{base}/")],
        &mut |_, _, _| {},
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("train-images-idx3-ubyte.gz") && e.contains("404"),
        "{e}"
    );
    assert!(leftovers(&dir).is_empty());
}

/// Trust on first use (TinyStories publishes no checksum): the first download records its sha256,
/// later calls are served from the cache against that record, a damaged copy is fetched again, and
/// a source that now serves other bytes is refused with the record left as it was.
#[test]
fn a_first_download_records_its_hash_and_is_held_to_it() {
    let (base, hits) = serve();
    let dir = scratch("tofu");
    let dest = dir.join("stories.txt");
    let record = record_path(&dest);
    assert_eq!(record, dir.join("stories.txt.sha256"));
    let get = |path: &str| {
        fetch_recorded(
            &client(),
            "stories",
            vec![format!("{base}{path}")],
            &dest,
            &mut |_, _| {},
        )
    };
    assert!(matches!(get("/good").unwrap(), Fetched::Downloaded { .. }));
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert_eq!(recorded.trim(), sha256_hex(GOOD));
    assert_eq!(get("/good").unwrap(), Fetched::Cached);
    assert_eq!(hits.load(Ordering::SeqCst), 1, "the cached copy is trusted");

    // A damaged copy is checked against the record and fetched again.
    std::fs::write(&dest, b"damaged").unwrap();
    assert!(matches!(get("/good").unwrap(), Fetched::Downloaded { .. }));
    assert_eq!(std::fs::read(&dest).unwrap(), GOOD);
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // The source now serves other bytes: refused, naming the record, which is kept.
    std::fs::write(&dest, b"damaged again").unwrap();
    let e = get("/corrupt").unwrap_err();
    assert!(matches!(e, DataError::Checksum { .. }), "{e}");
    let msg = e.to_string();
    assert!(msg.contains("stories.txt.sha256"), "{msg}");
    assert_eq!(std::fs::read_to_string(&record).unwrap(), recorded);
    assert!(!dir.join("stories.txt.partial").exists());

    // A record that is not a hash is an error that names it, not a silent re-record.
    std::fs::write(&record, "not a hash\n").unwrap();
    let e = get("/good").unwrap_err().to_string();
    assert!(
        e.contains("stories.txt.sha256") && e.contains("64 hex"),
        "{e}"
    );
}

#[test]
fn a_copy_put_in_place_by_hand_is_recorded_without_a_download() {
    let (base, hits) = serve();
    let dir = scratch("byhand");
    let dest = dir.join("stories.txt");
    std::fs::write(&dest, b"copied from elsewhere").unwrap();
    let got = fetch_recorded(
        &client(),
        "stories",
        vec![format!("{base}/good")],
        &dest,
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(got, Fetched::Cached);
    assert_eq!(hits.load(Ordering::SeqCst), 0);
    assert_eq!(
        std::fs::read_to_string(record_path(&dest)).unwrap().trim(),
        sha256_hex(b"copied from elsewhere")
    );
}
