-- SQLite twin of migrations/postgres/0005_replays.sql.
CREATE TABLE replay_runs (
    id                        BLOB PRIMARY KEY,
    started_by                BLOB NOT NULL REFERENCES operators(id),
    reason                    TEXT NOT NULL,
    selection                 TEXT NOT NULL,
    expected_payload_version  INTEGER NOT NULL,
    destination_queue         TEXT NOT NULL,
    status                    TEXT NOT NULL CHECK (status IN ('awaiting_approval', 'running', 'paused', 'cancelled', 'completed')),
    total                     INTEGER NOT NULL,
    rate_per_second           INTEGER NOT NULL,
    max_concurrency           INTEGER NOT NULL,
    auto_pause_threshold      INTEGER NOT NULL,
    -- New dead letters counted at the last resume: auto-pause looks at those since.
    dead_letter_baseline      INTEGER NOT NULL DEFAULT 0,
    approved_by               BLOB REFERENCES operators(id),
    paused_reason             TEXT,
    leased_by                 TEXT,
    lease_until               TEXT,
    created_at                TEXT NOT NULL,
    updated_at                TEXT NOT NULL
);

CREATE TABLE replay_items (
    id              BLOB PRIMARY KEY,
    run_id          BLOB NOT NULL REFERENCES replay_runs(id),
    dead_letter_id  BLOB NOT NULL REFERENCES dead_letters(id),
    status          TEXT NOT NULL CHECK (status IN ('pending', 'released', 'reconciling', 'skipped', 'cancelled')),
    detail          TEXT,
    job_id          BLOB REFERENCES jobs(id),
    released_at     TEXT,
    created_at      TEXT NOT NULL
);
CREATE INDEX replay_items_run_idx ON replay_items (run_id, status);
CREATE UNIQUE INDEX replay_items_one_active_idx ON replay_items (dead_letter_id) WHERE status = 'pending';

ALTER TABLE jobs ADD COLUMN replay_item_id BLOB REFERENCES replay_items(id);
CREATE INDEX jobs_replay_item_idx ON jobs (replay_item_id);
