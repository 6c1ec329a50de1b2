-- Issue 31 (SPEC §16): each provider has its own webhook route, and a provider's event ids are
-- only its own — two providers may both send `evt_1`. An event is now unique per provider and
-- event id: the same id from another provider is another event, a repeat from the same provider
-- still the duplicate it was. Every stored event is `default`'s (0031), so no stored pair clashes.
ALTER TABLE webhook_events DROP CONSTRAINT webhook_events_event_id_key;
ALTER TABLE webhook_events ADD CONSTRAINT webhook_events_provider_event_id_key UNIQUE (provider, event_id);
-- The per-provider `webhook_last_received_timestamp_seconds` gauge, read every refresh, finds
-- each provider and its newest handled event here (a skip scan, never the whole table);
-- `webhook_events_handled` still serves the newest event from any provider.
CREATE INDEX webhook_events_handled_by_provider ON webhook_events (provider, received_at) WHERE job_id IS NOT NULL;
