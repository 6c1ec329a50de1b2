//! Replays in the browser: runs with their progress, a start form whose dry run must be confirmed
//! (the confirmation carries the dry run's selection digest: a selection that changed is shown
//! again, not started), live progress, pause/resume/cancel, and approval by a second operator.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use chrono::{DateTime, Utc};
use maud::{html, Markup, PreEscaped};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::api::{self, PageRefusal};
use super::session::{urlencode, CsrfForm, Session};
use super::views::{self, csrf_field, opt, rate, role_note, state, when, Banner};
use crate::dead_letter::Category;
use crate::domain::ReplayStatus;
use crate::http::AppState;
use crate::jobs::Queue;
use crate::ops::types::{
    DryRun, ReasonRequest, ReplayControl, ReplayProgress, ReplayQuery, ReplayRunView, SelectionFilter, StartReplay,
    Started,
};
use crate::ops::Role;

/// The default replay destination.
const PAYOUTS_QUEUE: &str = Queue::Payouts.as_str();

/// A replay as the start form describes it (also the index page's query: a filter to prefill).
#[derive(Debug, Default, Clone, Deserialize, Serialize)]
pub struct ReplayForm {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    category: Option<String>,
    #[serde(default)]
    error_code: Option<String>,
    #[serde(default)]
    queue: Option<String>,
    #[serde(default)]
    job_type: Option<String>,
    /// One dead letter, chosen on its page (instead of the filter).
    #[serde(default)]
    dead_letter_id: Option<String>,
    /// `datetime-local` values, read as UTC.
    #[serde(default)]
    failed_after: Option<String>,
    #[serde(default)]
    failed_before: Option<String>,
    #[serde(default)]
    expected_payload_version: Option<String>,
    #[serde(default)]
    destination_queue: Option<String>,
    #[serde(default)]
    rate_per_second: Option<String>,
    #[serde(default)]
    max_concurrency: Option<String>,
    #[serde(default)]
    auto_pause_threshold: Option<String>,
    #[serde(default)]
    reason: Option<String>,
    /// The dry run's `selection_digest`, carried by the confirm form.
    #[serde(default)]
    selection_digest: Option<String>,
}

