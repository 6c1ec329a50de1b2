-- SQLite twin of migrations/postgres/0026_attempts_room_for_their_outcome.sql, which lowers
-- PostgreSQL's fillfactor on provider_attempts so the outcome update stays on its page. SQLite
-- has no fillfactor (it rewrites the row in its page or moves it), so there is nothing to set;
-- the migration keeps the two histories in step.
SELECT 1;
