//! The review queue and one withdrawal's page: its evidence as one timeline (transitions,
//! provider attempts, reconciliation results, dead letters, ledger entries) and the resolve forms,
//! each with a reason and the version the operator was shown.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use maud::{html, Markup};
use serde::Deserialize;
use serde_json::{json, Value};

use super::api;
use super::session::{urlencode, Session};
use super::views::{self, age, csrf_field, role_note, state, text, when, Banner};
use crate::domain::WithdrawalStatus;
use crate::http::AppState;
use crate::ops::Role;

#[derive(Debug, Default, Deserialize)]
pub struct QueueQuery {
    status: Option<String>,
    account_id: Option<String>,
    cursor: Option<String>,
}

/// `GET /ops/review`: withdrawals in a state (`requires_review` by default), oldest first.
pub async fn queue(State(state_): State<AppState>, session: Session, Query(q): Query<QueueQuery>) -> Response {
    let status = q.status.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "requires_review".into());
    let uri = format!(
        "/ops/v1/withdrawals{}",
        api::query(&[
            ("status", Some(status.as_str())),
            ("account_id", q.account_id.as_deref()),
            ("cursor", q.cursor.as_deref()),
            ("limit", Some("50")),
        ])
    );
    let (listed, banner, code) = match api::get(&state_, &session, &uri).await {
        Ok(v) => (v, None, StatusCode::OK),
        Err(r) => (json!({"data": []}), Some(Banner::error(r.to_string())), r.status),
    };
    let rows = listed["data"].as_array().cloned().unwrap_or_default();
    let body = html! {
        h1 { "Review queue" }
        form.filters method="get" action="/ops/review" aria-label="Filter withdrawals" {
            p {
                label for="status" { "State" } br;
                select #status name="status" {
                    @for s in WithdrawalStatus::ALL {
                        option value=(s.as_str()) selected[s.as_str() == status] { (s.as_str()) }
                    }
                }
            }
            p { label for="account_id" { "Account id" } br; input #account_id name="account_id" value=(q.account_id.clone().unwrap_or_default()) size="38"; }
            p { button type="submit" { "Filter" } }
        }
        p { (rows.len()) " shown, oldest in state first." }
        table #review-queue {
            thead { tr {
                th scope="col" { "Withdrawal" } th scope="col" { "State" } th.num scope="col" { "Amount" }
                th scope="col" { "Failure code" } th scope="col" { "In state for" } th scope="col" { "Last change" }
            } }
            tbody {
                @for w in &rows {
                    tr {
                        td { a href={ "/ops/withdrawals/" (text(&w["id"])) } { code { (text(&w["id"])) } } }
                        td { (state(&w["status"])) }
                        td.num { (text(&w["amount"])) " " (text(&w["currency"])) }
                        td { (text(&w["failure_code"])) }
                        td { (age(&w["age_seconds"])) }
                        td { (when(&w["updated_at"])) }
                    }
                }
                @if rows.is_empty() { tr { td colspan="6" { "Nothing in this state." } } }
            }
        }
        @if let Some(next) = listed["next_cursor"].as_str() {
            p { a href={ "/ops/review" (api::query(&[("status", Some(status.as_str())), ("account_id", q.account_id.as_deref()), ("cursor", Some(next))])) } { "Next page" } }
        }
    };
    (code, views::page(&session, "Review queue", banner, body)).into_response()
}

#[derive(Debug, Default, Deserialize)]
pub struct Done {
    done: Option<String>,
}

fn done_banner(done: Option<&str>) -> Option<Banner> {
    let text = match done? {
        "complete" => "The withdrawal is completed.",
        "fail" => "The withdrawal is failed and its funds are released to the customer's balance.",
        "retry" => "The payout is queued again.",
        "reconcile" => "A reconciliation with the provider is queued; its result will appear in the timeline.",
        "pending_approval" => {
            "Your decision is recorded and waits for a second operator: it applies only when another operator approves it."
        }
        "approve" => "You approved the decision: it was checked with the provider again and applied.",
        "reject" => "You rejected the decision: nothing moved.",
        _ => return None,
    };
    Some(Banner::ok(text))
}

/// `GET /ops/withdrawals/{id}`.
pub async fn withdrawal(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(d): Query<Done>,
) -> Response {
    render(&state_, &session, &id, done_banner(d.done.as_deref()), StatusCode::OK, None).await
}

