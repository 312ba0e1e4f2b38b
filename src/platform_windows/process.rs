//! Starting one command with `CreateProcessW`: the program found on `PATH`
//! with `PATHEXT`, the command line quoted the way the C runtime parses it,
//! a Unicode environment block, pipes for the standard streams (or a
//! pseudo console), created suspended and put into its job before its
//! first instruction runs.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io::{self, PipeReader, PipeWriter};
use std::os::windows::ffi::OsStrExt;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use windows_sys::Win32::Foundation::{
    HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE, SetHandleInformation,
};
use windows_sys::Win32::System::Threading::{
    CREATE_NO_WINDOW, CREATE_SUSPENDED, CREATE_UNICODE_ENVIRONMENT, CreateProcessW,
    EXTENDED_STARTUPINFO_PRESENT, PROCESS_CREATION_FLAGS, PROCESS_INFORMATION, ResumeThread,
    STARTF_USESTDHANDLES, STARTUPINFOEXW, STARTUPINFOW, TerminateProcess,
};

use super::conpty::{self, PseudoConsole};
use super::job::JobGuard;

/// Marking handles inheritable and starting a process is one step: a
/// command started by another thread meanwhile would inherit our pipes
/// and keep them open.
static INHERIT_LOCK: Mutex<()> = Mutex::new(());

/// Why a command did not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StartError {
    #[error("command not found: {program:?}")]
    NotFound { program: OsString },
    #[error("cannot run {program:?}: {source}")]
    CannotRun {
        program: OsString,
        source: io::Error,
    },
    #[error("cannot set up {what} for {program:?}: {source}")]
    Setup {
        what: &'static str,
        program: OsString,
        source: io::Error,
    },
}

impl StartError {
    /// The exit code `run` reports: 127 not found, 126 not runnable, 125
    /// when agent-reach itself failed.
    pub(crate) fn exit_code(&self) -> i32 {
        match self {
            StartError::NotFound { .. } => crate::exit_code::NOT_FOUND,
            StartError::CannotRun { .. } => crate::exit_code::CANNOT_EXECUTE,
            StartError::Setup { .. } => crate::exit_code::INTERNAL,
        }
    }
}

/// A started command: its process handle, id, and our ends of its pipes.
#[derive(Debug)]
pub(crate) struct Started {
    pub(crate) process: OwnedHandle,
    pub(crate) pid: u32,
    pub(crate) stdin: Option<PipeWriter>,
    pub(crate) stdout: PipeReader,
    /// `None` when stderr goes into the stdout pipe (merged streams) or
    /// the command has a console.
    pub(crate) stderr: Option<PipeReader>,
    /// Its pseudo console (`tty`), which holds `stdout` open until closed.
    pub(crate) console: Option<PseudoConsole>,
}

/// What to start.
#[derive(Debug)]
pub(crate) struct StartSpec<'a> {
    pub(crate) argv: &'a [OsString],
    pub(crate) cwd: &'a Path,
    pub(crate) env: &'a BTreeMap<OsString, OsString>,
    /// Give the command a stdin pipe (sessions); else it reads `NUL`.
    pub(crate) stdin_pipe: bool,
    /// stderr into the same pipe as stdout, in arrival order.
    pub(crate) merged: bool,
    /// Arguments joined as they are, unquoted (a `cmd.exe /c` line).
    pub(crate) verbatim_args: bool,
    /// A pseudo console instead of pipes ([`conpty`]); `stdin_pipe` and
    /// `merged` are then implied.
    pub(crate) tty: bool,
}

/// Starts `spec` inside `job`.
pub(crate) fn start(spec: &StartSpec<'_>, job: &JobGuard) -> Result<Started, StartError> {
    let program = spec.argv.first().cloned().unwrap_or_default();
    let resolved =
        resolve_program(&program, spec.env, spec.cwd).ok_or_else(|| StartError::NotFound {
            program: program.clone(),
        })?;
    let launch = Launch {
        command_line: command_line_for(
            &resolved,
            &spec.argv[1.min(spec.argv.len())..],
            spec.verbatim_args,
        ),
        environment: environment_block(spec.env),
        cwd: wide(spec.cwd.as_os_str()),
        program,
    };
    if spec.tty {
        launch.in_console(job)
    } else {
        launch.on_pipes(spec, job)
    }
}

/// A resolved command, ready for `CreateProcessW`.
struct Launch {
    program: OsString,
    command_line: Vec<u16>,
    environment: Vec<u16>,
    cwd: Vec<u16>,
}

