//! A minimal ustar writer (for the image's top layer, with exact numeric owners and no
//! dependence on the build host's users) and an ELF check for static executables.

use std::io::{self, Read};
use std::path::Path;

/// An in-memory ustar archive.
#[derive(Default)]
pub struct TarBuilder {
    buf: Vec<u8>,
    mtime: u64,
}

fn octal(field: &mut [u8], value: u64) {
    // Zero-padded octal, NUL-terminated, filling the field.
    let width = field.len() - 1;
    let text = format!("{value:0width$o}");
    let bytes = text.as_bytes();
    let start = bytes.len().saturating_sub(width);
    field[..width].copy_from_slice(&bytes[start..]);
    field[width] = 0;
}

impl TarBuilder {
    /// Entries get `mtime` (seconds since the epoch).
    pub fn new(mtime: u64) -> Self {
        TarBuilder {
            buf: Vec::new(),
            mtime,
        }
    }

    fn header(
        &mut self,
        path: &str,
        mode: u32,
        uid: u32,
        gid: u32,
        size: u64,
        kind: u8,
    ) -> io::Result<()> {
        let mut h = [0u8; 512];
        let bytes = path.as_bytes();
        if bytes.len() <= 100 {
            h[..bytes.len()].copy_from_slice(bytes);
        } else {
            // Split into prefix (<= 155) and name (<= 100) at a slash.
            let split = bytes[..bytes.len().min(156)]
                .iter()
                .rposition(|&b| b == b'/')
                .filter(|&i| bytes.len() - i - 1 <= 100)
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("tar path too long: {path}"),
                    )
                })?;
            h[..bytes.len() - split - 1].copy_from_slice(&bytes[split + 1..]);
            h[345..345 + split].copy_from_slice(&bytes[..split]);
        }
        octal(&mut h[100..108], u64::from(mode & 0o7777));
        octal(&mut h[108..116], u64::from(uid));
        octal(&mut h[116..124], u64::from(gid));
        octal(&mut h[124..136], size);
        octal(&mut h[136..148], self.mtime);
        h[156] = kind;
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
        let text = format!("{sum:06o}\0 ");
        h[148..156].copy_from_slice(text.as_bytes());
        self.buf.extend_from_slice(&h);
        Ok(())
    }

    pub fn dir(&mut self, path: &str, mode: u32, uid: u32, gid: u32) -> io::Result<()> {
        let path = format!("{}/", path.trim_end_matches('/'));
        self.header(&path, mode, uid, gid, 0, b'5')
    }

    pub fn file(
        &mut self,
        path: &str,
        mode: u32,
        uid: u32,
        gid: u32,
        data: &[u8],
    ) -> io::Result<()> {
        self.header(path, mode, uid, gid, data.len() as u64, b'0')?;
        self.buf.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.buf.extend(std::iter::repeat_n(0u8, pad));
        Ok(())
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.buf.extend(std::iter::repeat_n(0u8, 1024));
        self.buf
    }
}

/// True when `path` is an ELF executable without a program interpreter (static or
/// static-pie): it runs in any image whatever its libc.
pub fn is_static_elf(path: &Path) -> io::Result<bool> {
    let mut f = std::fs::File::open(path)?;
    let mut head = [0u8; 64];
    f.read_exact(&mut head)?;
    if &head[..4] != b"\x7fELF" || head[4] != 2 || head[5] != 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} is not a 64-bit little-endian ELF executable",
                path.display()
            ),
        ));
    }
    let phoff = u64::from_le_bytes(head[0x20..0x28].try_into().expect("8 bytes"));
    let phentsize = u16::from_le_bytes([head[0x36], head[0x37]]) as u64;
    let phnum = u16::from_le_bytes([head[0x38], head[0x39]]) as u64;
    let mut table = vec![0u8; (phentsize * phnum) as usize];
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(phoff))?;
    f.read_exact(&mut table)?;
    const PT_INTERP: u32 = 3;
    let dynamic = table
        .chunks(phentsize.max(4) as usize)
        .any(|ph| ph.len() >= 4 && u32::from_le_bytes([ph[0], ph[1], ph[2], ph[3]]) == PT_INTERP);
    Ok(!dynamic)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_read_back_with_gnu_tar() {
        let mut t = TarBuilder::new(1_700_000_000);
        t.dir("home/yy", 0o750, 1000, 1000).unwrap();
        t.file("home/yy/.profile", 0o644, 1000, 1000, b"echo hi\n")
            .unwrap();
        let long = format!("{}/file", "d".repeat(120));
        t.file(&long, 0o755, 0, 0, &[7u8; 1000]).unwrap();
        let data = t.finish();
        assert_eq!(data.len() % 512, 0);
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar");
        std::fs::write(&archive, &data).unwrap();
        let out = std::process::Command::new("tar")
            .args(["--numeric-owner", "-tvf"])
            .arg(&archive)
            .output();
        let Ok(out) = out else { return }; // no tar on this machine
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("drwxr-x--- 1000/1000"), "{text}");
        assert!(text.contains("-rw-r--r-- 1000/1000"), "{text}");
        assert!(text.contains(&long), "{text}");
    }

    #[test]
    fn dynamic_executables_are_told_apart() {
        // The test binary itself is linked like the crate's binaries.
        let me = std::env::current_exe().unwrap();
        let static_build = cfg!(target_feature = "crt-static");
        assert_eq!(is_static_elf(&me).unwrap(), static_build);
        assert!(is_static_elf(Path::new("/etc/hostname")).is_err());
    }
}
