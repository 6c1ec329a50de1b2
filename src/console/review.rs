//! The review queue (why each item waits, what the provider last said, filtered by reason) and one
//! withdrawal's page: its evidence as one timeline (transitions, provider attempts, reconciliation
//! results, dead letters, ledger entries) and the resolve forms, each with a reason and the
//! version the operator was shown.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use maud::{html, Markup};
use serde::Deserialize;

use super::api;
use super::session::{urlencode, CsrfForm, Session};
use super::views::{self, age, csrf_field, opt, role_note, state, text, when, Banner};
use crate::domain::{Evidence, StoredEvidence, WithdrawalStatus};
use crate::http::AppState;
use crate::ops::types::{
    ApproveOrReject, OpsWithdrawal, Page, ProviderStatus, ReasonFilter, ReasonRequest, ResolveRequest,
    ReviewDecisionView, WithdrawalDetail, WithdrawalQuery,
};
use crate::ops::Role;

#[derive(Debug, Default, Deserialize)]
pub struct QueueQuery {
    status: Option<String>,
    account_id: Option<String>,
    reason: Option<String>,
    cursor: Option<String>,
}

/// `GET /ops/review`: withdrawals in a state (`requires_review` by default), oldest first, each
/// with why it waits and what the provider last said; filtered by account and by reason.
pub async fn queue(State(state_): State<AppState>, session: Session, Query(q): Query<QueueQuery>) -> Response {
    let status = q.status.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| "requires_review".into());
    let reason = q.reason.clone().filter(|r| !r.is_empty());
    let filters =
        [("status", Some(status.as_str())), ("account_id", q.account_id.as_deref()), ("reason", reason.as_deref())];
    let listed = async {
        let query: WithdrawalQuery =
            api::parse_query(&[&filters[..], &[("cursor", q.cursor.as_deref()), ("limit", Some("50"))]].concat())?;
        api::withdrawals(&state_, &session, &query).await
    };
    let (listed, banner, code) = match listed.await {
        Ok(page) => (page, None, StatusCode::OK),
        Err(r) => (Page { data: Vec::new(), next_cursor: None }, Some(Banner::error(r.to_string())), r.status),
    };
    let rows = &listed.data;
    let body = html! {
        h1 { "Review queue" }
        form.filters method="get" action="/ops/review" aria-label="Filter withdrawals" {
            p {
                label for="status" { "State" } br;
                select #status name="status" {
                    @for s in WithdrawalStatus::ALL {
                        option value=(s.as_str()) selected[status.parse() == Ok(s)] { (s.as_str()) }
                    }
                }
            }
            p { label for="account_id" { "Account id" } br; input #account_id name="account_id" value=(q.account_id.clone().unwrap_or_default()) size="38"; }
            p {
                label for="reason" { "Why it waits" } br;
                select #reason name="reason" {
                    option value="" selected[reason.is_none()] { "any reason" }
                    @for r in ReasonFilter::all() {
                        @let value = r.to_string();
                        option value=(value) selected[reason.as_deref() == Some(value.as_str())] { (value) }
                    }
                }
            }
            p { button type="submit" { "Filter" } }
        }
        p { (rows.len()) " shown, oldest in state first." }
        table #review-queue {
            thead { tr {
                th scope="col" { "Withdrawal" } th scope="col" { "State" } th.num scope="col" { "Amount" }
                th scope="col" { "Why it waits" } th scope="col" { "Provider's last status" }
                th scope="col" { "In state for" } th scope="col" { "Last change" }
            } }
            tbody {
                @for w in rows {
                    tr {
                        td { a href={ "/ops/withdrawals/" (w.id) } { code { (w.id) } } }
                        td { (state(w.status)) }
                        td.num { (w.amount) " " (w.currency) }
                        td.reason { (reason_cell(w)) }
                        td.provider-status { (provider_cell(w.provider_status.as_ref())) }
                        td { (age(w.age_seconds)) }
                        td { (when(w.updated_at)) }
                    }
                }
                @if rows.is_empty() { tr { td colspan="7" { "Nothing in this state." } } }
            }
        }
        @if let Some(next) = listed.next_cursor.as_deref() {
            p { a href={ "/ops/review" (api::query(&[&filters[..], &[("cursor", Some(next))]].concat())) } { "Next page" } }
        }
    };
    (code, views::page(&session, "Review queue", banner, body)).into_response()
}

