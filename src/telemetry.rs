//! Tracing set-up, done once per process: pretty logs for people, JSON for production. Every line
//! goes through `redact::RedactingWriter`, the same rules as the dead-letter store.
//!
//! JSON lines carry the fields of every enclosing span (`spans`): a line written inside a job
//! names the job, its withdrawal, its correlation id and the attempt; a line inside a request
//! names the correlation id and the route.

use std::io::Write;

use tracing_subscriber::EnvFilter;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Pretty,
    Json,
}

/// Installs the global subscriber writing to stderr. `RUST_LOG` overrides the default `info` filter.
pub fn init(format: LogFormat) {
    init_with(format, std::io::stderr);
}

/// Installs the global subscriber writing each (redacted) line to what `make_writer` returns.
/// A second call keeps the first subscriber.
pub fn init_with<W, F>(format: LogFormat, make_writer: F)
where
    W: Write + 'static,
    F: Fn() -> W + Send + Sync + 'static,
{
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(move || crate::redact::RedactingWriter::new(make_writer()));
    let result = match format {
        LogFormat::Pretty => builder.with_ansi(false).try_init(),
        LogFormat::Json => builder.json().flatten_event(true).with_current_span(true).with_span_list(true).try_init(),
    };
    let _ = result;
}
