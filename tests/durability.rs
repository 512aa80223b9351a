//! kill -9 of the control plane during a burst of commands loses no command it
//! acknowledged: a call is answered only after the COMMIT of the batch it ran in and a sync
//! of the WAL that began after it (the sync thread's fsync, as `synchronous=FULL` would).
//! A real `yy serve` on SQLite, real admin clients on loopback, a real SIGKILL, the same
//! data directory started again.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Env, Server, http, wait_for};

/// Concurrent admin clients enqueueing pings: enough that batches of several calls form.
const ENQUEUERS: usize = 12;
/// Kill rounds, each on the data directory the previous one left behind.
const ROUNDS: usize = 3;
/// Acknowledged pings per round before the kill (the clients go on until it lands).
const ACKED_BEFORE_KILL: usize = 300;

fn start(env: &Env) -> Server {
    // The pings are never run (no Runner is started): the queue must hold them all.
    let extra = ["--max-pending-commands", "1000000"];
    Server::start_with(env, &env.data_dir(), "127.0.0.1:0", &extra)
}

/// Enqueues pings for `runner` from `ENQUEUERS` threads until the server stops answering;
/// each acknowledged command's id goes into `acked`.
fn burst(
    server: &Server,
    token: &str,
    runner: &str,
    acked: &Arc<Mutex<Vec<String>>>,
    killed: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<()>> {
    (0..ENQUEUERS)
        .map(|_| {
            let (addr, auth) = (server.addr(), format!("Bearer {token}"));
            let path = format!("/api/v1/runners/{runner}/ping");
            let (acked, killed) = (acked.clone(), killed.clone());
            std::thread::spawn(move || {
                let headers = [
                    ("Authorization", auth.as_str()),
                    ("Content-Type", "application/json"),
                ];
                loop {
                    match http(&addr, "POST", &path, &headers, "{}") {
                        Ok((200, body)) => {
                            let v: serde_json::Value = serde_json::from_str(&body)
                                .unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
                            let id = v["id"].as_str().expect("a command id").to_string();
                            acked.lock().unwrap().push(id);
                        }
                        // No answer: the server is gone.
                        Err(_) | Ok((0, _)) if killed.load(Ordering::SeqCst) => return,
                        other => panic!("enqueue failed before the kill: {other:?}"),
                    }
                }
            })
        })
        .collect()
}

#[test]
fn kill_9_during_a_burst_loses_no_acknowledged_command() {
    let env = Env::new();
    env.create_admin("root");
    let mut server = start(&env);
    env.login(&server, "root");
    let reg = env.register_runner(&server, "src", &[]);
    let token = env.stored_token();
    let mut all_acked: Vec<String> = Vec::new();

    for round in 1..=ROUNDS {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let killed = Arc::new(AtomicBool::new(false));
        let clients = burst(&server, &token, &reg.id, &acked, &killed);
        wait_for(
            Duration::from_secs(60),
            "the first acknowledged pings",
            || (acked.lock().unwrap().len() >= ACKED_BEFORE_KILL).then_some(()),
        );
        killed.store(true, Ordering::SeqCst);
        server.child.kill().expect("SIGKILL yy serve");
        server.child.wait().unwrap();
        for c in clients {
            c.join().expect("an enqueuer failed");
        }
        let acked = std::mem::take(&mut *acked.lock().unwrap());
        assert!(acked.len() >= ACKED_BEFORE_KILL);
        all_acked.extend(acked);

        server = start(&env);
        let auth = format!("Bearer {token}");
        let lost: Vec<&String> = all_acked
            .iter()
            .filter(|id| {
                let (status, body) = http(
                    &server.addr(),
                    "GET",
                    &format!("/api/v1/commands/{id}"),
                    &[("Authorization", &auth)],
                    "",
                )
                .unwrap();
                assert!(
                    status == 200 || status == 404,
                    "GET command {id}: {status} {body}"
                );
                status == 404
            })
            .collect();
        assert!(
            lost.is_empty(),
            "round {round}: {} of {} acknowledged commands lost after kill -9, e.g. {:?}",
            lost.len(),
            all_acked.len(),
            &lost[..lost.len().min(5)]
        );
    }
}
