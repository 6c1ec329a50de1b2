//! Dead-letter triage in the browser: the grouped summary (a group is a link that filters the
//! list), the filtered list, one redacted envelope with its history, and close with a reason.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::html;
use serde::Deserialize;
use serde_json::{json, Value};

use super::api;
use super::session::{urlencode, Session};
use super::views::{self, age, csrf_field, role_note, state, text, when, Banner};
use crate::dead_letter::Category;
use crate::http::AppState;
use crate::ops::Role;

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
    let summary = match api::get(&state_, &session, "/ops/v1/dead-letters/summary").await {
        Ok(v) => v,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            json!({"data": []})
        }
    };
    let mut pairs: Vec<(&str, Option<String>)> = q
        .pairs(q.cursor.as_deref())
        .into_iter()
        .map(|(k, v)| (k, v.map(|v| if k.starts_with("failed_") { api::utc_param(v) } else { v.to_owned() })))
        .collect();
    pairs.push(("limit", Some("50".to_owned())));
    let listed = match api::get(&state_, &session, &format!("/ops/v1/dead-letters{}", api::query(&pairs))).await {
        Ok(v) => v,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            json!({"data": []})
        }
    };
    let groups = summary["data"].as_array().cloned().unwrap_or_default();
    let rows = listed["data"].as_array().cloned().unwrap_or_default();
    let selected = |g: &Value| {
        q.category.as_deref() == g["category"].as_str() && q.error_code.as_deref() == g["error_code"].as_str()
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
                    @for g in &groups {
                        tr {
                            th scope="row" {
                                a href={ "/ops/dead-letters" (api::query(&[("category", g["category"].as_str()), ("error_code", g["error_code"].as_str())])) }
                                  aria-current=[selected(g).then_some("true")] {
                                    (text(&g["category"])) " / " (text(&g["error_code"]))
                                }
                                @if selected(g) { " (shown below)" }
                            }
                            td.num { (text(&g["open"])) }
                            td { (when(&g["oldest_open_at"])) }
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
                        @for s in ["open", "closed", "all"] {
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
                    @for d in &rows {
                        tr {
                            td { a href={ "/ops/dead-letters/" (text(&d["id"])) } { code { (text(&d["id"])) } } }
                            td.group { (text(&d["category"])) " / " (text(&d["error_code"])) }
                            td { (text(&d["queue"])) " · " (text(&d["job_type"])) " v" (text(&d["payload_version"])) }
                            td { @if d["withdrawal_id"].is_null() { "-" } @else { a href={ "/ops/withdrawals/" (text(&d["withdrawal_id"])) } { code { (text(&d["withdrawal_id"])) } } } }
                            td { (text(&d["side_effect_state"])) }
                            td { (when(&d["failed_at"])) }
                            td { (state(&d["state"])) }
                        }
                    }
                    @if rows.is_empty() { tr { td colspan="7" { "No dead letter matches." } } }
                }
            }
            @if let Some(next) = listed["next_cursor"].as_str() {
                p { a href={ "/ops/dead-letters" (api::query(&q.pairs(Some(next)))) } { "Next page" } }
            }
        }
    };
    (code, views::page(&session, "Dead letters", banner, body)).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct Done {
    done: Option<String>,
}

/// `GET /ops/dead-letters/{id}`: the redacted envelope and what happened to it.
pub async fn letter(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(d): Query<Done>,
) -> Response {
    let banner = (d.done.as_deref() == Some("close")).then(|| Banner::ok("The dead letter is closed."));
    render(&state_, &session, &id, banner, StatusCode::OK).await
}