impl Launch {
    fn setup(&self, what: &'static str) -> impl FnOnce(io::Error) -> StartError + use<> {
        let program = self.program.clone();
        move |source| StartError::Setup {
            what,
            program,
            source,
        }
    }

    /// Standard streams on pipes (stdin `NUL` unless a session).
    fn on_pipes(self, spec: &StartSpec<'_>, job: &JobGuard) -> Result<Started, StartError> {
        let (stdout_read, stdout_write) = io::pipe().map_err(self.setup("the stdout pipe"))?;
        let stderr_pipe = if spec.merged {
            None
        } else {
            Some(io::pipe().map_err(self.setup("the stderr pipe"))?)
        };
        let (stdin_child, stdin_ours): (OwnedHandle, Option<PipeWriter>) = if spec.stdin_pipe {
            let (read, write) = io::pipe().map_err(self.setup("the stdin pipe"))?;
            (OwnedHandle::from(read), Some(write))
        } else {
            let null = std::fs::File::open("NUL").map_err(self.setup("stdin (NUL)"))?;
            (OwnedHandle::from(null), None)
        };
        let stdout_child = OwnedHandle::from(stdout_write);
        let stderr_child = match &stderr_pipe {
            Some((_, write)) => write
                .try_clone()
                .map(OwnedHandle::from)
                .map_err(self.setup("the stderr pipe"))?,
            None => stdout_child
                .try_clone()
                .map_err(self.setup("the merged stderr"))?,
        };
        let stderr_read = stderr_pipe.map(|(read, _)| read);

        // SAFETY: an all-zero STARTUPINFOW is valid input once `cb` is set.
        let mut startup: STARTUPINFOW = unsafe { std::mem::zeroed() };
        startup.cb = size_of::<STARTUPINFOW>() as u32;
        startup.dwFlags = STARTF_USESTDHANDLES;
        startup.hStdInput = stdin_child.as_raw_handle();
        startup.hStdOutput = stdout_child.as_raw_handle();
        startup.hStdError = stderr_child.as_raw_handle();
        // Without a console of our own, the command gets a hidden one rather
        // than a window (background helpers start without a window).
        let flags = if super::console::has_console() {
            0
        } else {
            CREATE_NO_WINDOW
        };
        let inherited = [&stdin_child, &stdout_child, &stderr_child];
        let created = self.create(flags, &raw const startup, &inherited, job);
        drop((stdin_child, stdout_child, stderr_child));
        let (process, pid) = created?;
        Ok(Started {
            process,
            pid,
            stdin: stdin_ours,
            stdout: stdout_read,
            stderr: stderr_read,
            console: None,
        })
    }

    /// In a pseudo console of its own (`tty: true`): one stream out, the
    /// console's input in.
    fn in_console(self, job: &JobGuard) -> Result<Started, StartError> {
        let opened = {
            let _inherit = crate::sync::lock(&INHERIT_LOCK);
            conpty::open()
        };
        let opened = opened.map_err(self.setup("the pseudo console"))?;
        let mut attributes = conpty::AttributeListGuard::for_console(&opened.console)
            .map_err(self.setup("the pseudo console's attribute"))?;
        // SAFETY: an all-zero STARTUPINFOEXW is valid input once `cb` is set.
        let mut startup: STARTUPINFOEXW = unsafe { std::mem::zeroed() };
        startup.StartupInfo.cb = size_of::<STARTUPINFOEXW>() as u32;
        // The command's standard handles are the console's: none of ours
        // (were they left unset, it could inherit this process's own).
        startup.StartupInfo.dwFlags = STARTF_USESTDHANDLES;
        startup.StartupInfo.hStdInput = INVALID_HANDLE_VALUE;
        startup.StartupInfo.hStdOutput = INVALID_HANDLE_VALUE;
        startup.StartupInfo.hStdError = INVALID_HANDLE_VALUE;
        startup.lpAttributeList = attributes.as_ptr();
        let (process, pid) = self.create(
            EXTENDED_STARTUPINFO_PRESENT,
            (&raw const startup).cast(),
            &[],
            job,
        )?;
        drop(attributes);
        Ok(Started {
            process,
            pid,
            stdin: Some(opened.input),
            stdout: opened.output,
            stderr: None,
            console: Some(opened.console),
        })
    }

