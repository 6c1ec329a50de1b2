-- Issue 29: migration 0025 made a line's unique key (account_id, report_id, line_no), which no
-- longer serves the reads that go by report — a version's totals, an import's progress, the
-- day's line keys on every import — so each would scan every line ever imported. A plain index
-- by report serves them again, as the old unique key did.
CREATE INDEX settlement_lines_report_idx ON settlement_lines (report_id, line_no);
