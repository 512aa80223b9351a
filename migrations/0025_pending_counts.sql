-- What each Runner has waiting, kept beside it (migration 25): enqueueing checks the queue
-- limits against these instead of counting the pending rows, which cost time in
-- proportion to the backlog on every enqueue. Triggers keep them exact on every change of
-- a command's state, whoever makes it.
ALTER TABLE runners ADD COLUMN pending_commands INTEGER NOT NULL DEFAULT 0;
ALTER TABLE runners ADD COLUMN pending_bytes INTEGER NOT NULL DEFAULT 0;
UPDATE runners SET
    pending_commands = (SELECT count(*) FROM runner_commands c
                        WHERE c.runner_id = runners.id AND c.state = 'pending'),
    pending_bytes = (SELECT coalesce(sum(c.payload_bytes), 0) FROM runner_commands c
                     WHERE c.runner_id = runners.id AND c.state = 'pending');
CREATE TRIGGER runner_commands_pending_added AFTER INSERT ON runner_commands
WHEN NEW.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands + 1,
                       pending_bytes = pending_bytes + NEW.payload_bytes
    WHERE id = NEW.runner_id;
END;
CREATE TRIGGER runner_commands_pending_left AFTER UPDATE OF state, runner_id, payload_bytes ON runner_commands
WHEN OLD.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands - 1,
                       pending_bytes = pending_bytes - OLD.payload_bytes
    WHERE id = OLD.runner_id;
END;
CREATE TRIGGER runner_commands_pending_entered AFTER UPDATE OF state, runner_id, payload_bytes ON runner_commands
WHEN NEW.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands + 1,
                       pending_bytes = pending_bytes + NEW.payload_bytes
    WHERE id = NEW.runner_id;
END;
CREATE TRIGGER runner_commands_pending_deleted AFTER DELETE ON runner_commands
WHEN OLD.state = 'pending'
BEGIN
    UPDATE runners SET pending_commands = pending_commands - 1,
                       pending_bytes = pending_bytes - OLD.payload_bytes
    WHERE id = OLD.runner_id;
END;
-- A Runner's pending commands past their deadline, found by the lease without reading the
-- whole backlog (the sweep reads only the pending commands' entries).
CREATE INDEX runner_commands_pending_deadline ON runner_commands(runner_id, deadline_at) WHERE state = 'pending';