fn non_empty(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

fn owned(v: &Option<String>) -> Option<String> {
    non_empty(v).map(str::to_owned)
}

/// A field the core could not read from a body: refused as it refuses one (422 `invalid_body`).
fn unreadable(field: &str, value: &str, what: &str) -> PageRefusal {
    PageRefusal::invalid("invalid_body", format!("{field}: `{value}` is not {what}"))
}

/// A number field: absent means "the default".
fn number(field: &str, v: &Option<String>) -> Result<Option<i64>, PageRefusal> {
    non_empty(v).map(|n| n.parse::<i64>().map_err(|_| unreadable(field, n, "a whole number"))).transpose()
}

/// A time field: a browser's `datetime-local` (read as UTC) or RFC 3339.
fn time(field: &str, v: &Option<String>) -> Result<Option<DateTime<Utc>>, PageRefusal> {
    non_empty(v).map(|t| api::utc_param(t).parse().map_err(|_| unreadable(field, t, "a time"))).transpose()
}

impl ReplayForm {
    /// The replay this form describes, as the core's request; a field it could not read is
    /// refused here, before asking.
    fn request(&self, dry_run: bool) -> Result<StartReplay, PageRefusal> {
        let (dead_letter_ids, filter) = match non_empty(&self.dead_letter_id) {
            Some(id) => {
                let id = Uuid::parse_str(id).map_err(|_| unreadable("dead_letter_ids", id, "a dead letter id"))?;
                (Some(vec![id]), None)
            }
            None => {
                let filter = SelectionFilter {
                    queue: owned(&self.queue),
                    job_type: owned(&self.job_type),
                    error_code: owned(&self.error_code),
                    category: owned(&self.category),
                    failed_after: time("filter.failed_after", &self.failed_after)?,
                    failed_before: time("filter.failed_before", &self.failed_before)?,
                };
                (None, Some(filter))
            }
        };
        let expected_payload_version =
            number("expected_payload_version", &self.expected_payload_version)?.ok_or_else(|| {
                PageRefusal::invalid("invalid_body", "expected_payload_version: a whole number is required")
            })?;
        Ok(StartReplay {
            reason: self.reason.clone().unwrap_or_default(),
            dead_letter_ids,
            filter,
            expected_payload_version,
            destination_queue: non_empty(&self.destination_queue).unwrap_or(PAYOUTS_QUEUE).to_owned(),
            dry_run,
            rate_per_second: number("rate_per_second", &self.rate_per_second)?,
            max_concurrency: number("max_concurrency", &self.max_concurrency)?,
            auto_pause_threshold: number("auto_pause_threshold", &self.auto_pause_threshold)?,
            expected_selection_digest: if dry_run { None } else { owned(&self.selection_digest) },
        })
    }

    /// The selection as query pairs, to come back to the start form.
    fn selection_query(&self) -> String {
        api::query(&[
            ("dead_letter_id", non_empty(&self.dead_letter_id)),
            ("category", non_empty(&self.category)),
            ("error_code", non_empty(&self.error_code)),
            ("queue", non_empty(&self.queue)),
            ("job_type", non_empty(&self.job_type)),
            ("failed_after", non_empty(&self.failed_after)),
            ("failed_before", non_empty(&self.failed_before)),
        ])
    }

    /// The same replay as hidden fields, for the confirm form.
    fn hidden(&self) -> Markup {
        let fields = [
            ("dead_letter_id", &self.dead_letter_id),
            ("failed_after", &self.failed_after),
            ("failed_before", &self.failed_before),
            ("category", &self.category),
            ("error_code", &self.error_code),
            ("queue", &self.queue),
            ("job_type", &self.job_type),
            ("expected_payload_version", &self.expected_payload_version),
            ("destination_queue", &self.destination_queue),
            ("rate_per_second", &self.rate_per_second),
            ("max_concurrency", &self.max_concurrency),
            ("auto_pause_threshold", &self.auto_pause_threshold),
            ("reason", &self.reason),
        ];
        html! {
            @for (name, value) in fields {
                @if let Some(v) = value { input type="hidden" name=(name) value=(v); }
            }
        }
    }
}

fn selection_words(f: &ReplayForm) -> String {
    if let Some(id) = non_empty(&f.dead_letter_id) {
        return format!("dead letter {id}");
    }
    let parts: Vec<String> = [
        ("category", &f.category),
        ("error code", &f.error_code),
        ("queue", &f.queue),
        ("job type", &f.job_type),
        ("failed after (UTC)", &f.failed_after),
        ("failed before (UTC)", &f.failed_before),
    ]
    .iter()
    .filter_map(|(k, v)| non_empty(v).map(|v| format!("{k} {v}")))
    .collect();
    if parts.is_empty() {
        "every open dead letter".into()
    } else {
        format!("open dead letters with {}", parts.join(", "))
    }
}

/// `GET /ops/replays`: runs (newest first) and the start form, prefilled from the query.
pub async fn index(State(state_): State<AppState>, session: Session, Query(f): Query<ReplayForm>) -> Response {
    render_index(&state_, &session, &f, None, StatusCode::OK).await
}

async fn render_index(
    state_: &AppState,
    session: &Session,
    f: &ReplayForm,
    banner: Option<Banner>,
    code: StatusCode,
) -> Response {
    let query = ReplayQuery { status: owned(&f.status), limit: Some(50) };
    let (runs, banner, code) = match api::replays(state_, session, &query).await {
        Ok(runs) => (runs.data, banner, code),
        Err(r) => (Vec::new(), Some(Banner::error(r.to_string())), r.status),
    };
    let settings = state_.config().replay;
    let body = html! {
        h1 { "Replays" }
        section aria-labelledby="h-runs" {
            h2 #h-runs { "Runs" @if let Some(s) = non_empty(&f.status) { " that are " (s) } }
            table #replay-runs {
                thead { tr {
                    th scope="col" { "Run" } th scope="col" { "Status" } th.num scope="col" { "Items" }
                    th scope="col" { "Progress" } th scope="col" { "Reason" } th scope="col" { "Started" }
                } }
                tbody {
                    @for r in &runs {
                        @let p = r.progress.as_ref();
                        tr {
                            td { a href={ "/ops/replays/" (r.id) } { code { (r.id) } } }
                            td { (state(r.status)) }
                            td.num { (r.total) }
                            td { (opt(&p.map(|p| p.succeeded))) " succeeded, " (opt(&p.map(|p| p.failed))) " failed, "
                                 (opt(&p.map(|p| p.pending))) " pending" }
                            td { (r.reason) }
                            td { (when(r.created_at)) }
                        }
                    }
                    @if runs.is_empty() { tr { td colspan="6" { "No runs." } } }
                }
            }
        }
        section aria-labelledby="h-start" {
            h2 #h-start { "Start a replay" }
            (role_note(session, Role::Operator, "start replays"))
            @if session.can(Role::Operator) {
                p.hint { "A replay releases open dead letters back to a queue, gently. First comes a dry run: you see how many letters match and a sample, and nothing starts until you confirm. Runs of more than "
                    (settings.approval_threshold) " letters wait for a second operator's approval." }
                form #replay-form method="post" action="/ops/replays/preview" {
                    (csrf_field(session))
                    @if let Some(id) = non_empty(&f.dead_letter_id) {
                        p #replay-selection { "Selected: dead letter " code { (id) } " only. " a href="/ops/replays" { "Select by filter instead" } }
                        input type="hidden" name="dead_letter_id" value=(id);
                    } @else {
                    fieldset {
                        legend { "Which dead letters (open ones only)" }
                        div.filters {
                            p {
                                label for="r-category" { "Category" } br;
                                select #r-category name="category" {
                                    option value="" { "any" }
                                    @for c in Category::ALL {
                                        option value=(c.as_str()) selected[non_empty(&f.category) == Some(c.as_str())] { (c.as_str()) }
                                    }
                                }
                            }
                            p { label for="r-error_code" { "Error code" } br; input #r-error_code name="error_code" value=(f.error_code.clone().unwrap_or_default()); }
                            p { label for="r-queue" { "Queue" } br; input #r-queue name="queue" value=(f.queue.clone().unwrap_or_default()) size="14"; }
                            p { label for="r-job_type" { "Job type" } br; input #r-job_type name="job_type" value=(f.job_type.clone().unwrap_or_default()) size="16"; }
                            p { label for="r-failed_after" { "Failed after (UTC)" } br; input #r-failed_after type="datetime-local" name="failed_after" value=(f.failed_after.clone().unwrap_or_default()); }
                            p { label for="r-failed_before" { "Failed before (UTC)" } br; input #r-failed_before type="datetime-local" name="failed_before" value=(f.failed_before.clone().unwrap_or_default()); }
                        }
                    }
                    }
                    fieldset {
                        legend { "How" }
                        div.filters {
                            p { label for="r-version" { "Expected payload version" } br; input #r-version name="expected_payload_version" value=(f.expected_payload_version.clone().unwrap_or_else(|| crate::jobs::SubmitPayout::VERSION.to_string())) size="4" required inputmode="numeric"; }
                            p {
                                label for="r-destination" { "Destination queue" } br;
                                select #r-destination name="destination_queue" {
                                    @for q in Queue::REPLAY_DESTINATIONS.map(Queue::as_str) {
                                        option value=(q) selected[non_empty(&f.destination_queue).unwrap_or(PAYOUTS_QUEUE) == q] { (q) }
                                    }
                                }
                            }
                            p { label for="r-rate" { "Rate per second" } br; input #r-rate name="rate_per_second" value=(f.rate_per_second.clone().unwrap_or_default()) placeholder=(settings.default_rate_per_second) size="5" inputmode="numeric"; }
                            p { label for="r-concurrency" { "Max in flight" } br; input #r-concurrency name="max_concurrency" value=(f.max_concurrency.clone().unwrap_or_default()) placeholder=(settings.default_max_concurrency) size="5" inputmode="numeric"; }
                            p { label for="r-auto-pause" { "Pause after new dead letters" } br; input #r-auto-pause name="auto_pause_threshold" value=(f.auto_pause_threshold.clone().unwrap_or_default()) placeholder=(settings.default_auto_pause_threshold) size="5" inputmode="numeric"; }
                        }
                    }
                    p { label for="r-reason" { "Reason (required)" } br; textarea #r-reason name="reason" rows="2" cols="50" required maxlength="500" { (f.reason.clone().unwrap_or_default()) } }
                    button type="submit" #dry-run { "Dry run: preview what would be replayed" }
                }
            }
        }
    };
    (code, views::page(session, "Replays", banner, body)).into_response()
}

/// `POST /ops/replays/preview`: the dry run, and a confirm form for exactly this replay.
pub async fn preview(State(state_): State<AppState>, CsrfForm(session, f): CsrfForm<ReplayForm>) -> Response {
    dry_run(&state_, &session, &f, None).await
}

/// The dry run of the replay `f` describes.
async fn preview_of(state_: &AppState, session: &Session, f: &ReplayForm) -> Result<DryRun, PageRefusal> {
    match api::start_replay(state_, session, &f.request(true)?).await? {
        Started::DryRun(preview) => Ok(preview),
        Started::Run(run) => {
            tracing::error!(run = %run.id, "a replay dry run was answered with a run");
            Err(PageRefusal::internal())
        }
    }
}

async fn dry_run(state_: &AppState, session: &Session, f: &ReplayForm, banner: Option<Banner>) -> Response {
    let preview = match preview_of(state_, session, f).await {
        Ok(preview) => preview,
        Err(r) => return render_index(state_, session, f, Some(Banner::error(r.to_string())), r.status).await,
    };
    let count = preview.count;
    let body = html! {
        h1 { "Replay preview (dry run)" }
        p #preview-count { strong { (count) } " " (selection_words(f)) " would be released to the " code { (non_empty(&f.destination_queue).unwrap_or(PAYOUTS_QUEUE)) } " queue. Nothing has started." }
        @if preview.needs_approval { p #needs-approval { strong { "This run needs a second operator's approval" } " (more than " (state_.config().replay.approval_threshold) " letters): it will wait until an admin other than you approves it." } }
        @if preview.payload_version_mismatches > 0 {
            p role="alert" { strong { (preview.payload_version_mismatches) } " of them have a payload version other than the expected one; they will be skipped, not released." }
        }
        h2 { "Sample" }
        table #preview-sample {
            thead { tr { th scope="col" { "Dead letter" } th scope="col" { "Withdrawal" } th scope="col" { "Category / error code" } th scope="col" { "Payload version" } th scope="col" { "Side effect" } } }
            tbody {
                @for s in &preview.sample {
                    tr {
                        td { a href={ "/ops/dead-letters/" (s.dead_letter_id) } { code { (s.dead_letter_id) } } }
                        td { (opt(&s.withdrawal_id)) }
                        td { (s.category) " / " (s.error_code) }
                        td { (s.payload_version) }
                        td { (s.side_effect_state) }
                    }
                }
            }
        }
        p { "Reason: " (f.reason.clone().unwrap_or_default()) }
        form #confirm-form method="post" action="/ops/replays" {
            (csrf_field(session))
            (f.hidden())
            input type="hidden" name="selection_digest" value=(preview.selection_digest);
            button type="submit" #confirm-replay { "Confirm: replay these " (count) " dead letters" }
        }
        p { a href={ "/ops/replays" (f.selection_query()) } { "Change the selection" } }
    };
    views::page(session, "Replay preview", banner, body).into_response()
}

/// `POST /ops/replays`: starts a confirmed replay. The confirm form carries the dry run's
/// selection digest: if the selection is no longer exactly those dead letters, the API refuses
/// (`selection_changed`) and the new preview is shown instead.
pub async fn start(State(state_): State<AppState>, CsrfForm(session, f): CsrfForm<ReplayForm>) -> Response {
    if non_empty(&f.selection_digest).is_none() {
        let banner = Banner::error("A replay starts only from a confirmed dry run: check this preview, then confirm.");
        return dry_run(&state_, &session, &f, Some(banner)).await;
    }
    let started = async {
        match api::start_replay(&state_, &session, &f.request(false)?).await? {
            Started::Run(run) => Ok(run),
            Started::DryRun(_) => {
                tracing::error!("a replay start was answered with a dry run");
                Err(PageRefusal::internal())
            }
        }
    };
    match started.await {
        Ok(run) => Redirect::to(&format!("/ops/replays/{}?done=start", run.id)).into_response(),
        Err(r) if r.code == "selection_changed" => {
            let banner =
                Banner::error(format!("Not started: {r}. This is the selection now; check it and confirm again."));
            dry_run(&state_, &session, &f, Some(banner)).await
        }
        Err(r) => render_index(&state_, &session, &f, Some(Banner::error(r.to_string())), r.status).await,
    }
}

#[derive(Debug, Default, Deserialize)]
pub struct RunQuery {
    done: Option<String>,
    /// `progress`: only the progress section (the page's script refreshes it).
    part: Option<String>,
}

fn done_banner(done: Option<&str>) -> Option<Banner> {
    let text = match done? {
        "start" => "The replay is recorded. It runs now, or waits for approval if it is large.",
        "pause" => "The replay is paused.",
        "resume" => "The replay is running again.",
        "cancel" => "The replay is cancelled; pending items will not be released.",
        "approve" => "The replay is approved and running.",
        _ => return None,
    };
    Some(Banner::ok(text))
}

/// `GET /ops/replays/{id}`: one run, its live progress, items and controls.
pub async fn run(
    State(state_): State<AppState>,
    session: Session,
    Path(id): Path<String>,
    Query(q): Query<RunQuery>,
) -> Response {
    if q.part.as_deref() == Some("progress") {
        return match async { api::replay(&state_, &session, api::uuid(&id)?).await }.await {
            Ok(r) => axum::response::Html(progress(&r).into_string()).into_response(),
            Err(r) => (r.status, r.to_string()).into_response(),
        };
    }
    render_run(&state_, &session, &id, done_banner(q.done.as_deref()), StatusCode::OK).await
}

fn progress(r: &ReplayRunView) -> Markup {
    let p = r.progress.as_ref();
    let row = |label: &str, key: &str, count: fn(&ReplayProgress) -> i64| {
        html! { tr { th scope="row" { (label) } td.num id={ "progress-" (key) } { (opt(&p.map(count))) } } }
    };
    html! {
        div #progress aria-live="polite" data-status=(r.status) {
            p { "Status: " span #run-status { (state(r.status)) }
                @if let Some(why) = &r.paused_reason { " — " (why) } }
            table {
                tbody {
                    (row("Items", "total", |p| p.total)) (row("Pending", "pending", |p| p.pending))
                    (row("Released", "released", |p| p.released)) (row("Reconciling", "reconciling", |p| p.reconciling))
                    (row("In flight", "in_flight", |p| p.in_flight)) (row("Succeeded", "succeeded", |p| p.succeeded))
                    (row("Failed", "failed", |p| p.failed)) (row("Skipped", "skipped", |p| p.skipped))
                    (row("Cancelled", "cancelled", |p| p.cancelled)) (row("New dead letters", "new_dead_letters", |p| p.new_dead_letters))
                    tr { th scope="row" { "Released per second" } td.num id="progress-released_per_second" { (opt(&p.map(|p| rate(p.released_per_second)))) } }
                }
            }
        }
    }
}

async fn render_run(
    state_: &AppState,
    session: &Session,
    id: &str,
    banner: Option<Banner>,
    code: StatusCode,
) -> Response {
    let r = match async { api::replay(state_, session, api::uuid(id)?).await }.await {
        Ok(r) => r,
        Err(refusal) => return views::refused(refusal.status, "Replay", &refusal.to_string()),
    };
    let status = r.status;
    let mine = r.started_by == session.operator.id.0;
    let live = matches!(status, ReplayStatus::Running | ReplayStatus::AwaitingApproval | ReplayStatus::Paused);
    let control = |action: &str, label: &str| {
        html! {
            form method="post" action={ "/ops/replays/" (r.id) "/" (action) } #{ "control-" (action) } {
                (csrf_field(session))
                p { label for={ "reason-" (action) } { "Reason to " (action) " (required)" } br;
                    textarea #{ "reason-" (action) } name="reason" rows="2" cols="40" required maxlength="500" {} }
                button type="submit" #{ "submit-" (action) } { (label) }
            }
        }
    };
    let body = html! {
        h1 { "Replay " code { (r.id) } }
        dl {
            dt { "Reason" } dd { (r.reason) }
            dt { "Destination queue" } dd { (r.destination_queue) }
            dt { "Expected payload version" } dd { (r.expected_payload_version) }
            dt { "Limits" } dd { (r.rate_per_second) "/s, " (r.max_concurrency) " in flight, pauses after " (r.auto_pause_threshold) " new dead letters" }
            dt { "Started" } dd { (when(r.created_at)) " by " (r.started_by_name) @if mine { " (you)" } }
            dt { "Approved by" } dd { (opt(&r.approved_by_name)) }
        }
        section aria-labelledby="h-progress" {
            h2 #h-progress { "Progress" }
            (progress(&r))
            @if live { p.hint { "This section refreshes every two seconds while the run is live." } }
            p #refresh-note role="status" {}
        }
        @if live {
            section aria-labelledby="h-controls" {
                h2 #h-controls { "Controls" }
                (role_note(session, Role::Operator, "control replays"))
                div.actions {
                    @if session.can(Role::Operator) && status == ReplayStatus::Running { (control("pause", "Pause")) }
                    @if session.can(Role::Operator) && status == ReplayStatus::Paused { (control("resume", "Resume")) }
                    @if session.can(Role::Operator) { (control("cancel", "Cancel the run")) }
                    @if status == ReplayStatus::AwaitingApproval {
                        @if session.can(Role::Admin) && !mine { (control("approve", "Approve")) }
                        @else { p.hint #approval-note { "Approval needs an admin other than the operator who started the run." } }
                    }
                }
            }
        }
        section aria-labelledby="h-items" {
            h2 #h-items { "Items" }
            table #replay-items {
                thead { tr { th scope="col" { "Dead letter" } th scope="col" { "Status" } th scope="col" { "Detail" } th scope="col" { "Job" } } }
                tbody {
                    @for i in r.items.as_deref().unwrap_or_default() {
                        tr {
                            td { a href={ "/ops/dead-letters/" (i.dead_letter_id) } { code { (i.dead_letter_id) } } }
                            td { (state(i.status)) }
                            td { (opt(&i.detail)) }
                            td { code { (opt(&i.job_id)) } }
                        }
                    }
                }
            }
        }
        @if live {
            script { (PreEscaped(REFRESH_SCRIPT)) }
        }
    };
    (code, views::page(session, "Replay", banner, body)).into_response()
}

/// Refreshes the progress section's contents every two seconds while the run is live (the
/// section is an `aria-live` region, so the change is announced). When the run's status changes
/// the page reloads, unless a reason is being typed: then it says so and leaves the form alone.
/// Any failure (a session that ended, say) stops the refresh with a message. The page works
/// without it (reload by hand).
pub(super) const REFRESH_SCRIPT: &str = r#"
(function () {
  var box = document.getElementById("progress");
  var shown = box.getAttribute("data-status");
  var note = document.getElementById("refresh-note");
  var timer = setInterval(function () {
    fetch(location.pathname + "?part=progress", { credentials: "same-origin", redirect: "error" })
      .then(function (r) { if (!r.ok) { throw new Error(r.status); } return r.text(); })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("progress");
        box.innerHTML = fresh.innerHTML;
        var status = fresh.getAttribute("data-status");
        box.setAttribute("data-status", status);
        if (status === shown) { return; }
        clearInterval(timer);
        var typing = Array.prototype.some.call(document.querySelectorAll("textarea"), function (t) { return t.value.trim() !== ""; });
        if (typing) {
          note.textContent = "The run is now " + status + ": reload the page to see what you can do with it.";
        } else {
          location.replace(location.pathname);
        }
      })
      .catch(function () {
        clearInterval(timer);
        note.textContent = "Live refresh stopped (your session may have ended): reload the page.";
      });
  }, 2000);
})();
"#;

#[derive(Debug, Deserialize)]
pub struct ControlForm {
    reason: Option<String>,
}

/// `POST /ops/replays/{id}/{pause|resume|cancel|approve}`.
pub async fn control(
    State(state_): State<AppState>,
    Path((id, action)): Path<(String, String)>,
    CsrfForm(session, form): CsrfForm<ControlForm>,
) -> Response {
    let request = ReasonRequest { reason: form.reason.unwrap_or_default() };
    let controlled = async {
        let run = api::uuid(&id)?;
        let control = action.parse::<ReplayControl>().map_err(|_| PageRefusal::not_found())?;
        api::control_replay(&state_, &session, run, control, &request).await
    };
    match controlled.await {
        Ok(_) => Redirect::to(&format!("/ops/replays/{}?done={}", urlencode(&id), urlencode(&action))).into_response(),
        Err(r) => render_run(&state_, &session, &id, Some(Banner::error(r.to_string())), r.status).await,
    }
}
