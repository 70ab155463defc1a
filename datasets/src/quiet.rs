//! A panic inside code this project does not own (HF tokenizers, Burn's record decoding), caught
//! where it meets a user's file and turned into an error, without the panic's message and
//! backtrace on the terminal.
//!
//! The panic hook is the process's; this one stays silent only on the thread inside [`catch`] and
//! hands every other panic to the hook that was there before (the default printer, or a test
//! harness's), so nothing else changes.

use std::cell::Cell;
use std::panic::AssertUnwindSafe;
use std::sync::Once;

thread_local! {
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f`; a panic in it (on this thread) becomes `Err` with the panic's message.
pub fn catch<T>(f: impl FnOnce() -> T) -> Result<T, String> {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                before(info)
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let out = std::panic::catch_unwind(AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    out.map_err(|payload| {
        payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_becomes_its_message_and_a_value_passes_through() {
        assert_eq!(catch(|| 7), Ok(7));
        assert_eq!(
            catch(|| -> u8 { panic!("Invalid id.") }),
            Err("Invalid id.".into())
        );
        let n = 3;
        assert_eq!(
            catch(|| -> u8 { panic!("{n} is wrong") }),
            Err("3 is wrong".into())
        );
        assert!(!QUIET.with(Cell::get), "the thread is loud again");
    }
}
