-- yy control plane, schema version 14: when each computer was last used (a turn, an exec,
-- takeover or screen input; reading its state or screen does not count), and why yy
-- stopped it by itself (`idle 30m`, `reclaimed for agent NAME`).

ALTER TABLE computers ADD COLUMN last_used_at INTEGER;
ALTER TABLE computers ADD COLUMN stop_reason TEXT;
