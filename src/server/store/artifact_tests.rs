//! Artifact records against SQLite in memory: provenance, resumable begins, the per-turn
//! and size limits, and who may transfer what.

use super::artifacts::{self, ArtifactKind, ArtifactState};
use super::commands::{self, QueueLimits};
use super::sessions::{self, Admission};
use super::tests::{World, world};
use super::{StoreError, agents, retention};
use crate::api::artifacts::{CHUNK_BYTES, MAX_ARTIFACT_BYTES, MIN_CHUNK_BYTES, UploadBegin};
use crate::api::capabilities;
use crate::api::ids::{CommandId, Generation};
use crate::api::machine::{FetchPayload, Outcome, RunnerCommand};

const SHA: &str = "ab0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd";

/// Reconnects with the Worker capability; returns the generation.
fn connect_worker(w: &mut World) -> Generation {
    w.connect_declaring(&[capabilities::COMPUTER, capabilities::COMPUTER_WORKER], 2)
}

/// A computer agent's turn, leased and running in a new generation: (generation, command).
fn running_turn(w: &mut World, attachments: Vec<String>) -> (Generation, CommandId) {
    let generation = connect_worker(w);
    let admission = Admission {
        account_id: w.account.clone(),
        admin: true,
        agent: "box".into(),
        session: None,
        message: "export".into(),
        attachments,
        inputs: Vec::new(),
    };
    let (_, turn) = sessions::admit_turn(&mut w.conn, &admission, QueueLimits::default()).unwrap();
    w.run(generation, &turn.command_id);
    (generation, turn.command_id)
}

fn begin(command: &str, name: &str, size: u64) -> UploadBegin {
    UploadBegin {
        command_id: command.into(),
        name: name.into(),
        size,
        sha256: Some(SHA.into()),
        chunk_size: CHUNK_BYTES,
        source_path: Some(format!("/workspace/{name}")),
    }
}

#[test]
fn an_export_keeps_its_provenance_and_resumes_where_it_was() {
    let mut w = world();
    let (generation, command) = running_turn(&mut w, Vec::new());
    let runner = w.runner.clone();
    let a = artifacts::begin(
        &mut w.conn,
        &runner,
        generation,
        &begin(&command, "blob.bin", 3_000_000),
    )
    .unwrap();
    assert_eq!(a.state, ArtifactState::Uploading);
    assert_eq!(a.kind, ArtifactKind::Export);
    assert_eq!(a.agent.as_deref(), Some("box"));
    assert_eq!(a.profile.as_deref(), Some("default"));
    assert_eq!(a.turn_seq, Some(1));
    assert!(a.session_id.is_some() && a.computer_id.is_some());
    assert_eq!(a.account_id.as_deref(), Some(w.account.as_str()));

    artifacts::record_received(&w.conn, &a.id, CHUNK_BYTES as i64).unwrap();
    // The same file again (an interrupted transfer): the same upload, from where it was.
    let again = artifacts::begin(
        &mut w.conn,
        &runner,
        generation,
        &begin(&command, "blob.bin", 3_000_000),
    )
    .unwrap();
    assert_eq!(again.id, a.id);
    assert_eq!(again.upload_state().next_chunk(), 1);
    // Not visible as ready until sealed.
    assert!(!artifacts::get(&w.conn, &a.id).unwrap().is_ready());
    let sealed = artifacts::mark_ready(&w.conn, &a.id, SHA).unwrap();
    assert_eq!(sealed.state, ArtifactState::Ready);
    assert_eq!(sealed.received, 3_000_000);
    // Prefixes resolve; lists filter by session and owner.
    assert_eq!(artifacts::get(&w.conn, &a.id[..8]).unwrap().id, a.id);
    let session = a.session_id.clone().unwrap();
    assert_eq!(
        artifacts::list(&w.conn, Some(&session), None)
            .unwrap()
            .len(),
        1
    );
    assert!(
        artifacts::list(&w.conn, None, Some("someone-else"))
            .unwrap()
            .is_empty()
    );
}

