-- PostgreSQL's migration 19, the change of migrations/0019_agent_browser.sql: the managed
-- browser of host agents, off until an admin turns it on.
ALTER TABLE agents ADD COLUMN browser bigint NOT NULL DEFAULT 0 CHECK (browser IN (0, 1));
