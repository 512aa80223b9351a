-- yy control plane, schema version 2: the durable per-Runner command queue.

CREATE TABLE runner_commands (
    seq                 INTEGER PRIMARY KEY AUTOINCREMENT, -- queue order
    id                  TEXT NOT NULL UNIQUE,
    runner_id           TEXT NOT NULL REFERENCES runners(id),
    kind                TEXT NOT NULL,
    payload             TEXT NOT NULL,                     -- JSON
    payload_bytes       INTEGER NOT NULL,
    state               TEXT NOT NULL CHECK (state IN
        ('pending', 'leased', 'running', 'done', 'failed', 'cancelled', 'expired', 'uncertain')),
    created_at          INTEGER NOT NULL,
    deadline_at         INTEGER NOT NULL,
    leased_at           INTEGER,
    lease_generation    INTEGER,
    started_at          INTEGER,
    finished_at         INTEGER,
    cancel_requested_at INTEGER,
    result              TEXT,                              -- JSON, at most 8 MiB
    error               TEXT
);
CREATE INDEX runner_commands_queue ON runner_commands(runner_id, state, seq);
