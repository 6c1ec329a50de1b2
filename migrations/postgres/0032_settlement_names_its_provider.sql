-- Issue 31 (SPEC §16): settlement reports are per provider. Every imported report, its lines, its
-- exceptions and every operator import name the provider the report came from, as attempts do
-- since 0030 and reconciliation results and provider events since 0031. Earlier rows came from
-- the one provider there was, `default` (a constant default rewrites no row).
--
-- What was unique per day becomes unique per provider and day: a report version is
-- (provider, report_date, version), and a report is stored once per (provider, report_date,
-- digest) — the same bytes may be two providers' reports, or one provider's of two days (a day
-- with no line is the header alone, which a global digest took for the first such day's report).
-- An exception is unique by (account_id, provider, dedupe_key): two providers' lines may share a
-- transfer id.
ALTER TABLE settlement_reports ADD COLUMN provider text NOT NULL DEFAULT 'default';
ALTER TABLE settlement_reports DROP CONSTRAINT settlement_reports_report_date_version_key;
ALTER TABLE settlement_reports ADD CONSTRAINT settlement_reports_provider_date_version_key
    UNIQUE (provider, report_date, version);
ALTER TABLE settlement_reports DROP CONSTRAINT settlement_reports_digest_key;
ALTER TABLE settlement_reports ADD CONSTRAINT settlement_reports_provider_date_digest_key
    UNIQUE (provider, report_date, digest);

ALTER TABLE settlement_lines ADD COLUMN provider text NOT NULL DEFAULT 'default';

ALTER TABLE settlement_exceptions ADD COLUMN provider text NOT NULL DEFAULT 'default';
ALTER TABLE settlement_exceptions DROP CONSTRAINT settlement_exceptions_dedupe_key;
ALTER TABLE settlement_exceptions ADD CONSTRAINT settlement_exceptions_dedupe_key
    UNIQUE (account_id, provider, dedupe_key);

ALTER TABLE settlement_imports ADD COLUMN provider text NOT NULL DEFAULT 'default';
