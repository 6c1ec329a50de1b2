//! `GET /ops/audit`: the audit log, newest first, filterable by operator, action and target.

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::api;
use super::session::Session;
use super::views::{self, state, when, Banner};
use crate::http::AppState;
use crate::ops::types::{self, Page};

#[derive(Debug, Default, Deserialize)]
pub struct LogQuery {
    operator_id: Option<String>,
    action: Option<String>,
    target_id: Option<String>,
    cursor: Option<String>,
}

pub async fn log(State(state_): State<AppState>, session: Session, Query(q): Query<LogQuery>) -> Response {
    let pairs = |cursor: Option<&'_ str>| {
        vec![
            ("operator_id", q.operator_id.clone()),
            ("action", q.action.clone()),
            ("target_id", q.target_id.clone()),
            ("cursor", cursor.map(str::to_owned)),
        ]
    };
    let owned = pairs(q.cursor.as_deref());
    let mut borrowed: Vec<(&str, Option<&str>)> = owned.iter().map(|(k, v)| (*k, v.as_deref())).collect();
    borrowed.push(("limit", Some("100")));
    let listed = async {
        let query: types::AuditQuery = api::parse_query(&borrowed)?;
        api::audit(&state_, &session, &query).await
    };
    let (listed, banner, code) = match listed.await {
        Ok(page) => (page, None, StatusCode::OK),
        Err(r) => (Page { data: Vec::new(), next_cursor: None }, Some(Banner::error(r.to_string())), r.status),
    };
    let rows = &listed.data;
    let body = html! {
        h1 { "Audit log" }
        p.hint { "Every operator action, and every refusal, newest first. Rows are append-only." }
        form.filters method="get" action="/ops/audit" aria-label="Filter the audit log" {
            p { label for="a-action" { "Action" } br; input #a-action name="action" value=(q.action.clone().unwrap_or_default()) placeholder="withdrawal.resolve"; }
            p { label for="a-target" { "Target id" } br; input #a-target name="target_id" value=(q.target_id.clone().unwrap_or_default()) size="38"; }
            p { label for="a-operator" { "Operator id" } br; input #a-operator name="operator_id" value=(q.operator_id.clone().unwrap_or_default()) size="38"; }
            p { button type="submit" { "Filter" } }
        }
        table #audit-log {
            thead { tr {
                th scope="col" { "When" } th scope="col" { "Operator" } th scope="col" { "Action" } th scope="col" { "Target" }
                th scope="col" { "Reason" } th scope="col" { "Result" }
            } }
            tbody {
                @for r in rows {
                    tr {
                        td { (when(r.at)) }
                        td { (r.operator_name) " (" (r.role) ")" }
                        td { code { (r.action) } }
                        td { (r.target_type) " " code { (r.target_id) } }
                        td { (r.reason) }
                        td { (state(&r.result)) }
                    }
                }
                @if rows.is_empty() { tr { td colspan="6" { "No entries match." } } }
            }
        }
        @if let Some(next) = listed.next_cursor.as_deref() {
            @let next_pairs = pairs(Some(next));
            @let next_borrowed: Vec<(&str, Option<&str>)> = next_pairs.iter().map(|(k, v)| (*k, v.as_deref())).collect();
            p { a href={ "/ops/audit" (api::query(&next_borrowed)) } { "Older entries" } }
        }
    };
    (code, views::page(&session, "Audit log", banner, body)).into_response()
}
