//! The operator console (issue 9): server-rendered pages under `/ops` for finance operators —
//! overview, review queue with each withdrawal's evidence timeline and resolve forms, dead-letter
//! triage, replays, settlement exceptions with their evidence and resolve form, customer
//! notifications (endpoints' health, deliveries, redelivery), and the audit log. Templates are
//! maud, compiled into the binary; every action is a plain form post carrying the session's CSRF
//! token; a little inline script only refreshes a running replay's progress.
//!
//! Owns no data path of its own: pages call only `api`'s typed functions (one per operation, each
//! answering with a DTO of [`crate::ops::types`]), which act as the signed-in operator through the
//! ops API (`/ops/v1`) in process, so roles, validation and audit are exactly the API's.
//! [`session`] owns sign-in, the session cookie and CSRF: every form post is read through its
//! [`session::CsrfForm`], which refuses a wrong token before the handler runs.

mod api;
mod audit;
mod charts;
mod dead_letters;
mod notifications;
mod overview;
mod replays;
mod review;
pub mod session;
mod settlement;
mod signed_in;
mod views;

use std::sync::LazyLock;

use axum::http::{header, HeaderValue};
use axum::response::{Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use base64::Engine;
use sha2::{Digest, Sha256};

use crate::http::AppState;

/// Pages may run only the console's own script (by hash), post only to the console, and never
/// be framed (clickjacking); nothing is cached, since pages show customer data.
static CONTENT_SECURITY_POLICY: LazyLock<HeaderValue> = LazyLock::new(|| {
    let script = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(replays::REFRESH_SCRIPT.as_bytes()));
    HeaderValue::from_str(&format!(
        "default-src 'none'; style-src 'unsafe-inline'; script-src 'sha256-{script}'; connect-src 'self'; \
         img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
    ))
    .expect("a valid header")
});

async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY.clone());
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("same-origin"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/ops", get(|| async { Redirect::to("/ops/overview") }))
        .route("/ops/", get(|| async { Redirect::to("/ops/overview") }))
        .route("/ops/sign-in", get(session::sign_in_form).post(session::sign_in))
        .route("/ops/sign-out", post(session::sign_out))
        .route("/ops/overview", get(overview::page))
        .route("/ops/breakers/{name}", post(overview::switch))
        .route("/ops/review", get(review::queue))
        .route("/ops/withdrawals/{id}", get(review::withdrawal))
        .route("/ops/withdrawals/{id}/resolve", post(review::resolve))
        .route("/ops/withdrawals/{id}/decision/{verdict}", post(review::decide))
        .route("/ops/dead-letters", get(dead_letters::triage))
        .route("/ops/dead-letters/{id}", get(dead_letters::letter))
        .route("/ops/dead-letters/{id}/close", post(dead_letters::close))
        .route("/ops/replays", get(replays::index).post(replays::start))
        .route("/ops/replays/preview", post(replays::preview))
        .route("/ops/replays/{id}", get(replays::run))
        .route("/ops/replays/{id}/{action}", post(replays::control))
        .route("/ops/settlement", get(settlement::index))
        .route("/ops/settlement/exceptions/{id}", get(settlement::exception))
        .route("/ops/settlement/exceptions/{id}/resolve", post(settlement::resolve))
        .route("/ops/notifications", get(notifications::index))
        .route("/ops/notifications/{id}", get(notifications::notification))
        .route("/ops/notifications/{id}/redeliver", post(notifications::redeliver))
        .route("/ops/audit", get(audit::log))
        .layer(axum::middleware::map_response(security_headers))
}