async fn render(
    state_: &AppState,
    session: &Session,
    id: &str,
    banner: Option<Banner>,
    code: StatusCode,
    typed: Option<&ResolveForm>,
) -> Response {
    let shown = match api::get(state_, session, &format!("/ops/v1/withdrawals/{}", urlencode(id))).await {
        Ok(v) => v,
        Err(r) => return views::refused(r.status, "Withdrawal", &r.to_string()),
    };
    let w = &shown["withdrawal"];
    let body = html! {
        h1 { "Withdrawal " code { (text(&w["id"])) } }
        @if w["sandbox"] == true {
            p #sandbox-marker role="status" { strong { "SANDBOX" } ": made in sandbox mode; no real money is paid out for it." }
        }
        dl #withdrawal-facts {
            dt { "State" } dd #withdrawal-state { (state(&w["status"])) " for " (age(&w["age_seconds"])) }
            dt { "Amount" } dd { (text(&w["amount"])) " " (text(&w["currency"])) }
            dt { "Account" } dd { code { (text(&w["account_id"])) } }
            dt { "Destination" } dd {
                @for (k, v) in w["destination"].as_object().cloned().unwrap_or_default() { (k) ": " code { (text(&v)) } " " }
            }
            dt { "Customer reference" } dd { (text(&w["reference"])) }
            dt { "Failure code" } dd { (text(&w["failure_code"])) }
            dt { "Version" } dd #withdrawal-version { (text(&w["version"])) }
            dt { "Created" } dd { (when(&w["created_at"])) }
        }
        @if let Some(pending) = pending_decision(&shown) {
            @if w["status"] == "requires_review" {
                (decision_section(session, w, &pending))
            }
        } @else if w["status"] == "requires_review" {
            section aria-labelledby="h-resolve" {
                h2 #h-resolve { "Resolve" }
                (role_note(session, Role::Operator, "resolve withdrawals"))
                @if session.can(Role::Operator) { (resolve_forms(session, w, typed)) }
            }
        }
        section aria-labelledby="h-timeline" {
            h2 #h-timeline { "Evidence timeline" }
            (timeline(&shown))
        }
    };
    (code, views::page(session, "Withdrawal", banner, body)).into_response()
}

fn pending_decision(shown: &Value) -> Option<Value> {
    shown["review_decisions"].as_array()?.iter().find(|d| d["status"] == "pending").cloned()
}

/// A decision waiting for a second operator (the two-person rule): who asked for what, on which
/// provider answer; approve (not the requester) or reject.
fn decision_section(session: &Session, w: &Value, d: &Value) -> Markup {
    let id = text(&w["id"]);
    let mine = text(&d["requested_by"]) == session.operator.id.to_string();
    let form = |verdict: &str, label: &str, help: &str| {
        html! {
            form method="post" action={ "/ops/withdrawals/" (id) "/decision/" (verdict) } #{ "decision-" (verdict) } aria-labelledby={ "h-decision-" (verdict) } {
                h3 #{ "h-decision-" (verdict) } { (label) }
                p.hint { (help) }
                (csrf_field(session))
                p {
                    label for={ "decision-reason-" (verdict) } { "Reason (required)" } br;
                    textarea #{ "decision-reason-" (verdict) } name="reason" rows="2" cols="50" required maxlength="500" {}
                }
                button type="submit" #{ "submit-decision-" (verdict) } { (label) }
            }
        }
    };
    html! {
        section #pending-decision aria-labelledby="h-decision" {
            h2 #h-decision { "Waiting for a second operator" }
            p {
                "Decision " code { (text(&d["id"])) } ": " strong { (text(&d["action"])) }
                @if !d["provider_reference"].is_null() { " with transfer " code { (text(&d["provider_reference"])) } }
                ", requested by " code { (text(&d["requested_by"])) } " " (when(&d["requested_at"]))
                ": " (text(&d["reason"]))
            }
            p { "When it was requested the provider said: " (provider_said(&d["request_evidence"])) ". Approving asks the provider again." }
            (role_note(session, Role::Operator, "approve or reject decisions"))
            @if session.can(Role::Operator) {
                div.actions {
                    @if mine {
                        p.hint { "You requested this decision: another operator must approve it. You may withdraw it." }
                    } @else {
                        (form("approve", "Approve and apply", "Apply this decision; it is checked against the provider's record now."))
                    }
                    (form("reject", "Reject", "Drop this decision; nothing moves and the withdrawal stays in review."))
                }
            }
        }
    }
}

