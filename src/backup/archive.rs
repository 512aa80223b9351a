//! The archive format (docs/backup.md), version 1. Little-endian throughout:
//!
//! ```text
//! header   "YYBACKUP" u32:format u32:0                               16 bytes
//! entry*   "YYE1" u8:type [0;3] u32:mode u32:uid u32:gid i64:mtime
//!          u32:mtime_nsec u64:size u32:path_len  path  content       44 + path + size
//! manifest JSON (manifest::Manifest)
//! trailer  u64:manifest_len [u8;32]:sha256(manifest) "YYBKEND1"         48 bytes
//! ```
//!
//! Every byte is checked on reading: the header and the end mark are compared, each entry
//! header must be exactly what its manifest entry encodes to, each content must hash to its
//! manifest SHA-256, the manifest must hash to the trailer's, and the entries must end where
//! the manifest begins. A byte flipped anywhere therefore fails verification.

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use super::manifest::{Entry, EntryType, FORMAT, Manifest};
use super::progress::Progress;
use super::{BackupError, Result, io_error};

const MAGIC: &[u8; 8] = b"YYBACKUP";
const ENTRY_MAGIC: &[u8; 4] = b"YYE1";
const END_MAGIC: &[u8; 8] = b"YYBKEND1";
const HEADER_LEN: u64 = 16;
const ENTRY_HEADER_LEN: usize = 44;
const TRAILER_LEN: u64 = 48;
/// A manifest larger than this is not one yy wrote (about two million entries).
const MAX_MANIFEST: u64 = 512 * 1024 * 1024;
/// Longest path stored (Linux's PATH_MAX).
const MAX_PATH: usize = 4096;
/// The copy buffer: large enough that a syscall and a hash call per chunk cost nothing.
pub const CHUNK: usize = 1024 * 1024;

fn header() -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&FORMAT.to_le_bytes());
    h
}

/// The exact bytes that precede an entry's content.
pub fn entry_header(e: &Entry) -> Vec<u8> {
    let mut h = Vec::with_capacity(ENTRY_HEADER_LEN + e.path.len());
    h.extend_from_slice(ENTRY_MAGIC);
    h.push(e.kind.code());
    h.extend_from_slice(&[0; 3]);
    h.extend_from_slice(&e.mode.to_le_bytes());
    h.extend_from_slice(&e.uid.to_le_bytes());
    h.extend_from_slice(&e.gid.to_le_bytes());
    h.extend_from_slice(&e.mtime.to_le_bytes());
    h.extend_from_slice(&e.mtime_nsec.to_le_bytes());
    h.extend_from_slice(&e.size.to_le_bytes());
    h.extend_from_slice(&(e.path.len() as u32).to_le_bytes());
    h.extend_from_slice(e.path.as_bytes());
    h
}

/// A writer that hashes and counts what passes through.
struct Hashing<W> {
    inner: W,
    hash: Sha256,
    bytes: u64,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hash.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes an archive entry by entry; [`ArchiveWriter::finish`] appends the manifest.
pub struct ArchiveWriter<'p> {
    out: Hashing<io::BufWriter<File>>,
    entries: Vec<Entry>,
    /// The archive's path, for error messages.
    shown: std::path::PathBuf,
    progress: &'p Progress,
    buf: Vec<u8>,
}

/// What [`ArchiveWriter::finish`] returns.
pub struct Written {
    pub file: File,
    pub sha256: String,
    pub bytes: u64,
    pub manifest: Manifest,
}

