//! The chaos run's settlement phase (SPEC §14): once the run has converged, the provider's reports
//! are made to disagree with its own record in each way the mock can, a real bank return is made,
//! and every day the run touched is imported through the ops API, as an operator would; then the
//! database must show each discrepancy found exactly once, every other completed withdrawal
//! matched, and the return re-credited exactly once ([`check`]).
//!
//! Injected, on completed withdrawals chosen by the run's seed (none when fewer than
//! [`MIN_COMPLETED`] completed; the summary says so): a `paid` line left out (`omit_paid`, found as
//! `missing_from_report`), a wrong amount (`amount_mismatch`), a `returned` line the provider's
//! record does not show (`spurious_return`, found as `returned` and never credited), and a real
//! return at the mock (credited once). Always: a `paid` line under a made-up key on the run's first
//! day (`unknown_transfer`).
//!
//! The imports: a malformed report first (refused whole with `422 report_refused` and its line
//! number; no report stored), then every UTC day the run touched, **newest first**, then the last
//! day again (`already_imported`, nothing new). Newest first because the missing sweep runs after
//! every import and, with `SETTLEMENT_GRACE_DAYS=0`, weighs every completion since the earliest
//! imported day: importing the first day first would flag the later days' completions before
//! their reports are in.
//!
//! With several providers (SPEC §16, [`exercise_each`]) each provider's mock gets its own
//! discrepancies and its own bank return, chosen among the withdrawals *that* provider paid, and
//! its report also shows a `paid` line for a withdrawal the next provider paid (`foreign_line`):
//! a report is matched only against its own provider's withdrawals, so that line must come out an
//! `unknown_transfer` of this provider and the withdrawal stay matched at the provider that paid
//! it. Every provider's discrepancies and return are made before anything is imported; then each
//! provider's days are imported in turn (`"provider": name`), each ending with a ledger verify.
//! [`check`] then holds each provider's lines and exceptions against that provider's own record:
//! a withdrawal paid at one provider is matched in that provider's report and in no other's.
//!
//! It must not resolve exceptions or move money itself: everything it changes goes through the
//! mock's admin routes and the service's ops API; the database is only read.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use anyhow::{bail, Context};
use chrono::{DateTime, NaiveDate, Utc};
use provider_mocks::{ReportFault, ReportFaultConfig, TransferRecord, TransferStatus};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rust_decimal::Decimal;
use serde::Serialize;
use serde_json::{json, Value};
use uuid::Uuid;

use withdrawals::config::providers::DEFAULT_PROVIDER;
use withdrawals::domain::settlement::{ExceptionKind, ExceptionStatus, LineResult};
use withdrawals::domain::{format_minor, AccountId, Currency};
use withdrawals::ops::routes;
use withdrawals::storage::{accounts, verify, Db};

/// Fewer completed withdrawals than this and nothing is injected on withdrawals.
pub const MIN_COMPLETED: usize = 5;
/// The bank's reason for the real return.
const RETURN_CODE: &str = "R01";
/// The made-up transfer's amount.
const UNKNOWN_AMOUNT: &str = "7.77";

/// Where the settlement phase works: the service's ops API (as an operator) and one provider's
/// mock.
pub struct Api<'a> {
    pub http: &'a reqwest::Client,
    pub base_url: &'a str,
    pub mock_url: &'a str,
    /// An `operator` bearer token (importing needs that role).
    pub operator_token: &'a str,
    /// The provider the mock is, as the service names it, named in every import and listing;
    /// `None`: the one provider (`default`), named nowhere, as its operator would.
    pub provider: Option<&'a str>,
}

impl Api<'_> {
    /// The provider's name as the service stores it.
    fn provider(&self) -> &str {
        self.provider.unwrap_or(DEFAULT_PROVIDER)
    }
}

/// A completed withdrawal a discrepancy was injected on.
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    pub withdrawal_id: Uuid,
    pub account_id: Uuid,
    pub amount_minor: i64,
    pub currency: String,
}

/// The line for a transfer no withdrawal asked for.
#[derive(Debug, Clone, Serialize)]
pub struct UnknownLine {
    pub transfer_id: String,
    pub idempotency_key: String,
    pub amount: String,
    pub currency: String,
    pub date: NaiveDate,
}

/// A `paid` line in one provider's report for a withdrawal another provider paid.
#[derive(Debug, Clone, Serialize)]
pub struct ForeignLine {
    pub transfer_id: String,
    pub withdrawal_id: Uuid,
    /// The provider that paid it.
    pub paid_at: String,
    pub amount: String,
    pub currency: String,
    pub date: NaiveDate,
}