/// What the provider said, from a decision's evidence.
fn provider_said(evidence: &Value) -> Markup {
    html! {
        (state(&evidence["verdict"]))
        @if let Some(t) = evidence["transfer"].as_object() {
            " (transfer " code { (text(&t["id"].clone())) } ", " (text(&t["amount"].clone())) " " (text(&t["currency"].clone())) ")"
        }
        @if let Some(fields) = evidence["mismatch"].as_array() {
            " — differs in " (fields.iter().map(text).collect::<Vec<_>>().join(", "))
        }
        @if !evidence["asked_at"].is_null() { ", asked " (when(&evidence["asked_at"])) }
    }
}

/// `typed`: what the operator entered in a form that was refused, shown again in that form.
fn resolve_forms(session: &Session, w: &Value, typed: Option<&ResolveForm>) -> Markup {
    let id = text(&w["id"]);
    let version = text(&w["version"]);
    let typed_in = |action: &str| typed.filter(|t| t.action.as_deref() == Some(action));
    let reference = typed_in("complete").and_then(|t| t.provider_reference.clone()).unwrap_or_default();
    let form = |action: &str, label: &str, help: &str, extra: Markup| {
        let reason = typed_in(action).and_then(|t| t.reason.clone()).unwrap_or_default();
        html! {
            form method="post" action={ "/ops/withdrawals/" (id) "/resolve" } #{ "resolve-" (action) } aria-labelledby={ "h-" (action) } {
                h3 #{ "h-" (action) } { (label) }
                p.hint { (help) }
                (csrf_field(session))
                input type="hidden" name="action" value=(action);
                input type="hidden" name="version" value=(version);
                (extra)
                p {
                    label for={ "reason-" (action) } { "Reason (required)" } br;
                    textarea #{ "reason-" (action) } name="reason" rows="2" cols="50" required maxlength="500" { (reason) }
                }
                button type="submit" #{ "submit-" (action) } { (label) }
            }
        }
    };
    html! {
        p.hint { "Each decision is checked against version " (version) ", the one shown here: if the withdrawal changed since, nothing happens and you are told." }
        div.actions {
            (form("complete", "Complete", "The provider paid: give its transfer id; it is checked with the provider first.", html! {
                p { label for="provider_reference" { "Provider transfer id (required)" } br; input #provider_reference name="provider_reference" required size="30" value=(reference); }
            }))
            (form("fail", "Fail and release funds", "The payout will not happen: the held funds return to the customer's balance.", html! {}))
            (form("retry", "Retry the payout", "Send the payout again under the same provider key (only when nothing may have been paid).", html! {}))
            (form("reconcile", "Reconcile with the provider", "Ask the provider what happened to this payout before deciding.", html! {}))
        }
    }
}