impl<'p> ArchiveWriter<'p> {
    pub fn new(file: File, shown: &Path, progress: &'p Progress) -> Result<Self> {
        let mut w = ArchiveWriter {
            out: Hashing {
                inner: io::BufWriter::with_capacity(CHUNK, file),
                hash: Sha256::new(),
                bytes: 0,
            },
            entries: Vec::new(),
            shown: shown.to_path_buf(),
            progress,
            buf: vec![0; CHUNK],
        };
        w.put(&header())?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| io_error("writing", &self.shown, e))
    }

    fn check(e: &Entry) -> Result<()> {
        super::manifest::check_path(&e.path)
            .map_err(|_| BackupError::Invalid(format!("{:?} cannot be stored", e.path)))?;
        if e.path.len() > MAX_PATH {
            return Err(BackupError::Invalid(format!(
                "the path {} is longer than {MAX_PATH} bytes",
                e.path
            )));
        }
        Ok(())
    }

    /// A directory (`e.size` 0, no hash).
    pub fn dir(&mut self, mut e: Entry) -> Result<()> {
        Self::check(&e)?;
        e.kind = EntryType::Dir;
        e.size = 0;
        e.sha256 = None;
        self.put(&entry_header(&e))?;
        self.entries.push(e);
        Ok(())
    }

    /// A symlink; its content is the target.
    pub fn symlink(&mut self, mut e: Entry, target: &[u8]) -> Result<()> {
        Self::check(&e)?;
        e.kind = EntryType::Symlink;
        e.size = target.len() as u64;
        e.sha256 = Some(hex::encode(Sha256::digest(target)));
        self.put(&entry_header(&e))?;
        self.put(target)?;
        self.progress.file_done(target.len() as u64);
        self.entries.push(e);
        Ok(())
    }

    /// A file of exactly `e.size` bytes read from `src` (`src_shown` names it in errors).
    pub fn file(&mut self, mut e: Entry, src: &mut dyn Read, src_shown: &Path) -> Result<()> {
        Self::check(&e)?;
        e.kind = EntryType::File;
        self.put(&entry_header(&e))?;
        let mut hash = Sha256::new();
        let mut left = e.size;
        while left > 0 {
            let want = left.min(CHUNK as u64) as usize;
            let n = match src.read(&mut self.buf[..want]) {
                Ok(0) => {
                    return Err(BackupError::Io(format!(
                        "{} shrank while it was being read; run the backup again",
                        src_shown.display()
                    )));
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(io_error("reading", src_shown, err)),
            };
            hash.update(&self.buf[..n]);
            let chunk = std::mem::take(&mut self.buf);
            let r = self.put(&chunk[..n]);
            self.buf = chunk;
            r?;
            self.progress.bytes(n as u64);
            left -= n as u64;
        }
        e.sha256 = Some(hex::encode(hash.finalize()));
        self.progress.file_done(0);
        self.entries.push(e);
        Ok(())
    }

    /// The SHA-256 of the entry written last (none for a directory).
    pub fn last_sha256(&self) -> Option<&str> {
        self.entries.last()?.sha256.as_deref()
    }

    /// Appends the manifest (`entries` and totals filled in) and the trailer, flushes and
    /// fsyncs. The caller renames the file into place.
    pub fn finish(mut self, mut manifest: Manifest) -> Result<Written> {
        manifest.file_count = self
            .entries
            .iter()
            .filter(|e| e.kind != EntryType::Dir)
            .count() as u64;
        manifest.total_bytes = self.entries.iter().map(|e| e.size).sum();
        manifest.entries = std::mem::take(&mut self.entries);
        let json = serde_json::to_vec(&manifest)
            .map_err(|e| BackupError::Io(format!("encoding the manifest: {e}")))?;
        self.put(&json)?;
        let mut trailer = Vec::with_capacity(TRAILER_LEN as usize);
        trailer.extend_from_slice(&(json.len() as u64).to_le_bytes());
        trailer.extend_from_slice(&Sha256::digest(&json));
        trailer.extend_from_slice(END_MAGIC);
        self.put(&trailer)?;
        let shown = self.shown.clone();
        let Hashing { inner, hash, bytes } = self.out;
        let file = inner
            .into_inner()
            .map_err(|e| io_error("writing", &shown, e.into_error()))?;
        file.sync_all()
            .map_err(|e| io_error("syncing", &shown, e))?;
        Ok(Written {
            file,
            sha256: hex::encode(hash.finalize()),
            bytes,
            manifest,
        })
    }
}

