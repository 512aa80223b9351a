-- yy control plane, schema version 7: artifacts. The bytes are files under the data
-- directory (artifacts/ID, artifacts/ID.part while uploading); only their metadata and
-- provenance live here.

CREATE TABLE artifacts (
    id             TEXT PRIMARY KEY,
    kind           TEXT NOT NULL CHECK (kind IN ('export', 'fetch', 'input')),
    name           TEXT NOT NULL,
    size           INTEGER NOT NULL,
    sha256         TEXT NOT NULL,
    chunk_size     INTEGER NOT NULL,
    received       INTEGER NOT NULL DEFAULT 0,   -- bytes verified and stored so far
    state          TEXT NOT NULL CHECK (state IN ('uploading', 'ready')),
    account_id     TEXT REFERENCES accounts(id), -- the owner; NULL: admins only (fetch)
    runner_id      TEXT REFERENCES runners(id),
    command_id     TEXT,                         -- the command that uploaded it
    session_id     TEXT REFERENCES sessions(id),
    turn_id        TEXT,
    agent_id       TEXT REFERENCES agents(id),
    profile        TEXT,
    computer_id    TEXT,
    source_path    TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    finished_at    INTEGER
);
CREATE INDEX artifacts_session ON artifacts(session_id, created_at);
CREATE INDEX artifacts_command ON artifacts(command_id);
CREATE INDEX artifacts_turn ON artifacts(turn_id);
