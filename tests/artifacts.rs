//! Artifacts end to end: a computer agent's `computer_export` (real dockerd, real
//! hermes-agent 0.19 Worker, the scripted fake model) streamed to the control plane in
//! verified chunks and fetched back byte-identical; the machine API's refusals of corrupt
//! and out-of-order chunks; resumed uploads; the limits; `yy chat --attach`.

mod artifact_support;
mod common;
mod computer_support;

use std::os::unix::fs::PermissionsExt;

use artifact_support::{ask_follow, follow, follow_answer, raw_runner, sha256_hex, stored_len};
use common::hermes::{WorkerSetup, worker_setup};
use common::{Env, Out, http, machine, session_of};
use computer_support::test_image;
use serde_json::{Value, json};

type Setup = WorkerSetup;

fn setup(script: Value) -> Option<Setup> {
    worker_setup(|| test_image().id.clone(), script)
}

/// The tool calls of the session's first turn.
fn tools(s: &Setup, chat: &Out) -> Vec<Value> {
    let shown = s.env.json(&["session", "show", &session_of(chat)]);
    assert_eq!(shown["turns"][0]["state"], "complete", "{shown}");
    shown["turns"][0]["tools"].as_array().unwrap().clone()
}

#[test]
fn an_exported_binary_comes_back_byte_identical() {
    let Some(s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "head -c 9000000 /dev/urandom > blob.bin && ln -s blob.bin link.bin && ln -s /etc/hostname out.txt && sha256sum blob.bin"}}},
        {"tool_call": {"name": "computer_export", "arguments": {"path": "blob.bin"}}},
        {"tool_call": {"name": "computer_export", "arguments": {"path": "link.bin"}}},
        {"tool_call": {"name": "computer_export", "arguments": {"path": "out.txt"}}},
        {"text": "exported"}
    ])) else {
        return;
    };
    let out = s.env.run(&["chat", "box", "make a blob and export it"]);
    out.ok();
    let tools = tools(&s, &out);
    let guest_sha = tools[0]["result"]["stdout"]
        .as_str()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let exported = &tools[1]["result"];
    assert_eq!(exported["size"], 9_000_000, "{exported}");
    assert_eq!(exported["sha256"], guest_sha.as_str(), "{exported}");
    let id = exported["artifact_id"].as_str().unwrap();
    // A symlink is followed the way the guest sees it (the guest agent exports it), and one
    // that leads out of the workspace is refused: the host never reads through either.
    let linked = &tools[2]["result"];
    assert_eq!(linked["sha256"], guest_sha.as_str(), "{linked}");
    let outside = tools[3]["result"]["error"].as_str().unwrap_or_default();
    assert!(outside.contains("outside the workspace"), "{}", tools[3]);

    // Provenance: the session, turn, agent, profile and computer.
    let session = session_of(&out);
    let listed = s.env.json(&["artifact", "list", "--session", &session]);
    assert_eq!(listed.as_array().unwrap().len(), 2, "{listed}");
    let a = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["id"] == id)
        .unwrap();
    assert_eq!(a["id"], id);
    assert_eq!(a["state"], "ready");
    assert_eq!(a["kind"], "export");
    assert_eq!(a["agent"], "box");
    assert_eq!(a["profile"], "default");
    assert_eq!(a["turn_seq"], 1);
    assert_eq!(a["name"], "blob.bin");
    let computer = s.env.json(&["computer", "list"])[0]["id"].clone();
    assert_eq!(a["computer_id"], computer);

    // Fetched by a unique prefix, checked, written atomically and privately.
    let dest = s.env.path("blob.out");
    let got = s
        .env
        .run(&["artifact", "get", &id[..10], "-o", dest.to_str().unwrap()]);
    got.ok();
    let bytes = std::fs::read(&dest).unwrap();
    assert_eq!(bytes.len(), 9_000_000);
    assert_eq!(sha256_hex(&bytes), guest_sha);
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // Not a terminal: progress (if any) as lines on stderr, never a bar's control codes.
    assert!(!got.stderr.contains('\r'), "{got:?}");
    s.env
        .run(&["artifact", "get", id, "-o", dest.to_str().unwrap()])
        .fails(2, "already exists");
    // The bytes are kept whole, nothing partial beside them: a file of the data directory
    // (SQLite), or chunks in the database (PostgreSQL without --blob-dir), 4 MiB each.
    let dir = s.env.data_dir().join("artifacts");
    if s.env.on_postgres() {
        let chunks = s.env.sql(&format!(
            "SELECT count(*), sum(length(data)) FROM artifact_chunks WHERE artifact_id = '{id}'"
        ));
        assert_eq!(
            chunks,
            [[Some("3".to_string()), Some("9000000".to_string())]]
        );
        assert_eq!(std::fs::read_dir(&dir).map_or(0, |d| d.count()), 0);
    } else {
        let stored = dir.join(id);
        assert_eq!(std::fs::metadata(&stored).unwrap().len(), 9_000_000);
        let parts: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".part"))
            .collect();
        assert!(parts.is_empty(), "{parts:?}");
    }
    assert_eq!(s.model.steps().len(), 5);
}

