//! A race the tests run against the server: two names (a directory and a
//! link out of the root) swapped with `renameat2(RENAME_EXCHANGE)` in a
//! tight loop while requests use one of them, so a door that checks a
//! path and then opens it again by name is caught in between.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Swaps the names `a` and `b` until `stop`; the thread's answer is how
/// many swaps it made.
pub fn swap_until(a: PathBuf, b: PathBuf, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        use std::os::unix::ffi::OsStrExt;
        let a = std::ffi::CString::new(a.as_os_str().as_bytes()).unwrap();
        let b = std::ffi::CString::new(b.as_os_str().as_bytes()).unwrap();
        let mut swaps = 0;
        while !stop.load(Ordering::Relaxed) {
            // SAFETY: two NUL-terminated paths.
            let ret = unsafe {
                libc::renameat2(
                    libc::AT_FDCWD,
                    a.as_ptr(),
                    libc::AT_FDCWD,
                    b.as_ptr(),
                    libc::RENAME_EXCHANGE,
                )
            };
            assert_eq!(ret, 0, "renameat2: {}", std::io::Error::last_os_error());
            swaps += 1;
        }
        swaps
    })
}
