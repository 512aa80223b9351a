-- yy control plane: the current schema, used to create a fresh database in one step.
-- It must equal what migrations/ produce from an empty database (a test compares them).
-- Timestamps are Unix milliseconds.

CREATE TABLE accounts (
    id            TEXT PRIMARY KEY,
    username      TEXT NOT NULL UNIQUE,
    password_hash TEXT NOT NULL,
    admin         INTEGER NOT NULL DEFAULT 0 CHECK (admin IN (0, 1)),
    created_at    INTEGER NOT NULL,
    disabled_at   INTEGER                        -- set: no login, no token works
);

-- API tokens are stored as SHA-256 of the token; the token itself exists only on the client.
CREATE TABLE api_tokens (
    id           TEXT PRIMARY KEY,
    account_id   TEXT NOT NULL REFERENCES accounts(id),
    token_hash   TEXT NOT NULL UNIQUE,
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE INDEX api_tokens_account ON api_tokens(account_id);

CREATE TABLE sources (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '',
    created_at  INTEGER NOT NULL,
    archived_at INTEGER
);
CREATE UNIQUE INDEX sources_active_name ON sources(name) WHERE archived_at IS NULL;

CREATE TABLE profiles (
    id          TEXT PRIMARY KEY,
    name        TEXT NOT NULL,
    cwd         TEXT,
    created_at  INTEGER NOT NULL,
    archived_at INTEGER
);
CREATE UNIQUE INDEX profiles_active_name ON profiles(name) WHERE archived_at IS NULL;

CREATE TABLE agents (
    id          TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts(id),
    name        TEXT NOT NULL,
    source_id   TEXT NOT NULL REFERENCES sources(id),
    profile_id  TEXT NOT NULL REFERENCES profiles(id),
    env         TEXT NOT NULL CHECK (env IN ('host', 'computer')),
    manage_team INTEGER NOT NULL DEFAULT 0 CHECK (manage_team IN (0, 1)),
    created_at  INTEGER NOT NULL,
    archived_at INTEGER,
    browser     INTEGER NOT NULL DEFAULT 0 CHECK (browser IN (0, 1))
);
CREATE UNIQUE INDEX agents_active_name ON agents(account_id, name) WHERE archived_at IS NULL;

CREATE TABLE runners (
    id               TEXT PRIMARY KEY,
    source_id        TEXT NOT NULL REFERENCES sources(id),
    token_hash       TEXT NOT NULL UNIQUE,
    allowed_profiles TEXT NOT NULL,               -- JSON array of profile names
    artifact_roots   TEXT NOT NULL,               -- JSON array of absolute host paths
    server_url       TEXT NOT NULL,
    hermes_url       TEXT NOT NULL,
    created_at       INTEGER NOT NULL,
    disabled_at      INTEGER,
    -- Connection state, written by the machine API.
    generation       INTEGER NOT NULL DEFAULT 0, -- grows with every connect
    instance_id      TEXT,                       -- UUID of the process that holds the generation
    last_seen_at     INTEGER,
    version          TEXT,
    capabilities     TEXT NOT NULL DEFAULT '[]', -- JSON array
    status           TEXT,                       -- JSON object reported by the Runner
    computer_image   TEXT,                       -- full image id (sha256:...), or NULL
    network          TEXT NOT NULL DEFAULT 'none' CHECK (network IN ('none', 'public-web')),
    -- Image updates (migration 10): the image replaced last, the one being verified or
    -- waiting for the Runner to be idle, the command verifying it, and the last outcome.
    previous_image   TEXT,
    pending_image    TEXT,
    pending_state    TEXT CHECK (pending_state IN ('verifying', 'accepted')),
    pending_command  TEXT,
    image_note       TEXT,
    -- Token rotation (migration 16): when the current token was issued, the pending one
    -- (issued, not used yet) and an admin's request to rotate at the next contact.
    token_issued_at      INTEGER,
    next_token_hash      TEXT,
    next_token_issued_at INTEGER,
    rotate_requested_at  INTEGER,
    -- What waits for it (migration 25), kept by the triggers on runner_commands.
    pending_commands INTEGER NOT NULL DEFAULT 0,
    pending_bytes    INTEGER NOT NULL DEFAULT 0
);
-- One enabled Runner per source, enforced by the database itself.
CREATE UNIQUE INDEX runners_one_enabled_per_source ON runners(source_id) WHERE disabled_at IS NULL;
CREATE UNIQUE INDEX runners_next_token ON runners(next_token_hash) WHERE next_token_hash IS NOT NULL;
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
    error               TEXT,
    delivered_at        INTEGER                            -- first time an admin got the result
);
CREATE INDEX runner_commands_queue ON runner_commands(runner_id, state, seq);
CREATE TRIGGER runner_commands_pending_added AFTER INSERT ON runner_commands
WHEN NEW.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands + 1,
                       pending_bytes = pending_bytes + NEW.payload_bytes
    WHERE id = NEW.runner_id;
