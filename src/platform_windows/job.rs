//! The tree's container on Windows, as the cgroup is on Linux: a job object
//! every command is started into (suspended, assigned, then resumed, so not
//! even its first child can start outside it). Ending the job ends the
//! whole tree; the job is kill-on-close, so if agent-reach dies the system
//! ends the tree for it.

use std::ffi::c_void;
use std::io;
use std::os::windows::io::{AsRawHandle, FromRawHandle, OwnedHandle};

use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
    JOBOBJECT_BASIC_ACCOUNTING_INFORMATION, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JobObjectBasicAccountingInformation, JobObjectExtendedLimitInformation,
    QueryInformationJobObject, SetInformationJobObject, TerminateJobObject,
};

/// The exit code every process of a job ended by [`JobGuard::terminate`]
/// gets (the engine reports the timeout or the kill itself).
pub(crate) const KILLED_EXIT_CODE: u32 = 1;

/// A job object, ended with everything in it when dropped.
#[derive(Debug)]
pub(crate) struct JobGuard {
    handle: OwnedHandle,
}

impl JobGuard {
    /// A new anonymous job that kills its processes when its last handle
    /// closes.
    pub(crate) fn new() -> io::Result<Self> {
        // SAFETY: no attributes, no name; a non-null result is a handle we own.
        let raw = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
        if raw.is_null() {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a fresh handle nothing else owns.
        let handle = unsafe { OwnedHandle::from_raw_handle(raw) };
        // SAFETY: an all-zero limit structure is its documented empty value.
        let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
        limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
        // SAFETY: the pointer and size describe `limits`, alive for the call.
        let ok = unsafe {
            SetInformationJobObject(
                handle.as_raw_handle(),
                JobObjectExtendedLimitInformation,
                (&raw const limits).cast::<c_void>(),
                size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
            )
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self { handle })
    }

    /// Puts a (suspended) process into the job.
    pub(crate) fn assign(&self, process: &OwnedHandle) -> io::Result<()> {
        // SAFETY: both handles are open for the call.
        let ok = unsafe {
            AssignProcessToJobObject(self.handle.as_raw_handle(), process.as_raw_handle())
        };
        if ok == 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Ends every process in the job, the whole tree at once.
    pub(crate) fn terminate(&self) -> bool {
        // SAFETY: the handle is open for the call.
        unsafe { TerminateJobObject(self.handle.as_raw_handle(), KILLED_EXIT_CODE) != 0 }
    }

    /// How many processes of the job still run (`None` when the system
    /// does not say).
    pub(crate) fn active_processes(&self) -> Option<u32> {
        // SAFETY: an all-zero accounting structure is a valid out-buffer.
        let mut info: JOBOBJECT_BASIC_ACCOUNTING_INFORMATION = unsafe { std::mem::zeroed() };
        // SAFETY: the pointer and size describe `info`, alive for the call.
        let ok = unsafe {
            QueryInformationJobObject(
                self.handle.as_raw_handle(),
                JobObjectBasicAccountingInformation,
                (&raw mut info).cast::<c_void>(),
                size_of::<JOBOBJECT_BASIC_ACCOUNTING_INFORMATION>() as u32,
                std::ptr::null_mut(),
            )
        };
        (ok != 0).then_some(info.ActiveProcesses)
    }
}

impl Drop for JobGuard {
    fn drop(&mut self) {
        // Kill-on-close would do it when the handle closes; said explicitly
        // so the tree is gone before drop returns.
        self.terminate();
    }
}
