//! Replay (SPEC §8.3): a deliberate command, never "retry all". Start with a reason, a selection
//! (dead-letter ids or the triage filters), the expected payload version and a destination queue;
//! `dry_run` reports the count and a sample and changes nothing. Runs over the approval
//! threshold wait for a second operator. The worker's releaser does the releasing.

use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

use super::acts::{ReplayCancel, ReplayPause, ReplayResume, ReplayStart};
use super::approvals::{self, Approvable};
use super::types::{
    DryRun, List, ReasonRequest, ReplayControl, ReplayItemView, ReplayProgress, ReplayQuery, ReplayRunView,
    SampleLetter, StartReplay, Started,
};
use super::{
    page_limit, parameters_of, require_reason, Act, Action, Audited, Operator, Ops, OpsError, OpsResult, Role,
};
use crate::domain::{ApprovalKind, DeadLetterId, OperatorId, ReplayAction, ReplayRunId, ReplayStatus};
use crate::jobs::Queue;
use crate::storage::dead_letters::{self, DeadLetterFilter};
use crate::storage::replays::{self, ReplayRun};
use crate::storage::{is_unique_violation, DbTime, StorageError, Tx};

/// A short fingerprint of exactly which dead letters a selection holds (order-independent).
pub fn selection_digest(letters: &[dead_letters::DeadLetter]) -> String {
    use sha2::{Digest, Sha256};
    let mut ids: Vec<Uuid> = letters.iter().map(|d| d.id.0).collect();
    ids.sort();
    let mut hasher = Sha256::new();
    for id in ids {
        hasher.update(id.as_bytes());
    }
    hex::encode(&hasher.finalize()[..16])
}

/// A run as operators see it, with who started and approved it by name.
async fn named_run_view(
    ops: &Ops<'_>,
    run: &ReplayRun,
    progress: Option<&replays::Progress>,
) -> OpsResult<ReplayRunView> {
    let names =
        super::names(ops.db, [Some(run.started_by.0), run.approved_by.map(|o| o.0)].into_iter().flatten().collect())
            .await?;
    Ok(run_view(run, progress, &names))
}

fn run_view(run: &ReplayRun, progress: Option<&replays::Progress>, names: &super::Names) -> ReplayRunView {
    let elapsed = (Utc::now() - run.created_at.0).num_milliseconds().max(1) as f64 / 1000.0;
    ReplayRunView {
        id: run.id.0,
        status: run.status,
        reason: run.reason.clone(),
        selection: run.selection.0.clone(),
        expected_payload_version: run.expected_payload_version,
        destination_queue: run.destination_queue,
        total: run.total,
        rate_per_second: run.rate_per_second,
        max_concurrency: run.max_concurrency,
        auto_pause_threshold: run.auto_pause_threshold,
        started_by: run.started_by.0,
        started_by_name: super::name_of(names, run.started_by.0),
        approved_by: run.approved_by.map(|o| o.0),
        approved_by_name: run.approved_by.map(|o| super::name_of(names, o.0)),
        paused_reason: run.paused_reason.clone(),
        created_at: run.created_at.0,
        updated_at: run.updated_at.0,
        progress: progress.map(|p| ReplayProgress {
            total: run.total,
            pending: p.pending,
            released: p.released,
            reconciling: p.reconciling,
            skipped: p.skipped,
            cancelled: p.cancelled,
            in_flight: p.in_flight,
            succeeded: p.succeeded,
            failed: p.failed,
            new_dead_letters: p.new_dead_letters,
            released_per_second: ((p.released + p.reconciling) as f64 / elapsed * 100.0).round() / 100.0,
        }),
        items: None,
    }
}

/// Runs newest first, with their progress.
pub async fn list(ops: &Ops<'_>, operator: &Operator, q: ReplayQuery) -> OpsResult<List<ReplayRunView>> {
    operator.require(Role::Viewer)?;
    let status = q
        .status
        .as_deref()
        .map(|raw| {
            raw.parse::<ReplayStatus>().map_err(|_| {
                let known: Vec<&str> = ReplayStatus::ALL.iter().map(|s| s.as_str()).collect();
                OpsError::invalid(
                    "invalid_status",
                    "status",
                    format!("unknown run status `{raw}`: use one of {}", known.join(", ")),
                )
            })
        })
        .transpose()?;
    let limit = page_limit(q.limit)?;
    let runs = replays::list_runs(ops.db, status, limit).await?;
    let names = super::names(
        ops.db,
        runs.iter().flat_map(|r| [Some(r.started_by.0), r.approved_by.map(|o| o.0)]).flatten().collect(),
    )
    .await?;
    // One query for the whole page's progress, not one per run.
    let ids: Vec<ReplayRunId> = runs.iter().map(|r| r.id).collect();
    let progress = replays::progress_of_runs(ops.db, &ids).await?;
    let data = runs.iter().map(|run| run_view(run, progress.get(&run.id), &names)).collect();
    Ok(List { data })
}

