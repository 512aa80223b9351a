-- yy control plane, schema version 10: image updates of a Runner's computers.
-- `yy runner update --computer-image NEW` records NEW as pending (not yet current): the
-- Runner verifies it and runs an acceptance computer ('verifying'); once it passed
-- ('accepted') the control plane makes it current as soon as the Runner is idle. The
-- image it replaced is kept as the previous one (what `--rollback` returns to).

ALTER TABLE runners ADD COLUMN previous_image TEXT;   -- full image id, or NULL
ALTER TABLE runners ADD COLUMN pending_image TEXT;    -- full image id, or NULL
ALTER TABLE runners ADD COLUMN pending_state TEXT CHECK (pending_state IN ('verifying', 'accepted'));
ALTER TABLE runners ADD COLUMN pending_command TEXT;  -- the computer.image.accept command
ALTER TABLE runners ADD COLUMN image_note TEXT;       -- the last update's outcome (why refused)