#[test]
fn a_26_mib_export_and_a_ninth_export_are_refused_to_the_model() {
    let mut script = vec![
        json!({"tool_call": {"name": "terminal", "arguments": {"command": "head -c 27262976 /dev/zero > big.bin; for i in 1 2 3 4 5 6 7 8 9; do echo $i > f$i.txt; done"}}}),
        json!({"tool_call": {"name": "computer_export", "arguments": {"path": "big.bin"}}}),
    ];
    for i in 1..=9 {
        script.push(json!({"tool_call": {"name": "computer_export", "arguments": {"path": format!("f{i}.txt")}}}));
    }
    script.push(json!({"text": "done"}));
    let Some(s) = setup(Value::Array(script)) else {
        return;
    };
    let out = s.env.run(&["chat", "box", "export too much"]);
    out.ok();
    let tools = tools(&s, &out);
    let big = tools[1]["result"]["error"].as_str().unwrap_or_default();
    assert!(big.contains("at most 25 MiB"), "{}", tools[1]);
    for (i, t) in tools[2..10].iter().enumerate() {
        assert!(
            t["result"]["artifact_id"].is_string(),
            "export {} : {t}",
            i + 1
        );
    }
    let ninth = tools[10]["result"]["error"].as_str().unwrap_or_default();
    assert!(ninth.contains("8 per turn"), "{}", tools[10]);
    let listed = s.env.json(&["artifact", "list"]);
    assert_eq!(listed.as_array().unwrap().len(), 8, "{listed}");
}

#[test]
fn an_attached_file_is_in_the_guest_workspace_before_the_model_starts() {
    let Some(s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": "sha256sum attachments/data.csv"}}},
        {"text": "read it"}
    ])) else {
        return;
    };
    let file = s.env.path("data.csv");
    let content: Vec<u8> = (0..200_000u32).flat_map(|i| i.to_le_bytes()).collect();
    std::fs::write(&file, &content).unwrap();
    let out = s.env.run(&[
        "chat",
        "box",
        "look at /etc/hostname and my file",
        "--attach",
        file.to_str().unwrap(),
    ]);
    out.ok();
    let tools = tools(&s, &out);
    let stdout = tools[0]["result"]["stdout"].as_str().unwrap();
    assert!(stdout.starts_with(&sha256_hex(&content)), "{stdout}");
    // The model was told where the file is.
    let first = s.model.steps()[0]["body"]["messages"].to_string();
    assert!(first.contains("/workspace/attachments/data.csv"), "{first}");
    // An attachment over the limit is refused before anything is sent.
    let big = s.env.path("big.bin");
    std::fs::write(&big, vec![0u8; 16 * 1024 * 1024 + 1]).unwrap();
    s.env
        .run(&["chat", "box", "x", "--attach", big.to_str().unwrap()])
        .fails(6, "at most 16 MiB");
}