async fn select(ops: &Ops<'_>, req: &StartReplay, limit: i64) -> OpsResult<Vec<dead_letters::DeadLetter>> {
    let db = ops.db;
    match (&req.dead_letter_ids, &req.filter) {
        (Some(ids), None) => {
            let mut seen = std::collections::HashSet::new();
            let ids: Vec<DeadLetterId> =
                ids.iter().filter(|id| seen.insert(**id)).map(|id| DeadLetterId(*id)).collect();
            // One read for the whole selection; the checks below go in request order, so the
            // first offending id is the one named.
            let mut found: std::collections::HashMap<DeadLetterId, dead_letters::SelectedLetter> =
                dead_letters::get_many(db, &ids).await?.into_iter().map(|s| (s.letter.id, s)).collect();
            let mut letters = Vec::with_capacity(ids.len());
            for id in &ids {
                let selected = found.remove(id).ok_or_else(|| {
                    OpsError::invalid("unknown_dead_letter", "dead_letter_ids", format!("no dead letter {id}"))
                })?;
                if selected.closed {
                    return Err(OpsError::invalid(
                        "dead_letter_closed",
                        "dead_letter_ids",
                        format!("dead letter {id} is closed"),
                    ));
                }
                letters.push(selected.letter);
            }
            Ok(letters)
        }
        (None, Some(f)) => {
            // Replay is deliberate, never "retry all" (SPEC §8.3): a filter must narrow.
            let narrows = [&f.queue, &f.job_type, &f.error_code, &f.category].iter().any(|v| v.is_some())
                || f.failed_after.is_some()
                || f.failed_before.is_some();
            if !narrows {
                return Err(OpsError::invalid(
                    "filter_required",
                    "filter",
                    "a filter must name at least one of queue, job_type, error_code, category, failed_after, failed_before",
                ));
            }
            let filter = DeadLetterFilter {
                queue: f.queue.clone(),
                job_type: f.job_type.clone(),
                error_code: f.error_code.clone(),
                category: f.category.clone(),
                failed_after: f.failed_after.map(DbTime::from),
                failed_before: f.failed_before.map(DbTime::from),
                open: Some(true),
                after: None,
                oldest_first: false,
                limit: limit + 1,
            };
            // A filter selects what still needs replaying: not what a run already released.
            let selected = dead_letters::list_selection(db, &filter).await?;
            Ok(selected.into_iter().filter(|s| !s.replayed).map(|s| s.letter).collect())
        }
        _ => Err(OpsError::invalid("invalid_selection", "selection", "give exactly one of dead_letter_ids or filter")),
    }
}

/// Starts a replay run — or, with `dry_run`, reports what it would select and changes nothing.
pub async fn start(ops: &Ops<'_>, operator: &Operator, req: StartReplay) -> OpsResult<Started> {
    let act = if req.dry_run { super::Act { name: "replay.dry_run", ..ReplayStart::ACT } } else { ReplayStart::ACT };
    ops.perform(operator, &act, "", &req.reason, parameters_of(&req), async |audited| {
        start_checked(ops, operator, &req, audited).await
    })
    .await
}

