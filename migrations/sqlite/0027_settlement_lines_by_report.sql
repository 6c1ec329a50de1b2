-- SQLite twin of migrations/postgres/0027_settlement_lines_by_report.sql: the reads by report
-- get back the index the old unique key (report_id, line_no) gave them.
CREATE INDEX settlement_lines_report_idx ON settlement_lines (report_id, line_no);