/// `POST /api/v1/uploads` (what `yy chat --attach` sends): a damaged body is refused and
/// leaves nothing behind; an intact one larger than a chunk of the database comes back
/// byte-identical.
#[test]
fn an_attached_file_is_kept_whole_or_not_at_all() {
    let env = Env::new();
    let server = env.bootstrap();
    let auth = format!("Bearer {}", env.stored_token());
    // Text (the raw HTTP helper sends strings), over one 4 MiB chunk.
    let data: String = (0..(5 * 1024 * 1024 + 123))
        .map(|i| (b'a' + (i * 11 % 26) as u8) as char)
        .collect();
    let upload = |sha: &str| {
        http(
            &server.addr(),
            "POST",
            "/api/v1/uploads?name=notes.txt",
            &[("Authorization", auth.as_str()), ("yy-sha256", sha)],
            &data,
        )
        .unwrap()
    };
    let (status, body) = upload(&sha256_hex(b"other bytes"));
    assert_eq!(status, 422, "{body}");
    assert!(body.contains("arrived damaged"), "{body}");
    assert_eq!(env.json(&["artifact", "list"]), json!([]));
    let dir = env.data_dir().join("artifacts");
    assert_eq!(std::fs::read_dir(&dir).map_or(0, |d| d.count()), 0);
    if env.on_postgres() {
        assert_eq!(env.sql_number("SELECT count(*) FROM artifact_chunks"), 0);
    }

    let (status, body) = upload(&sha256_hex(data.as_bytes()));
    assert_eq!(status, 200, "{body}");
    let a: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(a["state"], "ready", "{a}");
    assert_eq!(a["kind"], "input", "{a}");
    assert_eq!(a["size"], data.len(), "{a}");
    let id = a["id"].as_str().unwrap();
    assert_eq!(stored_len(&env, id, id), data.len() as u64);
    let dest = env.path("notes.out");
    env.run(&["artifact", "get", id, "-o", dest.to_str().unwrap()])
        .ok();
    assert!(std::fs::read(&dest).unwrap() == data.as_bytes());
}

#[test]
fn corrupt_chunks_are_refused_and_an_interrupted_upload_resumes_without_a_partial_artifact() {
    let r = raw_runner();
    let chunk = 64 * 1024;
    // Three chunks of text (the raw HTTP helper sends strings), the last one short.
    let data: String = (0..(2 * chunk + 1000))
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let pieces = [&data[..chunk], &data[chunk..2 * chunk], &data[2 * chunk..]];
    let begin = json!({
        "command_id": r.command, "name": "out.txt", "size": data.len(),
        "sha256": sha256_hex(data.as_bytes()), "chunk_size": chunk,
        "source_path": "/srv/out.txt",
    })
    .to_string();
    let (status, up) = r.post("/runner/v1/artifacts", &begin);
    assert_eq!(status, 200, "{up}");
    let id = up["id"].as_str().unwrap().to_string();
    assert_eq!(up["received"], 0);

    // A chunk whose bytes do not match its SHA-256 is refused; nothing is stored.
    let (status, body) = r.chunk(&id, 0, pieces[0], &sha256_hex(b"something else"));
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "corrupt");
    assert_eq!(r.part_len(&id), 0);
    let shown = r.env.json(&["artifact", "show", &id]);
    assert_eq!(shown["received"], 0, "{shown}");
    assert_eq!(shown["state"], "uploading");
    // So is one whose CRC-32 (what Runners send) does not match.
    let wrong_crc = format!("{:08x}", !crc32fast::hash(pieces[0].as_bytes()));
    let (status, body) = r.chunk_checked(&id, 0, pieces[0], ("yy-crc32", &wrong_crc));
    assert_eq!(status, 422, "{body}");
    assert_eq!(r.part_len(&id), 0);
    let (status, body) = r.chunk_checked(&id, 0, pieces[0], ("yy-crc32", "xyz"));
    assert_eq!(status, 400, "{body}");
    // Out of order is refused too.
    let (status, body) = r.chunk(&id, 1, pieces[1], &sha256_hex(pieces[1].as_bytes()));
    assert_eq!(status, 409, "{body}");

    let crc = format!("{:08x}", crc32fast::hash(pieces[0].as_bytes()));
    let (status, body) = r.chunk_checked(&id, 0, pieces[0], ("yy-crc32", &crc));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["received"], chunk);
    // A retried chunk (its answer lost) is accepted once more and changes nothing.
    let (status, body) = r.chunk(&id, 0, pieces[0], &sha256_hex(pieces[0].as_bytes()));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["received"], chunk);
    // The control plane writes a chunk while it arrives: one refused after the first keeps
    // nothing of it (corrupt, short, or longer than the chunk size).
    let wrong_crc = format!("{:08x}", !crc32fast::hash(pieces[1].as_bytes()));
    let (status, body) = r.chunk_checked(&id, 1, pieces[1], ("yy-crc32", &wrong_crc));
    assert_eq!(status, 422, "{body}");
    assert_eq!(r.part_len(&id), chunk as u64);
    let short = &pieces[1][..1000];
    let (status, body) = r.chunk(&id, 1, short, &sha256_hex(short.as_bytes()));
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not 1000"),
        "{body}"
    );
    assert_eq!(r.part_len(&id), chunk as u64);
    let long = &data[chunk..];
    let (status, body) = r.chunk(&id, 1, long, &sha256_hex(long.as_bytes()));
    assert_eq!(status, 400, "{body}");
    assert_eq!(r.part_len(&id), chunk as u64);

    // Interrupted here: the partial upload is not an artifact anyone can get.
    let (status, body) = r.post(&format!("/runner/v1/artifacts/{id}/finish"), "{}");
    assert_eq!(status, 409, "{body}");
    let dest = r.env.path("partial.txt");
    r.env
        .run(&["artifact", "get", &id, "-o", dest.to_str().unwrap()])
        .fails(6, "still uploading");
    assert!(!dest.exists());

    // Beginning the same file again resumes from the last verified chunk.
    let (status, again) = r.post("/runner/v1/artifacts", &begin);
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["id"], id.as_str());
    assert_eq!(again["received"], chunk);
    for (n, piece) in pieces.iter().enumerate().skip(1) {
        let (status, body) = r.chunk(&id, n as u64, piece, &sha256_hex(piece.as_bytes()));
        assert_eq!(status, 200, "{body}");
    }
    let (status, done) = r.post(&format!("/runner/v1/artifacts/{id}/finish"), "{}");
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["state"], "ready");
    r.env
        .run(&["artifact", "get", &id, "-o", dest.to_str().unwrap()])
        .ok();
    assert_eq!(std::fs::read(&dest).unwrap(), data.as_bytes());
    let shown = r.env.json(&["artifact", "show", &id]);
    assert_eq!(shown["kind"], "fetch");
    assert_eq!(shown["source_path"], "/srv/out.txt");
    assert_eq!(shown["owner"], Value::Null);
}

