-- yy control plane, schema version 12: no team tool id at rest. A worker turn's id was
-- written into its command's payload; it is now minted when the command is leased and
-- sent in the lease answer only (its SHA-256 stays in tool_grants). Stored payloads lose
-- it, and secure_delete zeroes the bytes SQLite frees meanwhile.

PRAGMA secure_delete = ON;
UPDATE runner_commands SET payload = json_remove(payload, '$.team_tools')
 WHERE kind = 'worker.turn' AND json_valid(payload)
   AND json_type(payload, '$.team_tools') IS NOT NULL;
PRAGMA secure_delete = OFF;
