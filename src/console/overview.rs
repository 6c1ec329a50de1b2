//! `GET /ops/overview`: the whole service on one page (the same numbers as `/ops/v1/overview`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;

use super::api;
use super::session::Session;
use super::views::{self, age, state, Banner};
use crate::domain::WithdrawalStatus;
use crate::http::AppState;

pub async fn page(State(state_): State<AppState>, session: Session) -> Response {
    let session = &session;
    let o = match api::overview(&state_, session).await {
        Ok(o) => o,
        Err(refusal) => {
            return (
                refusal.status,
                views::page(session, "Overview", Some(Banner::error(refusal.to_string())), html! {}),
            )
                .into_response()
        }
    };
    let body = html! {
        h1 { "Overview" }
        @if o.sandbox {
            p #sandbox-mode role="status" { strong { "SANDBOX MODE" } ": no provider is configured; payouts go to an in-process mock and no money moves. Withdrawals made here are marked sandbox and are never paid by a real provider." }
        }
        section aria-labelledby="h-withdrawals" {
            h2 #h-withdrawals { "Withdrawals by state" }
            table #withdrawals-by-state {
                thead { tr { th scope="col" { "State" } th.num scope="col" { "Count" } th scope="col" { "Oldest in state" } } }
                tbody {
                    @for w in &o.withdrawals {
                        tr {
                            th scope="row" {
                                @if w.state == WithdrawalStatus::RequiresReview.as_str() {
                                    a href="/ops/review" { (state(&w.state)) }
                                } @else { (state(&w.state)) }
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
            table {
                thead { tr { th scope="col" { "Provider" } th scope="col" { "State" } } }
                tbody {
                    @for b in &o.breakers {
                        tr { th scope="row" { (b.name) } td { (state(&b.state)) } }
                    }
                    @if o.breakers.is_empty() {
                        tr { td colspan="2" { "This process does not call the provider (API-only role); read the workers' metrics." } }
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
                            th scope="row" { a href={ "/ops/replays" (api::query(&[("status", Some(&r.status))])) } { (state(&r.status)) } }
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
    views::page(session, "Overview", None, body).into_response()
}
