-- PostgreSQL's migration 25, the change of migrations/0025_pending_counts.sql: each Runner's
-- pending commands and bytes kept beside it by a trigger, and an index of pending deadlines.
ALTER TABLE runners ADD COLUMN pending_commands bigint NOT NULL DEFAULT 0,
                    ADD COLUMN pending_bytes bigint NOT NULL DEFAULT 0;
UPDATE runners SET
    pending_commands = (SELECT count(*) FROM runner_commands c
                        WHERE c.runner_id = runners.id AND c.state = 'pending'),
    pending_bytes = (SELECT coalesce(sum(c.payload_bytes), 0) FROM runner_commands c
                     WHERE c.runner_id = runners.id AND c.state = 'pending');
CREATE FUNCTION runner_commands_pending() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Nested: OLD is not there for an INSERT, nor NEW for a DELETE.
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        IF OLD.state = 'pending' THEN
            UPDATE runners SET pending_commands = pending_commands - 1,
                               pending_bytes = pending_bytes - OLD.payload_bytes
            WHERE id = OLD.runner_id;
        END IF;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        IF NEW.state = 'pending' THEN
            UPDATE runners SET pending_commands = pending_commands + 1,
                               pending_bytes = pending_bytes + NEW.payload_bytes
            WHERE id = NEW.runner_id;
        END IF;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER runner_commands_pending_added AFTER INSERT ON runner_commands
    FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION runner_commands_pending();
CREATE TRIGGER runner_commands_pending_left AFTER UPDATE OF state, runner_id, payload_bytes ON runner_commands
    FOR EACH ROW WHEN (OLD.state = 'pending') EXECUTE FUNCTION runner_commands_pending();
CREATE TRIGGER runner_commands_pending_entered AFTER UPDATE OF state, runner_id, payload_bytes ON runner_commands
    FOR EACH ROW WHEN (NEW.state = 'pending' AND OLD.state <> 'pending') EXECUTE FUNCTION runner_commands_pending();
CREATE TRIGGER runner_commands_pending_deleted AFTER DELETE ON runner_commands
    FOR EACH ROW WHEN (OLD.state = 'pending') EXECUTE FUNCTION runner_commands_pending();
CREATE INDEX runner_commands_pending_deadline ON runner_commands(runner_id, deadline_at) WHERE state = 'pending';
