//! Settlement reconciliation in the browser (SPEC §14): the latest imported reports, the
//! settlement exceptions filtered by kind and status, one exception with the evidence it was
//! opened on, and its resolution with a reason and a note. Resolving records the finding and
//! moves no money; a withdrawal is put right on its review page, which the exception links to.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::api;
use super::session::{urlencode, CsrfForm, Session};
use super::views::{self, csrf_field, opt, role_note, state, when, Banner};
use crate::http::AppState;
use crate::ops::types::{ExceptionKind, ExceptionQuery, ExceptionStatus, List, Page, ReportQuery, Resolution};
use crate::ops::Role;

/// The list's status filter: open (the default), resolved or both.
const STATUSES: [&str; 3] = ["open", "resolved", "all"];

/// How many imported report versions the list page shows.
const LATEST_REPORTS: i64 = 5;

/// What each resolution means, for the form's choices.
fn meaning(r: Resolution) -> &'static str {
    match r {
        Resolution::ProviderCorrected => "the provider corrected its report (a later version matches)",
        Resolution::ResolvedInReview => "put right through review, or the return was applied",
        Resolution::NotOurs => "not ours, confirmed with the provider",
        Resolution::AcceptedDifference => "a known, accepted difference (e.g. timing across days)",
        Resolution::EscalatedToProvider => "raised with the provider (their case number in the note)",
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct ListQuery {
    kind: Option<String>,
    status: Option<String>,
    cursor: Option<String>,
}

impl ListQuery {
    fn pairs<'a>(&'a self, cursor: Option<&'a str>) -> Vec<(&'a str, Option<&'a str>)> {
        vec![("kind", self.kind.as_deref()), ("status", self.status.as_deref()), ("cursor", cursor)]
    }
}