END;
CREATE TRIGGER runner_commands_pending_left AFTER UPDATE OF state, runner_id, payload_bytes ON runner_commands
WHEN OLD.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands - 1,
                       pending_bytes = pending_bytes - OLD.payload_bytes
    WHERE id = OLD.runner_id;
END;
CREATE TRIGGER runner_commands_pending_entered AFTER UPDATE OF state, runner_id, payload_bytes ON runner_commands
WHEN NEW.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands + 1,
                       pending_bytes = pending_bytes + NEW.payload_bytes
    WHERE id = NEW.runner_id;
END;
CREATE TRIGGER runner_commands_pending_deleted AFTER DELETE ON runner_commands
WHEN OLD.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands - 1,
                       pending_bytes = pending_bytes - OLD.payload_bytes
    WHERE id = OLD.runner_id;
END;
-- A Runner's pending commands past their deadline, found by the lease without reading the
-- whole backlog (the sweep reads only the pending commands' entries).
CREATE INDEX runner_commands_pending_deadline ON runner_commands(runner_id, deadline_at) WHERE state = 'pending';
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
    updated_at   INTEGER NOT NULL,
    -- The network mode it was last started with (its Runner's mode at that start).
    network      TEXT NOT NULL DEFAULT 'none' CHECK (network IN ('none', 'public-web')),
    -- JSON: what its workspace takes, as its Runner last reported it.
    workspace_usage TEXT,
    -- When it was last used (a turn, an exec, takeover, screen input; reads do not count).
    last_used_at INTEGER,
    -- Why yy stopped it by itself (`idle 30m`, `reclaimed for agent NAME`); a start clears it.
    stop_reason  TEXT
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

CREATE TABLE teams (
    id          TEXT PRIMARY KEY,
    account_id  TEXT NOT NULL REFERENCES accounts(id),
    name        TEXT NOT NULL,
    created_by  TEXT NOT NULL,                       -- 'operator' or the creating agent's id
    created_at  INTEGER NOT NULL,
    archived_at INTEGER
);
CREATE UNIQUE INDEX teams_active_name ON teams(account_id, name) WHERE archived_at IS NULL;

CREATE TABLE team_members (
    team_id  TEXT NOT NULL REFERENCES teams(id),
    agent_id TEXT NOT NULL REFERENCES agents(id),
    role     TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    added_at INTEGER NOT NULL,
    PRIMARY KEY (team_id, agent_id)
);
CREATE UNIQUE INDEX team_members_one_admin ON team_members(team_id) WHERE role = 'admin';

CREATE TABLE goals (
    id                TEXT PRIMARY KEY,
    account_id        TEXT NOT NULL REFERENCES accounts(id),
    team_id           TEXT NOT NULL REFERENCES teams(id),
    title             TEXT NOT NULL,
    criteria          TEXT NOT NULL,
    state             TEXT NOT NULL CHECK (state IN
        ('active', 'waiting_user', 'stopped', 'completed', 'blocked', 'cancelled')),
    reason            TEXT,                          -- why it stopped, waits or ended
    origin_session_id TEXT REFERENCES sessions(id),  -- where the result is delivered
    admin_session_id  TEXT REFERENCES sessions(id),  -- where the admin plans and reviews
    created_by        TEXT NOT NULL,                 -- 'operator' or the creating agent's id
    -- Each user instruction (create, resume) is one authorization; attempts and automatic
    -- wake-ups are counted within it, and helpers are bound to it.
    generation        INTEGER NOT NULL DEFAULT 1,
    wakeups           INTEGER NOT NULL DEFAULT 0,
    -- The admin needs a turn when attention > seen (a result to review, a plan to make).
    attention         INTEGER NOT NULL DEFAULT 1,
    seen              INTEGER NOT NULL DEFAULT 0,
    admin_turn_id     TEXT,                          -- the admin's last turn for this goal
    summary           TEXT,                          -- the admin's words when it ended
    created_at        INTEGER NOT NULL,
    updated_at        INTEGER NOT NULL,
    ended_at          INTEGER
);
CREATE INDEX goals_team ON goals(team_id, state);

CREATE TABLE subtasks (
    id            TEXT PRIMARY KEY,
    goal_id       TEXT NOT NULL REFERENCES goals(id),
    seq           INTEGER NOT NULL,
    title         TEXT NOT NULL,
    owner_id      TEXT NOT NULL REFERENCES agents(id),
    criteria      TEXT NOT NULL,
    inputs        TEXT NOT NULL,                     -- JSON: {"text": ..., "artifacts": [ids]}
    state         TEXT NOT NULL CHECK (state IN
        ('queued', 'running', 'review', 'accepted', 'waiting_user', 'blocked', 'cancelled')),
    attempts      INTEGER NOT NULL DEFAULT 0,        -- turns started in this authorization
    note          TEXT,                              -- the last review note
    session_id    TEXT REFERENCES sessions(id),      -- the owner's session for this subtask
    turn_id       TEXT,                              -- the owner's current or last turn
    result        TEXT,                              -- JSON: {"text", "turn_state", "artifacts"}
    next_look_at  INTEGER NOT NULL DEFAULT 0,        -- back-off while an uncertain turn is checked
    looks         INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    UNIQUE (goal_id, seq)
);
CREATE INDEX subtasks_state ON subtasks(state, goal_id);

CREATE TABLE subtask_deps (
    subtask_id TEXT NOT NULL REFERENCES subtasks(id),
    depends_on TEXT NOT NULL REFERENCES subtasks(id),
    PRIMARY KEY (subtask_id, depends_on)
);

-- The result of an ended goal, on its way to the origin session: one per goal and
-- authorization, admitted as a turn of that session exactly once.
CREATE TABLE deliveries (
    id           TEXT PRIMARY KEY,
    goal_id      TEXT NOT NULL REFERENCES goals(id),
    generation   INTEGER NOT NULL,
    session_id   TEXT NOT NULL REFERENCES sessions(id),
    state        TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'failed')),
    payload      TEXT NOT NULL,                      -- JSON: the structured result
    turn_id      TEXT,
    error        TEXT,
    created_at   INTEGER NOT NULL,
    delivered_at INTEGER,
    UNIQUE (goal_id, generation)
);

