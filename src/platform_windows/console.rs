//! The console agent-reach shares with its commands: set to code page
//! 65001 (UTF-8) once, so commands that follow the console write UTF-8.

use windows_sys::Win32::System::Console::{GetConsoleOutputCP, SetConsoleCP, SetConsoleOutputCP};

use super::codepage::UTF8_CODE_PAGE;

/// Whether this process has a console (its commands then share it).
pub(crate) fn has_console() -> bool {
    // SAFETY: takes no arguments; 0 means no console.
    unsafe { GetConsoleOutputCP() != 0 }
}

/// Sets the console's input and output code pages to UTF-8, when there is
/// a console. Commands started afterwards inherit it.
pub(crate) fn use_utf8_console() {
    if has_console() {
        // SAFETY: plain integer arguments.
        unsafe {
            SetConsoleOutputCP(UTF8_CODE_PAGE);
            SetConsoleCP(UTF8_CODE_PAGE);
        }
    }
}

/// Whether this "Windows" is Wine (its ntdll exports `wine_get_version`).
/// Wine's `powershell.exe` is a stub that runs nothing, so a shell choice
/// must not take it for PowerShell.
pub(crate) fn is_wine() -> bool {
    use windows_sys::Win32::System::LibraryLoader::{GetModuleHandleW, GetProcAddress};
    let ntdll: Vec<u16> = "ntdll.dll"
        .encode_utf16()
        .chain(std::iter::once(0))
        .collect();
    // SAFETY: a NUL-terminated name; ntdll is loaded in every process and
    // the handle is not freed.
    let module = unsafe { GetModuleHandleW(ntdll.as_ptr()) };
    if module.is_null() {
        return false;
    }
    // SAFETY: a valid module handle and a NUL-terminated ANSI name.
    unsafe { GetProcAddress(module, c"wine_get_version".as_ptr().cast()).is_some() }
}
