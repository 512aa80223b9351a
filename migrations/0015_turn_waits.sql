-- yy control plane, schema version 15: chats queue instead of failing. A turn that cannot
-- start yet (its agent is in another turn, an earlier turn of the agent waits, every slot
-- is taken, its computer is settling) waits here, first in, first out per agent, until
-- the scheduler admits it; it then becomes a session turn with the same id.

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
    ended_at    INTEGER
);
CREATE INDEX turn_waits_state ON turn_waits(state, agent_id, created_at);
CREATE INDEX turn_waits_session ON turn_waits(session_id);