-- Temporary helpers: agents bound to a goal and its generation, retired when either ends.
CREATE TABLE helpers (
    agent_id   TEXT PRIMARY KEY REFERENCES agents(id),
    goal_id    TEXT NOT NULL REFERENCES goals(id),
    account_id TEXT NOT NULL REFERENCES accounts(id),
    generation INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    retired_at INTEGER
);
CREATE INDEX helpers_account ON helpers(account_id, retired_at);

-- Opaque per-turn ids for team tools: bound to the turn's account, source, session and
-- agent; valid only while that turn is queued or running.
CREATE TABLE tool_grants (
    id         TEXT PRIMARY KEY,                    -- SHA-256 (hex) of the opaque id
    turn_id    TEXT NOT NULL UNIQUE,
    account_id TEXT NOT NULL REFERENCES accounts(id),
    source_id  TEXT NOT NULL REFERENCES sources(id),
    session_id TEXT NOT NULL REFERENCES sessions(id),
    agent_id   TEXT NOT NULL REFERENCES agents(id),
    created_at INTEGER NOT NULL
);

-- Agents an admin agent created with its team tools, and the isolation they keep: an
-- isolated admin's members never become host agents.
CREATE TABLE agent_origins (
    agent_id   TEXT PRIMARY KEY REFERENCES agents(id),
    created_by TEXT NOT NULL REFERENCES agents(id),
    isolated   INTEGER NOT NULL CHECK (isolated IN (0, 1))
);