async fn start_checked(
    ops: &Ops<'_>,
    operator: &Operator,
    req: &StartReplay,
    audited: &Audited<'_>,
) -> OpsResult<Started> {
    let settings = ops.config.replay;
    let reason = require_reason(&req.reason)?;
    let limits = limits(&settings, req, operator)?;
    let letters = select(ops, req, settings.max_selection).await?;
    if letters.is_empty() {
        return Err(OpsError::invalid("empty_selection", "selection", "the selection matches no open dead letter"));
    }
    if letters.len() as i64 > settings.max_selection {
        return Err(OpsError::invalid(
            "selection_too_large",
            "selection",
            format!("at most {} items per run", settings.max_selection),
        ));
    }
    let needs_approval = letters.len() as i64 > settings.approval_threshold;
    if req.dry_run {
        return dry_run(ops, operator, req, &letters, needs_approval, audited).await.map(Started::DryRun);
    }
    if let Some(expected) = &req.expected_selection_digest {
        if *expected != selection_digest(&letters) {
            return Err(OpsError::conflict("selection_changed",
                format!(
                    "the selection is no longer the one the dry run showed (it now holds {} dead letters); run the dry run again",
                    letters.len()
                ),
            ));
        }
    }
    let ids: Vec<_> = letters.iter().map(|d| (d.account_id, d.id)).collect();
    let active: std::collections::HashMap<DeadLetterId, ReplayRunId> =
        replays::active_runs_for(ops.db, &ids).await?.into_iter().collect();
    if let Some((letter, run)) = letters.iter().find_map(|d| active.get(&d.id).map(|run| (d.id, *run))) {
        return Err(already_replaying(letter, run));
    }
    let now = DbTime::now();
    let run = ReplayRun {
        id: ReplayRunId::new(),
        started_by: operator.id,
        reason: crate::redact::text(reason),
        selection: sqlx::types::Json(json!({"dead_letter_ids": letters.iter().map(|d| d.id).collect::<Vec<_>>()})),
        expected_payload_version: req.expected_payload_version,
        destination_queue: limits.destination,
        status: if needs_approval { ReplayStatus::AwaitingApproval } else { ReplayStatus::Running },
        total: letters.len() as i64,
        rate_per_second: limits.rate,
        max_concurrency: limits.concurrency,
        auto_pause_threshold: limits.auto_pause,
        dead_letter_baseline: 0,
        approved_by: None,
        paused_reason: None,
        created_at: now,
        updated_at: now,
    };
    let mut tx = ops.db.begin().await?;
    replays::insert_run(&mut tx, &run).await?;
    for letter in &letters {
        if let Err(err) = replays::insert_item(&mut tx, run.id, letter.account_id, letter.id).await {
            drop(tx);
            return Err(match err {
                StorageError::Database(ref db) if is_unique_violation(db) => {
                    let holder =
                        replays::active_run_for(ops.db, letter.account_id, letter.id).await?.unwrap_or_default();
                    already_replaying(letter.id, holder)
                }
                other => other.into(),
            });
        }
    }
    let audited = Audited { target_id: run.id.to_string(), ..audited.clone_shallow() };
    audited.record_ok(&mut tx, operator).await?;
    tx.commit().await?;
    Ok(Started::Run(Box::new(named_run_view(ops, &run, None).await?)))
}

/// A run's pace, checked: within the bounds, and beyond an operator's limits only for an admin.
struct Limits {
    destination: Queue,
    rate: i64,
    concurrency: i64,
    auto_pause: i64,
}

fn limits(settings: &crate::config::ReplaySettings, req: &StartReplay, operator: &Operator) -> OpsResult<Limits> {
    let Some(destination) =
        req.destination_queue.parse().ok().filter(|q: &Queue| Queue::REPLAY_DESTINATIONS.contains(q))
    else {
        return Err(OpsError::invalid(
            "unknown_queue",
            "destination_queue",
            "destination queue must be payouts, reconciliation or notifications",
        ));
    };
    let rate = req.rate_per_second.unwrap_or(settings.default_rate_per_second);
    let concurrency = req.max_concurrency.unwrap_or(settings.default_max_concurrency);
    let auto_pause = req.auto_pause_threshold.unwrap_or(settings.default_auto_pause_threshold);
    if !(1..=1_000).contains(&rate) || !(1..=100).contains(&concurrency) || auto_pause < 1 {
        return Err(OpsError::invalid(
            "invalid_limits",
            "rate_per_second",
            "rate 1–1000/s, concurrency 1–100, auto-pause ≥ 1",
        ));
    }
    // Operators replay within limits; faster or wider runs are an admin's call (SPEC §8).
    if !operator.role.includes(Role::Admin)
        && (rate > settings.operator_max_rate || concurrency > settings.operator_max_concurrency)
    {
        return Err(OpsError::forbidden(
            "admin_required",
            format!(
                "operators may replay at up to {}/s with {} in flight; ask an admin for more",
                settings.operator_max_rate, settings.operator_max_concurrency
            ),
        ));
    }
    Ok(Limits { destination, rate, concurrency, auto_pause })
}

/// What a run of this selection would do, audited, changing nothing else.
async fn dry_run(
    ops: &Ops<'_>,
    operator: &Operator,
    req: &StartReplay,
    letters: &[dead_letters::DeadLetter],
    needs_approval: bool,
    audited: &Audited<'_>,
) -> OpsResult<DryRun> {
    let sample = letters
        .iter()
        .take(5)
        .map(|d| SampleLetter {
            dead_letter_id: d.id.0,
            withdrawal_id: d.withdrawal_id.map(|w| w.0),
            category: d.category,
            error_code: d.error_code.clone(),
            payload_version: d.payload_version,
            side_effect_state: d.side_effect_state,
        })
        .collect();
    let mismatched = letters.iter().filter(|d| d.payload_version != req.expected_payload_version).count();
    let mut tx = ops.db.begin().await?;
    audited.record_ok(&mut tx, operator).await?;
    tx.commit().await?;
    Ok(DryRun {
        dry_run: true,
        count: letters.len() as i64,
        sample,
        needs_approval,
        payload_version_mismatches: mismatched as i64,
        selection_digest: selection_digest(letters),
    })
}