    /// `CreateProcessW`, suspended, with `inherited` inheritable for the
    /// call (none: nothing is inherited); the process joins `job` before
    /// its first instruction runs.
    fn create(
        &self,
        flags: PROCESS_CREATION_FLAGS,
        startup: *const STARTUPINFOW,
        inherited: &[&OwnedHandle],
        job: &JobGuard,
    ) -> Result<(OwnedHandle, u32), StartError> {
        let flags = flags | CREATE_SUSPENDED | CREATE_UNICODE_ENVIRONMENT;
        let mut command_line = self.command_line.clone();
        // SAFETY: an all-zero PROCESS_INFORMATION is a valid out-parameter.
        let mut info: PROCESS_INFORMATION = unsafe { std::mem::zeroed() };
        let created = {
            let _inherit = crate::sync::lock(&INHERIT_LOCK);
            for handle in inherited {
                set_inherit(handle, true).map_err(self.setup("handle inheritance"))?;
            }
            // SAFETY: every pointer is valid for the call: the command line
            // is a mutable NUL-terminated buffer, the environment block is
            // double NUL-terminated UTF-16, the directory NUL-terminated,
            // `startup` a STARTUPINFOW (or, with EXTENDED_STARTUPINFO_PRESENT,
            // a STARTUPINFOEXW) that outlives the call.
            let ok = unsafe {
                CreateProcessW(
                    std::ptr::null(),
                    command_line.as_mut_ptr(),
                    std::ptr::null(),
                    std::ptr::null(),
                    i32::from(!inherited.is_empty()),
                    flags,
                    self.environment.as_ptr().cast(),
                    self.cwd.as_ptr(),
                    startup,
                    &raw mut info,
                )
            };
            let error = io::Error::last_os_error();
            for handle in inherited {
                let _ = set_inherit(handle, false);
            }
            if ok == 0 { Err(error) } else { Ok(()) }
        };
        created.map_err(|source| StartError::CannotRun {
            program: self.program.clone(),
            source,
        })?;
        // SAFETY: CreateProcessW succeeded: both handles are new and ours.
        let (process, thread) = unsafe {
            (
                OwnedHandle::from_raw_handle(info.hProcess),
                OwnedHandle::from_raw_handle(info.hThread),
            )
        };
        if let Err(source) = job.assign(&process) {
            // Never let it run outside the job: end the suspended process.
            // SAFETY: the process handle is open.
            unsafe { TerminateProcess(process.as_raw_handle(), 1) };
            return Err(self.setup("the job object")(source));
        }
        // SAFETY: the thread handle is open.
        unsafe { ResumeThread(thread.as_raw_handle()) };
        Ok((process, info.dwProcessId))
    }
}

fn set_inherit(handle: &OwnedHandle, inherit: bool) -> io::Result<()> {
    let flag = if inherit { HANDLE_FLAG_INHERIT } else { 0 };
    // SAFETY: the handle is open for the call.
    let ok = unsafe { SetHandleInformation(handle.as_raw_handle(), HANDLE_FLAG_INHERIT, flag) };
    if ok == 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `s` as NUL-terminated UTF-16.
pub(crate) fn wide(s: &OsStr) -> Vec<u16> {
    s.encode_wide().chain(std::iter::once(0)).collect()
}

/// A variable of `env`, looked up the Windows way (names ignore case).
pub(crate) fn env_var<'a>(env: &'a BTreeMap<OsString, OsString>, name: &str) -> Option<&'a OsStr> {
    env.iter()
        .find(|(key, _)| key.to_string_lossy().eq_ignore_ascii_case(name))
        .map(|(_, value)| value.as_os_str())
}

/// The program `name` stands for: a path as given (with `PATHEXT` tried
/// when it has no extension, relative to `cwd`), else the first match on
/// `PATH`. A bare name is never looked for in `cwd` (as `CreateProcessW`
/// and `cmd` would): a `git.cmd` or `pwsh.bat` a project holds must not
/// stand in for the program a tool or an approval names; `.\x.cmd` runs
/// the project's own.
pub(crate) fn resolve_program(
    name: &OsStr,
    env: &BTreeMap<OsString, OsString>,
    cwd: &Path,
) -> Option<PathBuf> {
    let extensions: Vec<String> = env_var(env, "PATHEXT")
        .map(|v| v.to_string_lossy().into_owned())
        .unwrap_or_else(|| DEFAULT_PATHEXT.to_owned())
        .split(';')
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect();
    let candidates = |base: PathBuf| -> Option<PathBuf> {
        if base.extension().is_some() && base.is_file() {
            return Some(base);
        }
        extensions
            .iter()
            .map(|ext| {
                let mut with = base.clone().into_os_string();
                with.push(ext);
                PathBuf::from(with)
            })
            .find(|p| p.is_file())
    };
    let path = Path::new(name);
    if path.components().count() > 1 || path.is_absolute() {
        return candidates(cwd.join(path));
    }
    let search = env_var(env, "PATH").map(std::env::split_paths);
    search
        .into_iter()
        .flatten()
        .find_map(|dir| candidates(dir.join(path)))
}

