-- SQLite twin of migrations/postgres/0008_paced_autovacuum.sql, which paces PostgreSQL's
-- autovacuum on the tables every withdrawal writes. SQLite has no autovacuum of dead row
-- versions (it reuses free pages in place), so there is nothing to set; the migration keeps the
-- two histories in step.
SELECT 1;
