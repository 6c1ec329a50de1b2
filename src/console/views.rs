//! The console's page frame and small view helpers: layout with navigation, banners, times shown
//! as an age with the exact UTC time on hover, absent values as `-`. Markup is maud, compiled into
//! the binary and escaped by default.

use std::fmt::Display;

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde_json::Value;

use super::signed_in::Session;
use crate::ops::Role;

const CSS: &str = r#"
:root { font-family: system-ui, sans-serif; line-height: 1.4; color: #111; background: #fff; }
body { margin: 0; }
header { background: #1d2b3a; color: #fff; padding: .5rem 1rem; display: flex; flex-wrap: wrap; gap: 1rem; align-items: center; }
header a { color: #fff; }
header nav ul { list-style: none; display: flex; gap: 1rem; margin: 0; padding: 0; flex-wrap: wrap; }
header .who { margin-left: auto; }
header form { display: inline; }
main { padding: 1rem; max-width: 80rem; }
a:focus, button:focus, input:focus, select:focus, textarea:focus, summary:focus { outline: 3px solid #0b0c0c; outline-offset: 2px; box-shadow: 0 0 0 6px #ffdd00; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
a.skip { position: absolute; left: -9999px; }
a.skip:focus { left: 1rem; top: .5rem; background: #fff; color: #000; padding: .25rem .5rem; z-index: 1; }
table { border-collapse: collapse; margin: .5rem 0 1rem; }
th, td { border: 1px solid #999; padding: .25rem .5rem; text-align: left; vertical-align: top; }
th { background: #eef1f4; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.banner { padding: .5rem 1rem; border: 2px solid; margin-bottom: 1rem; }
.banner.ok { border-color: #1a7f37; background: #e9f7ee; }
.banner.error { border-color: #b42318; background: #fdecea; }
.banner strong { margin-right: .5rem; }
.state { font-weight: bold; border: 1px solid #555; padding: 0 .3rem; border-radius: .2rem; }
.hint { color: #444; font-size: .9rem; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dt { font-weight: 600; }
dd { margin: 0; }
fieldset { margin: .5rem 0 1rem; max-width: 48rem; }
label { font-weight: 600; }
textarea { width: 100%; max-width: 44rem; }
ol.timeline { list-style: none; padding-left: 0; border-left: 3px solid #999; }
ol.timeline li { margin: 0 0 .75rem; padding-left: .75rem; }
ol.timeline .kind { font-weight: bold; }
pre { background: #f4f4f4; padding: .5rem; overflow-x: auto; max-width: 78rem; }
.filters { display: flex; flex-wrap: wrap; gap: .75rem; align-items: flex-end; }
.filters p { margin: 0; }
.actions { display: flex; flex-wrap: wrap; gap: 1rem; }
.actions form { border: 1px solid #999; padding: .5rem; }
"#;

/// A message at the top of a page: the outcome of the last action.
pub struct Banner {
    ok: bool,
    text: String,
}

impl Banner {
    pub fn ok(text: impl Into<String>) -> Self {
        Banner { ok: true, text: text.into() }
    }

    pub fn error(text: impl Into<String>) -> Self {
        Banner { ok: false, text: text.into() }
    }
}

fn banner(b: &Banner) -> Markup {
    html! {
        @if b.ok {
            div.banner.ok role="status" { strong { "Done." } (b.text) }
        } @else {
            div.banner.error role="alert" { strong { "Not done." } (b.text) }
        }
    }
}

fn frame(title: &str, nav: Markup, banner_: Option<Banner>, body: Markup) -> Html<String> {
    Html(
        html! {
            (DOCTYPE)
            html lang="en" {
                head {
                    meta charset="utf-8";
                    meta name="viewport" content="width=device-width, initial-scale=1";
                    title { (title) " · withdrawals console" }
                    style { (PreEscaped(CSS)) }
                }
                body {
                    a.skip href="#main" { "Skip to content" }
                    header { strong { "withdrawals · operator console" } (nav) }
                    main #main {
                        @if let Some(b) = &banner_ { (banner(b)) }
                        (body)
                    }
                }
            }
        }
        .into_string(),
    )
}

/// A console page for a signed-in operator: navigation, who is signed in, sign-out.
pub fn page(session: &Session, title: &str, banner_: Option<Banner>, body: Markup) -> Html<String> {
    let nav = html! {
        nav aria-label="Console" {
            ul {
                li { a href="/ops/overview" { "Overview" } }
                li { a href="/ops/review" { "Review queue" } }
                li { a href="/ops/dead-letters" { "Dead letters" } }
                li { a href="/ops/replays" { "Replays" } }
                li { a href="/ops/settlement" { "Settlement" } }
                li { a href="/ops/notifications" { "Notifications" } }
                li { a href="/ops/audit" { "Audit log" } }
            }
        }
        span.who {
            "Signed in as " strong #signed-in-as { (session.operator.name) } " (" (session.operator.role.as_str()) ") "
            form method="post" action="/ops/sign-out" {
                (csrf_field(session))
                button type="submit" #sign-out { "Sign out" }
            }
        }
    };
    frame(title, nav, banner_, body)
}

pub fn page_without_nav(title: &str, banner_: Option<Banner>, body: Markup) -> Html<String> {
    frame(title, html! {}, banner_, body)
}

/// A page that says what was refused and changes nothing.
pub fn refused(status: StatusCode, title: &str, text: &str) -> Response {
    let body = html! {
        h1 { (title) }
        p { (text) }
        p { a href="/ops/overview" { "Back to the overview" } }
    };
    (status, page_without_nav(title, Some(Banner::error(text)), body)).into_response()
}

pub fn csrf_field(session: &Session) -> Markup {
    html! { input type="hidden" name="csrf" value=(session.csrf()); }
}

/// A JSON value as plain text (`-` for null): the values of a free-form map, like a destination.
pub fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// A value that may be absent, as text (`-` when it is).
pub fn opt<T: Display>(v: &Option<T>) -> String {
    v.as_ref().map_or_else(|| "-".into(), T::to_string)
}

/// A rate as the API writes it (`0.0`, `2.5`).
pub fn rate(per_second: f64) -> String {
    serde_json::Number::from_f64(per_second).map_or_else(|| "-".into(), |n| n.to_string())
}

/// An age in words: "45 s", "12 min", "3 h", "2 d".
pub fn age_words(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        s if s < 120 => format!("{s} s"),
        s if s < 7_200 => format!("{} min", s / 60),
        s if s < 172_800 => format!("{} h", s / 3_600),
        s => format!("{} d", s / 86_400),
    }
}

/// A time as "3 h ago" with the exact UTC time on hover (and in the `datetime` attribute); `-`
/// when there is none.
pub fn when(at: impl Into<Option<DateTime<Utc>>>) -> Markup {
    match at.into() {
        Some(at) => {
            let exact = at.format("%Y-%m-%d %H:%M:%S UTC").to_string();
            // The exact time on hover, and for screen readers and keyboards in hidden text.
            html! {
                time datetime=(at.to_rfc3339()) title=(exact) { (age_words((Utc::now() - at).num_seconds())) " ago" }
                span.sr-only { " (" (exact) ")" }
            }
        }
        None => html! { "-" },
    }
}

/// An age in seconds as words, or `-`.
pub fn age(seconds: impl Into<Option<i64>>) -> String {
    seconds.into().map(age_words).unwrap_or_else(|| "-".into())
}

/// A state as a bordered word: readable without colour.
pub fn state(v: impl Display) -> Markup {
    html! { span.state { (v) } }
}

/// Only roles that may act see an action's form; the server refuses the others anyway.
pub fn role_note(session: &Session, needed: Role, what: &str) -> Markup {
    html! {
        @if !session.can(needed) {
            p.hint #role-note { "Your role (" (session.operator.role.as_str()) ") can view but not " (what) "; that needs " (needed.as_str()) "." }
        }
    }
}

/// `?done=<action>`: where a successful form post redirects, so the page can say it is done.
#[derive(Debug, Default, serde::Deserialize)]
pub struct Done {
    pub done: Option<String>,
}
