-- yy control plane: scrape tokens. A scrape token reads /metrics and nothing else (a
-- Prometheus server holds it, not a person); stored as its SHA-256 like API tokens. It does
-- not expire unused: a scraper uses it every few seconds or not at all, and an admin
-- revokes it.

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
