-- SQLite twin of migrations/postgres/0034_dead_letters_name_their_provider.sql (issue 31): a dead
-- letter names its withdrawal's latest attempt's provider; NULL before, and for jobs that reached none.
ALTER TABLE dead_letters ADD COLUMN provider TEXT;
