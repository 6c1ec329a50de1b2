//! Dead-letter triage in the browser: the grouped summary (a group is a link that filters the
//! list), the filtered list, one redacted envelope with its history, and close with a reason.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::api;
use super::session::{urlencode, CsrfForm, Session};
use super::views::{self, age, csrf_field, opt, role_note, state, when, Banner};
use crate::dead_letter::Category;
use crate::http::AppState;
use crate::ops::types::{DeadLetterGroup, DeadLetterQuery, List, Page, ReasonRequest};
use crate::ops::Role;

/// The list's state filter: open (the default), closed or both.
const LETTER_STATES: [&str; 3] = ["open", "closed", "all"];

#[derive(Debug, Default, Deserialize)]
pub struct TriageQuery {
    category: Option<String>,
    error_code: Option<String>,
    queue: Option<String>,
    job_type: Option<String>,
    state: Option<String>,
    /// `datetime-local` values, read as UTC.
    failed_after: Option<String>,
    failed_before: Option<String>,
    cursor: Option<String>,
}

impl TriageQuery {
    fn pairs<'a>(&'a self, cursor: Option<&'a str>) -> Vec<(&'a str, Option<&'a str>)> {
        vec![
            ("category", self.category.as_deref()),
            ("error_code", self.error_code.as_deref()),
            ("queue", self.queue.as_deref()),
            ("job_type", self.job_type.as_deref()),
            ("state", self.state.as_deref()),
            ("failed_after", self.failed_after.as_deref()),
            ("failed_before", self.failed_before.as_deref()),
            ("cursor", cursor),
        ]
    }
}