/// `GET /ops/settlement`: the latest reports, the filters and the exceptions.
pub async fn index(State(state_): State<AppState>, session: Session, Query(q): Query<ListQuery>) -> Response {
    let mut banner = None;
    let mut code = StatusCode::OK;
    let latest = ReportQuery { date: None, provider: None, limit: Some(LATEST_REPORTS) };
    let reports = match api::settlement_reports(&state_, &session, &latest).await {
        Ok(reports) => reports,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            List { data: Vec::new() }
        }
    };
    let latest_imports = crate::ops::types::ImportListQuery { limit: Some(LATEST_REPORTS) };
    let imports = match api::settlement_imports(&state_, &session, &latest_imports).await {
        Ok(imports) => imports,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            List { data: Vec::new() }
        }
    };
    let mut pairs = q.pairs(q.cursor.as_deref());
    pairs.push(("limit", Some("50")));
    let listed = async {
        let query: ExceptionQuery = api::parse_query(&pairs)?;
        api::settlement_exceptions(&state_, &session, &query).await
    };
    let listed = match listed.await {
        Ok(page) => page,
        Err(r) => {
            code = r.status;
            banner = Some(Banner::error(r.to_string()));
            Page { data: Vec::new(), next_cursor: None }
        }
    };
    let status = q.status.as_deref().filter(|s| !s.is_empty()).unwrap_or("open");
    let kind = q.kind.as_deref().unwrap_or("");
    let rows = &listed.data;
    let body = html! {
        h1 { "Settlement" }
        section aria-labelledby="h-imports" {
            h2 #h-imports { "Latest imports" }
            table #settlement-imports {
                thead { tr {
                    th scope="col" { "Day" } th scope="col" { "Provider" } th scope="col" { "Source" }
                    th scope="col" { "State" } th.num scope="col" { "Lines done" } th.num scope="col" { "Matched" }
                    th.num scope="col" { "Exceptions" } th scope="col" { "Queued" } th scope="col" { "Import" }
                } }
                tbody {
                    @for i in &imports.data {
                        tr {
                            td { (i.date) }
                            td { (i.provider) }
                            td { (i.source) }
                            td { (i.state) @if let Some(e) = &i.error { " — " (e) } }
                            td.num { (i.lines_done) " / " (i.lines) }
                            td.num { (i.matched) }
                            td.num { (i.exceptions) }
                            td { (when(i.created_at)) }
                            td { code { (i.id) } }
                        }
                    }
                    @if imports.data.is_empty() {
                        tr { td colspan="9" { "No import yet." } }
                    }
                }
            }
        }
        section aria-labelledby="h-reports" {
            h2 #h-reports { "Latest reports" }
            table #settlement-reports {
                thead { tr {
                    th scope="col" { "Day" } th scope="col" { "Provider" } th.num scope="col" { "Version" }
                    th scope="col" { "Digest" } th scope="col" { "Source" } th.num scope="col" { "Lines" }
                    th scope="col" { "Added / removed / changed" } th scope="col" { "Imported" } th scope="col" { "By" }
                } }
                tbody {
                    @for r in &reports.data {
                        @let count = |field: &str| r.differences.get(field).and_then(|v| v.as_u64()).unwrap_or(0);
                        tr {
                            td { (r.date) }
                            td { (r.provider) }
                            td.num { (r.version) }
                            td { code { (r.digest.get(..12).unwrap_or(&r.digest)) } }
                            td { (r.source) }
                            td.num { (r.lines) }
                            td { (count("added")) " / " (count("removed")) " / " (count("changed")) }
                            td { (when(r.imported_at)) }
                            td { (r.imported_by) }
                        }
                    }
                    @if reports.data.is_empty() {
                        tr { td colspan="9" { "No report imported yet (" code { "withdrawals settlement import --date D" } ")." } }
                    }
                }
            }
        }
        section aria-labelledby="h-exceptions" {
            h2 #h-exceptions { "Exceptions" }
            form.filters method="get" action="/ops/settlement" aria-label="Filter settlement exceptions" {
                p {
                    label for="f-kind" { "Kind" } br;
                    select #f-kind name="kind" {
                        option value="" { "any" }
                        @for k in ExceptionKind::ALL {
                            option value=(k.as_str()) selected[kind == k.as_str()] { (k.as_str()) }
                        }
                    }
                }
                p {
                    label for="f-status" { "Status" } br;
                    select #f-status name="status" {
                        @for s in STATUSES {
                            option value=(s) selected[status == s] { (s) }
                        }
                    }
                }
                p { button type="submit" { "Filter" } }
            }
            p #list-count { (rows.len()) " shown, oldest first." }
            table #settlement-exceptions {
                thead { tr {
                    th scope="col" { "Exception" } th scope="col" { "Kind" } th scope="col" { "Provider" }
                    th scope="col" { "Status" } th scope="col" { "Opened" } th scope="col" { "Withdrawal" }
                    th scope="col" { "Transfer" } th scope="col" { "Detail" }
                } }
                tbody {
                    @for e in rows {
                        tr {
                            td { a href={ "/ops/settlement/exceptions/" (e.id) } { code { (e.id) } } }
                            td.kind { (e.kind) }
                            td { (e.provider) }
                            td { (state(e.status)) }
                            td { (when(e.opened_at)) }
                            td { @if let Some(w) = e.withdrawal_id { a href={ "/ops/withdrawals/" (w) } { code { (w) } } } @else { "-" } }
                            td { (opt(&e.transfer_id)) }
                            td { (e.detail) }
                        }
                    }
                    @if rows.is_empty() { tr { td colspan="8" { "No settlement exception matches." } } }
                }
            }
            @if let Some(next) = listed.next_cursor.as_deref() {
                p { a href={ "/ops/settlement" (api::query(&q.pairs(Some(next)))) } { "Next page" } }
            }
        }
    };
    (code, views::page(&session, "Settlement", banner, body)).into_response()
}

/// `GET /ops/settlement/exceptions/{id}`: the exception, its evidence and (open) the resolve form.
pub async fn exception(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(d): Query<views::Done>,
) -> Response {
    let banner = (d.done.as_deref() == Some("resolve")).then(|| Banner::ok("The settlement exception is resolved."));
    render(&state_, &session, &id, banner, StatusCode::OK, None).await
}

