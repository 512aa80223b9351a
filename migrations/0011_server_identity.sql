-- yy control plane, schema version 11: the server's identity. A backup records it and a
-- restore of another server's backup must be asked for (`yy restore --from-other-server`).
-- Random once, when the database is made or migrated; a restore brings the archive's.

CREATE TABLE server_identity (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    id        TEXT NOT NULL                          -- 32 hex digits
);
INSERT INTO server_identity (singleton, id) VALUES (1, lower(hex(randomblob(16))));
