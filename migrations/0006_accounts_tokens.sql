-- yy control plane, schema: accounts an admin can disable, tokens listed per account, and
-- results that are dropped after delivery.

ALTER TABLE accounts ADD COLUMN disabled_at INTEGER;         -- set: no login, no token works
CREATE INDEX api_tokens_account ON api_tokens(account_id);
ALTER TABLE runner_commands ADD COLUMN delivered_at INTEGER; -- first time an admin got the result
