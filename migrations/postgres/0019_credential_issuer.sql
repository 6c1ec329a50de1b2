-- Issue 27: who issued each operator's current credential (created, rotated or re-enabled), so a
-- two-person approval can refuse a credential the requester handed out (SPEC §8). The issuer is
-- an operator id; paths that run with only DATABASE_URL (`operators create`) name the reserved
-- local actor (the nil id, a disabled row that cannot sign in, created on first use) and the OS
-- user in `credential_issuer_name`. NULL on both = issued before this migration (unknown).
ALTER TABLE operators
    ADD COLUMN credential_issued_by uuid REFERENCES operators(id),
    ADD COLUMN credential_issuer_name text;
