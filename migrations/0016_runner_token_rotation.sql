-- yy control plane, schema version 16: Runner tokens rotate. A token lives for
-- `yy serve --runner-token-lifetime` from `token_issued_at`; the Runner asks for a new one
-- (`next_token_hash`, pending) and the first request that carries it promotes it and
-- drops the old one. `rotate_requested_at`: an admin asked for a rotation at the next
-- contact (`yy runner rotate-token`).

ALTER TABLE runners ADD COLUMN token_issued_at INTEGER;
ALTER TABLE runners ADD COLUMN next_token_hash TEXT;
ALTER TABLE runners ADD COLUMN next_token_issued_at INTEGER;
ALTER TABLE runners ADD COLUMN rotate_requested_at INTEGER;
CREATE UNIQUE INDEX runners_next_token ON runners(next_token_hash) WHERE next_token_hash IS NOT NULL;
-- Tokens issued before this version count from the upgrade, not from their registration:
-- an upgrade must not expire every Runner older than the lifetime at once.
UPDATE runners SET token_issued_at = CAST(strftime('%s', 'now') AS INTEGER) * 1000;
