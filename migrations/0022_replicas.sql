-- The `yy serve` processes on this database (issue 27): each writes its row at start and
-- every 5 s; one unseen for 15 s is gone. Rows unseen for an hour are removed.
CREATE TABLE replicas (
    id         TEXT PRIMARY KEY,                     -- random, per process start
    hostname   TEXT NOT NULL,
    listen     TEXT NOT NULL,                        -- the address it serves on
    version    TEXT NOT NULL,
    leads      INTEGER NOT NULL DEFAULT 0 CHECK (leads IN (0, 1)), -- runs the once-only work
    started_at INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL
);
