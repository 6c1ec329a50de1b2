//! Customer notifications in the browser (SPEC §17): each webhook endpoint's health (status, why
//! it was disabled, failing since when, its notifications by status) and the recent deliveries,
//! filtered by endpoint and status; one notification with its attempts and the event as sent;
//! and redelivery with a reason (operator role; audited by the core like every action).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::api;
use super::session::{urlencode, CsrfForm, Session};
use super::views::{self, csrf_field, opt, role_note, state, when, Banner};
use crate::domain::{EndpointStatus, NotificationStatus};
use crate::http::AppState;
use crate::ops::types::{
    List, NotificationQuery, NotificationView, ReasonRequest, WebhookEndpointQuery, WebhookEndpointView,
};
use crate::ops::Role;

/// How many endpoints and deliveries the page shows.
const SHOWN: i64 = 50;

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    endpoint: Option<String>,
    status: Option<String>,
}

impl ListQuery {
    fn pairs(&self) -> Vec<(&str, Option<&str>)> {
        vec![("endpoint", self.endpoint.as_deref()), ("status", self.status.as_deref())]
    }
}

/// An endpoint's notifications by status, one line each in [`NotificationStatus::ALL`]'s order.
fn counts(e: &WebhookEndpointView) -> Markup {
    html! {
        @for s in NotificationStatus::ALL {
            span data-status=(s.as_str()) { (s.as_str()) " " strong { (e.notifications.of(s)) } } br;
        }
    }
}

/// The last answer of a delivery: its status code and error, `-` for neither.
fn last_answer(n: &NotificationView) -> Markup {
    html! {
        (opt(&n.last_status_code))
        @if let Some(e) = &n.last_error { " — " (e) }
    }
}

/// `GET /ops/notifications`: the endpoints' health and the recent deliveries.
pub async fn index(State(state_): State<AppState>, session: Session, Query(q): Query<ListQuery>) -> Response {
    let mut banner = None;
    let mut code = StatusCode::OK;
    let endpoints = match api::webhook_endpoints(&state_, &session, &WebhookEndpointQuery { limit: Some(SHOWN) }).await
    {
        Ok(list) => list,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            List { data: Vec::new() }
        }
    };
    let mut pairs = q.pairs();
    let limit = SHOWN.to_string();
    pairs.push(("limit", Some(limit.as_str())));
    let listed = async {
        let query: NotificationQuery = api::parse_query(&pairs)?;
        api::notifications(&state_, &session, &query).await
    };
    let listed = match listed.await {
        Ok(list) => list,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            List { data: Vec::new() }
        }
    };
    let chosen_endpoint = q.endpoint.as_deref().map(str::trim).unwrap_or("");
    let chosen_status = q.status.as_deref().map(str::trim).unwrap_or("");
    let rows = &listed.data;
    let body = html! {
        h1 { "Notifications" }
        section aria-labelledby="h-endpoints" {
            h2 #h-endpoints { "Endpoints" }
            p.hint { "Every account's webhook endpoints, newest first. An endpoint that answers 410, or fails for longer than the disable window, is disabled: nothing more is sent to it until its customer registers it again." }
            table #endpoints {
                thead { tr {
                    th scope="col" { "Endpoint / account" } th scope="col" { "URL" } th scope="col" { "Status" }
                    th scope="col" { "Failing since" } th scope="col" { "Notifications" }
                } }
                tbody {
                    @for e in &endpoints.data {
                        tr {
                            th scope="row" {
                                a href={ "/ops/notifications" (api::query(&[("endpoint", Some(e.id.as_str()))])) }
                                  aria-current=[(chosen_endpoint == e.id).then_some("true")] { code { (e.id) } }
                                br; span.hint { "account " code { (e.account_id) } }
                            }
                            td { (e.url) }
                            td { (state(e.status)) @if let Some(r) = &e.disabled_reason { br; (r) } }
                            td { (when(e.failing_since)) }
                            td.counts { (counts(e)) }
                        }
                    }
                    @if endpoints.data.is_empty() { tr { td colspan="5" { "No endpoint is registered." } } }
                }
            }
        }
        section aria-labelledby="h-deliveries" {
            h2 #h-deliveries { "Recent deliveries" }
            form.filters method="get" action="/ops/notifications" aria-label="Filter notifications" {
                p {
                    label for="f-endpoint" { "Endpoint" } br;
                    select #f-endpoint name="endpoint" {
                        option value="" { "any" }
                        @for e in &endpoints.data {
                            option value=(e.id) selected[chosen_endpoint == e.id] { (e.id) " — " (e.url) }
                        }
                    }
                }
                p {
                    label for="f-status" { "Status" } br;
                    select #f-status name="status" {
                        option value="" { "any" }
                        @for s in NotificationStatus::ALL {
                            option value=(s.as_str()) selected[chosen_status == s.as_str()] { (s.as_str()) }
                        }
                    }
                }
                p { button type="submit" { "Filter" } }
            }
            p #list-count { (rows.len()) " shown, newest first." }
            table #deliveries {
                thead { tr {
                    th scope="col" { "Notification" } th scope="col" { "Event" } th scope="col" { "Withdrawal" }
                    th scope="col" { "Endpoint" } th scope="col" { "Status" } th.num scope="col" { "Attempts" }
                    th scope="col" { "Last answer" }
                } }
                tbody {
                    @for n in rows {
                        tr {
                            td { a href={ "/ops/notifications/" (n.id) } { code { (n.id) } } br; span.hint { "created " (when(n.created_at)) } }
                            td { (n.event_type) br; code { (n.event_id) } }
                            td { a href={ "/ops/withdrawals/" (n.withdrawal_id) } { code { (n.withdrawal_id) } } }
                            td { code { (n.endpoint_id) } }
                            td { (state(n.status)) }
                            td.num { (n.attempts) }
                            td { (last_answer(n)) @if n.last_attempt_at.is_some() { br; span.hint { (when(n.last_attempt_at)) } } }
                        }
                    }
                    @if rows.is_empty() { tr { td colspan="7" { "No notification matches." } } }
                }
            }
        }
    };
    (code, views::page(&session, "Notifications", banner, body)).into_response()
}

