//! `GET /ops/overview`: the whole service on one page (the same numbers as `/ops/v1/overview`)
//! under trend charts of the last hour and the last day (`ops::trends`, drawn by [`super::charts`]),
//! and the breakers' kill switch for admins (`POST /ops/breakers/{name}/{action}`).

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use maud::{html, Markup, PreEscaped};
use serde::Deserialize;

use super::api::{self, PageRefusal};
use super::charts::{self, Chart, Series, Style};
use super::session::{urlencode, CsrfForm, Session};
use super::views::{self, age, csrf_field, role_note, state, when, Banner, Done};
use crate::domain::{Role, WithdrawalStatus};
use crate::http::AppState;
use crate::ops::trends::{self, TrendWindow};
use crate::ops::types::BreakerAction;
use crate::ops::types::ReasonRequest;

pub async fn page(State(state_): State<AppState>, session: Session, Query(done): Query<Done>) -> Response {
    let banner = done.done.as_deref().and_then(BreakerAction::from_form).map(|a| {
        Banner::ok(format!("Breaker {}: every process obeys within one poll interval.", a.as_str().replace('_', " ")))
    });
    render(&state_, &session, banner, StatusCode::OK).await
}

async fn render(state_: &AppState, session: &Session, banner: Option<Banner>, code: StatusCode) -> Response {
    let o = match api::overview(state_, session).await {
        Ok(o) => o,
        Err(refusal) => {
            return (
                refusal.status,
                views::page(session, "Overview", Some(Banner::error(refusal.to_string())), html! {}),
            )
                .into_response()
        }
    };
    let trend = trends::trends(&state_.ops(), &session.operator).await.map_err(PageRefusal::from);
    let body = html! {
        h1 { "Overview" }
        @if o.sandbox {
            p #sandbox-mode role="status" { strong { "SANDBOX MODE" } ": no provider is configured; payouts go to an in-process mock and no money moves. Withdrawals made here are marked sandbox and are never paid by a real provider." }
        }
        section #trends aria-labelledby="h-trends" {
            h2 #h-trends { "Trends" }
            @match &trend {
                Ok(t) => {
                    style { (PreEscaped(charts::CSS)) }
                    (trend_window("hour", "Last hour, per minute", "minute", &t.hour))
                    (trend_window("day", "Last day, per 15 minutes", "quarter hour", &t.day))
                }
                Err(refusal) => p.hint { "The trends could not be read: " (refusal) }
            }
        }
        section aria-labelledby="h-withdrawals" {
            h2 #h-withdrawals { "Withdrawals by state" }
            table #withdrawals-by-state {
                thead { tr { th scope="col" { "State" } th.num scope="col" { "Count" } th scope="col" { "Oldest in state" } } }
                tbody {
                    @for w in &o.withdrawals {
                        tr {
                            th scope="row" {
                                @if w.state == WithdrawalStatus::RequiresReview {
                                    a href="/ops/review" { (state(w.state)) }
                                } @else { (state(w.state)) }
                            }
                            td.num { (w.count) }
                            td { (age(w.oldest_age_seconds)) }
                        }
                    }
                }
            }
        }
        section aria-labelledby="h-dead-letters" {
            h2 #h-dead-letters { "Open dead letters: " (o.dead_letters.open) }
            p { "Oldest open: " (age(o.dead_letters.oldest_open_age_seconds)) }
            table #dead-letters-by-category {
                thead { tr { th scope="col" { "Category" } th.num scope="col" { "Open" } th scope="col" { "Oldest" } } }
                tbody {
                    @for c in &o.dead_letters.by_category {
                        tr {
                            th scope="row" {
                                a href={ "/ops/dead-letters" (api::query(&[("category", Some(&c.category))])) } { (c.category) }
                            }
                            td.num { (c.open) }
                            td { (age(c.oldest_age_seconds)) }
                        }
                    }
                }
            }
        }
        section aria-labelledby="h-breakers" {
            h2 #h-breakers { "Provider breakers" }
            table #breakers {
                thead { tr { th scope="col" { "Provider" } th scope="col" { "State" } th scope="col" { "Override" } th scope="col" { "Processes" } } }
                tbody {
                    @for b in &o.breakers {
                        tr {
                            th scope="row" { (b.name) }
                            td.breaker-state { (state(b.state)) }
                            td {
                                @if let Some(f) = &b.forced {
                                    (state(f.mode)) " by " (f.set_by_name) ", " (when(f.set_at)) ": " (f.reason)
                                } @else { "none" }
                            }
                            td {
                                ul {
                                    @for p in &b.processes {
                                        li { (p.role) " on " (p.host) ": " (state(p.state)) " since " (when(p.since)) }
                                    }
                                    @if b.processes.is_empty() { li { "No process has reported yet." } }
                                }
                            }
                        }
                    }
                    @if o.breakers.is_empty() {
                        tr { td colspan="4" { "No process with a provider breaker has reported." } }
                    }
                }
            }
            (role_note(session, Role::Admin, "force or release a breaker"))
            @if session.can(Role::Admin) {
                @for b in &o.breakers {
                    form.breaker-switch method="post" action={ "/ops/breakers/" (urlencode(&b.name)) } {
                        (csrf_field(session))
                        p.hint { "The kill switch for " strong { (b.name) } ": forced open rejects every provider call of every process (payouts wait, nothing fails); forced closed lets every call through; release hands it back. Every process obeys within one poll interval." }
                        p { label for={ "breaker-reason-" (b.name) } { "Reason (required)" } br; textarea id={ "breaker-reason-" (b.name) } name="reason" rows="2" cols="50" required maxlength="500" {} }
                        button type="submit" name="action" value="force-open" { "Force open" } " "
                        button type="submit" name="action" value="force-closed" { "Force closed" } " "
                        button type="submit" name="action" value="release" { "Release" }
                    }
                }
            }
        }
        section aria-labelledby="h-replays" {
            h2 #h-replays { "Replays" }
            table {
                thead { tr { th scope="col" { "Status" } th.num scope="col" { "Runs" } th.num scope="col" { "Items pending" } } }
                tbody {
                    @for r in &o.replays {
                        tr {
                            th scope="row" { a href={ "/ops/replays" (api::query(&[("status", Some(&r.status))])) } { (state(r.status)) } }
                            td.num { (r.runs) }
                            td.num { (r.pending_items) }
                        }
                    }
                    @if o.replays.is_empty() { tr { td colspan="3" { "No replay has been started." } } }
                }
            }
        }
        section aria-labelledby="h-queues" {
            h2 #h-queues { "Job queues" }
            table {
                thead { tr { th scope="col" { "Queue" } th.num scope="col" { "Scheduled" } th.num scope="col" { "Due" } th.num scope="col" { "Running" } th scope="col" { "Oldest due" } } }
                tbody {
                    @for q in &o.queues {
                        tr {
                            th scope="row" { (q.queue) }
                            td.num { (q.scheduled) }
                            td.num { (q.due) }
                            td.num { (q.running) }
                            td { (age(q.oldest_due_age_seconds)) }
                        }
                    }
                }
            }
        }
    };
    (code, views::page(session, "Overview", banner, body)).into_response()
}

