-- PostgreSQL's migration 21, the change of migrations/0021_turn_wait_order.sql: the order
-- of waiting chat turns as a column (a database made before had none waiting in any order
-- but their arrival's).
ALTER TABLE turn_waits ADD COLUMN seq bigint NOT NULL DEFAULT 0;
UPDATE turn_waits w SET seq = o.n
FROM (SELECT id, row_number() OVER (ORDER BY created_at, id) AS n FROM turn_waits) o
WHERE o.id = w.id;
