//! `tty: true` on Windows: a pseudo console (ConPTY) per command.
//!
//! The console is made with `CreatePseudoConsole` over two pipes (what the
//! command reads, what it shows) and handed to the command through its
//! `STARTUPINFOEXW` attribute list; the command is then started suspended
//! and put into its job before it runs, as every command is
//! ([`super::process::start`]). `portable-pty` wraps the same calls but
//! starts the process itself, running, so its tree could escape the job
//! before it is assigned; that is why this uses `windows-sys` directly.
//!
//! `CreatePseudoConsole` is looked up at run time, not imported: Windows
//! before 10 1809 (Server 2016) does not have it, and an import would stop
//! the whole binary from loading there. Under Wine 8 the calls succeed but
//! the console carries nothing (the command writes to our own standard
//! output, which would corrupt an MCP stream), so the doors run a tty
//! request on pipes there and say why ([`grant`]); the engine opens what
//! its spec says, which lets the unit tests run this path under Wine.
//!
//! The console writes UTF-8 (VT sequences included) whatever code page
//! the command uses, and holds its output pipe open until it is closed:
//! the engine closes it once the command's tree is done
//! ([`PseudoConsole`]'s drop), after which the reader sees the end.

use std::ffi::c_void;
use std::io::{self, PipeReader, PipeWriter};
use std::os::windows::io::{AsRawHandle, OwnedHandle};
use std::sync::OnceLock;

use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::System::Console::{COORD, HPCON};
use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
use windows_sys::Win32::System::Threading::{
    DeleteProcThreadAttributeList, InitializeProcThreadAttributeList,
    PROC_THREAD_ATTRIBUTE_PSEUDOCONSOLE, UpdateProcThreadAttribute,
};
use windows_sys::core::HRESULT;

/// Columns and rows the command sees (as on Linux: wide, so tools do not
/// wrap lines an agent reads whole).
pub(crate) const COLUMNS: i16 = 200;
pub(crate) const ROWS: i16 = 50;

type CreateFn = unsafe extern "system" fn(COORD, HANDLE, HANDLE, u32, *mut HPCON) -> HRESULT;
type CloseFn = unsafe extern "system" fn(HPCON);

/// kernel32's pseudo console calls, when this Windows has them.
#[derive(Debug, Clone, Copy)]
struct Calls {
    create: CreateFn,
    close: CloseFn,
}

/// kernel32's calls, looked up once; `Err` when this Windows has none.
fn calls() -> Result<Calls, &'static str> {
    static CALLS: OnceLock<Result<Calls, &'static str>> = OnceLock::new();
    *CALLS.get_or_init(|| {
        let kernel32: Vec<u16> = "kernel32.dll"
            .encode_utf16()
            .chain(std::iter::once(0))
            .collect();
        // SAFETY: a NUL-terminated name; kernel32 is loaded in every
        // process and the handle is not freed.
        let module = unsafe { GetModuleHandleW(kernel32.as_ptr()) };
        if module.is_null() {
            return Err("kernel32.dll is not loaded");
        }
        // SAFETY: a valid module and NUL-terminated names; each pointer,
        // when found, is the documented function, so the transmutes give
        // it its documented signature.
        unsafe {
            let create = GetProcAddress(module, c"CreatePseudoConsole".as_ptr().cast());
            let close = GetProcAddress(module, c"ClosePseudoConsole".as_ptr().cast());
            match (create, close) {
                (Some(create), Some(close)) => Ok(Calls {
                    create: std::mem::transmute::<unsafe extern "system" fn() -> isize, CreateFn>(
                        create,
                    ),
                    close: std::mem::transmute::<unsafe extern "system" fn() -> isize, CloseFn>(
                        close,
                    ),
                }),
                _ => Err("this Windows has no ConPTY (it came with Windows 10 1809)"),
            }
        }
    })
}

/// Why `tty: true` cannot be a pseudo console here, or `None` when it can.
/// The doors ask ([`grant`]); the engine opens what its spec says.
pub(crate) fn unavailable() -> Option<&'static str> {
    if super::console::is_wine() {
        return Some("Wine's pseudo console does not carry a command's output");
    }
    calls().err()
}

/// Whether a request for a tty gets a pseudo console, and when it asked
/// for one and cannot, the line that tells the caller it runs on pipes.
pub(crate) fn grant(requested: bool) -> (bool, Option<String>) {
    match (requested, unavailable()) {
        (false, _) => (false, None),
        (true, None) => (true, None),
        (true, Some(why)) => (
            false,
            Some(format!(
                "tty: no pseudo console here ({why}): the command runs on pipes"
            )),
        ),
    }
}

/// One pseudo console; dropping it closes it (which ends its output pipe,
/// and on recent Windows the processes still attached to it).
#[derive(Debug)]
pub(crate) struct PseudoConsole {
    handle: HPCON,
    close: CloseFn,
}

