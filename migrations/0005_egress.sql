-- yy control plane, schema version 5: the network mode of each Runner (none, or the public
-- web through its egress proxy) and the mode each computer was last started with.

ALTER TABLE runners ADD COLUMN network TEXT NOT NULL DEFAULT 'none' CHECK (network IN ('none', 'public-web'));
ALTER TABLE computers ADD COLUMN network TEXT NOT NULL DEFAULT 'none' CHECK (network IN ('none', 'public-web'));
