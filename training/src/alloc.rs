//! The process's memory allocator: mimalloc, keeping freed memory, unless
//! `NERVUS_ALLOCATOR=system` asks for the system's.
//!
//! A training step allocates and frees tensors of megabytes by the hundred. glibc's malloc gives
//! blocks that large back to the kernel when they are freed, so the next step faults every page in
//! again and the kernel zeroes it first. A profile of one video DiT step on one thread
//! (`perf record`, flex) put about a quarter of the time there (`clear_page_erms`, page faults)
//! against a fifth in the matrix products. mimalloc reuses freed blocks; with purging turned off
//! it never hands memory back during a run, so the process stays at its peak and stops paying for
//! pages. `cargo xtask bench allocator` measures what that is worth per model, both allocators in
//! the same run.
//!
//! The choice is made once, at the process's first allocation, from the environment (read with
//! `getenv`, which does not allocate), and never changes: a block is always freed by the
//! allocator that made it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

use libmimalloc_sys::mi_option_t;
use mimalloc::MiMalloc;

/// The environment variable that chooses the system's allocator (`system`); anything else, or
/// nothing, means mimalloc.
pub const ENV: &str = "NERVUS_ALLOCATOR";
const ENV_C: &std::ffi::CStr = c"NERVUS_ALLOCATOR";

/// mimalloc's `mi_option_purge_delay` (milliseconds before freed memory goes back to the OS; -1:
/// never). Position 15 of `mi_option_e` in the mimalloc that libmimalloc-sys 0.1.49 bundles (v3,
/// `include/mimalloc.h`), which the sys crate does not name; the versions are pinned in
/// Cargo.toml for that reason.
const PURGE_DELAY: mi_option_t = 15;

const UNDECIDED: u8 = 0;
const MIMALLOC: u8 = 1;
const SYSTEM: u8 = 2;

static CHOICE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// mimalloc or the system's, as the environment chose at the first allocation. A binary opts in
/// with
///
/// ```ignore
/// #[global_allocator]
/// static ALLOCATOR: nervus_training::alloc::Allocator = nervus_training::alloc::Allocator;
/// ```
///
/// (every example and `xtask` do; tests and other binaries keep the system's).
pub struct Allocator;

fn choice() -> u8 {
    match CHOICE.load(Ordering::Acquire) {
        UNDECIDED => decide(),
        c => c,
    }
}

#[cold]
fn decide() -> u8 {
    // SAFETY: the name is a NUL-terminated literal; getenv returns null or a NUL-terminated string
    // owned by the environment, which is only read here.
    let system = unsafe {
        let value = libc::getenv(ENV_C.as_ptr());
        !value.is_null() && std::ffi::CStr::from_ptr(value).to_bytes() == b"system"
    };
    let c = if system {
        SYSTEM
    } else {
        // SAFETY: sets one of mimalloc's option globals; allocates nothing.
        unsafe { libmimalloc_sys::mi_option_set(PURGE_DELAY, -1) };
        MIMALLOC
    };
    // Two threads deciding at once read the same environment and store the same value.
    CHOICE.store(c, Ordering::Release);
    c
}

/// Which allocator this process uses: "mimalloc" or "system" (also where the binary did not opt
/// into [`Allocator`]: its choice is made at the first allocation through it).
pub fn name() -> &'static str {
    // Any allocation goes through the installed allocator; with ours it decides here at the latest.
    drop(std::hint::black_box(Box::new(0u8)));
    if CHOICE.load(Ordering::Acquire) != MIMALLOC {
        "system"
    } else {
        "mimalloc"
    }
}

// SAFETY: every call is forwarded to one allocator, the same one for the life of the process.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if choice() == SYSTEM {
            unsafe { System.alloc(layout) }
        } else {
            unsafe { MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if choice() == SYSTEM {
            unsafe { System.alloc_zeroed(layout) }
        } else {
            unsafe { MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if choice() == SYSTEM {
            unsafe { System.dealloc(ptr, layout) }
        } else {
            unsafe { MiMalloc.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if choice() == SYSTEM {
            unsafe { System.realloc(ptr, layout, new_size) }
        } else {
            unsafe { MiMalloc.realloc(ptr, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static ALLOCATOR: Allocator = Allocator;

    #[test]
    fn the_choice_follows_the_environment_and_mimalloc_keeps_its_memory() {
        assert_eq!(ENV_C.to_str(), Ok(ENV));
        let asked = std::env::var(ENV).ok();
        let expected = if asked.as_deref() == Some("system") {
            "system"
        } else {
            "mimalloc"
        };
        assert_eq!(name(), expected);
        if expected == "mimalloc" {
            // SAFETY: reads an option global.
            let delay = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
            assert_eq!(delay, -1, "purging should be off");
        }
        // Big blocks made and freed, written through: nothing is lost between allocators.
        for n in [1usize << 10, 1 << 20, 1 << 26] {
            let v = vec![3u8; n];
            assert!(v.iter().all(|&b| b == 3));
        }
    }
}
