//! Moving a tunnel's bytes: both directions at once, a half-close passed on, and the
//! connection closed after an idle period.
//!
//! On Linux the bytes go socket → pipe → socket with `splice(2)`, so the proxy never copies
//! them through its own memory (this is what keeps bulk transfers near direct speed,
//! docs/benchmarks.md). When a pipe cannot be made, a plain read/write loop does the same.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::Interest;
use tokio::net::TcpStream;

/// Bytes moved per splice (the pipe is grown to this when the system allows).
const PIPE_SIZE: usize = 1 << 20;
/// Buffer per direction of the fallback loop.
const COPY_BUF: usize = 128 * 1024;

/// Copies both ways until both sides have finished, either fails, or no byte moved for
/// `idle`.
pub async fn relay(a: TcpStream, b: TcpStream, idle: Duration) {
    let start = tokio::time::Instant::now();
    let last = AtomicU64::new(0);
    let pipes = (Pipe::new(), Pipe::new());
    let copy = async {
        match pipes {
            (Ok(p1), Ok(p2)) => tokio::try_join!(
                splice_pump(&a, &b, &p1, start, &last),
                splice_pump(&b, &a, &p2, start, &last)
            )
            .map(|_| ()),
            _ => copy_both(&a, &b, start, &last).await,
        }
    };
    let watchdog = async {
        let tick = (idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
        loop {
            tokio::time::sleep(tick).await;
            let quiet = start
                .elapsed()
                .saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
            if quiet >= idle {
                return;
            }
        }
    };
    tokio::select! {
        _ = copy => {}
        _ = watchdog => {}
    }
}

struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`, which we then own.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors were just created and are owned by nothing else.
        let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        // SAFETY: F_SETPIPE_SZ on our own pipe; a refusal leaves the default size.
        let got = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, PIPE_SIZE as i32) };
        let size = if got > 0 { got as usize } else { 64 * 1024 };
        Ok(Pipe { read, write, size })
    }
}

fn splice(from: RawFd, to: RawFd, len: usize) -> io::Result<usize> {
    // SAFETY: splice between descriptors we hold open; no user memory is passed.
    let n = unsafe {
        libc::splice(
            from,
            std::ptr::null_mut(),
            to,
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_MOVE | libc::SPLICE_F_NONBLOCK,
        )
    };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// One direction with splice. The pipe is only filled when empty and drained completely,
/// so "would block" always means the socket is not ready (never that the pipe is).
async fn splice_pump(
    from: &TcpStream,
    to: &TcpStream,
    pipe: &Pipe,
    start: tokio::time::Instant,
    last: &AtomicU64,
) -> io::Result<()> {
    loop {
        let mut queued = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(from.as_raw_fd(), pipe.write.as_raw_fd(), pipe.size)
            }) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if queued == 0 {
            // SAFETY: half-closing our own socket; the peer sees the end of this direction.
            unsafe { libc::shutdown(to.as_raw_fd(), libc::SHUT_WR) };
            return Ok(());
        }
        while queued > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(pipe.read.as_raw_fd(), to.as_raw_fd(), queued)
            }) {
                Ok(n) => queued -= n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// Both directions with a read/write loop (no pipe available).
async fn copy_both(
    a: &TcpStream,
    b: &TcpStream,
    start: tokio::time::Instant,
    last: &AtomicU64,
) -> io::Result<()> {
    async fn one(
        from: &TcpStream,
        to: &TcpStream,
        start: tokio::time::Instant,
        last: &AtomicU64,
    ) -> io::Result<()> {
        let mut buf = vec![0u8; COPY_BUF];
        loop {
            from.readable().await?;
            let n = match from.try_read(&mut buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            };
            if n == 0 {
                // SAFETY: half-closing our own socket.
                unsafe { libc::shutdown(to.as_raw_fd(), libc::SHUT_WR) };
                return Ok(());
            }
            let mut sent = 0;
            while sent < n {
                to.writable().await?;
                match to.try_write(&buf[sent..n]) {
                    Ok(m) => sent += m,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    Err(e) => return Err(e),
                }
            }
            last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }
    tokio::try_join!(one(a, b, start, last), one(b, a, start, last)).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    /// 8 MiB each way at once, then both half-closes, through both relay kinds.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn both_ways_and_half_close_with_splice_and_without() {
        for use_splice in [true, false] {
            let (mut client, proxy_in) = pair().await;
            let (proxy_out, mut server) = pair().await;
            let relayed = tokio::spawn(async move {
                if use_splice {
                    relay(proxy_in, proxy_out, Duration::from_secs(30)).await;
                } else {
                    let start = tokio::time::Instant::now();
                    let last = AtomicU64::new(0);
                    copy_both(&proxy_in, &proxy_out, start, &last)
                        .await
                        .unwrap();
                }
            });
            let data: Vec<u8> = (0..8 << 20).map(|i| (i % 251) as u8).collect();
            let (d1, d2) = (data.clone(), data.clone());
            let up = tokio::spawn(async move {
                client.write_all(&d1).await.unwrap();
                client.shutdown().await.unwrap();
                let mut back = Vec::new();
                client.read_to_end(&mut back).await.unwrap();
                back
            });
            let mut got = Vec::new();
            server.read_to_end(&mut got).await.unwrap();
            assert!(got == data, "upstream bytes differ (splice {use_splice})");
            server.write_all(&d2).await.unwrap();
            server.shutdown().await.unwrap();
            assert!(up.await.unwrap() == data, "downstream bytes differ");
            relayed.await.unwrap();
        }
    }
}
