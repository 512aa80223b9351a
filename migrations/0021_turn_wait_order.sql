-- The order of waiting chat turns as a column of its own (it was SQLite's rowid, which
-- PostgreSQL does not have): first in, first out per agent.
ALTER TABLE turn_waits ADD COLUMN seq INTEGER NOT NULL DEFAULT 0;
UPDATE turn_waits SET seq = rowid;
