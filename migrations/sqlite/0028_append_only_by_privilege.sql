-- SQLite twin of migrations/postgres/0028_append_only_by_privilege.sql, which makes the seven
-- append-only tables read-and-insert-only for the service's PostgreSQL role. SQLite has no roles:
-- the process owns its file, and the append-only triggers (0001 onwards) stay the guard. The
-- migration keeps the two histories in step.
SELECT 1;
