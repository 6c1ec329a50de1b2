-- SQLite twin of migrations/postgres/0031_results_and_events_name_their_provider.sql (issue 31):
-- reconciliation results and provider events name their provider; earlier rows are `default`'s.
ALTER TABLE reconciliation_results ADD COLUMN provider TEXT NOT NULL DEFAULT 'default';
ALTER TABLE webhook_events ADD COLUMN provider TEXT NOT NULL DEFAULT 'default';