#[test]
fn an_upload_whose_whole_file_does_not_match_starts_over() {
    let r = raw_runner();
    let chunk = 64 * 1024;
    let data: String = "x".repeat(chunk + 10);
    // Announce a SHA-256 the bytes will not have: every chunk verifies, the whole does not.
    let begin = json!({
        "command_id": r.command, "name": "lie.txt", "size": data.len(),
        "sha256": sha256_hex(b"not these bytes"), "chunk_size": chunk,
    })
    .to_string();
    let (_, up) = r.post("/runner/v1/artifacts", &begin);
    let id = up["id"].as_str().unwrap().to_string();
    for (n, piece) in [&data[..chunk], &data[chunk..]].iter().enumerate() {
        let (status, body) = r.chunk(&id, n as u64, piece, &sha256_hex(piece.as_bytes()));
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = r.post(&format!("/runner/v1/artifacts/{id}/finish"), "{}");
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("from the start")
    );
    let shown = r.env.json(&["artifact", "show", &id]);
    assert_eq!(shown["state"], "uploading");
    assert_eq!(shown["received"], 0);
    assert_eq!(r.part_len(&id), 0);
    assert_eq!(stored_len(&r.env, &id, &id), 0, "never in place");
    // Stale generations transfer nothing.
    let (status, body) = machine(
        &r.server,
        &format!("/runner/v1/artifacts/{id}/finish"),
        &r.token,
        &r.instance,
        Some(r.generation - 1),
        &[],
        "{}",
    );
    assert_eq!(status, 409, "{body}");
}