/// `PATHEXT` when the environment has none.
const DEFAULT_PATHEXT: &str = ".COM;.EXE;.BAT;.CMD";

/// The command line for `program` and `args`: batch files run through
/// `cmd.exe /d /s /c`, which parses its own line.
fn command_line_for(program: &Path, args: &[OsString], verbatim: bool) -> Vec<u16> {
    let quote = |arg: &OsStr| {
        if verbatim {
            arg.to_owned()
        } else {
            quote_arg(arg)
        }
    };
    let is_batch = program
        .extension()
        .and_then(OsStr::to_str)
        .is_some_and(|e| e.eq_ignore_ascii_case("cmd") || e.eq_ignore_ascii_case("bat"));
    let mut line = OsString::new();
    if is_batch {
        let mut inner = quote_arg(program.as_os_str());
        for arg in args {
            inner.push(" ");
            inner.push(quote(arg));
        }
        line.push("cmd.exe /d /s /c \"");
        line.push(inner);
        line.push("\"");
    } else {
        line.push(quote_arg(program.as_os_str()));
        for arg in args {
            line.push(" ");
            line.push(quote(arg));
        }
    }
    wide(&line)
}

/// One argument quoted the way `CommandLineToArgvW` and the C runtime
/// split a command line: backslashes are literal unless they precede a
/// quote.
pub(crate) fn quote_arg(arg: &OsStr) -> OsString {
    let text: Vec<u16> = arg.encode_wide().collect();
    let needs_quotes = text.is_empty()
        || text
            .iter()
            .any(|c| *c == u16::from(b' ') || *c == u16::from(b'\t') || *c == u16::from(b'"'));
    if !needs_quotes {
        return arg.to_owned();
    }
    let mut out: Vec<u16> = vec![u16::from(b'"')];
    let mut backslashes = 0usize;
    for &c in &text {
        if c == u16::from(b'\\') {
            backslashes += 1;
        } else if c == u16::from(b'"') {
            out.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes * 2 + 1));
            out.push(c);
            backslashes = 0;
        } else {
            out.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes));
            out.push(c);
            backslashes = 0;
        }
    }
    out.extend(std::iter::repeat_n(u16::from(b'\\'), backslashes * 2));
    out.push(u16::from(b'"'));
    std::os::windows::ffi::OsStringExt::from_wide(&out)
}

/// The environment as `CreateProcessW` wants it: `NAME=VALUE` entries
/// sorted without regard to case, each NUL-terminated, then one more NUL.
fn environment_block(env: &BTreeMap<OsString, OsString>) -> Vec<u16> {
    let mut entries: Vec<(&OsString, &OsString)> = env.iter().collect();
    entries.sort_by_key(|(name, _)| name.to_string_lossy().to_uppercase());
    let mut block = Vec::new();
    for (name, value) in entries {
        block.extend(name.encode_wide());
        block.push(u16::from(b'='));
        block.extend(value.encode_wide());
        block.push(0);
    }
    if block.is_empty() {
        block.push(0);
    }
    block.push(0);
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quoted(arg: &str) -> String {
        quote_arg(OsStr::new(arg)).to_string_lossy().into_owned()
    }

    #[test]
    fn plain_arguments_stay_as_they_are() {
        assert_eq!(quoted(r"C:\dir\file.txt"), r"C:\dir\file.txt");
    }

    #[test]
    fn spaces_quotes_and_trailing_backslashes_are_quoted_for_the_c_runtime() {
        assert_eq!(quoted("a b"), "\"a b\"");
        assert_eq!(quoted(""), "\"\"");
        assert_eq!(quoted(r#"say "hi""#), r#""say \"hi\"""#);
        assert_eq!(quoted(r"C:\with space\"), r#""C:\with space\\""#);
    }
}