/// `GET /ops/dead-letters`: summary, filters and the list.
pub async fn triage(State(state_): State<AppState>, session: Session, Query(q): Query<TriageQuery>) -> Response {
    let mut banner = None;
    let mut code = StatusCode::OK;
    let summary = match api::dead_letter_summary(&state_, &session).await {
        Ok(groups) => groups,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            List { data: Vec::new() }
        }
    };
    let mut pairs: Vec<(&str, Option<String>)> = q
        .pairs(q.cursor.as_deref())
        .into_iter()
        .map(|(k, v)| (k, v.map(|v| if k.starts_with("failed_") { api::utc_param(v) } else { v.to_owned() })))
        .collect();
    pairs.push(("limit", Some("50".to_owned())));
    let listed = async {
        let query: DeadLetterQuery = api::parse_query(&pairs)?;
        api::dead_letters(&state_, &session, &query).await
    };
    let listed = match listed.await {
        Ok(page) => page,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            Page { data: Vec::new(), next_cursor: None }
        }
    };
    let groups = &summary.data;
    let rows = &listed.data;
    let selected = |g: &DeadLetterGroup| {
        q.category.as_deref() == Some(g.category.as_str()) && q.error_code.as_deref() == Some(g.error_code.as_str())
    };
    // A replay needs a filter that narrows (the open/closed state does not).
    let filtered = q.pairs(None).iter().any(|(k, v)| *k != "state" && v.is_some_and(|v| !v.trim().is_empty()));
    let body = html! {
        h1 { "Dead letters" }
        section aria-labelledby="h-summary" {
            h2 #h-summary { "Open, by category and error code" }
            p.hint { "Triage step one: pick the biggest or oldest group. Each group links to its letters." }
            table #dead-letter-summary {
                thead { tr { th scope="col" { "Category / error code" } th.num scope="col" { "Open" } th scope="col" { "Oldest open" } } }
                tbody {
                    @for g in groups {
                        tr {
                            th scope="row" {
                                a href={ "/ops/dead-letters" (api::query(&[("category", Some(g.category.as_str())), ("error_code", Some(g.error_code.as_str()))])) }
                                  aria-current=[selected(g).then_some("true")] {
                                    (g.category) " / " (g.error_code)
                                }
                                @if selected(g) { " (shown below)" }
                            }
                            td.num { (g.open) }
                            td { (when(g.oldest_open_at)) }
                        }
                    }
                    @if groups.is_empty() { tr { td colspan="3" { "No open dead letters." } } }
                }
            }
        }
        section aria-labelledby="h-list" {
            h2 #h-list { "Letters" }
            form.filters method="get" action="/ops/dead-letters" aria-label="Filter dead letters" {
                p {
                    label for="f-category" { "Category" } br;
                    select #f-category name="category" {
                        option value="" { "any" }
                        @for c in Category::ALL {
                            option value=(c.as_str()) selected[q.category.as_deref() == Some(c.as_str())] { (c.as_str()) }
                        }
                    }
                }
                p { label for="f-error_code" { "Error code" } br; input #f-error_code name="error_code" value=(q.error_code.clone().unwrap_or_default()); }
                p { label for="f-queue" { "Queue" } br; input #f-queue name="queue" value=(q.queue.clone().unwrap_or_default()) size="14"; }
                p { label for="f-job_type" { "Job type" } br; input #f-job_type name="job_type" value=(q.job_type.clone().unwrap_or_default()) size="16"; }
                p {
                    label for="f-state" { "State" } br;
                    select #f-state name="state" {
                        @for s in LETTER_STATES {
                            option value=(s) selected[q.state.as_deref().unwrap_or("open") == s] { (s) }
                        }
                    }
                }
                p { label for="f-failed_after" { "Failed after (UTC)" } br; input #f-failed_after type="datetime-local" name="failed_after" value=(q.failed_after.clone().unwrap_or_default()); }
                p { label for="f-failed_before" { "Failed before (UTC)" } br; input #f-failed_before type="datetime-local" name="failed_before" value=(q.failed_before.clone().unwrap_or_default()); }
                p { button type="submit" { "Filter" } }
            }
            @if filtered {
                p { a #replay-these href={ "/ops/replays" (api::query(&[("category", q.category.as_deref()), ("error_code", q.error_code.as_deref()), ("queue", q.queue.as_deref()), ("job_type", q.job_type.as_deref()), ("failed_after", q.failed_after.as_deref()), ("failed_before", q.failed_before.as_deref())])) } { "Replay the open letters matching this filter…" } }
            }
            p #list-count { (rows.len()) " shown, newest first." }
            table #dead-letter-list {
                thead { tr {
                    th scope="col" { "Dead letter" } th scope="col" { "Category / error code" } th scope="col" { "Job" }
                    th scope="col" { "Withdrawal" } th scope="col" { "Side effect" } th scope="col" { "Failed" } th scope="col" { "State" }
                } }
                tbody {
                    @for d in rows {
                        tr {
                            td { a href={ "/ops/dead-letters/" (d.id) } { code { (d.id) } } }
                            td.group { (d.category) " / " (d.error_code) }
                            td { (d.queue) " · " (d.job_type) " v" (d.payload_version) }
                            td { @if let Some(w) = d.withdrawal_id { a href={ "/ops/withdrawals/" (w) } { code { (w) } } } @else { "-" } }
                            td { (d.side_effect_state) }
                            td { (when(d.failed_at)) }
                            td { (state(d.state)) }
                        }
                    }
                    @if rows.is_empty() { tr { td colspan="7" { "No dead letter matches." } } }
                }
            }
            @if let Some(next) = listed.next_cursor.as_deref() {
                p { a href={ "/ops/dead-letters" (api::query(&q.pairs(Some(next)))) } { "Next page" } }
            }
        }
    };
    (code, views::page(&session, "Dead letters", banner, body)).into_response()
}

/// `GET /ops/dead-letters/{id}`: the redacted envelope and what happened to it.
pub async fn letter(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(d): Query<views::Done>,
) -> Response {
    let banner = (d.done.as_deref() == Some("close")).then(|| Banner::ok("The dead letter is closed."));
    render(&state_, &session, &id, banner, StatusCode::OK).await
}

async fn render(state_: &AppState, session: &Session, id: &str, banner: Option<Banner>, code: StatusCode) -> Response {
    let d = async { api::dead_letter(state_, session, api::uuid(id)?).await };
    let d = match d.await {
        Ok(d) => d,
        Err(r) => return views::refused(r.status, "Dead letter", &r.to_string()),
    };
    let field = |label: &str, value: &dyn std::fmt::Display| {
        html! { tr { th scope="row" { (label) } td { (value) } } }
    };
    let payload = match &d.payload {
        Some(payload) => serde_json::to_string_pretty(payload).unwrap_or_default(),
        None => opt(&d.raw_payload),
    };
    let events = d.events.as_deref().unwrap_or_default();
    let body = html! {
        h1 { "Dead letter " code { (d.id) } }
        p { "State: " (state(d.state)) " · failed " (when(d.failed_at)) " (" (age(d.age_seconds)) ")" }
        p { "Owner: " strong { (d.owner) } " · runbook: " code { (d.runbook) } }
        table #envelope {
            tbody {
                (field("Category", &d.category)) (field("Error code", &d.error_code)) (field("Error class", &d.error_class))
                (field("Error message", &d.error_message)) (field("Side effect", &d.side_effect_state))
                (field("Queue", &d.queue)) (field("Job type", &d.job_type)) (field("Payload version", &d.payload_version))
                (field("Job", &d.job_id)) (field("Attempts", &d.attempts)) (field("Correlation id", &d.correlation_id))
                (field("Idempotency key", &opt(&d.idempotency_key))) (field("Worker", &d.worker_host)) (field("Worker version", &d.worker_version))
                (field("Provider", &opt(&d.provider)))
                tr { th scope="row" { "Withdrawal" } td { @if let Some(w) = d.withdrawal_id { a href={ "/ops/withdrawals/" (w) } { code { (w) } } } @else { "-" } } }
            }
        }
        h2 { "Payload (redacted)" }
        pre #payload { (payload) }
        @if let Some(stack) = &d.stack { h2 { "Stack" } pre { (stack) } }
        h2 { "History" }
        ol #letter-events {
            @for e in events {
                li { (when(e.at)) " · " strong { (e.action) } " by " (e.actor) ": " (e.reason)
                     @if let Some(Some(job_status)) = &e.replay_job_status { " — replayed job is " (state(job_status)) } }
            }
            @if events.is_empty() { li { "Nothing yet." } }
        }
        @if d.is_open() {
            section aria-labelledby="h-close" {
                h2 #h-close { "Close" }
                (role_note(session, Role::Operator, "close dead letters"))
                @if session.can(Role::Operator) {
                    form #close-form method="post" action={ "/ops/dead-letters/" (d.id) "/close" } {
                        (csrf_field(session))
                        p.hint { "Closing archives the letter with your reason; it is never deleted." }
                        p { label for="close-reason" { "Reason (required)" } br; textarea #close-reason name="reason" rows="2" cols="50" required maxlength="500" {} }
                        button type="submit" { "Close dead letter" }
                    }
                    p { a #replay-this href={ "/ops/replays" (api::query(&[("dead_letter_id", Some(d.id.to_string()))])) } { "Replay this dead letter…" } }
                }
            }
        }
    };
    (code, views::page(session, "Dead letter", banner, body)).into_response()
}

#[derive(Debug, Deserialize)]
pub struct CloseForm {
    reason: Option<String>,
}

/// `POST /ops/dead-letters/{id}/close`.
pub async fn close(
    State(state_): State<AppState>,
    Path(id): Path<String>,
    CsrfForm(session, form): CsrfForm<CloseForm>,
) -> Response {
    let request = ReasonRequest { reason: form.reason.unwrap_or_default() };
    let closed = async { api::close_dead_letter(&state_, &session, api::uuid(&id)?, &request).await };
    match closed.await {
        Ok(_) => Redirect::to(&format!("/ops/dead-letters/{}?done=close", urlencode(&id))).into_response(),
        Err(r) => render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status).await,
    }
}