/// All evidence in time order.
fn timeline(shown: &Value) -> Markup {
    let mut events: Vec<(String, Markup)> = Vec::new();
    let empty = Vec::new();
    let each = |key: &str| shown[key].as_array().unwrap_or(&empty).clone();
    for t in each("transitions") {
        events.push((
            text(&t["at"]),
            html! {
                span.kind { "Transition" } " " (state(&t["from"])) " → " (state(&t["to"])) " by " (text(&t["actor"]))
                ": " (text(&t["reason"]))
                @if t["evidence"].is_object() { " — the provider said " (provider_said(&t["evidence"])) }
            },
        ));
    }
    for d in each("review_decisions") {
        events.push((
            text(&d["requested_at"]),
            html! {
                span.kind { "Decision requested" } " " (text(&d["action"])) " by " code { (text(&d["requested_by"])) }
                ": " (text(&d["reason"])) " — " (state(&d["status"]))
                @if !d["decided_by"].is_null() { " by " code { (text(&d["decided_by"])) } ": " (text(&d["decision_reason"])) }
            },
        ));
    }
    for a in each("provider_attempts") {
        events.push((text(&a["started_at"]), html! {
            span.kind { "Provider attempt " (text(&a["attempt_no"])) } " — outcome " (state(&a["outcome"]))
            ", side effect " (text(&a["side_effect"])) ", HTTP " (text(&a["http_status"]))
            @if !a["provider_transfer_id"].is_null() { ", transfer " code { (text(&a["provider_transfer_id"])) } }
            @if !a["error_code"].is_null() { ", error " code { (text(&a["error_code"])) } ": " (text(&a["error_message"])) }
        }));
    }
    for r in each("reconciliation_results") {
        events.push((
            text(&r["at"]),
            html! {
                span.kind { "Reconciliation" } " — the provider says " (state(&r["result"]))
                @if !r["provider_transfer_id"].is_null() { ", transfer " code { (text(&r["provider_transfer_id"])) } }
                @if !r["detail"].is_null() { ": " (text(&r["detail"])) }
            },
        ));
    }
    for d in each("dead_letters") {
        events.push((text(&d["failed_at"]), html! {
            span.kind { "Dead letter" } " " a href={ "/ops/dead-letters/" (text(&d["id"])) } { (text(&d["category"])) " / " (text(&d["error_code"])) }
            " — side effect " (text(&d["side_effect_state"])) ", owner " (text(&d["owner"])) ": " (text(&d["error_message"]))
        }));
    }
    for e in each("ledger_entries") {
        events.push((
            text(&e["at"]),
            html! {
                span.kind { "Ledger entry " (text(&e["kind"])) } " — available " (text(&e["available"])) ", held "
                (text(&e["held"])) ", paid out " (text(&e["paid_out"]))
            },
        ));
    }
    // By time (parsed: RFC 3339 text with and without fractions does not sort as text); stable
    // for equal times, so a transition stays before the ledger entry written with it.
    events.sort_by_key(|(at, _)| chrono::DateTime::parse_from_rfc3339(at).ok());
    html! {
        ol.timeline #timeline {
            @for (at, event) in &events {
                li { (when(&Value::String(at.clone()))) " · " (event) }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ResolveForm {
    csrf: Option<String>,
    action: Option<String>,
    reason: Option<String>,
    version: Option<String>,
    provider_reference: Option<String>,
}

/// `POST /ops/withdrawals/{id}/resolve`: the ops API's resolve, as this operator.
pub async fn resolve(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Form(form): Form<ResolveForm>,
) -> Response {
    if let Some(refused) = session.csrf_refusal(form.csrf.as_deref()) {
        return refused;
    }
    let action = form.action.clone().unwrap_or_default();
    let body = json!({
        "action": action,
        "reason": form.reason.clone().unwrap_or_default(),
        "version": form.version.as_deref().and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(-1),
        "provider_reference": form.provider_reference.clone().filter(|r| !r.trim().is_empty()),
    });
    match api::post(&state_, &session, &format!("/ops/v1/withdrawals/{}/resolve", urlencode(&id)), body).await {
        Ok(answer) => {
            let done = if answer["status"] == "pending_approval" { "pending_approval" } else { action.as_str() };
            Redirect::to(&format!("/ops/withdrawals/{}?done={}", urlencode(&id), urlencode(done))).into_response()
        }
        Err(r) => render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status, Some(&form)).await,
    }
}

#[derive(Debug, Deserialize)]
pub struct DecisionForm {
    csrf: Option<String>,
    reason: Option<String>,
}

/// `POST /ops/withdrawals/{id}/decision/approve|reject`: the ops API's, as this operator.
pub async fn decide(
    State(state_): State<AppState>,
    session: Session,
    Path((id, verdict)): Path<(String, String)>,
    Form(form): Form<DecisionForm>,
) -> Response {
    if let Some(refused) = session.csrf_refusal(form.csrf.as_deref()) {
        return refused;
    }
    if !matches!(verdict.as_str(), "approve" | "reject") {
        return views::refused(StatusCode::NOT_FOUND, "Withdrawal", "no such decision action");
    }
    let body = json!({"reason": form.reason.clone().unwrap_or_default()});
    let uri = format!("/ops/v1/withdrawals/{}/decision/{verdict}", urlencode(&id));
    match api::post(&state_, &session, &uri, body).await {
        Ok(_) => Redirect::to(&format!("/ops/withdrawals/{}?done={verdict}", urlencode(&id))).into_response(),
        Err(r) => render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status, None).await,
    }
}
