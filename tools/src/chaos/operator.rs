//! The chaos run's operators: two scripted finance operators who work the review queue through
//! the ops API (SPEC §8.1) while the faults run, the way hurried humans would, to prove that no
//! button moves money against the provider's record.
//!
//! Each operator pages through `GET /ops/v1/withdrawals?status=requires_review` and, for every
//! withdrawal it lists, presses the buttons in its habitual order with the version it just read
//! until one is accepted: operator A tries `fail`, then `retry`, then `complete`; operator B,
//! who prefers resending, tries `retry` first (so `retry` is exercised, not only refused after a
//! `fail` was). `complete` names whatever transfer id the provider shows for the withdrawal (the
//! mock's `GET /__admin/transfers`, by idempotency key = withdrawal id, read once per pass; else
//! the id in the withdrawal's evidence); with no id to name it is not pressed. A decision the
//! two-person rule holds (202) is at once "approved" by its own requester (which must be refused
//! with `second_operator_required`); the other operator approves it when a resolve of its own
//! answers `decision_pending`, and rejects it when the approval is refused for good (a stale
//! decision would otherwise block the withdrawal forever).
//!
//! Every answer is tallied by action and outcome (`ok`, `pending_approval`, or the refusal's
//! `code`). The operators are bounded: each sends at most one request per `pace` to the service,
//! at most `max_requests` in all, and stops at its deadline or when the run tells it to.
//!
//! A pass is *settled* when nothing in it was accepted and nothing was refused for a reason time
//! can change (provider pending or unreachable, an attempt in flight, a stale version, a decision
//! waiting): the operators have nothing left to do. The run's convergence waits for one.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use withdrawals::ops::routes;

/// Outcomes by action: `{"fail": {"ok": 3, "transfer_pending_at_provider": 7}, …}`.
pub type Tally = BTreeMap<String, BTreeMap<String, u64>>;

/// Outcome names that are not refusals.
pub const OK: &str = "ok";
pub const PENDING_APPROVAL: &str = "pending_approval";
/// `complete` was not pressed: no transfer id to name.
pub const NO_TRANSFER_ID: &str = "skipped_no_transfer_id";

/// Refusals that another try may turn into an acceptance: a pass that saw one is not settled.
const TRANSIENT: &[&str] = &[
    "provider_unavailable",
    "attempt_in_flight",
    "transfer_pending_at_provider",
    "reconciliation_in_progress",
    "stale_version",
    "not_in_review",
    "decision_pending",
    "second_operator_required",
    "decision_already_decided",
    "no_pending_decision",
    "transport_error",
    "internal_error",
];

withdrawals::text_enum! {
    /// The review buttons the scripted operators press (`reconcile` is the worker's, not theirs).
    pub enum Button("review button", 3) {
        Fail = "fail",
        Retry = "retry",
        Complete = "complete",
    }
}

/// One scripted operator: its bearer token and the order it presses the buttons in.
#[derive(Debug, Clone)]
pub struct Operator {
    pub name: String,
    pub token: String,
    pub order: [Button; 3],
    /// Walks the queue newest first (two people rarely start at the same end).
    pub newest_first: bool,
}

/// How hard the operators may push.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Least time between two requests of one operator to the service.
    pub pace: Duration,
    /// Requests one operator may send in all.
    pub max_requests: u64,
    /// When an operator stops by itself.
    pub deadline: Instant,
}

/// What the operators did, for the report.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct DeskReport {
    pub actions: Tally,
    pub operators: usize,
    pub passes: u64,
    pub settled_passes: u64,
    pub visits: u64,
    pub requests: u64,
    /// Why each operator stopped: `told`, `deadline` or `budget`.
    pub stopped: Vec<String>,
    /// Withdrawals an operator found in review while their transfer was still pending at the
    /// provider (the ones a blind `fail` would have paid twice).
    pub pending_at_provider_in_review: usize,
    /// Answers the service must never give (e.g. a requester approving its own decision).
    pub anomalies: Vec<String>,
}

#[derive(Default)]
struct DeskState {
    report: DeskReport,
    /// Per operator: when its latest pass started, if that pass was settled.
    settled_pass_started: Vec<Option<Instant>>,
    running: usize,
    pending_seen: std::collections::HashSet<String>,
}

