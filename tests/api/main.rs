//! End-to-end and storage tests, one binary (one link). Every scenario runs on SQLite and on
//! PostgreSQL through the `both_backends!` macro; see `harness` for what each test gets.

mod browser;
mod harness;

mod access;
mod auth_failures;
mod breakers;
mod chaos;
mod cli;
mod console;
mod credentials;
mod credits;
mod dashboard;
mod dead_letter_summary;
mod dead_letters;
mod funds;
mod http_metrics;
mod idempotency;
mod ledger;
mod metrics;
mod model;
mod notifications;
mod notifications_ops;
mod ops;
mod payouts;
mod provider;
mod provider_truth;
mod providers;
mod queue;
mod redaction;
mod replays;
mod returns;
mod review_reasons;
mod runbooks;
mod sandbox;
mod schema_keys;
mod security;
mod selection;
mod settlement;
mod settlement_ui;
mod text_inputs;
mod transitions;
mod trends;
mod two_person;
mod validation;
mod webhooks;
