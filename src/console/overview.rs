//! `GET /ops/overview`: the whole service on one page (the same numbers as `/ops/v1/overview`).

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::html;

use super::api;
use super::session::Session;
use super::views::{self, age, state, text, Banner};
use crate::http::AppState;

pub async fn page(State(state_): State<AppState>, session: Session) -> Response {
    let session = &session;
    let o = match api::get(&state_, session, "/ops/v1/overview").await {
        Ok(o) => o,
        Err(refusal) => {
            return (
                refusal.status,
                views::page(session, "Overview", Some(Banner::error(refusal.to_string())), html! {}),
            )
                .into_response()
        }
    };
    let empty = Vec::new();
    let list = |v: &serde_json::Value| v.as_array().unwrap_or(&empty).clone();
    let body = html! {
        h1 { "Overview" }
        @if o["sandbox"] == true {
            p #sandbox-mode role="status" { strong { "SANDBOX MODE" } ": no provider is configured; payouts go to an in-process mock and no money moves. Withdrawals made here are marked sandbox and are never paid by a real provider." }
        }
        section aria-labelledby="h-withdrawals" {
            h2 #h-withdrawals { "Withdrawals by state" }
            table #withdrawals-by-state {
                thead { tr { th scope="col" { "State" } th.num scope="col" { "Count" } th scope="col" { "Oldest in state" } } }
                tbody {
                    @for w in list(&o["withdrawals"]) {
                        tr {
                            th scope="row" {
                                @if w["state"] == "requires_review" {
                                    a href="/ops/review" { (state(&w["state"])) }
                                } @else { (state(&w["state"])) }
                            }
                            td.num { (text(&w["count"])) }
                            td { (age(&w["oldest_age_seconds"])) }
                        }
                    }
                }
            }
        }
        section aria-labelledby="h-dead-letters" {
            h2 #h-dead-letters { "Open dead letters: " (text(&o["dead_letters"]["open"])) }
            p { "Oldest open: " (age(&o["dead_letters"]["oldest_open_age_seconds"])) }
            table #dead-letters-by-category {
                thead { tr { th scope="col" { "Category" } th.num scope="col" { "Open" } th scope="col" { "Oldest" } } }
                tbody {
                    @for c in list(&o["dead_letters"]["by_category"]) {
                        tr {
                            th scope="row" {
                                a href={ "/ops/dead-letters" (api::query(&[("category", c["category"].as_str())])) } { (text(&c["category"])) }
                            }
                            td.num { (text(&c["open"])) }
                            td { (age(&c["oldest_age_seconds"])) }
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
                    @for b in list(&o["breakers"]) {
                        tr { th scope="row" { (text(&b["name"])) } td { (state(&b["state"])) } }
                    }
                    @if list(&o["breakers"]).is_empty() {
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
                    @for r in list(&o["replays"]) {
                        tr {
                            th scope="row" { a href={ "/ops/replays" (api::query(&[("status", r["status"].as_str())])) } { (state(&r["status"])) } }
                            td.num { (text(&r["runs"])) }
                            td.num { (text(&r["pending_items"])) }
                        }
                    }
                    @if list(&o["replays"]).is_empty() { tr { td colspan="3" { "No replay has been started." } } }
                }
            }
        }
        section aria-labelledby="h-queues" {
            h2 #h-queues { "Job queues" }
            table {
                thead { tr { th scope="col" { "Queue" } th.num scope="col" { "Scheduled" } th.num scope="col" { "Due" } th.num scope="col" { "Running" } th scope="col" { "Oldest due" } } }
                tbody {
                    @for q in list(&o["queues"]) {
                        tr {
                            th scope="row" { (text(&q["queue"])) }
                            td.num { (text(&q["scheduled"])) }
                            td.num { (text(&q["due"])) }
                            td.num { (text(&q["running"])) }
                            td { (age(&q["oldest_due_age_seconds"])) }
                        }
                    }
                }
            }
        }
    };
    views::page(session, "Overview", None, body).into_response()
}