/// The review desk the operators share: where they work and what they have done.
pub struct Desk {
    base_url: String,
    /// Every provider mock's admin URL (two in a two-provider run): what the providers show.
    mock_urls: Vec<String>,
    http: reqwest::Client,
    limits: Limits,
    state: Mutex<DeskState>,
}

/// What the provider shows for one withdrawal, read at the start of a pass.
#[derive(Debug, Clone)]
struct Shown {
    transfer_id: String,
    status: String,
}

/// One answer of the service.
struct Answer {
    outcome: String,
}

impl Answer {
    fn transient(&self) -> bool {
        TRANSIENT.contains(&self.outcome.as_str()) || self.outcome.starts_with("http_5")
    }
}

#[derive(Default)]
struct PassResult {
    acted: bool,
    transient: bool,
}

impl Desk {
    pub fn new(base_url: &str, mock_url: &str, limits: Limits) -> anyhow::Result<Arc<Desk>> {
        Desk::watching(base_url, &[mock_url.to_owned()], limits)
    }

    /// A desk whose operators look at several providers' records (SPEC §16).
    pub fn watching(base_url: &str, mock_urls: &[String], limits: Limits) -> anyhow::Result<Arc<Desk>> {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
        Ok(Arc::new(Desk {
            base_url: base_url.to_owned(),
            mock_urls: mock_urls.to_vec(),
            http,
            limits,
            state: Mutex::new(DeskState::default()),
        }))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, DeskState> {
        // A panicking operator task must not take the report down with it.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the operators; each runs until `stop`, its deadline or its budget.
    pub fn start(self: &Arc<Self>, operators: Vec<Operator>, stop: &CancellationToken) -> tokio::task::JoinSet<()> {
        let mut tasks = tokio::task::JoinSet::new();
        {
            let mut s = self.state();
            s.report.operators = operators.len();
            s.settled_pass_started = vec![None; operators.len()];
            s.running = operators.len();
        }
        for (i, op) in operators.into_iter().enumerate() {
            let (desk, stop) = (self.clone(), stop.clone());
            tasks.spawn(async move {
                let why = desk.work(i, &op, &stop).await;
                let mut s = desk.state();
                s.report.stopped.push(format!("{}: {why}", op.name));
                s.running -= 1;
            });
        }
        tasks
    }

    /// True when every operator has, since `since`, started a pass that turned out settled —
    /// or when no operator is working any more (nobody is left to act).
    pub fn settled_since(&self, since: Instant) -> bool {
        let s = self.state();
        s.running == 0 || s.settled_pass_started.iter().all(|p| p.is_some_and(|at| at >= since))
    }

    pub fn report(&self) -> DeskReport {
        self.state().report.clone()
    }

    /// One pass of `op` over the review queue, outside [`start`](Self::start) (for tests that
    /// drive the operators step by step). True if it was settled.
    pub async fn one_pass(&self, op: &Operator) -> bool {
        let mut pacer = Pacer { next: Instant::now(), interval: self.limits.pace };
        let (result, _) = self.pass(op, &mut pacer, &mut 0, &CancellationToken::new()).await;
        self.count_pass(&result)
    }

    /// Counts a finished pass; true if it was settled.
    fn count_pass(&self, result: &PassResult) -> bool {
        let settled = !result.acted && !result.transient;
        let mut s = self.state();
        s.report.passes += 1;
        s.report.settled_passes += u64::from(settled);
        settled
    }

    async fn work(&self, who: usize, op: &Operator, stop: &CancellationToken) -> &'static str {
        let mut pacer = Pacer { next: Instant::now(), interval: self.limits.pace };
        let mut sent = 0_u64;
        loop {
            if stop.is_cancelled() {
                return "told";
            }
            if Instant::now() >= self.limits.deadline {
                return "deadline";
            }
            if sent >= self.limits.max_requests {
                return "budget";
            }
            let started = Instant::now();
            let (result, listed) = self.pass(op, &mut pacer, &mut sent, stop).await;
            let settled = self.count_pass(&result);
            self.state().settled_pass_started[who] = settled.then_some(started);
            if listed == 0 {
                // An empty queue: look again shortly rather than hammer the list.
                tokio::select! {
                    () = stop.cancelled() => return "told",
                    () = tokio::time::sleep(Duration::from_millis(250)) => {}
                }
            }
        }
    }

    /// One pass over the whole review queue. Returns what happened and how many were listed.
    async fn pass(
        &self,
        op: &Operator,
        pacer: &mut Pacer,
        sent: &mut u64,
        stop: &CancellationToken,
    ) -> (PassResult, usize) {
        let mut result = PassResult::default();
        let Some(mut queue) = self.list_review(op, pacer, sent).await else {
            result.transient = true;
            return (result, 0);
        };
        if queue.is_empty() {
            return (result, 0);
        }
        if op.newest_first {
            queue.reverse();
        }
        let shown = self.provider_shows().await;
        let listed = queue.len();
        for (id, version) in queue {
            if stop.is_cancelled() || Instant::now() >= self.limits.deadline || *sent >= self.limits.max_requests {
                result.transient = true;
                break;
            }
            self.state().report.visits += 1;
            let visit = self.visit(op, &id, version, shown.as_ref().and_then(|m| m.get(&id)), pacer, sent).await;
            result.acted |= visit.acted;
            result.transient |= visit.transient;
        }
        // Without the provider's view, `complete` may have been skipped for want of an id.
        result.transient |= shown.is_none();
        (result, listed)
    }

    /// Presses the operator's buttons on one withdrawal until one is accepted.
    async fn visit(
        &self,
        op: &Operator,
        id: &str,
        version: i64,
        shown: Option<&Shown>,
        pacer: &mut Pacer,
        sent: &mut u64,
    ) -> PassResult {
        let mut result = PassResult::default();
        for button in op.order {
            let reference = match button {
                Button::Complete => match shown {
                    Some(s) => Some(s.transfer_id.clone()),
                    None => self.transfer_id_from_evidence(op, id, pacer, sent).await,
                },
                Button::Fail | Button::Retry => None,
            };
            if button == Button::Complete && reference.is_none() {
                self.count(button.as_str(), NO_TRANSFER_ID);
                continue;
            }
            let mut body = json!({
                "action": button.as_str(),
                "reason": format!("chaos operator {}: hurried {}", op.name, button.as_str()),
                "version": version,
            });
            if let Some(r) = &reference {
                body["provider_reference"] = json!(r);
            }
            let url = format!("{}{}", self.base_url, routes::WITHDRAWAL_RESOLVE.path(&[&id]));
            let answer = self.send(op, pacer, sent, self.http.post(url).json(&body)).await;
            self.count(button.as_str(), &answer.outcome);
            if answer.outcome == "transfer_pending_at_provider" {
                let mut s = self.state();
                s.pending_seen.insert(id.to_owned());
                s.report.pending_at_provider_in_review = s.pending_seen.len();
            }
            if matches!(button, Button::Fail | Button::Retry)
                && matches!(answer.outcome.as_str(), OK | PENDING_APPROVAL)
                && shown.is_some_and(|s| matches!(s.status.as_str(), "paid" | "returned"))
            {
                // A paid transfer never becomes unpaid, so this view cannot be out of date.
                let s = shown.expect("checked");
                self.anomaly(format!(
                    "{} {} of withdrawal {id} was accepted ({}) while the provider showed transfer {} {}",
                    op.name,
                    button.as_str(),
                    answer.outcome,
                    s.transfer_id,
                    s.status
                ));
            }
            match answer.outcome.as_str() {
                OK => {
                    result.acted = true;
                    return result;
                }
                PENDING_APPROVAL => {
                    result.acted = true;
                    // Hurried: the requester tries to approve its own decision at once.
                    let own = self.decide(op, id, true, pacer, sent).await;
                    if own.outcome == OK {
                        self.anomaly(format!("{} approved its own {} of withdrawal {id}", op.name, button.as_str()));
                    }
                    return result;
                }
                "decision_pending" => {
                    let decided = self.second_look(op, id, pacer, sent).await;
                    result.acted |= decided.acted;
                    result.transient = true;
                    return result;
                }
                "stale_version" | "not_in_review" => {
                    result.transient = true;
                    return result;
                }
                _ => result.transient |= answer.transient(),
            }
        }
        result
    }

    /// A decision waits on the withdrawal: approve it (as the second operator), and reject it
    /// when the approval is refused for a reason that will not go away.
    async fn second_look(&self, op: &Operator, id: &str, pacer: &mut Pacer, sent: &mut u64) -> PassResult {
        let mut result = PassResult::default();
        let approved = self.decide(op, id, true, pacer, sent).await;
        if approved.outcome == OK {
            result.acted = true;
            return result;
        }
        let keeps = approved.transient() && !matches!(approved.outcome.as_str(), "stale_version" | "not_in_review");
        if !keeps {
            let rejected = self.decide(op, id, false, pacer, sent).await;
            result.acted = rejected.outcome == OK;
        }
        result
    }

    async fn decide(&self, op: &Operator, id: &str, approve: bool, pacer: &mut Pacer, sent: &mut u64) -> Answer {
        let (verb, route) =
            if approve { ("approve", routes::DECISION_APPROVE) } else { ("reject", routes::DECISION_REJECT) };
        let kind = verb;
        let url = format!("{}{}", self.base_url, route.path(&[&id]));
        let body = json!({"reason": format!("chaos operator {}: hurried {verb}", op.name)});
        let answer = self.send(op, pacer, sent, self.http.post(url).json(&body)).await;
        self.count(kind, &answer.outcome);
        answer
    }

    /// The newest transfer id in the withdrawal's evidence (attempts, reconciliation results).
    async fn transfer_id_from_evidence(
        &self,
        op: &Operator,
        id: &str,
        pacer: &mut Pacer,
        sent: &mut u64,
    ) -> Option<String> {
        pacer.wait().await;
        *sent += 1;
        self.state().report.requests += 1;
        let url = format!("{}{}", self.base_url, routes::WITHDRAWAL.path(&[&id]));
        let shown: Value = self.http.get(url).bearer_auth(&op.token).send().await.ok()?.json().await.ok()?;
        let from = |list: &str| {
            shown[list]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|e| e["provider_transfer_id"].as_str().map(str::to_owned))
                .next_back()
        };
        from("reconciliation_results").or_else(|| from("provider_attempts"))
    }

