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
    super::loaded_function("ntdll.dll", c"wine_get_version").is_some()
}
