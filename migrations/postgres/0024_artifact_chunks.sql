-- PostgreSQL's migration 24, the change of migrations/0024_artifact_chunks.sql: artifact
-- bytes in the database, one row per verified chunk (gone with their artifact's row).
CREATE TABLE artifact_chunks (
    artifact_id text NOT NULL REFERENCES artifacts(id) ON DELETE CASCADE,
    n           bigint NOT NULL,
    data        bytea NOT NULL,
    PRIMARY KEY (artifact_id, n)
);