    /// Every `requires_review` withdrawal with the version just read, oldest first.
    async fn list_review(&self, op: &Operator, pacer: &mut Pacer, sent: &mut u64) -> Option<Vec<(String, i64)>> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            pacer.wait().await;
            *sent += 1;
            self.state().report.requests += 1;
            let mut url =
                format!("{}{}?status=requires_review&limit=200", self.base_url, routes::WITHDRAWALS.path(&[]));
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let response = self.http.get(url).bearer_auth(&op.token).send().await.ok()?;
            if !response.status().is_success() {
                return None;
            }
            let page: Value = response.json().await.ok()?;
            for w in page["data"].as_array().into_iter().flatten() {
                if let (Some(id), Some(version)) = (w["id"].as_str(), w["version"].as_i64()) {
                    items.push((id.to_owned(), version));
                }
            }
            match page["next_cursor"].as_str() {
                Some(next) if items.len() < 10_000 => cursor = Some(next.to_owned()),
                _ => return Some(items),
            }
        }
    }

    /// The providers' view by idempotency key (= withdrawal id), from the mocks' ground truth.
    /// Should two providers hold one key (a violation the run reports), the paid one is shown.
    async fn provider_shows(&self) -> Option<HashMap<String, Shown>> {
        let mut shows: HashMap<String, Shown> = HashMap::new();
        for mock in &self.mock_urls {
            let body: Value =
                self.http.get(format!("{mock}/__admin/transfers")).send().await.ok()?.json().await.ok()?;
            for t in body["data"].as_array()? {
                let (Some(key), Some(id), Some(status)) =
                    (t["idempotency_key"].as_str(), t["id"].as_str(), t["status"].as_str())
                else {
                    continue;
                };
                let shown = Shown { transfer_id: id.to_owned(), status: status.to_owned() };
                let paid = |s: &Shown| matches!(s.status.as_str(), "paid" | "returned");
                if shows.get(key).is_none_or(|held| !paid(held)) {
                    shows.insert(key.to_owned(), shown);
                }
            }
        }
        Some(shows)
    }

    async fn send(&self, op: &Operator, pacer: &mut Pacer, sent: &mut u64, request: reqwest::RequestBuilder) -> Answer {
        pacer.wait().await;
        *sent += 1;
        self.state().report.requests += 1;
        let Ok(response) = request.bearer_auth(&op.token).send().await else {
            return Answer { outcome: "transport_error".into() };
        };
        let status = response.status().as_u16();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let outcome = match (status, body["code"].as_str()) {
            (200, _) => OK.to_owned(),
            (202, _) => PENDING_APPROVAL.to_owned(),
            (_, Some(code)) => code.to_owned(),
            (status, None) => format!("http_{status}"),
        };
        Answer { outcome }
    }

    fn count(&self, kind: &str, outcome: &str) {
        *self.state().report.actions.entry(kind.to_owned()).or_default().entry(outcome.to_owned()).or_default() += 1;
    }

    fn anomaly(&self, what: String) {
        let mut s = self.state();
        if s.report.anomalies.len() < 100 {
            s.report.anomalies.push(what);
        }
    }
}

