//! The witness log `cargo xtask witnesses` reads: with `NERVUS_WITNESS_LOG` naming a file, every
//! `worst_rel` a test makes is appended as `<test name>\t<value>`, and every `record` as
//! `<test name>#<tensor>#<bound>\t<value>`. A binary of its own with one test, because the log is
//! opened once per process from the environment.

use nervus_models::compare::{WITNESS_LOG, record, worst_rel};

#[test]
fn comparisons_and_records_are_logged_under_the_test_name() {
    let path = std::env::temp_dir().join(format!("nervus-witness-{}.log", std::process::id()));
    let _ = std::fs::remove_file(&path);
    // SAFETY: the only test in this binary, so no other thread reads the environment meanwhile.
    unsafe { std::env::set_var(WITNESS_LOG, &path) };
    let r = worst_rel(&[1.0, 2.5], &[1.0, 2.0]);
    record("grad.h.0.attn.c_attn.bias", 7.5e-7, 2e-5);
    assert!(worst_rel(&[f64::NAN], &[1.0]).is_infinite());
    let log = std::fs::read_to_string(&path).expect("the log was written");
    let _ = std::fs::remove_file(&path);
    let name = "comparisons_and_records_are_logged_under_the_test_name";
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(
        lines,
        [
            format!("{name}\t{r:e}"),
            format!("{name}#grad.h.0.attn.c_attn.bias#2e-5\t7.5e-7"),
            format!("{name}\tinf"),
        ],
        "{log}"
    );
}