#[test]
fn an_upload_begun_without_its_sha256_is_checked_against_the_one_the_finish_carries() {
    let r = raw_runner();
    let chunk = 64 * 1024;
    let data: String = (0..(chunk + 500))
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let pieces = [&data[..chunk], &data[chunk..]];
    let begin = json!({
        "command_id": r.command, "name": "later.txt", "size": data.len(), "chunk_size": chunk,
    })
    .to_string();
    let (status, up) = r.post("/runner/v1/artifacts", &begin);
    assert_eq!(status, 200, "{up}");
    let id = up["id"].as_str().unwrap().to_string();
    let send_all = || {
        for (n, piece) in pieces.iter().enumerate() {
            let crc = format!("{:08x}", crc32fast::hash(piece.as_bytes()));
            let (status, body) = r.chunk_checked(&id, n as u64, piece, ("yy-crc32", &crc));
            assert_eq!(status, 200, "{body}");
        }
    };
    send_all();
    let finish = format!("/runner/v1/artifacts/{id}/finish");
    // Neither the begin nor the finish named the SHA-256: nothing to check against.
    let (status, body) = r.post(&finish, "{}");
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("send it with the finish")
    );
    // A SHA-256 the bytes do not have: refused, and the upload starts over.
    let wrong = json!({ "sha256": sha256_hex(b"other bytes") }).to_string();
    let (status, body) = r.post(&finish, &wrong);
    assert_eq!(status, 422, "{body}");
    assert_eq!(r.part_len(&id), 0);
    assert_eq!(r.env.json(&["artifact", "show", &id])["received"], 0);
    send_all();
    let right = json!({ "sha256": sha256_hex(data.as_bytes()) }).to_string();
    let (status, done) = r.post(&finish, &right);
    assert_eq!(status, 200, "{done}");
    assert_eq!(done["state"], "ready");
    let shown = r.env.json(&["artifact", "show", &id]);
    assert_eq!(shown["sha256"], sha256_hex(data.as_bytes()).as_str());
    let dest = r.env.path("later.txt");
    r.env
        .run(&["artifact", "get", &id, "-o", dest.to_str().unwrap()])
        .ok();
    assert_eq!(std::fs::read(&dest).unwrap(), data.as_bytes());
}

#[test]
fn a_fetch_is_followed_chunk_by_chunk_while_it_uploads_and_cut_off_when_it_starts_over() {
    use std::io::Read;
    let r = raw_runner();
    let chunk = 64 * 1024;
    let data: String = (0..(2 * chunk + 1000))
        .map(|i| (b'a' + (i * 7 % 26) as u8) as char)
        .collect();
    let pieces = [&data[..chunk], &data[chunk..2 * chunk], &data[2 * chunk..]];
    let crc = |p: &str| format!("{:08x}", crc32fast::hash(p.as_bytes()));
    // The follow is asked for before the Runner begins: it answers once the upload exists.
    let admin = r.env.stored_token();
    // Asked, and read by the server (whose handler subscribes, then looks for the upload).
    let stream = ask_follow(&r.server.addr(), &admin, &r.command);
    common::waits::wait_read_by_peer(&stream, "the server to read the follow request");
    let asked = std::thread::spawn({
        move || {
            let (status, length, mut body) = follow_answer(stream);
            // Nothing past the first verified chunk can arrive before the second is sent.
            let mut first = vec![0u8; 64 * 1024];
            body.read_exact(&mut first).unwrap();
            (status, length, first, body)
        }
    });
    let begin = json!({
        "command_id": r.command, "name": "out.txt", "size": data.len(),
        "chunk_size": chunk, "source_path": "/srv/out.txt",
    })
    .to_string();
    let (status, up) = r.post("/runner/v1/artifacts", &begin);
    assert_eq!(status, 200, "{up}");
    let id = up["id"].as_str().unwrap().to_string();
    let (status, body) = r.chunk_checked(&id, 0, pieces[0], ("yy-crc32", &crc(pieces[0])));
    assert_eq!(status, 200, "{body}");
    let (status, length, first, mut body) = asked.join().unwrap();
    assert_eq!((status, length), (200, data.len() as u64));
    assert_eq!(
        first,
        pieces[0].as_bytes(),
        "the first chunk arrived on its own"
    );
    for (n, piece) in pieces.iter().enumerate().skip(1) {
        let (status, answer) = r.chunk_checked(&id, n as u64, piece, ("yy-crc32", &crc(piece)));
        assert_eq!(status, 200, "{answer}");
    }
    let finish = json!({"sha256": sha256_hex(data.as_bytes())}).to_string();
    let (status, done) = r.post(&format!("/runner/v1/artifacts/{id}/finish"), &finish);
    assert_eq!(status, 200, "{done}");
    let mut rest = Vec::new();
    body.read_to_end(&mut rest).unwrap();
    assert_eq!(
        rest,
        &data.as_bytes()[chunk..],
        "the rest followed after the finish"
    );

    // An upload that starts over cuts its follow off short of the end: the last byte
    // waits for the whole file's check, which fails here.
    let r = raw_runner();
    let admin = r.env.stored_token();
    let begin = json!({
        "command_id": r.command, "name": "out.txt", "size": data.len(), "chunk_size": chunk,
    })
    .to_string();
    let (status, up) = r.post("/runner/v1/artifacts", &begin);
    assert_eq!(status, 200, "{up}");
    let id = up["id"].as_str().unwrap().to_string();
    let (status, length, mut body) = follow(&r.server.addr(), &admin, &r.command);
    assert_eq!((status, length), (200, data.len() as u64));
    for (n, piece) in pieces.iter().enumerate() {
        let (status, answer) = r.chunk_checked(&id, n as u64, piece, ("yy-crc32", &crc(piece)));
        assert_eq!(status, 200, "{answer}");
    }
    let mut most = vec![0u8; data.len() - 1];
    body.read_exact(&mut most).unwrap();
    let lie = json!({"sha256": sha256_hex(b"other bytes")}).to_string();
    let (status, refused) = r.post(&format!("/runner/v1/artifacts/{id}/finish"), &lie);
    assert_eq!(status, 422, "{refused}");
    let mut tail = Vec::new();
    let _ = body.read_to_end(&mut tail);
    assert!(
        tail.is_empty(),
        "the last byte of a refused file never went out"
    );

    // A Runner's token is not an admin's; an unknown command has nothing to follow.
    let (status, _, _) = follow(&r.server.addr(), &r.token, &r.command);
    assert_eq!(status, 401);
    let (status, _, _) = follow(&r.server.addr(), &admin, "not-a-command");
    assert_eq!(status, 404);
}