#[test]
fn limits_per_artifact_and_per_turn_are_refused_clearly() {
    let mut w = world();
    let (generation, command) = running_turn(&mut w, Vec::new());
    let runner = w.runner.clone();
    let big = artifacts::begin(
        &mut w.conn,
        &runner,
        generation,
        &begin(&command, "big.bin", MAX_ARTIFACT_BYTES + 1),
    );
    assert!(
        matches!(&big, Err(StoreError::Limit(m)) if m.contains("25 MiB")),
        "{big:?}"
    );
    for i in 0..8 {
        artifacts::begin(
            &mut w.conn,
            &runner,
            generation,
            &begin(&command, &format!("f{i}"), 10),
        )
        .unwrap();
    }
    let ninth = artifacts::begin(&mut w.conn, &runner, generation, &begin(&command, "f8", 10));
    assert!(
        matches!(&ninth, Err(StoreError::Limit(m)) if m.contains("8 per turn")),
        "{ninth:?}"
    );
    let bad = artifacts::begin(
        &mut w.conn,
        &runner,
        generation,
        &begin(&command, "../x", 10),
    );
    assert!(matches!(bad, Err(StoreError::Invalid(_))));
}

#[test]
fn only_the_running_command_of_the_live_generation_transfers() {
    let mut w = world();
    let (generation, command) = running_turn(&mut w, Vec::new());
    let runner = w.runner.clone();
    let stale = artifacts::begin(
        &mut w.conn,
        &runner,
        Generation(generation.get() - 1),
        &begin(&command, "a", 10),
    );
    assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
    let other = artifacts::begin(
        &mut w.conn,
        &"other-runner".into(),
        generation,
        &begin(&command, "a", 10),
    );
    assert!(matches!(other, Err(StoreError::NotFound(_))), "{other:?}");
    let a = artifacts::begin(&mut w.conn, &runner, generation, &begin(&command, "a", 10)).unwrap();
    // Archiving the agent takes away its turn's right to transfer.
    let account = w.account.clone();
    agents::archive(&mut w.conn, &account, "box").unwrap();
    let refused = artifacts::for_transfer(&w.conn, &runner, generation, &a.id);
    assert!(
        matches!(refused, Err(StoreError::Forbidden(_))),
        "{refused:?}"
    );
    // An ended command transfers nothing.
    w.complete(generation, &command, Outcome::Done).unwrap();
    let ended = artifacts::for_transfer(&w.conn, &runner, generation, &a.id);
    assert!(matches!(ended, Err(StoreError::Conflict(_))), "{ended:?}");
    assert_eq!(artifacts::abandoned(&w.conn).unwrap(), vec![a.id]);
}

#[test]
fn a_fetch_uploads_one_artifact_without_an_owner() {
    let mut w = world();
    let generation = connect_worker(&mut w);
    let fetch = RunnerCommand::Fetch(FetchPayload {
        path: "/srv/out.txt".into(),
        artifact_roots: vec!["/srv".into()],
    });
    let runner = w.runner.clone();
    let cmd =
        commands::enqueue(&mut w.conn, &runner, &fetch, None, QueueLimits::default()).unwrap();
    w.run(generation, &cmd.id);
    let a = artifacts::begin(
        &mut w.conn,
        &runner,
        generation,
        &begin(&cmd.id, "out.txt", 5),
    )
    .unwrap();
    assert_eq!(a.kind, ArtifactKind::Fetch);
    assert_eq!(a.account_id, None);
    assert_eq!(a.source_path.as_deref(), Some("/workspace/out.txt"));
    let second = artifacts::begin(&mut w.conn, &runner, generation, &begin(&cmd.id, "b", 5));
    assert!(
        matches!(&second, Err(StoreError::Limit(m)) if m.contains("this fetch already exported 1 file,")),
        "{second:?}"
    );

    // Delivered to `yy runner fetch`, the artifact stays a day (its printed id works),
    // then goes.
    artifacts::mark_ready(&w.conn, &a.id, SHA).unwrap();
    w.complete(generation, &cmd.id, Outcome::Done).unwrap();
    w.conn
        .execute(
            "UPDATE runner_commands SET result = '{}' WHERE id = ?1",
            [&cmd.id],
        )
        .unwrap();
    let now = crate::timefmt::now_ms();
    retention::mark_delivered(&w.conn, &cmd.id, now).unwrap();
    let month = 30 * 24 * 3_600_000;
    let hour = 3_600_000;
    for later in [2 * 60_000, 23 * hour] {
        let kept = retention::compact(&mut w.conn, month, now + later).unwrap();
        assert!(kept.artifacts.is_empty(), "{later} ms after: {kept:?}");
        assert!(artifacts::get(&w.conn, &a.id).unwrap().is_ready());
    }
    let gone = retention::compact(&mut w.conn, month, now + 25 * hour).unwrap();
    assert_eq!(gone.artifacts, vec![a.id.clone()]);
    assert!(matches!(
        artifacts::get(&w.conn, &a.id),
        Err(StoreError::NotFound(_))
    ));
}

