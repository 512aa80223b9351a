-- yy control plane, schema version 8: teams, goals split into subtasks, their scheduling,
-- deliveries back to the session a goal came from, temporary helpers, and the per-turn ids
-- that admit team-tool calls.

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
