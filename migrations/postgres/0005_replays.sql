-- Deliberate replays (SPEC §8.3): a persisted run and its items, released in bounded batches.
CREATE TABLE replay_runs (
    id                        uuid PRIMARY KEY,
    started_by                uuid NOT NULL REFERENCES operators(id),
    reason                    text NOT NULL,
    selection                 jsonb NOT NULL,
    expected_payload_version  bigint NOT NULL,
    destination_queue         text NOT NULL,
    status                    text NOT NULL CHECK (status IN ('awaiting_approval', 'running', 'paused', 'cancelled', 'completed')),
    total                     bigint NOT NULL,
    rate_per_second           bigint NOT NULL,
    max_concurrency           bigint NOT NULL,
    auto_pause_threshold      bigint NOT NULL,
    -- New dead letters counted at the last resume: auto-pause looks at those since.
    dead_letter_baseline      bigint NOT NULL DEFAULT 0,
    approved_by               uuid REFERENCES operators(id),
    paused_reason             text,
    leased_by                 text,
    lease_until               timestamptz,
    created_at                timestamptz NOT NULL,
    updated_at                timestamptz NOT NULL
);

CREATE TABLE replay_items (
    id              uuid PRIMARY KEY,
    run_id          uuid NOT NULL REFERENCES replay_runs(id),
    dead_letter_id  uuid NOT NULL REFERENCES dead_letters(id),
    status          text NOT NULL CHECK (status IN ('pending', 'released', 'reconciling', 'skipped', 'cancelled')),
    detail          text,
    job_id          uuid REFERENCES jobs(id),
    released_at     timestamptz,
    created_at      timestamptz NOT NULL
);
CREATE INDEX replay_items_run_idx ON replay_items (run_id, status);
-- A dead letter waits in at most one run at a time: a second run selecting it is refused.
CREATE UNIQUE INDEX replay_items_one_active_idx ON replay_items (dead_letter_id) WHERE status = 'pending';

ALTER TABLE jobs ADD COLUMN replay_item_id uuid REFERENCES replay_items(id);
CREATE INDEX jobs_replay_item_idx ON jobs (replay_item_id);