/// An archive whose manifest has been read and checked (its entries not yet).
pub struct Opened {
    file: File,
    pub manifest: Manifest,
    manifest_bytes: Vec<u8>,
    trailer: Vec<u8>,
    manifest_offset: u64,
    pub len: u64,
    shown: std::path::PathBuf,
}

/// Receives an archive's entries as they are verified. A file's content arrives in chunks
/// before [`Sink::file_end`]; `file_end` comes only when the content matched its hash.
pub trait Sink {
    fn dir(&mut self, e: &Entry) -> Result<()>;
    fn symlink(&mut self, e: &Entry, target: &[u8]) -> Result<()>;
    fn file_start(&mut self, e: &Entry) -> Result<()>;
    fn file_data(&mut self, chunk: &[u8]) -> Result<()>;
    fn file_end(&mut self, e: &Entry) -> Result<()>;
}

/// A sink that keeps nothing (verification alone).
pub struct Discard;

impl Sink for Discard {
    fn dir(&mut self, _: &Entry) -> Result<()> {
        Ok(())
    }
    fn symlink(&mut self, _: &Entry, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn file_start(&mut self, _: &Entry) -> Result<()> {
        Ok(())
    }
    fn file_data(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn file_end(&mut self, _: &Entry) -> Result<()> {
        Ok(())
    }
}

fn damaged(shown: &Path, what: String) -> BackupError {
    BackupError::Corrupt(format!(
        "{} is damaged: {what}; it cannot be used",
        shown.display()
    ))
}

/// Opens `path`, checks its header, trailer and manifest.
pub fn open(path: &Path) -> Result<Opened> {
    let mut file = File::open(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => BackupError::NotFound(format!(
            "{} does not exist: name a file written by `yy backup create`",
            path.display()
        )),
        _ => io_error("opening", path, e),
    })?;
    let meta = file.metadata().map_err(|e| io_error("reading", path, e))?;
    if !meta.is_file() {
        return Err(BackupError::Invalid(format!(
            "{} is not a file",
            path.display()
        )));
    }
    let len = meta.len();
    let not_backup = || {
        BackupError::Invalid(format!(
            "{} is not a yy backup archive (written by `yy backup create` or `yy runner backup`)",
            path.display()
        ))
    };
    let mut head = [0u8; 16];
    if len < HEADER_LEN + TRAILER_LEN {
        return Err(not_backup());
    }
    file.read_exact(&mut head)
        .map_err(|e| io_error("reading", path, e))?;
    if &head[..8] != MAGIC {
        return Err(not_backup());
    }
    if head != header() {
        return Err(damaged(path, "its header is not format 1".into()));
    }
    let mut trailer = vec![0u8; TRAILER_LEN as usize];
    file.seek(SeekFrom::Start(len - TRAILER_LEN))
        .and_then(|_| file.read_exact(&mut trailer))
        .map_err(|e| io_error("reading", path, e))?;
    if &trailer[40..] != END_MAGIC {
        return Err(damaged(
            path,
            "its end mark is missing (truncated or overwritten)".into(),
        ));
    }
    let manifest_len = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    if manifest_len > MAX_MANIFEST || manifest_len > len - HEADER_LEN - TRAILER_LEN {
        return Err(damaged(path, "its manifest length is impossible".into()));
    }
    let manifest_offset = len - TRAILER_LEN - manifest_len;
    let mut manifest_bytes = vec![0u8; manifest_len as usize];
    file.seek(SeekFrom::Start(manifest_offset))
        .and_then(|_| file.read_exact(&mut manifest_bytes))
        .map_err(|e| io_error("reading", path, e))?;
    if Sha256::digest(&manifest_bytes).as_slice() != &trailer[8..40] {
        return Err(damaged(
            path,
            "its manifest does not match the manifest's SHA-256".into(),
        ));
    }
    let manifest: Manifest = serde_json::from_slice(&manifest_bytes)
        .map_err(|e| damaged(path, format!("its manifest cannot be read ({e})")))?;
    manifest.check()?;
    Ok(Opened {
        file,
        manifest,
        manifest_bytes,
        trailer,
        manifest_offset,
        len,
        shown: path.to_path_buf(),
    })
}

impl Opened {
    /// Reads every entry in order, checks it against the manifest and hands it to `sink`.
    /// Returns the SHA-256 of the whole archive.
    pub fn read_all(&mut self, sink: &mut dyn Sink, progress: &Progress) -> Result<String> {
        let shown = self.shown.clone();
        let bad = |what: String| damaged(&shown, what);
        let io = |e: io::Error| io_error("reading", &shown, e);
        self.file.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut r = BufReader::with_capacity(CHUNK, &self.file);
        let mut archive_hash = Sha256::new();
        let mut head = [0u8; 16];
        r.read_exact(&mut head).map_err(io)?;
        archive_hash.update(head);
        let mut pos = HEADER_LEN;
        let mut buf = vec![0u8; CHUNK];
        let mut got = Vec::with_capacity(ENTRY_HEADER_LEN + 256);
        for e in &self.manifest.entries {
            let want = entry_header(e);
            let end = pos
                .checked_add(want.len() as u64)
                .and_then(|p| p.checked_add(e.size));
            if end.is_none_or(|end| end > self.manifest_offset) {
                return Err(bad(format!("the entry {} runs past the entries", e.path)));
            }
            got.resize(want.len(), 0);
            r.read_exact(&mut got).map_err(io)?;
            if got != want {
                return Err(bad(format!(
                    "the header of {} differs from the manifest",
                    e.path
                )));
            }
            archive_hash.update(&got);
            pos += want.len() as u64;
            match e.kind {
                EntryType::Dir => sink.dir(e)?,
                EntryType::Symlink => {
                    let mut target = vec![0u8; e.size as usize];
                    r.read_exact(&mut target).map_err(io)?;
                    archive_hash.update(&target);
                    if Some(hex::encode(Sha256::digest(&target))) != e.sha256 {
                        return Err(bad(format!(
                            "the symlink {} does not match its SHA-256",
                            e.path
                        )));
                    }
                    sink.symlink(e, &target)?;
                    progress.file_done(e.size);
                }
                EntryType::File => {
                    sink.file_start(e)?;
                    let mut hash = Sha256::new();
                    let mut left = e.size;
                    while left > 0 {
                        let n = left.min(CHUNK as u64) as usize;
                        r.read_exact(&mut buf[..n]).map_err(io)?;
                        hash.update(&buf[..n]);
                        archive_hash.update(&buf[..n]);
                        sink.file_data(&buf[..n])?;
                        progress.bytes(n as u64);
                        left -= n as u64;
                    }
                    if Some(hex::encode(hash.finalize())) != e.sha256 {
                        return Err(bad(format!(
                            "the content of {} does not match its SHA-256 in the manifest",
                            e.path
                        )));
                    }
                    sink.file_end(e)?;
                    progress.file_done(0);
                }
            }
            pos += e.size;
        }
        if pos != self.manifest_offset {
            return Err(bad(format!(
                "{} between the entries and the manifest",
                crate::api::words::plural(
                    self.manifest_offset - pos,
                    "unlisted byte lies",
                    "unlisted bytes lie"
                )
            )));
        }
        archive_hash.update(&self.manifest_bytes);
        archive_hash.update(&self.trailer);
        Ok(hex::encode(archive_hash.finalize()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Runner's: its workspaces may hold links.
    fn manifest() -> Manifest {
        let mut m = crate::backup::manifest::test_manifest(vec![]);
        m.kind = crate::backup::Kind::Runner;
        m
    }

    fn entry(path: &str) -> Entry {
        Entry {
            path: path.into(),
            kind: EntryType::File,
            size: 0,
            sha256: None,
            mode: 0o644,
            uid: 1,
            gid: 2,
            mtime: 3,
            mtime_nsec: 4,
        }
    }

    struct Keep(Vec<(String, Vec<u8>)>);
    impl Sink for Keep {
        fn dir(&mut self, e: &Entry) -> Result<()> {
            self.0.push((e.path.clone(), vec![]));
            Ok(())
        }
        fn symlink(&mut self, e: &Entry, t: &[u8]) -> Result<()> {
            self.0.push((e.path.clone(), t.to_vec()));
            Ok(())
        }
        fn file_start(&mut self, e: &Entry) -> Result<()> {
            self.0.push((e.path.clone(), vec![]));
            Ok(())
        }
        fn file_data(&mut self, c: &[u8]) -> Result<()> {
            self.0.last_mut().unwrap().1.extend_from_slice(c);
            Ok(())
        }
        fn file_end(&mut self, _: &Entry) -> Result<()> {
            Ok(())
        }
    }

    fn write_sample(path: &Path) -> Written {
        let p = Progress::hidden();
        let mut w = ArchiveWriter::new(File::create(path).unwrap(), path, &p).unwrap();
        for d in ["workspaces", "workspaces/d"] {
            let mut d = entry(d);
            d.kind = EntryType::Dir;
            w.dir(d).unwrap();
        }
        let data = vec![7u8; CHUNK + 5];
        let mut f = entry("workspaces/d/big");
        f.size = data.len() as u64;
        w.file(f, &mut &data[..], Path::new("big")).unwrap();
        w.file(entry("empty"), &mut &b""[..], Path::new("empty"))
            .unwrap();
        w.symlink(entry("workspaces/d/link"), b"big").unwrap();
        w.finish(manifest()).unwrap()
    }

    #[test]
    fn what_is_written_reads_back_with_the_same_hash() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yyb");
        let written = write_sample(&path);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(written.bytes, bytes.len() as u64);
        assert_eq!(written.sha256, hex::encode(Sha256::digest(&bytes)));
        let mut opened = open(&path).unwrap();
        assert_eq!(opened.manifest.file_count, 3);
        assert_eq!(opened.manifest.total_bytes, (CHUNK + 5 + 3) as u64);
        let mut keep = Keep(vec![]);
        let sha = opened.read_all(&mut keep, &Progress::hidden()).unwrap();
        assert_eq!(sha, written.sha256);
        assert_eq!(keep.0.len(), 5);
        assert_eq!(keep.0[2].1, vec![7u8; CHUNK + 5]);
        assert_eq!(keep.0[4].1, b"big");
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.yyb");
        write_sample(&path);
        let good = std::fs::read(&path).unwrap();
        // Every byte outside the big content, and a sample inside it.
        let positions: Vec<usize> = (0..good.len())
            .filter(|i| *i < 200 || *i > CHUNK || i % 4099 == 0)
            .collect();
        for i in positions {
            let mut bad = good.clone();
            bad[i] ^= 0x01;
            std::fs::write(&path, &bad).unwrap();
            let result =
                open(&path).and_then(|mut o| o.read_all(&mut Discard, &Progress::hidden()));
            assert!(
                result.is_err(),
                "a flip at byte {i} of {} went unnoticed",
                good.len()
            );
        }
        // Truncated or extended by a byte.
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(open(&path).is_err());
        let mut longer = good.clone();
        longer.insert(20, 0);
        std::fs::write(&path, &longer).unwrap();
        assert!(
            open(&path)
                .and_then(|mut o| o.read_all(&mut Discard, &Progress::hidden()))
                .is_err()
        );
    }

    #[test]
    fn other_files_are_not_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x");
        std::fs::write(&path, vec![b'x'; 1000]).unwrap();
        assert!(matches!(open(&path), Err(BackupError::Invalid(_))));
        assert!(matches!(
            open(&dir.path().join("missing")),
            Err(BackupError::NotFound(_))
        ));
    }
}
