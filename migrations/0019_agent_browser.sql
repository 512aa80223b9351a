-- The managed browser of host agents (docs/browser.md): off until an admin turns it on.
ALTER TABLE agents ADD COLUMN browser INTEGER NOT NULL DEFAULT 0 CHECK (browser IN (0, 1));
