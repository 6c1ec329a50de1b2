//! `X-Correlation-Id`: taken from the request when it is sane, generated otherwise, attached to
//! the request's tracing span and echoed on every response (SPEC §3).

use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

pub static HEADER: HeaderName = HeaderName::from_static("x-correlation-id");

/// The request's correlation id, available to handlers as an extension.
#[derive(Debug, Clone)]
pub struct CorrelationId(pub String);

fn accept(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    let ok = !text.is_empty() && text.len() <= 128 && text.bytes().all(|b| b.is_ascii_graphic());
    ok.then(|| text.to_owned())
}

pub async fn middleware(mut request: Request, next: Next) -> Response {
    let id = request.headers().get(&HEADER).and_then(accept).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    request.extensions_mut().insert(CorrelationId(id.clone()));
    let span = tracing::info_span!(
        "request",
        correlation_id = %id,
        method = %request.method(),
        path = %request.uri().path()
    );
    let mut response = next.run(request).instrument(span).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(HEADER.clone(), value);
    }
    response
}