CREATE TABLE computer_controls (
    computer_id   TEXT PRIMARY KEY REFERENCES computers(id),
    control_fence INTEGER NOT NULL,
    holder        TEXT REFERENCES accounts(id),
    expires_at    INTEGER,
    paused        INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1))
);

-- The server's identity: a backup records it, a restore of another server's backup must be
-- asked for (`yy restore --from-other-server`).
CREATE TABLE server_identity (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    id        TEXT NOT NULL                          -- 32 hex digits
);
INSERT INTO server_identity (singleton, id) VALUES (1, lower(hex(randomblob(16))));

-- Chat turns that cannot start yet, first in, first out per agent (see migration 13).
CREATE TABLE turn_waits (
    id          TEXT PRIMARY KEY,                    -- the turn's id once it starts
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    account_id  TEXT NOT NULL REFERENCES accounts(id),  -- who asked
    admin       INTEGER NOT NULL,                    -- whether the asker was an admin
    agent_id    TEXT NOT NULL REFERENCES agents(id),
    message     TEXT NOT NULL,
    attachments TEXT NOT NULL,                       -- JSON: uploaded artifact ids
    state       TEXT NOT NULL CHECK (state IN ('waiting', 'cancelled', 'refused')),
    reason      TEXT NOT NULL,                       -- why it waits, or why it ended
    created_at  INTEGER NOT NULL,
    ended_at    INTEGER,
    seq         INTEGER NOT NULL DEFAULT 0            -- arrival order (migration 21)
);
CREATE INDEX turn_waits_state ON turn_waits(state, agent_id, created_at);
CREATE INDEX turn_waits_session ON turn_waits(session_id);

CREATE TABLE scrape_tokens (
    id           TEXT PRIMARY KEY,
    name         TEXT NOT NULL,
    token_hash   TEXT NOT NULL UNIQUE,
    created_by   TEXT NOT NULL REFERENCES accounts(id),
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER
);
CREATE UNIQUE INDEX scrape_tokens_live_name ON scrape_tokens(name) WHERE revoked_at IS NULL;

-- Computers shared by explicit grant: the member agent's turns run in computer_id (see
-- migration 18).
CREATE TABLE computer_grants (
    agent_id    TEXT PRIMARY KEY REFERENCES agents(id),
    computer_id TEXT NOT NULL REFERENCES computers(id),
    granted_by  TEXT NOT NULL REFERENCES accounts(id),
    created_at  INTEGER NOT NULL
);
CREATE INDEX computer_grants_computer ON computer_grants(computer_id);

-- An operator's control of a host agent's managed browser, and the Runner holding it.
CREATE TABLE browser_controls (
    agent_id      TEXT PRIMARY KEY REFERENCES agents(id),
    runner_id     TEXT NOT NULL REFERENCES runners(id),
    control_fence INTEGER NOT NULL,
    holder        TEXT REFERENCES accounts(id),
    expires_at    INTEGER,
    paused        INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1))
);

-- The `yy serve` processes on this database (issue 27): each writes its row at start and
-- every 5 s; one unseen for 15 s is gone. Rows unseen for an hour are removed.
CREATE TABLE replicas (
    id         TEXT PRIMARY KEY,                     -- random, per process start
    hostname   TEXT NOT NULL,
    listen     TEXT NOT NULL,                        -- the address it serves on
    version    TEXT NOT NULL,
    leads      INTEGER NOT NULL DEFAULT 0 CHECK (leads IN (0, 1)), -- runs the once-only work
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL,
    peer_url   TEXT,                                 -- how the other replicas reach it
    cert_sha256 TEXT                                 -- its certificate, which they pin
);

-- Artifact bytes in the database (issue 27), one row per verified chunk: used with
-- PostgreSQL and no `yy serve --blob-dir`; SQLite keeps files and leaves it empty.
CREATE TABLE artifact_chunks (
    artifact_id TEXT NOT NULL REFERENCES artifacts(id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,                -- bytes from n * the artifact's chunk_size
    data        BLOB NOT NULL,
    PRIMARY KEY (artifact_id, n)
);