/// `GET /ops/notifications/{id}`: the notification, its attempts, the event and the redeliver form.
pub async fn notification(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(d): Query<views::Done>,
) -> Response {
    let banner = (d.done.as_deref() == Some("redeliver"))
        .then(|| Banner::ok("The redelivery is queued: the same event goes to the endpoint again."));
    render(&state_, &session, &id, banner, StatusCode::OK, None).await
}

/// The notification's page; `kept` is a refused form's reason, shown again.
async fn render(
    state_: &AppState,
    session: &Session,
    id: &str,
    banner: Option<Banner>,
    code: StatusCode,
    kept: Option<&str>,
) -> Response {
    let d = async { api::notification(state_, session, api::uuid(id)?).await };
    let d = match d.await {
        Ok(d) => d,
        Err(r) => return views::refused(r.status, "Notification", &r.to_string()),
    };
    let (n, e) = (&d.notification, &d.endpoint);
    let event = serde_json::to_string_pretty(&d.event).unwrap_or_default();
    let field = |label: &str, value: &dyn std::fmt::Display| {
        html! { tr { th scope="row" { (label) } td { (value) } } }
    };
    let body = html! {
        h1 { "Notification " code { (n.id) } }
        p { "Status: " span #notification-status { (state(n.status)) } " · created " (when(n.created_at)) }
        table #notification {
            tbody {
                (field("Event", &n.event_id)) (field("Event type", &n.event_type))
                tr { th scope="row" { "Withdrawal" } td { a href={ "/ops/withdrawals/" (n.withdrawal_id) } { code { (n.withdrawal_id) } } } }
                (field("Account", &n.account_id)) (field("Attempts", &n.attempts))
                tr { th scope="row" { "Last answer" } td { (last_answer(n)) } }
                tr { th scope="row" { "Last attempt" } td { (when(n.last_attempt_at)) } }
                tr { th scope="row" { "Delivered" } td { (when(n.delivered_at)) } }
            }
        }
        h2 { "Endpoint" }
        table #endpoint {
            tbody {
                tr { th scope="row" { "Endpoint" } td { a href={ "/ops/notifications" (api::query(&[("endpoint", Some(e.id.as_str()))])) } { code { (e.id) } } } }
                (field("URL", &e.url))
                tr { th scope="row" { "Status" } td #endpoint-status { (state(e.status)) } }
                (field("Disabled because", &opt(&e.disabled_reason)))
                tr { th scope="row" { "Failing since" } td { (when(e.failing_since)) } }
            }
        }
        h2 { "Attempts" }
        table #attempts {
            thead { tr {
                th.num scope="col" { "Attempt" } th scope="col" { "At" } th scope="col" { "Result" }
                th.num scope="col" { "Status code" } th.num scope="col" { "Took (ms)" } th scope="col" { "Error" }
            } }
            tbody {
                @for a in &d.attempts {
                    tr {
                        td.num { (a.attempt) } td { (when(a.at)) } td { (state(a.result)) }
                        td.num { (opt(&a.status_code)) } td.num { (a.duration_ms) } td { (opt(&a.error)) }
                    }
                }
                @if d.attempts.is_empty() { tr { td colspan="6" { "No attempt yet." } } }
            }
        }
        h2 { "Event as sent" }
        pre #event { (event) }
        section aria-labelledby="h-redeliver" {
            h2 #h-redeliver { "Redeliver" }
            @if e.status != EndpointStatus::Enabled {
                p.hint #not-redeliverable { "Its endpoint is " (e.status) ": nothing is sent to it, so this notification cannot be redelivered." }
            } @else {
                (role_note(session, Role::Operator, "redeliver notifications"))
                @if session.can(Role::Operator) {
                    form #redeliver-form method="post" action={ "/ops/notifications/" (n.id) "/redeliver" } {
                        (csrf_field(session))
                        p.hint { "Sends the same event (same id) to the endpoint again, with a fresh retry window; receivers deduplicate by the event id. Your reason goes to the audit log." }
                        p { label for="redeliver-reason" { "Reason (required)" } br; textarea #redeliver-reason name="reason" rows="2" cols="50" required maxlength="500" { (kept.unwrap_or("")) } }
                        button #submit-redeliver type="submit" { "Redeliver notification" }
                    }
                }
            }
        }
        p { a href="/ops/notifications" { "Back to the notifications" } }
    };
    (code, views::page(session, "Notification", banner, body)).into_response()
}

#[derive(Debug, Deserialize)]
pub struct RedeliverForm {
    reason: Option<String>,
}

/// `POST /ops/notifications/{id}/redeliver`: the ops core's redelivery, as this operator.
pub async fn redeliver(
    State(state_): State<AppState>,
    Path(id): Path<String>,
    CsrfForm(session, form): CsrfForm<RedeliverForm>,
) -> Response {
    let request = ReasonRequest { reason: form.reason.clone().unwrap_or_default() };
    let queued = async { api::redeliver_notification(&state_, &session, api::uuid(&id)?, &request).await };
    match queued.await {
        Ok(_) => Redirect::to(&format!("/ops/notifications/{}?done=redeliver", urlencode(&id))).into_response(),
        Err(r) => {
            render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status, form.reason.as_deref()).await
        }
    }
}