/// What was made to disagree, and on what.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Discrepancies {
    pub omit_paid: Option<Target>,
    pub wrong_amount: Option<Target>,
    /// The amount the report shows for `wrong_amount`.
    pub wrong_amount_reported: Option<String>,
    pub spurious_return: Option<Target>,
    /// A real bank return at the mock: the one return that must be credited.
    pub bank_return: Option<Target>,
    pub unknown_transfer: Option<UnknownLine>,
    /// With several providers: a line for a withdrawal the next provider paid.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub foreign_line: Option<ForeignLine>,
    /// Why the injections on withdrawals were skipped, when they were.
    pub skipped: Option<String>,
}

impl Discrepancies {
    /// Every withdrawal something was injected on.
    fn targets(&self) -> impl Iterator<Item = &Target> {
        [&self.omit_paid, &self.wrong_amount, &self.spurious_return, &self.bank_return].into_iter().flatten()
    }

    /// The report faults (without the malformed line).
    fn faults(&self) -> Vec<ReportFault> {
        let key = |t: &Target| t.withdrawal_id.to_string();
        let mut rules = Vec::new();
        if let Some(t) = &self.omit_paid {
            rules.push(ReportFault::OmitPaid { idempotency_key: key(t) });
        }
        if let (Some(t), Some(amount)) = (&self.wrong_amount, &self.wrong_amount_reported) {
            let amount = amount.parse().expect("a formatted amount parses");
            rules.push(ReportFault::WrongAmount { idempotency_key: key(t), amount });
        }
        if let Some(t) = &self.spurious_return {
            rules.push(ReportFault::SpuriousReturn { idempotency_key: key(t) });
        }
        if let Some(u) = &self.unknown_transfer {
            rules.push(ReportFault::UnknownTransfer {
                transfer_id: u.transfer_id.clone(),
                idempotency_key: u.idempotency_key.clone(),
                reference: None,
                amount: u.amount.parse().expect("a constant amount parses"),
                currency: u.currency.clone(),
                date: u.date,
            });
        }
        if let Some(f) = &self.foreign_line {
            rules.push(ReportFault::UnknownTransfer {
                transfer_id: f.transfer_id.clone(),
                idempotency_key: f.withdrawal_id.to_string(),
                reference: Some(f.withdrawal_id.to_string()),
                amount: f.amount.parse().expect("a formatted amount parses"),
                currency: f.currency.clone(),
                date: f.date,
            });
        }
        rules
    }
}

/// The settlement phase of one provider: what it did through the API and what the database shows.
#[derive(Debug, Default, Serialize)]
pub struct SettlementRun {
    /// The provider, as the service names it (`default` for the one provider).
    pub provider: String,
    pub injected: Discrepancies,
    /// Every UTC day the run touched (by the mock's clock), oldest first.
    pub days: Vec<NaiveDate>,
    /// The malformed report's answer: status, code, and the line it named.
    pub refused_status: Option<u16>,
    pub refused_code: Option<String>,
    pub refused_line: Option<u64>,
    /// Report versions stored right after the refusal (must be none).
    pub reports_after_refusal: Option<usize>,
    /// Each day's import summary, in import order.
    pub imports: Vec<Value>,
    /// The same day imported again.
    pub reimport: Option<Value>,
    /// `GET /ops/v1/ledger/verify`: `200 clean`, or the status and code.
    pub ledger_verify: String,
    /// The returned account's available balance before anything was imported (minor units).
    pub return_available_before: Option<i64>,
    /// The same after the imports.
    pub return_available_after: Option<i64>,
    /// From the database, after the imports (see [`check`]): this provider's report versions,
    /// lines, matched lines and exceptions.
    pub reports: Vec<String>,
    pub lines: u64,
    pub line_results: BTreeMap<String, u64>,
    pub matched: u64,
    pub exceptions: BTreeMap<String, u64>,
    pub returns_credited: u64,
    pub violations: Vec<String>,
}

impl SettlementRun {
    fn violation(&mut self, what: String) {
        if self.violations.len() < 100 {
            self.violations.push(what);
        }
    }
}

/// Injects the discrepancies and the return, then runs the imports through the ops API. Never
/// fails: what goes wrong is a violation of the run.
pub async fn exercise(db: &Db, api: &Api<'_>, seed: u64, start_day: NaiveDate) -> SettlementRun {
    exercise_each(db, std::slice::from_ref(api), seed, start_day).await.pop().expect("one run per provider")
}