#[test]
fn attachments_go_with_one_computer_turn_and_only_its_runner_downloads_them() {
    let mut w = world();
    let account = w.account.clone();
    let input = artifacts::create_input(&w.conn, "in-1", &account, "data.csv", 12, SHA).unwrap();
    assert!(input.is_ready());
    // A host agent takes no attachments.
    let generation = connect_worker(&mut w);
    let host = sessions::admit_turn(
        &mut w.conn,
        &Admission {
            account_id: account.clone(),
            admin: true,
            agent: "host-1".into(),
            session: None,
            message: "x".into(),
            attachments: vec!["in-1".into()],
            inputs: Vec::new(),
        },
        QueueLimits::default(),
    );
    assert!(
        matches!(&host, Err(StoreError::Invalid(m)) if m.contains("host")),
        "{host:?}"
    );
    let (generation2, command) = running_turn(&mut w, vec!["in-1".into()]);
    assert!(generation2 > generation);
    let cmd = commands::get(&w.conn, &command).unwrap();
    let payload: serde_json::Value = serde_json::from_str(&cmd.payload).unwrap();
    assert_eq!(payload["attachments"][0]["name"], "data.csv");
    let runner = w.runner.clone();
    let got = artifacts::for_download(&w.conn, &runner, generation2, "in-1").unwrap();
    assert_eq!(got.command_id.as_deref(), Some(command.as_str()));
    assert!(artifacts::for_download(&w.conn, &"other".into(), generation2, "in-1").is_err());
    // Used once: a second turn cannot take it again.
    w.complete(generation2, &command, Outcome::Done).unwrap();
    let again = sessions::admit_turn(
        &mut w.conn,
        &Admission {
            account_id: account,
            admin: true,
            agent: "box".into(),
            session: None,
            message: "x".into(),
            attachments: vec!["in-1".into()],
            inputs: Vec::new(),
        },
        QueueLimits::default(),
    );
    assert!(matches!(again, Err(StoreError::Conflict(_))), "{again:?}");
}

/// A fetch command running in a new generation, and the upload it began of `size` bytes
/// in chunks of 64 KiB: (generation, command, artifact id).
fn fetch_upload(w: &mut World, size: u64) -> (Generation, CommandId, String) {
    let generation = connect_worker(w);
    let fetch = RunnerCommand::Fetch(FetchPayload {
        path: "/srv/out.bin".into(),
        artifact_roots: vec!["/srv".into()],
    });
    let runner = w.runner.clone();
    let cmd =
        commands::enqueue(&mut w.conn, &runner, &fetch, None, QueueLimits::default()).unwrap();
    w.run(generation, &cmd.id);
    let mut b = begin(&cmd.id, "out.bin", size);
    b.chunk_size = MIN_CHUNK_BYTES;
    let a = artifacts::begin(&mut w.conn, &runner, generation, &b).unwrap();
    (generation, cmd.id, a.id)
}

fn chunk_rows(w: &World, id: &str) -> i64 {
    w.conn
        .query_row(
            "SELECT count(*) FROM artifact_chunks WHERE artifact_id = ?1",
            [id],
            |r| r.get(0),
        )
        .unwrap()
}

