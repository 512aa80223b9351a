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

/// A mapping of `/proc/self/smaps` whose resident pages are all clean copies of a file:
/// file-backed, not writable, and never written (no anonymous pages).
#[derive(Debug, PartialEq)]
struct CleanMapping {
    start: usize,
    end: usize,
    resident_kb: u64,
}

/// The clean file mappings in the text of `/proc/self/smaps` that hold resident pages.
fn clean_mappings(smaps: &str) -> Vec<CleanMapping> {
    let mut found = Vec::new();
    let mut current: Option<(CleanMapping, bool)> = None;
    let mut finish = |m: Option<(CleanMapping, bool)>| {
        if let Some((m, true)) = m
            && m.resident_kb > 0
        {
            found.push(m);
        }
    };
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let first = fields.next().unwrap_or_default();
        if let Some((start, end)) = first.split_once('-')
            && let (Ok(start), Ok(end)) = (
                usize::from_str_radix(start, 16),
                usize::from_str_radix(end, 16),
            )
        {
            finish(current.take());
            let perms = fields.next().unwrap_or_default();
            let path = fields.nth(3).unwrap_or_default();
            let rest: Vec<&str> = fields.collect();
            // A file (not [heap], [vdso] or a deleted file), mapped without write access.
            let candidate = path.starts_with('/') && rest.is_empty() && !perms.contains('w');
            let mapping = CleanMapping {
                start,
                end,
                resident_kb: 0,
            };
            current = Some((mapping, candidate));
            continue;
        }
        let Some((m, candidate)) = current.as_mut() else {
            continue;
        };
        let kb = || {
            fields
                .clone()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match first {
            "Rss:" => m.resident_kb = kb(),
            // A page written once (relocations of read-only-after-relocation data) is an
            // anonymous copy: dropping it would bring back the file's unrelocated bytes.
            "Anonymous:" if kb() > 0 => *candidate = false,
            "Anonymous:" => {}
            _ => {}
        }
    }
    finish(current.take());
    found
}

/// Takes this process's clean file pages (code and read-only data of the executable and
/// its libraries) out of its resident set. They stay in the page cache, shared by every
/// process that maps the file, and the next use faults each back in without reading
/// anything. For a long-lived process after its start-up: what start-up alone touched
/// stops counting as its memory. Returns the kilobytes given back.
pub fn release_clean_file_pages() -> std::io::Result<u64> {
    let smaps = std::fs::read_to_string("/proc/self/smaps")?;
    let mut released = 0;
    for m in clean_mappings(&smaps) {
        // SAFETY: the range is one whole mapping of this process, read from smaps, and its
        // resident pages are clean copies of a file (never written, not writable), so
        // MADV_DONTNEED only unmaps pages the kernel refills from the same file on the next
        // access: no memory anyone relies on changes.
        let r = unsafe {
            libc::madvise(
                m.start as *mut libc::c_void,
                m.end - m.start,
                libc::MADV_DONTNEED,
            )
        };
        if r == 0 {
            released += m.resident_kb;
        }
    }
    Ok(released)
}

/// This host's name, as the kernel has it (empty when unreadable).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/self/smaps` text: one mapping per entry (range, perms, path, Rss and
    /// Anonymous in kB), with the other fields as the kernel writes them.
    fn smaps(entries: &[(&str, &str, &str, u64, u64)]) -> String {
        entries
            .iter()
            .map(|(range, perms, path, rss, anon)| {
                format!("{range} {perms} 00000000 fd:01 1234   {path}\nRss: {rss:>12} kB\nPss: {rss:>12} kB\nAnonymous: {anon:>6} kB\n")
            })
            .collect()
    }

    #[test]
    fn only_clean_resident_file_mappings_are_released() {
        let text = smaps(&[
            ("55d0c0000000-55d0c0100000", "r--p", "/usr/bin/yy", 800, 0),
            ("55d0c0100000-55d0c0200000", "r-xp", "/usr/bin/yy", 1024, 0),
            // Read-only after relocation: written once, so not a clean copy.
            ("55d0c0200000-55d0c0210000", "r--p", "/usr/bin/yy", 64, 64),
            ("55d0c0210000-55d0c0220000", "rw-p", "/usr/bin/yy", 64, 64),
            ("55d0c1000000-55d0c2000000", "rw-p", "[heap]", 2048, 2048),
            ("7f0000000000-7f0000001000", "r-xp", "[vdso]", 4, 0),
            (
                "7f0000100000-7f0000200000",
                "r-xp",
                "/tmp/gone (deleted)",
                12,
                0,
            ),
            (
                "7f0000300000-7f0000400000",
                "r-xp",
                "/usr/lib/libc.so.6",
                0,
                0,
            ),
        ]);
        assert_eq!(
            clean_mappings(&text),
            vec![
                CleanMapping {
                    start: 0x55d0c0000000,
                    end: 0x55d0c0100000,
                    resident_kb: 800
                },
                CleanMapping {
                    start: 0x55d0c0100000,
                    end: 0x55d0c0200000,
                    resident_kb: 1024
                },
            ]
        );
    }

    #[test]
    fn releasing_keeps_the_process_working() {
        let before = release_clean_file_pages().unwrap();
        // Code and data run again from the page cache.
        let s: String = (0..1000).map(|i| i.to_string()).collect();
        assert!(s.len() > 1000);
        assert!(before > 0, "a test binary has resident code");
    }
}
