-- yy control plane, schema version 13: what each computer's workspace takes, as its Runner
-- reported it with a start, an exec or a turn (JSON: used, free and limit bytes, and when).

ALTER TABLE computers ADD COLUMN workspace_usage TEXT;