/// At most one request per `interval`: the operators must not crowd out the customers.
struct Pacer {
    next: Instant,
    interval: Duration,
}

impl Pacer {
    async fn wait(&mut self) {
        tokio::time::sleep_until(self.next.into()).await;
        self.next = Instant::now().max(self.next) + self.interval;
    }
}

/// The human line for the summary: `fail ok 12, refused 30 (transfer_pending_at_provider 20,
/// transfer_paid_at_provider 10); retry …`, from the report's `actions`.
pub fn describe(actions: &Value) -> String {
    let Some(kinds) = actions.as_object() else { return "none".into() };
    if kinds.is_empty() {
        return "no actions".into();
    }
    let known = ["fail", "retry", "complete", "approve", "reject"];
    let mut names: Vec<&String> = kinds.keys().collect();
    names.sort_by_key(|k| (known.iter().position(|n| n == k).unwrap_or(known.len()), (*k).clone()));
    names
        .into_iter()
        .map(|kind| {
            let outcomes = kinds[kind].as_object().cloned().unwrap_or_default();
            let n = |name: &str| outcomes.get(name).and_then(Value::as_u64).unwrap_or(0);
            let mut refusals: Vec<(String, u64)> = outcomes
                .iter()
                .filter(|(k, _)| ![OK, PENDING_APPROVAL, NO_TRANSFER_ID].contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                .collect();
            refusals.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            let refused: u64 = refusals.iter().map(|(_, v)| v).sum();
            let mut line = format!("{kind} ok {}", n(OK));
            if n(PENDING_APPROVAL) > 0 {
                line.push_str(&format!(", pending approval {}", n(PENDING_APPROVAL)));
            }
            line.push_str(&format!(", refused {refused}"));
            if !refusals.is_empty() {
                let parts: Vec<String> = refusals.iter().map(|(k, v)| format!("{k} {v}")).collect();
                line.push_str(&format!(" ({})", parts.join(", ")));
            }
            if n(NO_TRANSFER_ID) > 0 {
                line.push_str(&format!(", not pressed {} (no transfer id)", n(NO_TRANSFER_ID)));
            }
            line
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_summary_line_says_what_was_done_and_why_the_rest_was_refused() {
        let actions = json!({
            "complete": {"ok": 4, "provider_reference_mismatch": 9, "skipped_no_transfer_id": 2},
            "fail": {"ok": 12, "transfer_pending_at_provider": 20, "transfer_paid_at_provider": 10, "pending_approval": 3},
            "approve": {"ok": 3, "second_operator_required": 3},
            "retry": {},
        });
        assert_eq!(
            describe(&actions),
            "fail ok 12, pending approval 3, refused 30 (transfer_pending_at_provider 20, transfer_paid_at_provider 10); \
             retry ok 0, refused 0; \
             complete ok 4, refused 9 (provider_reference_mismatch 9), not pressed 2 (no transfer id); \
             approve ok 3, refused 3 (second_operator_required 3)"
        );
        assert_eq!(describe(&json!({})), "no actions");
    }

    #[test]
    fn only_refusals_time_can_change_keep_a_pass_unsettled() {
        let transient = |o: &str| Answer { outcome: o.into() }.transient();
        assert!(transient("transfer_pending_at_provider"));
        assert!(transient("provider_unavailable"));
        assert!(transient("http_502"));
        assert!(!transient("transfer_paid_at_provider"), "complete comes next in the same visit");
        assert!(!transient("provider_reference_mismatch"));
        assert!(!transient("provider_mismatch"));
    }
}
