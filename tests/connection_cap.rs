//! Slow clients against the real `yy serve` (issue 23, finding 10): with the usual 1,024
//! open-file limit, more idle sockets than that limit keep out neither a health check nor
//! a Runner's long-poll, and the server never runs out of descriptors.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::time::{Duration, Instant};

use common::{Env, Server, http};

const LIMIT: u64 = 1024;

/// Open descriptors of a process.
fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Lets this test process hold thousands of sockets.
fn raise_own_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain system calls on a stack struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
    }
    assert!(
        lim.rlim_cur >= 4096,
        "the test needs 4096 descriptors, the hard limit is {}",
        lim.rlim_max
    );
}

/// Up to `n` sockets that connect and say nothing (half of them start a header and stop);
/// stops early when a connect hangs (the listen backlog is full: the server takes no more).
fn idle_sockets(addr: &str, n: usize) -> Vec<TcpStream> {
    let to: std::net::SocketAddr = addr.parse().unwrap();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let Ok(mut s) = TcpStream::connect_timeout(&to, Duration::from_secs(2)) else {
            break;
        };
        if i % 2 == 1 {
            let _ = s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x");
        }
        out.push(s);
    }
    out
}

/// How long `/healthz` takes to answer 200.
fn health(addr: &str) -> Duration {
    let t = Instant::now();
    let (status, body) = http(addr, "GET", "/healthz", &[], "").unwrap();
    assert_eq!(status, 200, "{body}");
    t.elapsed()
}

#[test]
fn idle_sockets_past_the_file_limit_keep_out_neither_health_checks_nor_long_polls() {
    raise_own_limit();
    let env = Env::new();
    env.create_admin("root");
    let data = env.data_dir();
    // The usual default limit, hard as well: yy cannot raise it.
    let server = Server::start_shaped(&env, &data, "127.0.0.1:0", &[], |cmd| {
        // SAFETY: only setrlimit between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: LIMIT,
                    rlim_max: LIMIT,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let addr = server.addr();
    let pid = server.child.id();
    assert!(
        server.log().contains("max_connections=768"),
        "the cap fits the limit: {}",
        server.log()
    );
    env.login(&server, "root");
    let reg = env.register_runner(&server, "src", &[]);
    let instance = uuid::Uuid::new_v4().to_string();
    let (status, connected) = common::machine(
        &server,
        "/runner/v1/connect",
        &reg.token,
        &instance,
        None,
        &[],
        common::STATUS,
    );
    assert_eq!(status, 200, "{connected}");
    let generation = connected["generation"].as_i64().unwrap();

    // 1,100 idle sockets: more than the cap, more than the file limit.
    let first = idle_sockets(&addr, 1100);
    let took = health(&addr);
    eprintln!(
        "/healthz behind {} idle sockets: {took:?}; server fds {}",
        first.len(),
        fds(pid)
    );
    assert!(took < Duration::from_secs(3), "/healthz took {took:?}");
    assert_eq!(first.len(), 1100, "every idle socket got in");

    // A Runner's long-poll gets in, and is not closed while more idle sockets arrive.
    let poll = {
        let (addr, token, instance) = (addr.clone(), reg.token.clone(), instance.clone());
        std::thread::spawn(move || {
            let t = Instant::now();
            let mut s = TcpStream::connect(&addr).unwrap();
            let body = r#"{"max":1,"wait_ms":4000}"#;
            let req = format!(
                "POST /runner/v1/lease HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nyy-protocol: 1\r\nyy-runner-instance: {instance}\r\nyy-generation: {generation}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            s.write_all(req.as_bytes()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut out = String::new();
            let _ = s.read_to_string(&mut out);
            (out, t.elapsed())
        })
    };
    // It got in once the server holds it parked.
    env.wait_longpolls(&server, 1);
    let second = idle_sockets(&addr, 1100);
    let took2 = health(&addr);
    assert_eq!(second.len(), 1100, "every idle socket got in");
    let peak_fds = fds(pid);
    let (answer, waited) = poll.join().unwrap();
    assert!(
        answer.starts_with("HTTP/1.1 200"),
        "the long-poll was cut: {answer:?}"
    );
    assert!(
        waited >= Duration::from_millis(3900),
        "{waited:?}: {answer}"
    );
    assert!(took2 < Duration::from_secs(3), "/healthz took {took2:?}");
    assert!(
        (peak_fds as u64) < LIMIT,
        "the server holds {peak_fds} descriptors of {LIMIT}"
    );
    eprintln!(
        "with {} more idle sockets: /healthz {took2:?}, long-poll answered after {waited:?}, server fds {peak_fds}",
        second.len()
    );
    assert!(!server.log().contains("accept failed"), "{}", server.log());
    drop((first, second));
    // Still serving afterwards.
    health(&addr);
    env.run(&["whoami"]).ok();
}
