-- An operator's control of a host agent's managed browser (`yy browser attach --control`):
-- the same fence, holder, expiry and pause as a computer's, and the Runner that holds the
-- browser.
CREATE TABLE browser_controls (
    agent_id      TEXT PRIMARY KEY REFERENCES agents(id),
    runner_id     TEXT NOT NULL REFERENCES runners(id),
    control_fence INTEGER NOT NULL,
    holder        TEXT REFERENCES accounts(id),
    expires_at    INTEGER,
    paused        INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1))
);