/// [`exercise`] for each provider's mock in `apis` (see the module doc): one run each, in the
/// same order. The first provider's choice is the one [`exercise`] makes with the same seed.
pub async fn exercise_each(db: &Db, apis: &[Api<'_>], seed: u64, start_day: NaiveDate) -> Vec<SettlementRun> {
    let mut runs: Vec<SettlementRun> =
        apis.iter().map(|a| SettlementRun { provider: a.provider().to_owned(), ..SettlementRun::default() }).collect();
    // Two bank returns never share an account: each return's check reads its account's balance.
    let mut returned_accounts = HashSet::new();
    // Each provider's preparation: a withdrawal it paid with nothing injected on, or why it stopped.
    let mut prepared = Vec::new();
    for (i, (api, run)) in apis.iter().zip(&mut runs).enumerate() {
        let spare = prepare(db, api, (seed, i), start_day, &mut returned_accounts, run).await;
        if let Err(err) = &spare {
            run.violation(format!("the settlement phase stopped: {err:#}"));
        }
        prepared.push(spare);
    }
    if apis.len() > 1 {
        for (i, run) in runs.iter_mut().enumerate() {
            let from = (i + 1) % apis.len();
            let spare = prepared[from].as_ref().ok().and_then(Option::as_ref);
            run.injected.foreign_line = spare.map(|t| ForeignLine {
                transfer_id: format!("tr_chaos_foreign_{seed}_{i}"),
                withdrawal_id: t.withdrawal_id,
                paid_at: apis[from].provider().to_owned(),
                amount: minor_to_decimal(t.amount_minor, &t.currency).to_string(),
                currency: t.currency.clone(),
                date: start_day,
            });
        }
    }
    for ((api, run), _) in apis.iter().zip(&mut runs).zip(&prepared).filter(|(_, spare)| spare.is_ok()) {
        if let Err(err) = import_days(api, start_day, run).await {
            run.violation(format!("the settlement phase stopped: {err:#}"));
        }
    }
    runs
}

/// The days of the run, the discrepancies on this provider's withdrawals and its bank return (on
/// an account none in `returned_accounts` is, which it joins). Returns a withdrawal this provider
/// paid that nothing was injected on, for another provider's `foreign_line`. `(seed, index)`: the
/// run's seed and the provider's place among the run's.
async fn prepare(
    db: &Db,
    api: &Api<'_>,
    (seed, index): (u64, usize),
    start_day: NaiveDate,
    returned_accounts: &mut HashSet<Uuid>,
    run: &mut SettlementRun,
) -> anyhow::Result<Option<Target>> {
    let now = mock_now(api.http, api.mock_url).await?;
    let mut day = start_day;
    while day <= now.date_naive() {
        run.days.push(day);
        day = day.succ_opt().context("the calendar ends")?;
    }
    let transfers: Vec<TransferRecord> = serde_json::from_value(
        get_json(api.http, &format!("{}/__admin/transfers", api.mock_url)).await?["data"].take(),
    )?;
    let (injected, spare) = choose(db, &transfers, (seed, index), start_day, returned_accounts).await?;
    run.injected = injected;

    if let Some(t) = &run.injected.bank_return {
        returned_accounts.insert(t.account_id);
        let before = accounts::balances(db, AccountId(t.account_id)).await?;
        run.return_available_before = before.iter().find(|b| b.currency == t.currency).map(|b| b.available);
        let body = json!({
            "idempotency_key": t.withdrawal_id.to_string(), "return_code": RETURN_CODE, "at": now,
        });
        let response = api.http.post(format!("{}/__admin/returns", api.mock_url)).json(&body).send().await?;
        if !response.status().is_success() {
            bail!("the mock refused the return of {}: {}", t.withdrawal_id, response.text().await.unwrap_or_default());
        }
    }
    Ok(spare)
}

/// The imports of one provider's days (see the module doc), then a ledger verify.
async fn import_days(api: &Api<'_>, start_day: NaiveDate, run: &mut SettlementRun) -> anyhow::Result<()> {
    // A malformed report first: refused whole, nothing stored.
    let mut rules = run.injected.faults();
    rules.push(ReportFault::MalformedLine { date: start_day, amount: "12,34".into() });
    set_report_faults(api, rules).await?;
    let (status, body) = import(api, start_day).await?;
    let provider = api.provider();
    run.refused_status = Some(status);
    run.refused_code = body["code"].as_str().map(str::to_owned);
    run.refused_line = body["detail"].as_str().and_then(line_named);
    if status != 422 || body["code"] != "report_refused" {
        run.violation(format!(
            "{provider}'s malformed report of {start_day} was answered {status} {body}, not 422 report_refused"
        ));
    }
    let stored = report_versions(api).await?;
    run.reports_after_refusal = Some(stored);
    if stored != 0 {
        run.violation(format!("a refused report stored something: {stored} report version(s) after the refusal"));
    }

    // The run's days, newest first (see the module doc), then the last one again.
    set_report_faults(api, run.injected.faults()).await?;
    for day in run.days.clone().into_iter().rev() {
        let (status, body) = import(api, day).await?;
        if status != 200 {
            run.violation(format!("importing {provider}'s report of {day} was answered {status} {body}"));
        }
        run.imports.push(body);
    }
    let again = *run.days.first().expect("at least the start day");
    let versions_before = report_versions(api).await?;
    let (status, body) = import(api, again).await?;
    let m = &body["matching"];
    let nothing_new = status == 200
        && body["already_imported"] == true
        && body["missing_opened"] == 0
        && ["matched", "completed", "failed", "returns_credited", "exceptions_opened"].iter().all(|k| m[k] == 0)
        && report_versions(api).await? == versions_before;
    if !nothing_new {
        run.violation(format!(
            "importing {provider}'s report of {again} again was not `already_imported` with nothing new: {status} {body}"
        ));
    }
    run.reimport = Some(body);

    let response = api
        .http
        .get(format!("{}{}", api.base_url, routes::LEDGER_VERIFY.path(&[])))
        .bearer_auth(api.operator_token)
        .send()
        .await?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    run.ledger_verify = if status == 200 && body["clean"] == true {
        "200 clean".to_owned()
    } else {
        format!("{status} {}", body["code"].as_str().unwrap_or("?"))
    };
    if run.ledger_verify != "200 clean" {
        run.violation(format!("GET /ops/v1/ledger/verify answered {status} {body}"));
    }
    Ok(())
}

/// The withdrawals to inject on: completed here and paid at the provider, by customer key (so
/// the same completions give the same choice), shuffled by the seed and the provider's place; the
/// bank return on none of `returned_accounts`. Also a withdrawal paid there that nothing is
/// injected on (the spare). The made-up transfer's id is the same for every provider (two
/// providers' lines may share a transfer id; each is its own provider's exception), its key not.
async fn choose(
    db: &Db,
    transfers: &[TransferRecord],
    (seed, index): (u64, usize),
    day: NaiveDate,
    returned_accounts: &HashSet<Uuid>,
) -> anyhow::Result<(Discrepancies, Option<Target>)> {
    let mut rng = StdRng::seed_from_u64(seed.wrapping_add(index as u64) ^ 0x5e77_1e5e_771e);
    let paid: HashSet<&str> =
        transfers.iter().filter(|t| t.status == TransferStatus::Paid).map(|t| t.idempotency_key.as_str()).collect();
    let mut candidates: Vec<verify::WithdrawalOutcome> = verify::withdrawal_outcomes(db)
        .await?
        .into_iter()
        .filter(|w| w.status == "completed" && paid.contains(w.id.to_string().as_str()))
        .collect();
    candidates.sort_by(|a, b| a.idempotency_key.cmp(&b.idempotency_key));
    let mut d = Discrepancies {
        unknown_transfer: Some(UnknownLine {
            transfer_id: format!("tr_chaos_unknown_{seed}"),
            idempotency_key: Uuid::from_u128(rng.gen()).to_string(),
            amount: UNKNOWN_AMOUNT.to_owned(),
            currency: "USD".to_owned(),
            date: day,
        }),
        ..Discrepancies::default()
    };
    let target = |w: &verify::WithdrawalOutcome| Target {
        withdrawal_id: w.id,
        account_id: w.account_id,
        amount_minor: w.amount,
        currency: w.currency.clone(),
    };
    if candidates.len() < MIN_COMPLETED {
        d.skipped = Some(format!(
            "only {} completed withdrawal(s) paid at the provider (fewer than {MIN_COMPLETED}): omit_paid, \
             wrong_amount, spurious_return and the bank return skipped",
            candidates.len()
        ));
        return Ok((d, candidates.first().map(target)));
    }
    candidates.shuffle(&mut rng);
    let wrong = &candidates[1];
    d.omit_paid = Some(target(&candidates[0]));
    d.wrong_amount = Some(target(wrong));
    d.wrong_amount_reported = Some(minor_to_decimal(wrong.amount + 100, &wrong.currency).to_string());
    d.spurious_return = Some(target(&candidates[2]));
    let returned = (3..candidates.len()).find(|&i| !returned_accounts.contains(&candidates[i].account_id));
    d.bank_return = returned.map(|i| target(&candidates[i]));
    let spare = (3..candidates.len()).find(|&i| Some(i) != returned).map(|i| target(&candidates[i]));
    Ok((d, spare))
}

/// Minor units of `currency` as a decimal amount.
fn minor_to_decimal(minor: i64, currency: &str) -> Decimal {
    Decimal::new(minor, Currency::parse(currency).map(|c| c.minor_units()).unwrap_or(2))
}

/// Checks one provider's settlement invariants against the database, after [`exercise`] (or
/// [`exercise_each`]). `at`: every provider's record of what it executed, by name (the one
/// provider: `default`) — the ground truth: a withdrawal executed at another provider than the
/// run's is that provider's to match, never this one's.
pub async fn check(db: &Db, run: &mut SettlementRun, at: &[(&str, &[TransferRecord])]) -> anyhow::Result<()> {
    let provider = run.provider.clone();
    if !at.iter().any(|(p, _)| *p == provider) {
        run.violation(format!("no record of provider {provider:?} to check its reports against"));
    }
    let elsewhere: HashMap<&str, &str> = at
        .iter()
        .filter(|(p, _)| *p != provider)
        .flat_map(|(p, transfers)| transfers.iter().map(move |t| (t.idempotency_key.as_str(), *p)))
        .collect();
    let paid_elsewhere = |id: Uuid| elsewhere.get(id.to_string().as_str()).copied();
    let outcomes = verify::withdrawal_outcomes(db).await?;
    let all_lines = verify::settlement_lines(db).await?;
    let lines: Vec<&verify::LineOutcome> = all_lines.iter().filter(|l| l.provider == provider).collect();
    let mut exceptions = verify::settlement_exceptions(db).await?;
    exceptions.retain(|e| e.provider == provider);
    // Returns of withdrawals another provider executed are that provider's run's.
    let mut credits = verify::return_credits(db).await?;
    credits.retain(|c| paid_elsewhere(c.withdrawal_id).is_none());
    run.reports = verify::settlement_reports(db)
        .await?
        .iter()
        .filter(|r| r.provider == provider)
        .map(|r| format!("{} v{} ({} lines)", r.report_date, r.version, r.line_count))
        .collect();
    run.lines = lines.len() as u64;
    for l in &lines {
        let name = l.result.map_or("undecided", |r| r.as_str());
        *run.line_results.entry(name.to_owned()).or_default() += 1;
    }
    run.matched = lines.iter().filter(|l| l.result == Some(LineResult::Matched)).count() as u64;
    for e in &exceptions {
        *run.exceptions.entry(e.kind.as_str().to_owned()).or_default() += 1;
    }
    run.returns_credited = credits.iter().map(|c| c.payout_returns.max(0) as u64).sum();

    // Every completed withdrawal this provider paid is matched in its reports, unless a
    // discrepancy was injected on it; one another provider paid is matched in none of them.
    let injected: HashSet<Uuid> = run.injected.targets().map(|t| t.withdrawal_id).collect();
    let matched: HashSet<Uuid> =
        lines.iter().filter(|l| l.result == Some(LineResult::Matched)).filter_map(|l| l.withdrawal_id).collect();
    let completed = outcomes.iter().filter(|w| w.status == "completed");
    for w in completed.filter(|w| !injected.contains(&w.id) && paid_elsewhere(w.id).is_none()) {
        if !matched.contains(&w.id) {
            let shown: Vec<String> = all_lines
                .iter()
                .filter(|l| l.withdrawal_id == Some(w.id) || l.idempotency_key == w.id.to_string())
                .map(|l| {
                    format!(
                        "{}'s {} v{} line {} {} {:?}",
                        l.provider, l.report_date, l.version, l.line_no, l.status, l.result
                    )
                })
                .collect();
            run.violation(format!(
                "completed withdrawal {} has no matched settlement line in {provider}'s reports (lines: {shown:?})",
                w.id
            ));
        }
    }
    for l in &lines {
        let Some((id, result)) = l.withdrawal_id.zip(l.result) else { continue };
        if let Some(there) = paid_elsewhere(id).filter(|_| result != LineResult::UnknownTransfer) {
            run.violation(format!(
                "withdrawal {id}, executed at {there}, came out {result} in {provider}'s report of {} (v{} line {})",
                l.report_date, l.version, l.line_no
            ));
        }
    }
    let undecided = lines.iter().filter(|l| l.result.is_none()).count();
    if undecided > 0 {
        run.violation(format!("{undecided} settlement line(s) left undecided after the imports"));
    }

    // Each injected discrepancy is one open exception of its kind; there is no other exception.
    let d = &run.injected;
    let by_withdrawal = |t: &Option<Target>, kind| t.as_ref().map(|t| (kind, Some(t.withdrawal_id), None));
    let expected: Vec<(ExceptionKind, Option<Uuid>, Option<String>)> = [
        by_withdrawal(&d.omit_paid, ExceptionKind::MissingFromReport),
        by_withdrawal(&d.wrong_amount, ExceptionKind::AmountMismatch),
        by_withdrawal(&d.spurious_return, ExceptionKind::Returned),
        d.unknown_transfer.as_ref().map(|u| (ExceptionKind::UnknownTransfer, None, Some(u.transfer_id.clone()))),
        d.foreign_line.as_ref().map(|f| (ExceptionKind::UnknownTransfer, None, Some(f.transfer_id.clone()))),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut explained = vec![false; exceptions.len()];
    let mut found = Vec::new();
    for (kind, withdrawal, transfer) in &expected {
        let hits: Vec<usize> = (0..exceptions.len())
            .filter(|&i| {
                let e = &exceptions[i];
                e.kind == *kind
                    && match (withdrawal, transfer) {
                        (Some(w), _) => e.withdrawal_id == Some(*w),
                        (None, t) => e.transfer_id == *t,
                    }
            })
            .collect();
        let what = withdrawal
            .map_or_else(|| format!("transfer {}", transfer.as_deref().unwrap_or("?")), |w| format!("withdrawal {w}"));
        match hits.as_slice() {
            [] => found.push(format!("the injected {kind} on {what} was not found as an exception of {provider}")),
            [i] if exceptions[*i].status != ExceptionStatus::Open => {
                found.push(format!("the {kind} exception on {what} is {}, not open", exceptions[*i].status))
            }
            [_] => {}
            many => found.push(format!("the injected {kind} on {what} opened {} exceptions", many.len())),
        }
        for i in hits {
            explained[i] = true;
        }
    }
    for (e, _) in exceptions.iter().zip(&explained).filter(|(_, ok)| !**ok) {
        found.push(format!(
            "unexpected {} exception of {provider} ({}, withdrawal {:?}, transfer {:?})",
            e.kind, e.dedupe_key, e.withdrawal_id, e.transfer_id
        ));
    }
    for f in found {
        run.violation(f);
    }

    // The real return is credited exactly once; nothing else is (the spurious one least of all).
    let credit: HashMap<Uuid, &verify::ReturnCredit> = credits.iter().map(|c| (c.withdrawal_id, c)).collect();
    if let Some(t) = run.injected.bank_return.clone() {
        match credit.get(&t.withdrawal_id) {
            None => run.violation(format!("the bank return of withdrawal {} was not credited", t.withdrawal_id)),
            Some(c) => {
                if (c.payout_returns, c.returned_minor, c.return_entries, c.entries_available_minor)
                    != (1, t.amount_minor, 1, t.amount_minor)
                {
                    run.violation(format!(
                        "the bank return of withdrawal {} ({} minor) was credited as {} payout_returns row(s) of {} \
                         and {} `return` ledger entr(ies) adding {} to available",
                        t.withdrawal_id,
                        t.amount_minor,
                        c.payout_returns,
                        c.returned_minor,
                        c.return_entries,
                        c.entries_available_minor
                    ));
                }
            }
        }
        let after = accounts::balances(db, AccountId(t.account_id)).await?;
        let after = after.iter().find(|b| b.currency == t.currency).map(|b| b.available);
        run.return_available_after = after;
        // Settlement (any provider's) may also have failed a withdrawal of that account (releasing
        // its hold).
        let released: i64 = all_lines
            .iter()
            .filter(|l| l.applied.as_deref() == Some("failed"))
            .filter_map(|l| outcomes.iter().find(|w| Some(w.id) == l.withdrawal_id))
            .filter(|w| w.account_id == t.account_id && w.currency == t.currency)
            .map(|w| w.amount)
            .sum();
        if let (Some(before), Some(after)) = (run.return_available_before, after) {
            if after - before != t.amount_minor + released {
                let money = |minor| money(minor, &t.currency);
                run.violation(format!(
                    "account {}'s available went from {} to {} with the bank return of {} (and {} released by \
                     settlement)",
                    t.account_id,
                    money(before),
                    money(after),
                    money(t.amount_minor),
                    money(released)
                ));
            }
        }
    }
    let real = run.injected.bank_return.as_ref().map(|t| t.withdrawal_id);
    let others: Vec<String> = credits
        .iter()
        .filter(|c| Some(c.withdrawal_id) != real)
        .map(|c| {
            let spurious = run.injected.spurious_return.as_ref().is_some_and(|t| t.withdrawal_id == c.withdrawal_id);
            format!(
                "withdrawal {}{} was re-credited ({} payout_returns row(s), {} `return` entr(ies)) but the provider \
                 returned nothing",
                c.withdrawal_id,
                if spurious { " (the spurious return)" } else { "" },
                c.payout_returns,
                c.return_entries
            )
        })
        .collect();
    for o in others {
        run.violation(o);
    }
    Ok(())
}

fn money(minor: i64, currency: &str) -> String {
    match Currency::parse(currency) {
        Ok(c) => format!("{} {currency}", format_minor(minor, c)),
        Err(_) => format!("{minor} (minor units) {currency}"),
    }
}

/// The line number a refusal names (`report refused: line 7: …`).
fn line_named(detail: &str) -> Option<u64> {
    let rest = &detail[detail.find("line ")? + 5..];
    rest[..rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len())].parse().ok()
}

/// The mock's clock (the UTC day of a report is the mock's).
pub async fn mock_now(http: &reqwest::Client, mock_url: &str) -> anyhow::Result<DateTime<Utc>> {
    let clock = get_json(http, &format!("{mock_url}/__admin/clock")).await?;
    let now = clock["now"].as_str().context("the mock's clock has no `now`")?;
    Ok(DateTime::parse_from_rfc3339(now).context("the mock's clock")?.with_timezone(&Utc))
}

async fn get_json(http: &reqwest::Client, url: &str) -> anyhow::Result<Value> {
    let response = http.get(url).send().await.with_context(|| format!("GET {url}"))?;
    if !response.status().is_success() {
        bail!("GET {url} answered {}", response.status());
    }
    Ok(response.json().await?)
}

async fn set_report_faults(api: &Api<'_>, rules: Vec<ReportFault>) -> anyhow::Result<()> {
    let url = format!("{}/__admin/report-faults", api.mock_url);
    let response = api.http.post(url).json(&ReportFaultConfig { rules }).send().await?;
    if !response.status().is_success() {
        bail!("the mock refused the report faults: {}", response.text().await.unwrap_or_default());
    }
    Ok(())
}

/// `POST /ops/v1/settlement/imports {date}`, then its progress (`GET …/imports/{id}`) polled until
/// the workers' job finishes it: `(200, the summary)` once done, the refusal's status and body
/// when refused at once, `(422, the import)` when the job refused it.
async fn import(api: &Api<'_>, date: NaiveDate) -> anyhow::Result<(u16, Value)> {
    let response = api
        .http
        .post(format!("{}{}", api.base_url, routes::SETTLEMENT_IMPORTS.path(&[])))
        .bearer_auth(api.operator_token)
        .timeout(Duration::from_secs(60))
        .json(&match api.provider {
            Some(provider) => json!({ "date": date, "provider": provider }),
            None => json!({ "date": date }),
        })
        .send()
        .await
        .with_context(|| format!("import {}'s report of {date}", api.provider()))?;
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status != 202 {
        return Ok((status, body));
    }
    let id = body["id"].as_str().unwrap_or_default().to_owned();
    let deadline = std::time::Instant::now() + Duration::from_secs(300);
    loop {
        let view: Value = api
            .http
            .get(format!("{}{}", api.base_url, routes::SETTLEMENT_IMPORT.path(&[&id])))
            .bearer_auth(api.operator_token)
            .send()
            .await
            .with_context(|| format!("read the import of {date}"))?
            .json()
            .await?;
        match view["state"].as_str() {
            Some("done") => return Ok((200, view["summary"].clone())),
            Some("failed") => return Ok((422, view)),
            _ if std::time::Instant::now() > deadline => bail!("the import of {date} did not finish in 300 s: {view}"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// How many report versions are stored (of the provider, when the API names one), as
/// `GET /ops/v1/settlement/reports` lists them.
async fn report_versions(api: &Api<'_>) -> anyhow::Result<usize> {
    let only = api.provider.map_or_else(String::new, |p| format!("&provider={p}"));
    let response = api
        .http
        .get(format!("{}{}?limit=200{only}", api.base_url, routes::SETTLEMENT_REPORTS.path(&[])))
        .bearer_auth(api.operator_token)
        .send()
        .await?;
    if !response.status().is_success() {
        bail!("GET /ops/v1/settlement/reports answered {}", response.status());
    }
    let body: Value = response.json().await?;
    Ok(body["data"].as_array().map_or(0, Vec::len))
}

/// The summary's settlement lines, from the report's `settlement` value: one provider's run, or
/// `{"providers": {name: run}}`.
pub fn describe(s: &Value) -> Vec<String> {
    if let Some(why) = s["skipped"].as_str() {
        return vec![format!("settlement: skipped ({why})")];
    }
    match s["providers"].as_object() {
        Some(each) => each.iter().flat_map(|(name, s)| describe_one(s, &format!("settlement {name}"))).collect(),
        None => describe_one(s, "settlement"),
    }
}

/// One provider's lines, each headed `{head}`.
fn describe_one(s: &Value, head: &str) -> Vec<String> {
    let n = |v: &Value| v.as_u64().unwrap_or(0);
    let list = |v: &Value| {
        let items: Vec<String> =
            v.as_array().into_iter().flatten().filter_map(|r| r.as_str().map(str::to_owned)).collect();
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join(", ")
        }
    };
    let counts = |v: &Value| {
        let items: Vec<String> =
            v.as_object().into_iter().flatten().map(|(k, c)| format!("{k} {}", c.as_u64().unwrap_or(0))).collect();
        if items.is_empty() {
            "none".to_owned()
        } else {
            items.join(", ")
        }
    };
    let i = &s["injected"];
    // Ids end in their random part (UUIDv7 begin with the time, alike within a run).
    let on = |k: &str| {
        i[k]["withdrawal_id"].as_str().map_or("-".to_owned(), |id| format!("…{}", &id[id.len().saturating_sub(8)..]))
    };
    let injected = match i["skipped"].as_str() {
        Some(why) => {
            format!("unknown_transfer {}; {why}", i["unknown_transfer"]["transfer_id"].as_str().unwrap_or("-"))
        }
        None => format!(
            "omit_paid {}, wrong_amount {} (reported {}), spurious_return {}, bank return {}, unknown_transfer {}",
            on("omit_paid"),
            on("wrong_amount"),
            i["wrong_amount_reported"].as_str().unwrap_or("-"),
            on("spurious_return"),
            on("bank_return"),
            i["unknown_transfer"]["transfer_id"].as_str().unwrap_or("-")
        ),
    };
    let refused = match (s["refused_status"].as_u64(), s["refused_line"].as_u64()) {
        (Some(status), Some(line)) => format!(
            "{status} {} at line {line} ({} report(s) stored after)",
            s["refused_code"].as_str().unwrap_or("?"),
            n(&s["reports_after_refusal"])
        ),
        (Some(status), None) => format!("{status} {} (no line named)", s["refused_code"].as_str().unwrap_or("?")),
        _ => "not tried".to_owned(),
    };
    let foreign = match i["foreign_line"].as_object() {
        Some(f) => format!(
            "; a paid line for {}'s withdrawal …{} ({})",
            f["paid_at"].as_str().unwrap_or("?"),
            f["withdrawal_id"].as_str().map_or("-", |id| &id[id.len().saturating_sub(8)..]),
            f["transfer_id"].as_str().unwrap_or("-")
        ),
        None => String::new(),
    };
    let reimport = &s["reimport"];
    vec![
        format!("{head}: injected {injected}{foreign}"),
        format!(
            "{head}: malformed report refused {refused}; imported {}; same day again: already_imported {}",
            list(&s["reports"]),
            reimport["already_imported"]
        ),
        format!(
            "{head}: {} lines ({}), {} matched; exceptions {}; returns credited {}; ledger verify {}",
            n(&s["lines"]),
            counts(&s["line_results"]),
            n(&s["matched"]),
            counts(&s["exceptions"]),
            n(&s["returns_credited"]),
            s["ledger_verify"].as_str().unwrap_or("?")
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refusal_names_its_line() {
        assert_eq!(line_named("report refused: line 7: amount `12,34` is not a decimal"), Some(7));
        assert_eq!(line_named("report refused: line 12"), Some(12));
        assert_eq!(line_named("the header is wrong"), None);
    }
}
