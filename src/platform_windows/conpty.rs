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
use std::marker::PhantomData;
use std::os::windows::io::{AsRawHandle, OwnedHandle};
use std::sync::OnceLock;

use windows_sys::Win32::Foundation::HANDLE;
use windows_sys::Win32::System::Console::{COORD, HPCON};
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
        let create = super::loaded_function("kernel32.dll", c"CreatePseudoConsole");
        let close = super::loaded_function("kernel32.dll", c"ClosePseudoConsole");
        // SAFETY: each pointer, when found, is the documented function, so
        // the transmutes give it its documented signature.
        unsafe {
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

/// A pseudo console and our ends of its pipes. The pipes are declared
/// first so they are dropped first: closing a console whose output nobody
/// reads can wait forever (before Windows 11 24H2).
#[derive(Debug)]
pub(crate) struct Opened {
    /// What the command reads (keystrokes; `\r` is Enter).
    pub(crate) input: PipeWriter,
    /// What the console shows, as UTF-8 with VT sequences.
    pub(crate) output: PipeReader,
    pub(crate) console: PseudoConsole,
}

/// Opens a pseudo console of [`COLUMNS`] × [`ROWS`]. `CreatePseudoConsole`
/// makes inheritable copies of the pipe ends while it starts the console's
/// host: the caller holds the lock that keeps other commands from starting
/// (and inheriting them) meanwhile.
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
        input,
        output,
        console: PseudoConsole {
            handle,
            close: calls.close,
        },
    })
}

/// A process attribute list holding one pseudo console, for
/// `STARTUPINFOEXW::lpAttributeList`; deleted when dropped.
/// It borrows the console it names, which therefore outlives it.
#[derive(Debug)]
pub(crate) struct AttributeListGuard<'console> {
    /// The list's storage (`u64`s: the list holds pointers, so it is kept
    /// aligned for them).
    storage: Vec<u64>,
    console: PhantomData<&'console PseudoConsole>,
}

impl<'console> AttributeListGuard<'console> {
    /// A list naming `console` as the new process's console.
    pub(crate) fn for_console(console: &'console PseudoConsole) -> io::Result<Self> {
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
        let guard = Self {
            storage,
            console: PhantomData,
        };
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

impl Drop for AttributeListGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: the list was initialized by `for_console`.
        unsafe { DeleteProcThreadAttributeList(self.as_ptr()) };
    }
}

/// What a tty command is sent for `text`: a line break is the Enter key,
/// which a console reads as `\r` (a bare `\n` is Ctrl+J to it).
/// `previous` is the last byte of the previous write (a `\r\n` split
/// across two writes is one Enter), and is updated.
pub(crate) fn keystrokes(text: &[u8], previous: &mut u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for &byte in text {
        match byte {
            b'\n' if *previous == b'\r' => {}
            b'\n' => out.push(b'\r'),
            other => out.push(other),
        }
        *previous = byte;
    }
    out
}

/// The terminal queries answered for the command, with their answers: a
/// pseudo console (some Windows versions, at start) and programs in it
/// (crossterm, Ink) ask and wait for a terminal that nobody runs here.
const QUERIES: [(&[u8], &[u8]); 3] = [
    // Primary device attributes: a VT500-class terminal.
    (b"\x1b[c", b"\x1b[?61c"),
    (b"\x1b[0c", b"\x1b[?61c"),
    // The cursor position: the top left corner.
    (b"\x1b[6n", b"\x1b[1;1R"),
];

/// Finds [`QUERIES`] in a console's output, a query split across two
/// reads included.
#[derive(Debug, Default)]
pub(crate) struct QueryWatch {
    /// The end of the last read when it begins a query.
    partial: Vec<u8>,
}

impl QueryWatch {
    /// The answers to the queries in `chunk` (the next bytes of output).
    pub(crate) fn answers(&mut self, chunk: &[u8]) -> Vec<u8> {
        let mut text = std::mem::take(&mut self.partial);
        text.extend_from_slice(chunk);
        let mut answers = Vec::new();
        for (at, _) in text.iter().enumerate().filter(|(_, b)| **b == 0x1b) {
            let rest = &text[at..];
            if let Some((_, answer)) = QUERIES.iter().find(|(q, _)| rest.starts_with(q)) {
                answers.extend_from_slice(answer);
            } else if QUERIES
                .iter()
                .any(|(q, _)| rest.len() < q.len() && q.starts_with(rest))
            {
                self.partial = rest.to_vec();
                break;
            }
        }
        answers
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_answered_once_even_split_across_reads() {
        let mut watch = QueryWatch::default();
        assert_eq!(
            watch.answers(b"text\x1b[c more \x1b[6n"),
            b"\x1b[?61c\x1b[1;1R"
        );
        assert_eq!(watch.answers(b"a\x1b["), b"");
        assert_eq!(watch.answers(b"0c b"), b"\x1b[?61c");
        assert_eq!(
            watch.answers(b"\x1b[31mred\x1b[0m"),
            b"",
            "colours are not queries"
        );
        assert_eq!(watch.answers(b"\x1b"), b"");
        assert_eq!(watch.answers(b"[6n"), b"\x1b[1;1R");
    }

    #[test]
    fn line_breaks_become_the_enter_key_once() {
        let mut previous = 0;
        assert_eq!(keystrokes(b"dir\n", &mut previous), b"dir\r");
        assert_eq!(keystrokes(b"a\r\nb\n\n", &mut previous), b"a\rb\r\r");
        assert_eq!(keystrokes(b"no break", &mut previous), b"no break");
        assert_eq!(keystrokes(b"x\r", &mut previous), b"x\r");
        assert_eq!(
            keystrokes(b"\ny", &mut previous),
            b"y",
            "one Enter across two writes"
        );
    }
}