fn already_replaying(dead_letter: DeadLetterId, run: ReplayRunId) -> OpsError {
    OpsError::conflict("already_replaying", format!("dead letter {dead_letter} is already being replayed by run {run}"))
}

/// One run with its progress and each dead letter's fate.
pub async fn status(ops: &Ops<'_>, operator: &Operator, id: ReplayRunId) -> OpsResult<ReplayRunView> {
    operator.require(Role::Viewer)?;
    let run = replays::get_run(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
    let progress = replays::progress(ops.db, id).await?;
    let mut view = named_run_view(ops, &run, Some(&progress)).await?;
    let items = replays::items(ops.db, id).await?;
    view.items = Some(
        items
            .iter()
            .map(|i| ReplayItemView {
                dead_letter_id: i.dead_letter_id.0,
                status: i.status,
                detail: i.detail.clone(),
                job_id: i.job_id.map(|j| j.0),
            })
            .collect(),
    );
    Ok(view)
}

/// The action a run control is audited and authorised as.
pub fn control_act(control: ReplayControl) -> Act {
    match control {
        ReplayControl::Pause => ReplayPause::ACT,
        ReplayControl::Resume => ReplayResume::ACT,
        ReplayControl::Cancel => ReplayCancel::ACT,
        ReplayControl::Approve => approvals::approve_act(ApprovalKind::ReplayRun),
    }
}

/// Pauses, resumes, cancels or approves run `id` (approval through [`approvals::approve`]).
pub async fn control(
    ops: &Ops<'_>,
    operator: &Operator,
    id: ReplayRunId,
    control: ReplayControl,
    req: ReasonRequest,
) -> OpsResult<ReplayRunView> {
    let act = control_act(control);
    ops.perform(operator, &act, id.to_string(), &req.reason, json!({}), async |audited| {
        let reason = require_reason(&req.reason)?;
        let run = replays::get_run(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        match control {
            ReplayControl::Approve => approvals::approve(ops, operator, &run, reason, audited).await?,
            ReplayControl::Pause | ReplayControl::Resume | ReplayControl::Cancel => {
                let mut tx = ops.db.begin().await?;
                change(ops, &mut tx, &run, control, reason, operator.id).await?;
                audited.record_ok(&mut tx, operator).await?;
                tx.commit().await?;
            }
        }
        let run = replays::get_run(ops.db, id).await?.ok_or_else(OpsError::not_found)?;
        named_run_view(ops, &run, None).await
    })
    .await
}

/// Moves `run` by `control` in `tx` (`by` the operator); 409 `invalid_run_state` when its state
/// does not allow it (SPEC §8.3's state machine, `domain::replay`).
async fn change(
    ops: &Ops<'_>,
    tx: &mut Tx,
    run: &ReplayRun,
    control: ReplayControl,
    reason: &str,
    by: OperatorId,
) -> OpsResult<()> {
    let id = run.id;
    let changed = match control {
        ReplayControl::Pause => {
            let reason = crate::redact::text(reason);
            replays::set_status(tx, id, ReplayAction::Pause, Some(&reason), None).await?
        }
        ReplayControl::Resume => {
            let resumed = replays::set_status(tx, id, ReplayAction::Resume, None, None).await?;
            let seen = replays::progress(ops.db, id).await?.new_dead_letters;
            replays::reset_baseline(tx, id, seen).await?;
            resumed
        }
        ReplayControl::Cancel => {
            let ok = replays::set_status(tx, id, ReplayAction::Cancel, Some(reason), None).await?;
            if ok {
                replays::cancel_pending(tx, id).await?;
            }
            ok
        }
        ReplayControl::Approve => replays::set_status(tx, id, ReplayAction::Approve, None, Some(by)).await?,
    };
    if !changed {
        return Err(OpsError::conflict(
            "invalid_run_state",
            format!("cannot {} a run that is {}", control.as_str(), run.status),
        ));
    }
    Ok(())
}

/// A run over the approval threshold waits for a second person, who lets it start.
impl Approvable for ReplayRun {
    const KIND: ApprovalKind = ApprovalKind::ReplayRun;
    type Checked = ();
    type Applied = ();

    fn requested_by(&self) -> OperatorId {
        self.started_by
    }

    /// Nothing beyond the second person: each item is checked as it is released.
    async fn check(&self, _ops: &Ops<'_>, _approver: &Operator) -> OpsResult<()> {
        Ok(())
    }

    async fn apply(&self, ops: &Ops<'_>, tx: &mut Tx, approver: &Operator, reason: &str, (): ()) -> OpsResult<()> {
        change(ops, tx, self, ReplayControl::Approve, reason, approver.id).await
    }
}
