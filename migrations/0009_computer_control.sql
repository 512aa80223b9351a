-- yy control plane: an operator's control of a computer (takeover). One row per computer
-- ever taken over. The control fence only grows, for the computer's whole life: every take
-- raises it, and renewals, releases and inputs of an older fence are refused. Control
-- lasts until expires_at unless renewed; `paused` stays set (the model waits at its next
-- tool call) until a handback, whoever holds control.
CREATE TABLE computer_controls (
    computer_id   TEXT PRIMARY KEY REFERENCES computers(id),
    control_fence INTEGER NOT NULL,
    holder        TEXT REFERENCES accounts(id),
    expires_at    INTEGER,
    paused        INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1))
);
