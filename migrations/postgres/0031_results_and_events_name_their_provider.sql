-- Issue 31 (SPEC §16): every reconciliation result and every provider event names the provider
-- it came from, as attempts do since 0030. Earlier rows came from the one provider there was,
-- `default`; the bare `/webhooks/provider` stays `default`'s. A constant default rewrites no row
-- (and so fires none of the append-only triggers of reconciliation_results).
ALTER TABLE reconciliation_results ADD COLUMN provider text NOT NULL DEFAULT 'default';
ALTER TABLE webhook_events ADD COLUMN provider text NOT NULL DEFAULT 'default';