async fn render(state_: &AppState, session: &Session, id: &str, banner: Option<Banner>, code: StatusCode) -> Response {
    let d = match api::get(state_, session, &format!("/ops/v1/dead-letters/{}", urlencode(id))).await {
        Ok(v) => v,
        Err(r) => return views::refused(r.status, "Dead letter", &r.to_string()),
    };
    let field = |label: &str, key: &str| html! { tr { th scope="row" { (label) } td { (text(&d[key])) } } };
    let payload = if d["payload"].is_null() {
        text(&d["raw_payload"])
    } else {
        serde_json::to_string_pretty(&d["payload"]).unwrap_or_default()
    };
    let body = html! {
        h1 { "Dead letter " code { (text(&d["id"])) } }
        p { "State: " (state(&d["state"])) " · failed " (when(&d["failed_at"])) " (" (age(&d["age_seconds"])) ")" }
        p { "Owner: " strong { (text(&d["owner"])) } " · runbook: " code { (text(&d["runbook"])) } }
        table #envelope {
            tbody {
                (field("Category", "category")) (field("Error code", "error_code")) (field("Error class", "error_class"))
                (field("Error message", "error_message")) (field("Side effect", "side_effect_state"))
                (field("Queue", "queue")) (field("Job type", "job_type")) (field("Payload version", "payload_version"))
                (field("Job", "job_id")) (field("Attempts", "attempts")) (field("Correlation id", "correlation_id"))
                (field("Idempotency key", "idempotency_key")) (field("Worker", "worker_host")) (field("Worker version", "worker_version"))
                tr { th scope="row" { "Withdrawal" } td { @if d["withdrawal_id"].is_null() { "-" } @else { a href={ "/ops/withdrawals/" (text(&d["withdrawal_id"])) } { code { (text(&d["withdrawal_id"])) } } } } }
            }
        }
        h2 { "Payload (redacted)" }
        pre #payload { (payload) }
        @if !d["stack"].is_null() { h2 { "Stack" } pre { (text(&d["stack"])) } }
        h2 { "History" }
        ol #letter-events {
            @for e in d["events"].as_array().cloned().unwrap_or_default() {
                li { (when(&e["at"])) " · " strong { (text(&e["action"])) } " by " (text(&e["actor"])) ": " (text(&e["reason"]))
                     @if !e["replay_job_status"].is_null() { " — replayed job is " (state(&e["replay_job_status"])) } }
            }
            @if d["events"].as_array().is_none_or(|e| e.is_empty()) { li { "Nothing yet." } }
        }
        @if d["state"] == "open" {
            section aria-labelledby="h-close" {
                h2 #h-close { "Close" }
                (role_note(session, Role::Operator, "close dead letters"))
                @if session.can(Role::Operator) {
                    form #close-form method="post" action={ "/ops/dead-letters/" (text(&d["id"])) "/close" } {
                        (csrf_field(session))
                        p.hint { "Closing archives the letter with your reason; it is never deleted." }
                        p { label for="close-reason" { "Reason (required)" } br; textarea #close-reason name="reason" rows="2" cols="50" required maxlength="500" {} }
                        button type="submit" { "Close dead letter" }
                    }
                    p { a #replay-this href={ "/ops/replays" (api::query(&[("dead_letter_id", d["id"].as_str())])) } { "Replay this dead letter…" } }
                }
            }
        }
    };
    (code, views::page(session, "Dead letter", banner, body)).into_response()
}

#[derive(Debug, Deserialize)]
pub struct CloseForm {
    csrf: Option<String>,
    reason: Option<String>,
}

/// `POST /ops/dead-letters/{id}/close`.
pub async fn close(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Form(form): Form<CloseForm>,
) -> Response {
    if let Some(refused) = session.csrf_refusal(form.csrf.as_deref()) {
        return refused;
    }
    let body = json!({"reason": form.reason.unwrap_or_default()});
    match api::post(&state_, &session, &format!("/ops/v1/dead-letters/{}/close", urlencode(&id)), body).await {
        Ok(_) => Redirect::to(&format!("/ops/dead-letters/{}?done=close", urlencode(&id))).into_response(),
        Err(r) => render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status).await,
    }
}
