-- PostgreSQL's migration 23, the change of migrations/0023_replica_peers.sql: how the other
-- replicas reach each one, and the certificate they pin.
ALTER TABLE replicas ADD COLUMN peer_url text;
ALTER TABLE replicas ADD COLUMN cert_sha256 text;
