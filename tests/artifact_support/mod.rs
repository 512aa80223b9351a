//! Shared by tests/artifacts.rs: a Runner driven by hand over the machine API, the bytes the
//! control plane holds of an upload on either backend, and a fetch followed on a raw
//! connection.
#![allow(dead_code)]

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::{Env, STATUS, Server, http, machine};

pub fn sha256_hex(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// A Runner driven by hand over the machine API: connected, with a running `fetch`.
pub struct Raw {
    pub env: Env,
    pub server: Server,
    pub token: String,
    pub instance: String,
    pub generation: i64,
    pub command: String,
}

pub fn raw_runner() -> Raw {
    let env = Env::new();
    let server = env.bootstrap();
    let reg = env.register_runner(&server, "main", &[]);
    let instance = uuid::Uuid::new_v4().to_string();
    let (status, connected) = machine(
        &server,
        "/runner/v1/connect",
        &reg.token,
        &instance,
        None,
        &[],
        STATUS,
    );
    assert_eq!(status, 200, "{connected}");
    let generation = connected["generation"].as_i64().unwrap();
    let auth = format!("Bearer {}", env.stored_token());
    let (status, body) = http(
        &server.addr(),
        "POST",
        &format!("/api/v1/runners/{}/fetch", reg.id),
        &[
            ("Authorization", auth.as_str()),
            ("Content-Type", "application/json"),
        ],
        r#"{"path": "/srv/out.txt"}"#,
    )
    .unwrap();
    assert_eq!(status, 200, "{body}");
    let command = serde_json::from_str::<Value>(&body).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let call = |path: &str, body: &str| {
        machine(
            &server,
            path,
            &reg.token,
            &instance,
            Some(generation),
            &[],
            body,
        )
    };
    let (status, leased) = call("/runner/v1/lease", r#"{"max": 1, "wait_ms": 0}"#);
    assert_eq!(status, 200, "{leased}");
    let (status, started) = call(&format!("/runner/v1/commands/{command}/start"), "{}");
    assert_eq!(status, 200, "{started}");
    Raw {
        env,
        server,
        token: reg.token,
        instance,
        generation,
        command,
    }
}

impl Raw {
    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
        machine(
            &self.server,
            path,
            &self.token,
            &self.instance,
            Some(self.generation),
            &[],
            body,
        )
    }

    pub fn chunk(&self, id: &str, n: u64, data: &str, sha: &str) -> (u16, Value) {
        self.chunk_checked(id, n, data, ("yy-sha256", sha))
    }

    /// A chunk with the given checksum header (`yy-sha256` or `yy-crc32`).
    pub fn chunk_checked(&self, id: &str, n: u64, data: &str, check: (&str, &str)) -> (u16, Value) {
        let g = self.generation.to_string();
        let auth = format!("Bearer {}", self.token);
        let (status, text) = http(
            &self.server.addr(),
            "PUT",
            &format!("/runner/v1/artifacts/{id}/chunks/{n}"),
            &[
                ("Authorization", auth.as_str()),
                ("yy-protocol", "1"),
                ("yy-runner-instance", self.instance.as_str()),
                ("yy-generation", g.as_str()),
                check,
            ],
            data,
        )
        .unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    /// The bytes of upload `id` the control plane holds: its part file, or its chunks in
    /// the database.
    pub fn part_len(&self, id: &str) -> u64 {
        stored_len(&self.env, id, &format!("{id}.part"))
    }
}

/// The bytes the control plane holds of artifact `id`: the file `name` of its artifact
/// directory (SQLite), or its chunks in the database (PostgreSQL without --blob-dir).
pub fn stored_len(env: &Env, id: &str, name: &str) -> u64 {
    if env.on_postgres() {
        return env.sql_number(&format!(
            "SELECT coalesce(sum(length(data)), 0) FROM artifact_chunks WHERE artifact_id = '{id}'"
        )) as u64;
    }
    std::fs::metadata(env.data_dir().join("artifacts").join(name))
        .map(|m| m.len())
        .unwrap_or(0)
}

/// `GET /api/v1/commands/{id}/artifact` on a raw connection: its status, Content-Length,
/// and the stream positioned at the body.
pub fn follow(
    addr: &str,
    token: &str,
    command: &str,
) -> (u16, u64, std::io::BufReader<std::net::TcpStream>) {
    follow_answer(ask_follow(addr, token, command))
}

/// Sends the follow request of [`follow`].
pub fn ask_follow(addr: &str, token: &str, command: &str) -> std::net::TcpStream {
    use std::io::Write;
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(
        stream,
        "GET /api/v1/commands/{command}/artifact HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    stream
}

/// Reads the answer of [`ask_follow`] up to its body.
pub fn follow_answer(
    stream: std::net::TcpStream,
) -> (u16, u64, std::io::BufReader<std::net::TcpStream>) {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(stream);
    let (mut status, mut length) = (0, 0);
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some(s) = line.strip_prefix("HTTP/1.1 ") {
            status = s[..3].parse().unwrap();
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length: ") {
            length = v.parse().unwrap();
        }
    }
    (status, length, reader)
}
