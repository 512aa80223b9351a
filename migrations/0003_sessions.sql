-- yy control plane, schema version 3: Bot sessions carried by Runners to Hermes.

CREATE TABLE sessions (
    id                TEXT PRIMARY KEY,
    account_id        TEXT NOT NULL REFERENCES accounts(id),
    agent_id          TEXT NOT NULL REFERENCES agents(id),
    runner_id         TEXT REFERENCES runners(id),  -- the channel whose Hermes holds it
    hermes_session_id TEXT,
    state             TEXT NOT NULL CHECK (state IN ('idle', 'running', 'pending_cleanup', 'closed')),
    stop_command_id   TEXT,                          -- the last stop, until it is confirmed
    cleanup_reason    TEXT,                          -- why a stop could not be confirmed
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL
);
CREATE INDEX sessions_agent ON sessions(agent_id, updated_at);

CREATE TABLE session_turns (
    id          TEXT PRIMARY KEY,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    seq         INTEGER NOT NULL,
    runner_id   TEXT NOT NULL REFERENCES runners(id),
    command_id  TEXT NOT NULL,
    message     TEXT NOT NULL,
    state       TEXT NOT NULL CHECK (state IN
        ('queued', 'running', 'complete', 'interrupted', 'error', 'uncertain')),
    final_text  TEXT,
    usage       TEXT,                                -- JSON
    error       TEXT,
    created_at  INTEGER NOT NULL,
    finished_at INTEGER,
    -- An uncertain turn is checked later through its original Hermes session, never replayed.
    check_command_id TEXT,
    check_result     TEXT,                           -- JSON: what Hermes showed
    UNIQUE (session_id, seq)
);
CREATE UNIQUE INDEX session_turns_command ON session_turns(command_id);

-- What a turn streamed, in order: text deltas, tool starts and results, errors.
CREATE TABLE session_events (
    session_id TEXT NOT NULL REFERENCES sessions(id),
    seq        INTEGER NOT NULL,
    turn_id    TEXT NOT NULL,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,                        -- JSON
    created_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, seq)
);
