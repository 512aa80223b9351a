-- PostgreSQL's migration 18, the change of migrations/0018_computer_grants.sql: computers
-- shared by the user's explicit grant.
CREATE TABLE computer_grants (
    agent_id    text PRIMARY KEY REFERENCES agents(id),
    computer_id text NOT NULL REFERENCES computers(id),
    granted_by  text NOT NULL REFERENCES accounts(id),
    created_at  bigint NOT NULL
);
CREATE INDEX computer_grants_computer ON computer_grants(computer_id);
