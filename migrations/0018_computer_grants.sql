-- yy control plane, schema version 18: computers shared by the user's explicit grant. A
-- member's turns run in the granted computer instead of its own, one turn at a time in it;
-- each member keeps its own sessions (model history). An agent joins at most one shared
-- computer. Revoking deletes the row; the audit log keeps every grant and revoke.
CREATE TABLE computer_grants (
    agent_id    TEXT PRIMARY KEY REFERENCES agents(id),
    computer_id TEXT NOT NULL REFERENCES computers(id),
    granted_by  TEXT NOT NULL REFERENCES accounts(id),
    created_at  INTEGER NOT NULL
);
CREATE INDEX computer_grants_computer ON computer_grants(computer_id);