#[test]
fn chunks_in_the_database_are_stored_with_their_progress_and_sealed_only_when_whole() {
    use super::artifact_chunks::{self as chunks, Put};
    let mut w = world();
    let chunk = MIN_CHUNK_BYTES as usize;
    let data: Vec<u8> = (0..2 * chunk + 100).map(|i| (i * 7 % 251) as u8).collect();
    let (first, second, last) = (&data[..chunk], &data[chunk..2 * chunk], &data[2 * chunk..]);
    let (_, _, id) = fetch_upload(&mut w, data.len() as u64);

    // Appended with its progress, in one step.
    assert_eq!(
        chunks::put(&w.conn, &id, 0, 0, first).unwrap(),
        Put::Stored(chunk as u64)
    );
    assert_eq!(artifacts::get(&w.conn, &id).unwrap().received, chunk as i64);
    assert_eq!(chunks::stored_bytes(&w.conn, &id).unwrap(), chunk as u64);
    // Sent again: compared, not stored twice; other bytes are refused.
    assert_eq!(
        chunks::put(&w.conn, &id, 0, 0, first).unwrap(),
        Put::Repeated
    );
    assert_eq!(
        chunks::put(&w.conn, &id, 0, 0, second).unwrap(),
        Put::Differs
    );
    // Past the next one: refused, nothing stored.
    let at = 2 * chunk as u64;
    assert_eq!(
        chunks::put(&w.conn, &id, 2, at, last).unwrap(),
        Put::OutOfOrder(chunk as u64)
    );
    assert_eq!(chunk_rows(&w, &id), 1);
    // Not ready while bytes are missing.
    let early = chunks::seal(&w.conn, &id, data.len() as u64, SHA);
    assert!(matches!(early, Err(StoreError::Conflict(_))), "{early:?}");
    chunks::put(&w.conn, &id, 1, chunk as u64, second).unwrap();
    chunks::put(&w.conn, &id, 2, at, last).unwrap();
    assert_eq!(
        chunks::stored_bytes(&w.conn, &id).unwrap(),
        data.len() as u64
    );
    // Read back chunk by chunk, byte-identical.
    let mut back = Vec::new();
    for n in 0..chunks::chunks_of(data.len() as u64, chunk as u64) {
        back.extend(chunks::chunk(&w.conn, &id, n).unwrap().unwrap());
    }
    assert_eq!(back, data);
    assert_eq!(chunks::chunk(&w.conn, &id, 3).unwrap(), None);

    // A restart takes the chunks with the progress.
    artifacts::restart(&w.conn, &id).unwrap();
    assert_eq!(chunk_rows(&w, &id), 0);
    assert_eq!(artifacts::get(&w.conn, &id).unwrap().received, 0);
    for (n, piece) in [first, second, last].iter().enumerate() {
        let put = chunks::put(&w.conn, &id, n as u64, (n * chunk) as u64, piece).unwrap();
        assert!(matches!(put, Put::Stored(_)), "{put:?}");
    }
    let sealed = chunks::seal(&w.conn, &id, data.len() as u64, SHA).unwrap();
    assert!(sealed.is_ready());
    assert_eq!(sealed.sha256, SHA);
    assert_eq!(chunks::put(&w.conn, &id, 0, 0, first).unwrap(), Put::Ready);
}

#[test]
fn chunks_in_the_database_go_with_their_artifact() {
    use super::artifact_chunks as chunks;
    let mut w = world();
    let (generation, command, id) = fetch_upload(&mut w, 10);
    chunks::put(&w.conn, &id, 0, 0, b"0123456789").unwrap();
    chunks::seal(&w.conn, &id, 10, SHA).unwrap();
    w.complete(generation, &command, Outcome::Done).unwrap();
    // A fetched file goes with the retention (here at once), and its chunks with it.
    let gone = retention::compact(&mut w.conn, 1, crate::timefmt::now_ms() + 10).unwrap();
    assert_eq!(gone.artifacts, vec![id.clone()]);
    assert_eq!(chunk_rows(&w, &id), 0);

    // An attached file: its row stands for it while it uploads, and a discarded one goes
    // with its chunks; a sealed one stays.
    let account = w.account.clone();
    chunks::begin_input(&w.conn, "in-1", &account, "a.txt", 0, MIN_CHUNK_BYTES).unwrap();
    chunks::put(&w.conn, "in-1", 0, 0, b"abc").unwrap();
    let uploading = artifacts::get(&w.conn, "in-1").unwrap();
    assert_eq!(
        (uploading.state, uploading.kind),
        (ArtifactState::Uploading, ArtifactKind::Input)
    );
    // Not attachable while it uploads.
    let early = artifacts::attachable(&w.conn, &account, &["in-1".into()]);
    assert!(matches!(early, Err(StoreError::NotFound(_))), "{early:?}");
    chunks::discard(&w.conn, "in-1").unwrap();
    assert!(artifacts::get(&w.conn, "in-1").is_err());
    assert_eq!(chunk_rows(&w, "in-1"), 0);
    chunks::begin_input(&w.conn, "in-2", &account, "b.txt", 3, MIN_CHUNK_BYTES).unwrap();
    chunks::put(&w.conn, "in-2", 0, 0, b"abc").unwrap();
    let input = chunks::seal(&w.conn, "in-2", 3, SHA).unwrap();
    assert!(input.is_ready());
    assert_eq!((input.size, input.received), (3, 3));
    chunks::discard(&w.conn, "in-2").unwrap();
    assert!(artifacts::get(&w.conn, "in-2").unwrap().is_ready());
    assert_eq!(
        artifacts::attachable(&w.conn, &account, &["in-2".into()])
            .unwrap()
            .len(),
        1
    );
}