/// Why it waits: the reason (its dead letter linked) and the letter's error code; a withdrawal in
/// another state shows its failure code, as before.
fn reason_cell(w: &OpsWithdrawal) -> Markup {
    match &w.reason {
        Some(r) => html! {
            @match r.dead_letter_id {
                Some(letter) => { a href={ "/ops/dead-letters/" (letter) } { code { (r.value) } } }
                None => { code { (r.value) } }
            }
            @if let Some(code) = &r.code { " " code.error-code { (code) } }
        },
        None => html! { (opt(&w.failure_code)) },
    }
}

/// The provider's last known status, where it was read (reconciliation or an attempt) and when.
fn provider_cell(status: Option<&ProviderStatus>) -> Markup {
    match status {
        Some(s) => html! {
            (state(&s.status))
            @if let Some(source) = s.source { " from " (source) }
            @if let Some(provider) = &s.provider { " at " (provider) }
            @if let Some(at) = s.at { ", " (when(at)) }
        },
        None => html! { (state("unknown")) },
    }
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
    Query(d): Query<views::Done>,
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
    let shown = async { api::withdrawal(state_, session, api::withdrawal_id(id)?).await };
    let shown = match shown.await {
        Ok(shown) => shown,
        Err(r) => return views::refused(r.status, "Withdrawal", &r.to_string()),
    };
    let w = &shown.withdrawal;
    let in_review = w.status == WithdrawalStatus::RequiresReview;
    let body = html! {
        h1 { "Withdrawal " code { (w.id) } }
        @if w.sandbox {
            p #sandbox-marker role="status" { strong { "SANDBOX" } ": made in sandbox mode; no real money is paid out for it." }
        }
        dl #withdrawal-facts {
            dt { "State" } dd #withdrawal-state { (state(w.status)) " for " (age(w.age_seconds)) }
            dt { "Amount" } dd { (w.amount) " " (w.currency) }
            dt { "Account" } dd { code { (w.account_id) } }
            dt { "Destination" } dd {
                // A masked destination, shown whole: its parts are whatever its type has.
                @for (k, v) in w.destination.as_object().into_iter().flatten() { (k) ": " code { (text(v)) } " " }
            }
            dt { "Customer reference" } dd { (opt(&w.reference)) }
            dt { "Failure code" } dd { (opt(&w.failure_code)) }
            dt { "Version" } dd #withdrawal-version { (w.version) }
            dt { "Created" } dd { (when(w.created_at)) }
        }
        @if let Some(pending) = pending_decision(&shown) {
            @if in_review {
                (decision_section(session, w, pending))
            }
        } @else if in_review {
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

fn pending_decision(shown: &WithdrawalDetail) -> Option<&ReviewDecisionView> {
    shown.review_decisions.iter().find(|d| d.status == crate::domain::DecisionStatus::Pending)
}

/// A decision waiting for a second operator (the two-person rule): who asked for what, on which
/// provider answer; approve (not the requester) or reject.
fn decision_section(session: &Session, w: &OpsWithdrawal, d: &ReviewDecisionView) -> Markup {
    let id = w.id;
    let mine = d.requested_by == session.operator.id.0;
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
                "Decision " code { (d.id) } ": " strong { (d.action) }
                @if let Some(reference) = &d.provider_reference { " with transfer " code { (reference) } }
                ", requested by " (d.requested_by_name) " " (when(d.requested_at))
                ": " (d.reason)
            }
            p { "When it was requested the provider said: " (provider_said(&d.request_evidence)) ". Approving asks the provider again." }
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

/// What the provider said, from stored evidence; evidence this version cannot read is shown as
/// such, never as nothing.
fn provider_said(stored: &serde_json::Value) -> Markup {
    match StoredEvidence::read(stored) {
        Ok(StoredEvidence::Provider(evidence)) => provider_answer(&evidence),
        Ok(StoredEvidence::SettlementLine(line)) => html! {
            "the settlement report showed it " (state(line.verdict))
            @if let Some(live) = &line.provider_record { "; asked then, " (provider_answer(live)) }
        },
        Err(unreadable) => html! { span.unreadable { (unreadable) } },
    }
}

fn provider_answer(evidence: &Evidence) -> Markup {
    html! {
        (state(evidence.verdict))
        @if let Some(t) = evidence.transfer() {
            " (transfer " code { (t.id) } ", " (t.amount) " " (t.currency) ")"
        }
        @if let Some(fields) = &evidence.mismatch {
            " — differs in " (fields.join(", "))
        }
        ", asked " (when(evidence.asked_at))
    }
}

/// `typed`: what the operator entered in a form that was refused, shown again in that form.
fn resolve_forms(session: &Session, w: &OpsWithdrawal, typed: Option<&ResolveForm>) -> Markup {
    let id = w.id;
    let version = w.version;
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
fn timeline(shown: &WithdrawalDetail) -> Markup {
    let mut events: Vec<(DateTime<Utc>, Markup)> = Vec::new();
    for t in &shown.transitions {
        events.push((
            t.at,
            html! {
                span.kind { "Transition" } " " (state(opt(&t.from))) " → " (state(t.to)) " by " (t.actor)
                ": " (t.reason)
                @if let Some(evidence) = t.evidence.as_ref().filter(|e| e.is_object()) {
                    " — the provider said " (provider_said(evidence))
                }
            },
        ));
    }
    for d in &shown.review_decisions {
        events.push((
            d.requested_at,
            html! {
                span.kind { "Decision requested" } " " (d.action) " by " (d.requested_by_name)
                ": " (d.reason) " — " (state(d.status))
                @if let Some(by) = &d.decided_by_name { " by " (by) ": " (opt(&d.decision_reason)) }
            },
        ));
    }
    for a in &shown.provider_attempts {
        events.push((
            a.started_at,
            html! {
                span.kind { "Provider attempt " (a.attempt_no) } " at " strong { (a.provider) } " — outcome " (state(opt(&a.outcome)))
                ", side effect " (a.side_effect) ", HTTP " (opt(&a.http_status))
                @if let Some(transfer) = &a.provider_transfer_id { ", transfer " code { (transfer) } }
                @if let Some(error) = &a.error_code { ", error " code { (error) } ": " (opt(&a.error_message)) }
            },
        ));
    }
    for r in &shown.reconciliation_results {
        events.push((
            r.at,
            html! {
                span.kind { "Reconciliation" } " — " strong { (r.provider) } " says " (state(r.result))
                @if let Some(transfer) = &r.provider_transfer_id { ", transfer " code { (transfer) } }
                ": " (r.detail)
            },
        ));
    }
    for d in &shown.dead_letters {
        events.push((d.failed_at, html! {
            span.kind { "Dead letter" } " " a href={ "/ops/dead-letters/" (d.id) } { (d.category) " / " (d.error_code) }
            " — side effect " (d.side_effect_state) ", owner " (d.owner) ": " (d.error_message)
        }));
    }
    for e in &shown.ledger_entries {
        events.push((
            e.at,
            html! {
                span.kind { "Ledger entry " (e.kind) } " — available " (e.available) ", held "
                (e.held) ", paid out " (e.paid_out)
            },
        ));
    }
    // By time; stable for equal times, so a transition stays before the ledger entry written
    // with it.
    events.sort_by_key(|(at, _)| *at);
    html! {
        ol.timeline #timeline {
            @for (at, event) in &events {
                li { (when(*at)) " · " (event) }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct ResolveForm {
    action: Option<String>,
    reason: Option<String>,
    version: Option<String>,
    provider_reference: Option<String>,
}

/// `POST /ops/withdrawals/{id}/resolve`: the ops API's resolve, as this operator.
pub async fn resolve(
    State(state_): State<AppState>,
    Path(id): Path<String>,
    CsrfForm(session, form): CsrfForm<ResolveForm>,
) -> Response {
    let action = form.action.clone().unwrap_or_default();
    let request = ResolveRequest {
        action: action.clone(),
        reason: form.reason.clone().unwrap_or_default(),
        // No number is no version: the core refuses it as stale.
        version: form.version.as_deref().and_then(|v| v.trim().parse::<i64>().ok()).unwrap_or(-1),
        provider_reference: form.provider_reference.clone().filter(|r| !r.trim().is_empty()),
    };
    let resolved = async { api::resolve(&state_, &session, api::withdrawal_id(&id)?, &request).await };
    match resolved.await {
        Ok(answer) => {
            let done = if answer.is_pending_approval() { "pending_approval" } else { action.as_str() };
            Redirect::to(&format!("/ops/withdrawals/{}?done={}", urlencode(&id), urlencode(done))).into_response()
        }
        Err(r) => render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status, Some(&form)).await,
    }
}

#[derive(Debug, Deserialize)]
pub struct DecisionForm {
    reason: Option<String>,
}

/// `POST /ops/withdrawals/{id}/decision/approve|reject`: the ops API's, as this operator.
pub async fn decide(
    State(state_): State<AppState>,
    Path((id, verdict)): Path<(String, String)>,
    CsrfForm(session, form): CsrfForm<DecisionForm>,
) -> Response {
    let Ok(verdict) = verdict.parse::<ApproveOrReject>() else {
        return views::refused(StatusCode::NOT_FOUND, "Withdrawal", "no such decision action");
    };
    let request = ReasonRequest { reason: form.reason.clone().unwrap_or_default() };
    let decided = async { api::decide(&state_, &session, api::withdrawal_id(&id)?, verdict, &request).await };
    match decided.await {
        Ok(_) => {
            Redirect::to(&format!("/ops/withdrawals/{}?done={}", urlencode(&id), verdict.as_str())).into_response()
        }
        Err(r) => render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status, None).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{EvidenceSource, LineEvidence, VerdictKind};

    #[test]
    fn evidence_is_shown_as_written_and_an_unreadable_shape_says_so() {
        let asked = Evidence::of(EvidenceSource::ProviderLookup, VerdictKind::NoTransfer, Utc::now());
        let shown = provider_said(&asked.to_json()).into_string();
        assert!(shown.contains("no_transfer") && shown.contains("asked"), "{shown}");

        let line: LineEvidence = serde_json::from_value(serde_json::json!({
            "source": "settlement_report", "report_id": uuid::Uuid::now_v7(), "line": 3, "line_key": "k",
            "report_line": {"transfer_id": "tr_1", "idempotency_key": "k", "reference": "r", "amount_minor": 1000,
                            "currency": "USD", "fee_minor": 0, "status": "paid", "event_at": Utc::now()},
            "verdict": "paid", "ours": null, "provider_record": asked.clone(), "matched_at": Utc::now()
        }))
        .unwrap();
        let shown = provider_said(&line.to_json()).into_string();
        assert!(shown.contains("settlement report showed it") && shown.contains("no_transfer"), "{shown}");

        let shown = provider_said(&serde_json::json!({"verdict": "paid"})).into_string();
        assert!(shown.contains("cannot read"), "an older shape is named, not shown as nothing: {shown}");
    }
}
