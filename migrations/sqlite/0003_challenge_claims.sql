-- The name and metadata proposed by a registration travel with its challenge and are applied
-- only when the challenge is attested, i.e. by the holder of the private key.
ALTER TABLE attestation_challenges ADD COLUMN name TEXT;
ALTER TABLE attestation_challenges ADD COLUMN metadata TEXT;
