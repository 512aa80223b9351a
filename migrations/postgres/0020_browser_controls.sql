-- PostgreSQL's migration 20, the change of migrations/0020_browser_controls.sql: an
-- operator's control of a host agent's managed browser.
CREATE TABLE browser_controls (
    agent_id      text PRIMARY KEY REFERENCES agents(id),
    runner_id     text NOT NULL REFERENCES runners(id),
    control_fence bigint NOT NULL,
    holder        text REFERENCES accounts(id),
    expires_at    bigint,
    paused        bigint NOT NULL DEFAULT 0 CHECK (paused IN (0, 1))
);
