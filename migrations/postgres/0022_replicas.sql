-- PostgreSQL's migration 22, the change of migrations/0022_replicas.sql: the `yy serve`
-- processes on this database.
CREATE TABLE replicas (
    id         text PRIMARY KEY,
    hostname   text NOT NULL,
    listen     text NOT NULL,
    version    text NOT NULL,
    leads      bigint NOT NULL DEFAULT 0 CHECK (leads IN (0, 1)),
    started_at bigint NOT NULL,
    seen_at    bigint NOT NULL
);