/// One window's three charts: withdrawals created, completed and failed; dead-letter arrivals by
/// category; the review queue's size.
fn trend_window(key: &str, heading: &str, bucket: &str, w: &TrendWindow) -> Markup {
    let sum = |v: &[i64]| v.iter().sum::<i64>();
    let withdrawals = Chart {
        id: format!("trend-{key}-withdrawals"),
        title: format!("Withdrawals per {bucket}"),
        summary: format!("{} created, {} completed, {} failed", sum(&w.created), sum(&w.completed), sum(&w.failed)),
        style: Style::Lines,
        levels: false,
        starts: w.bucket_starts.clone(),
        series: vec![
            Series::new("created", w.created.clone()),
            Series::new("completed", w.completed.clone()),
            Series::new("failed", w.failed.clone()),
        ],
    };
    let arrivals: Vec<String> = w.dead_letters.iter().map(|c| format!("{} {}", sum(&c.arrivals), c.category)).collect();
    let dead_letters = Chart {
        id: format!("trend-{key}-dead-letters"),
        title: format!("Dead-letter arrivals per {bucket}, by category"),
        summary: match arrivals.is_empty() {
            true => "none arrived".into(),
            false => arrivals.join(", "),
        },
        style: Style::StackedBars,
        levels: false,
        starts: w.bucket_starts.clone(),
        series: w.dead_letters.iter().map(|c| Series::new(c.category.as_str(), c.arrivals.clone())).collect(),
    };
    let now = w.review_queue.last().copied().unwrap_or(0);
    let review = Chart {
        id: format!("trend-{key}-review"),
        title: format!("Review queue at the end of each {bucket}"),
        summary: format!("{now} now, at most {}", w.review_queue.iter().copied().max().unwrap_or(0)),
        style: Style::Lines,
        levels: true,
        starts: w.bucket_starts.clone(),
        series: vec![Series::new("requires_review", w.review_queue.clone())],
    };
    html! {
        h3 { (heading) " (UTC)" }
        div.charts {
            (withdrawals.render())
            (dead_letters.render())
            (review.render())
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct BreakerForm {
    action: Option<String>,
    reason: Option<String>,
}

/// `POST /ops/breakers/{name}`: the kill switch, as the signed-in admin (the operator core checks
/// the role, requires the reason and audits).
pub async fn switch(
    State(state_): State<AppState>,
    Path(name): Path<String>,
    CsrfForm(session, form): CsrfForm<BreakerForm>,
) -> Response {
    let Some(action) = form.action.as_deref().and_then(BreakerAction::from_form) else {
        let banner = Banner::error("choose force open, force closed or release");
        return render(&state_, &session, Some(banner), StatusCode::UNPROCESSABLE_ENTITY).await;
    };
    let request = ReasonRequest { reason: form.reason.unwrap_or_default() };
    match api::switch_breaker(&state_, &session, &name, action, request).await {
        Ok(_) => Redirect::to(&format!("/ops/overview?done={}", form.action.unwrap_or_default())).into_response(),
        Err(r) => render(&state_, &session, Some(Banner::error(r.to_string())), r.status).await,
    }
}