impl Drop for PseudoConsole {
    fn drop(&mut self) {
        // SAFETY: the handle came from CreatePseudoConsole and is closed
        // once, here.
        unsafe { (self.close)(self.handle) };
    }
}

/// A pseudo console and our ends of its pipes.
#[derive(Debug)]
pub(crate) struct Opened {
    pub(crate) console: PseudoConsole,
    /// What the command reads (keystrokes; `\r` is Enter).
    pub(crate) input: PipeWriter,
    /// What the console shows, as UTF-8 with VT sequences.
    pub(crate) output: PipeReader,
}

/// Opens a pseudo console of [`COLUMNS`] × [`ROWS`].
pub(crate) fn open() -> io::Result<Opened> {
    let calls = calls().map_err(io::Error::other)?;
    let (input_read, input) = io::pipe()?;
    let (output, output_write) = io::pipe()?;
    let (input_read, output_write) = (
        OwnedHandle::from(input_read),
        OwnedHandle::from(output_write),
    );
    let mut handle: HPCON = 0;
    let size = COORD {
        X: COLUMNS,
        Y: ROWS,
    };
    // SAFETY: both handles are open pipe ends and `handle` a valid out
    // pointer. The console duplicates the handles: ours close at the end
    // of this function, as the documentation asks.
    let result = unsafe {
        (calls.create)(
            size,
            input_read.as_raw_handle(),
            output_write.as_raw_handle(),
            0,
            &raw mut handle,
        )
    };
    if result < 0 {
        // An HRESULT made from a Win32 error (FACILITY_WIN32) says that
        // error; others are shown as they are.
        let code = if (result as u32) & 0xFFFF_0000 == 0x8007_0000 {
            result & 0xFFFF
        } else {
            result
        };
        return Err(io::Error::from_raw_os_error(code));
    }
    Ok(Opened {
        console: PseudoConsole {
            handle,
            close: calls.close,
        },
        input,
        output,
    })
}

/// A process attribute list holding one pseudo console, for
/// `STARTUPINFOEXW::lpAttributeList`; deleted when dropped.
#[derive(Debug)]
pub(crate) struct AttributeListGuard {
    /// The list's storage (`u64`s: the list holds pointers, so it is kept
    /// aligned for them).
    storage: Vec<u64>,
}

impl AttributeListGuard {
    /// A list naming `console` as the new process's console.
    pub(crate) fn for_console(console: &PseudoConsole) -> io::Result<Self> {
        let mut bytes = 0usize;
        // SAFETY: the documented size query: a null list and one attribute;
        // it fails with ERROR_INSUFFICIENT_BUFFER and sets `bytes`.
        unsafe { InitializeProcThreadAttributeList(std::ptr::null_mut(), 1, 0, &raw mut bytes) };
        if bytes == 0 {
            return Err(io::Error::last_os_error());
        }
        let mut storage = vec![0u64; bytes.div_ceil(size_of::<u64>())];
        let list = storage.as_mut_ptr().cast::<c_void>();
        // SAFETY: `list` points to at least `bytes` writable, aligned bytes.
        if unsafe { InitializeProcThreadAttributeList(list, 1, 0, &raw mut bytes) } == 0 {
            return Err(io::Error::last_os_error());
        }
        let guard = Self { storage };
        // SAFETY: the list was initialized for one attribute; the value is
        // the console handle itself (the attribute takes the HPCON by
        // value, its size the handle's), valid while the console lives,
        // which outlasts the CreateProcessW call this list is for.
        let updated = unsafe {
            UpdateProcThreadAttribute(
                list,
                0,
                PROC_THREAD_ATTRIBUTE_PSEUDOCONSOLE as usize,
                console.handle as *const c_void,
                size_of::<HPCON>(),
                std::ptr::null_mut(),
                std::ptr::null(),
            )
        };
        if updated == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(guard)
    }

    /// The list, for `STARTUPINFOEXW::lpAttributeList`.
    pub(crate) fn as_ptr(&mut self) -> *mut c_void {
        self.storage.as_mut_ptr().cast()
    }
}

impl Drop for AttributeListGuard {
    fn drop(&mut self) {
        // SAFETY: the list was initialized by `for_console`.
        unsafe { DeleteProcThreadAttributeList(self.as_ptr()) };
    }
}

/// What a tty command is sent for `text`: a line break is the Enter key,
/// which a console reads as `\r` (a bare `\n` is Ctrl+J to it).
pub(crate) fn keystrokes(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    let mut previous = 0u8;
    for &byte in text {
        match byte {
            b'\n' if previous == b'\r' => {}
            b'\n' => out.push(b'\r'),
            other => out.push(other),
        }
        previous = byte;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_breaks_become_the_enter_key_once() {
        assert_eq!(keystrokes(b"dir\n"), b"dir\r");
        assert_eq!(keystrokes(b"a\r\nb\n\n"), b"a\rb\r\r");
        assert_eq!(keystrokes(b"no break"), b"no break");
    }
}
