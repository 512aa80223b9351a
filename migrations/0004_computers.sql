-- yy control plane, schema version 4: isolated computers, their fenced leases, and the
-- audit log of operator actions on them.

ALTER TABLE runners ADD COLUMN computer_image TEXT;  -- full image id (sha256:...), or NULL

CREATE TABLE computers (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    agent_id     TEXT NOT NULL REFERENCES agents(id),
    runner_id    TEXT NOT NULL REFERENCES runners(id),
    image_id     TEXT NOT NULL,
    guest_cwd    TEXT NOT NULL,
    state        TEXT NOT NULL CHECK (state IN ('starting', 'running', 'stopping', 'stopped', 'failed', 'removed')),
    -- One fence counter for the computer's whole life: it only grows. Every operation
    -- carries it, and the Runner refuses a smaller one.
    fence        INTEGER NOT NULL,
    -- The scheduling round holding the execution lease (server-generated), or NULL.
    lease_round  TEXT,
    container_id TEXT,
    last_command TEXT,                               -- the command that changed its state last
    last_error   TEXT,
    resources    TEXT,                               -- JSON: limits as the Runner applied them
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE UNIQUE INDEX computers_one_per_agent ON computers(agent_id) WHERE state != 'removed';

CREATE TABLE audit_log (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    at         INTEGER NOT NULL,
    account_id TEXT NOT NULL,
    action     TEXT NOT NULL,
    target     TEXT NOT NULL,
    detail     TEXT NOT NULL                         -- JSON
);
