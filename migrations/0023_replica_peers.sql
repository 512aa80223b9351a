-- How the other replicas reach each one (issue 27): the shell relay of `yy computer attach
-- --control` crosses from the replica the Runner is connected to into the one that holds
-- the operator's side. The certificate's SHA-256 is what the others pin (none: plain HTTP).
ALTER TABLE replicas ADD COLUMN peer_url TEXT;
ALTER TABLE replicas ADD COLUMN cert_sha256 TEXT;
