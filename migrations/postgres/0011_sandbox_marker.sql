-- Issue 17: a withdrawal created by a process in sandbox mode (no PROVIDER_URL) is marked, shown
-- as such, and only ever paid by a sandbox provider; a real provider never pays it (its funds
-- were never real), and a sandbox never pays a real one.
ALTER TABLE withdrawals ADD COLUMN sandbox boolean NOT NULL DEFAULT false;
