-- Artifact bytes in the database (issue 27): with PostgreSQL and no `yy serve --blob-dir`,
-- every verified chunk of an upload is a row, written in the transaction that records the
-- upload's progress, so every replica serves every artifact. SQLite keeps its artifact
-- files in the data directory and leaves this table empty (one logical schema for both).
CREATE TABLE artifact_chunks (
    artifact_id TEXT NOT NULL REFERENCES artifacts(id) ON DELETE CASCADE,
    n           INTEGER NOT NULL,                -- bytes from n * the artifact's chunk_size
    data        BLOB NOT NULL,
    PRIMARY KEY (artifact_id, n)
);
