-- Autovacuum on the tables every withdrawal writes, paced (issue 8). Each withdrawal leaves dead
-- row versions in `jobs` (three updates), `withdrawals` (two), `provider_attempts`,
-- `idempotency_records` and `balances`, so under steady load autovacuum visits these tables
-- about once a minute. At the default pace (a 2 ms sleep per 200 cost units) a round of VACUUM
-- and ANALYZE took about one second of a core on the 2-core benchmark machine, and the API's
-- p99 rose from ~6 ms to ~20 ms while it ran. Sleeping 10 ms per 200 units spreads the same
-- work over a few seconds at a fifth of the intensity; it still reads some 20 000 buffers a
-- second per worker, far more than these tables churn.
ALTER TABLE jobs SET (autovacuum_vacuum_cost_delay = 10);
ALTER TABLE withdrawals SET (autovacuum_vacuum_cost_delay = 10);
ALTER TABLE withdrawal_transitions SET (autovacuum_vacuum_cost_delay = 10);
ALTER TABLE balances SET (autovacuum_vacuum_cost_delay = 10);
ALTER TABLE ledger_entries SET (autovacuum_vacuum_cost_delay = 10);
ALTER TABLE provider_attempts SET (autovacuum_vacuum_cost_delay = 10);
ALTER TABLE idempotency_records SET (autovacuum_vacuum_cost_delay = 10);