/// The exception's page; `kept` is a refused form's values, shown again.
async fn render(
    state_: &AppState,
    session: &Session,
    id: &str,
    banner: Option<Banner>,
    code: StatusCode,
    kept: Option<&ResolveForm>,
) -> Response {
    let e = async { api::settlement_exception(state_, session, api::uuid(id)?).await };
    let e = match e.await {
        Ok(e) => e,
        Err(r) => return views::refused(r.status, "Settlement exception", &r.to_string()),
    };
    let evidence = serde_json::to_string_pretty(&e.evidence).unwrap_or_default();
    let kept_reason = kept.and_then(|f| f.reason.as_deref()).unwrap_or("");
    let kept_note = kept.and_then(|f| f.note.clone()).unwrap_or_default();
    let field = |label: &str, value: &dyn std::fmt::Display| {
        html! { tr { th scope="row" { (label) } td { (value) } } }
    };
    let body = html! {
        h1 { "Settlement exception " code { (e.id) } }
        p { "Status: " span #exception-status { (state(e.status)) } " · opened " (when(e.opened_at)) }
        table #exception {
            tbody {
                (field("Kind", &e.kind)) (field("Provider", &e.provider)) (field("Detail", &e.detail))
                tr { th scope="row" { "Withdrawal" } td { @if let Some(w) = e.withdrawal_id { a href={ "/ops/withdrawals/" (w) } { code { (w) } } " (its review page)" } @else { "-" } } }
                (field("Report day", &opt(&e.report_date))) (field("Transfer", &opt(&e.transfer_id)))
                tr { th scope="row" { "Opened" } td { (when(e.opened_at)) } }
                tr { th scope="row" { "Resolved" } td { (when(e.resolved_at)) } }
                (field("Resolved by", &opt(&e.resolved_by))) (field("Resolution", &opt(&e.resolution)))
                (field("Note", &opt(&e.resolution_note)))
            }
        }
        h2 { "Evidence" }
        pre #evidence { (evidence) }
        @if e.status == ExceptionStatus::Open {
            section aria-labelledby="h-resolve" {
                h2 #h-resolve { "Resolve" }
                (role_note(session, Role::Operator, "resolve settlement exceptions"))
                @if session.can(Role::Operator) {
                    form #resolve-form method="post" action={ "/ops/settlement/exceptions/" (e.id) "/resolve" } {
                        (csrf_field(session))
                        p.hint { "Resolving records what you found, with your note; it moves no money. To complete or fail the withdrawal, use its review page." }
                        p {
                            label for="resolve-reason" { "Resolution" } br;
                            select #resolve-reason name="reason" required {
                                option value="" { "choose…" }
                                @for r in Resolution::ALL {
                                    option value=(r.as_str()) selected[kept_reason == r.as_str()] { (r.as_str()) " — " (meaning(r)) }
                                }
                            }
                        }
                        p { label for="resolve-note" { "Note (required)" } br; textarea #resolve-note name="note" rows="3" cols="50" required maxlength="1000" { (kept_note) } }
                        button #submit-resolve type="submit" { "Resolve exception" }
                    }
                }
            }
        }
        p { a href="/ops/settlement" { "Back to the settlement exceptions" } }
    };
    (code, views::page(session, "Settlement exception", banner, body)).into_response()
}

#[derive(Debug, Deserialize)]
pub struct ResolveForm {
    reason: Option<String>,
    note: Option<String>,
}

/// `POST /ops/settlement/exceptions/{id}/resolve`: the ops core's resolve, as this operator.
pub async fn resolve(
    State(state_): State<AppState>,
    Path(id): Path<String>,
    CsrfForm(session, form): CsrfForm<ResolveForm>,
) -> Response {
    let (reason, note) = (form.reason.as_deref().unwrap_or(""), form.note.as_deref().unwrap_or(""));
    let resolved = async { api::resolve_settlement_exception(&state_, &session, api::uuid(&id)?, reason, note).await };
    match resolved.await {
        Ok(_) => Redirect::to(&format!("/ops/settlement/exceptions/{}?done=resolve", urlencode(&id))).into_response(),
        Err(r) => render(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status, Some(&form)).await,
    }
}