/// Issue 23, finding 4: a 0-byte export failed five times with HTTP 500 "sealing an
/// artifact: No such file or directory" (no chunk, so no part file). An empty file is a
/// valid artifact: fetched from a Runner's root and exported from a computer.
#[test]
fn an_empty_file_is_a_valid_artifact() {
    let env = Env::new();
    let root = env.path("roots");
    std::fs::create_dir(&root).unwrap();
    std::fs::write(root.join("empty.txt"), b"").unwrap();
    let server = env.bootstrap();
    let reg = env.register_runner(
        &server,
        "main",
        &["--artifact-root", root.to_str().unwrap()],
    );
    let (_runner, _) = env.start_online(&reg, "a", 0);
    let out = env.path("fetched.txt");
    let empty = root.join("empty.txt");
    let fetched = env.run(&[
        "runner",
        "fetch",
        &reg.id,
        empty.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    fetched.ok();
    assert_eq!(std::fs::read(&out).unwrap(), b"");
    let listed = env.json(&["artifact", "list"]);
    assert_eq!(listed[0]["state"], "ready", "{listed}");
    assert_eq!(listed[0]["size"], 0, "{listed}");
    assert_eq!(listed[0]["sha256"], sha256_hex(b""), "{listed}");

    // The model's export of an empty file in its computer.
    let Some(s) = setup(json!([
        {"tool_call": {"name": "terminal", "arguments": {"command": ": > empty.bin"}}},
        {"tool_call": {"name": "computer_export", "arguments": {"path": "empty.bin"}}},
        {"text": "exported"}
    ])) else {
        return;
    };
    let out = s.env.run(&["chat", "box", "export an empty file"]);
    out.ok();
    let tools = tools(&s, &out);
    let exported = &tools[1]["result"];
    assert_eq!(exported["size"], 0, "{exported}");
    assert_eq!(exported["sha256"], sha256_hex(b""), "{exported}");
    let id = exported["artifact_id"].as_str().unwrap();
    let dest = s.env.path("empty.out");
    s.env
        .run(&["artifact", "get", id, "-o", dest.to_str().unwrap()])
        .ok();
    assert_eq!(std::fs::read(&dest).unwrap(), b"");
}
