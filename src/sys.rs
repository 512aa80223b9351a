//! The system calls yy makes that std has no safe API for, each wrapped once with the
//! argument that makes it sound.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Sends `signal` to process `pid`, or to process group `-pid` when `pid` is negative.
pub fn kill(pid: i32, signal: i32) -> std::io::Result<()> {
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    if unsafe { libc::kill(pid, signal) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the child started by `cmd` receive `signal` when the thread that spawned it
/// ends, so it never outlives a parent that is killed outright (SIGKILL skips Drop).
pub fn die_with_parent(cmd: &mut std::process::Command, signal: i32) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: prctl(2) is one, and nothing is allocated.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, signal);
            Ok(())
        });
    }
}

/// The file system statistics of the file system holding `path`.
pub fn statvfs(path: &Path) -> std::io::Result<libc::statvfs> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: statvfs is plain old data, so all zeroes is a valid value of it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a pointer to a statvfs we own.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(st)
}
