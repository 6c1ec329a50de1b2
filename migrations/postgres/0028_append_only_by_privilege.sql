-- Issue 29 item 3: append-only by privilege, which survives distribution (Citus refuses the
-- row triggers on distributed tables unless a cluster-wide unsafe switch is on; GRANT and REVOKE
-- on a distributed table apply to its shards).
--
-- The service may run as a role in `withdrawals_app`: it reads and writes every table, but on
-- the seven append-only tables it may only read and insert (no UPDATE, DELETE or TRUNCATE; the
-- triggers never covered TRUNCATE), and it cannot change the migrations' record. Migrations run
-- as the owner (`withdrawals migrate`, or `MIGRATION_DATABASE_URL`), who keeps every right and
-- the triggers stay as a second guard on one primary (dropped on Citus: README "Scaling").
-- A process that keeps connecting as the owner works exactly as before.
--
-- Roles belong to the whole server, so the role may already exist (another database of this
-- server, or made by an administrator beforehand); a migrator that may not create roles needs it
-- made first, and is told so.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'withdrawals_app') THEN
        BEGIN
            CREATE ROLE withdrawals_app NOLOGIN;
        EXCEPTION
            -- Another database of this server created it meanwhile.
            WHEN duplicate_object OR unique_violation THEN NULL;
            WHEN insufficient_privilege THEN
                RAISE EXCEPTION 'role withdrawals_app does not exist and % may not create it: as an administrator run CREATE ROLE withdrawals_app NOLOGIN, then migrate again', current_user;
        END;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO withdrawals_app', current_schema());
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %I TO withdrawals_app', current_schema());
    -- Tables later migrations create get the same rights; an append-only one revokes its own.
    EXECUTE format('ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO withdrawals_app', current_schema());
END $$;

-- Readiness reads which migrations ran; only the owner records them.
REVOKE INSERT, UPDATE, DELETE ON _sqlx_migrations FROM withdrawals_app;

REVOKE UPDATE, DELETE, TRUNCATE ON
    ledger_entries,
    withdrawal_transitions,
    dead_letters,
    reconciliation_results,
    payout_returns,
    account_credits,
    audit_log
FROM withdrawals_app;
