//! Tracing set-up, done once per process: pretty logs for people, JSON for production. Every line
//! goes through `redact::RedactingWriter`, the same rules as the dead-letter store.

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Installs the global subscriber. `RUST_LOG` overrides the default `info` filter.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| crate::redact::RedactingWriter::new(std::io::stderr()));
    let result = match format {
        LogFormat::Pretty => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).try_init(),
    };
    // A second init (tests) keeps the first subscriber.
    let _ = result;
}
