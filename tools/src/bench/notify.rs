//! (2n) `bench --notify-endpoints` (SPEC §17; the notifications issue's "Done means"): the
//! end-to-end phase twice, one after the other, each on a fresh database of the same backend with
//! the same sizes and the same service settings — first with no endpoint registered (the outbox
//! is written and the dispatcher runs, finding no one to tell), then with one endpoint per account
//! (`["*"]`) at an in-process [`Receiver`] that verifies each signature and answers 200 at once.
//! It reports both rates, their ratio (the target: ≥ 0.8), where the CPU went in each, and — after
//! the measured window, outside its timing — how long the last deliveries took to land and each
//! delivery's lag from its event (the service's own timestamps).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::Rng;
use rust_decimal::Decimal;
use serde::Serialize;

use super::load::{self, EndToEndReport};
use super::{cpu, progress, BenchArgs, PROVIDER_KEY};
use crate::chaos::procs::{free_port, Proc};
use crate::chaos::receiver::{register_endpoint, Receiver};
use crate::store::notify as store;
use withdrawals::domain::{Amount, Currency};
use withdrawals::storage::PoolSettings;

/// How long the deliveries may take to land after the measured window.
const DRAIN_DEADLINE: Duration = Duration::from_secs(600);

/// Without and with one endpoint per account.
#[derive(Debug, Clone, Serialize)]
pub struct NotifyComparison {
    pub without: EndToEndReport,
    pub with: EndToEndReport,
    /// `with ÷ without` end-to-end withdrawals per second (target ≥ 0.8).
    pub ratio: f64,
    /// The same over the steady middle (10–90 % of completions).
    pub steady_state_ratio: Option<f64>,
    pub endpoints: usize,
    pub deliveries: Deliveries,
}

/// What the endpoints got, waited for after the measured window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Deliveries {
    /// Events of the run (all its accounts have an endpoint).
    pub events: u64,
    /// Distinct events the receiver answered 200, and the requests it got.
    pub received_events: u64,
    pub receiver_requests: u64,
    /// Left once the wait ended (all zero when every event was delivered).
    pub left: store::Undelivered,
    pub all_delivered: bool,
    /// From the end of the measured window (every withdrawal settled) until nothing was left.
    pub drain_seconds: f64,
    /// Share of the deliveries that had landed by the end of the measured window.
    pub delivered_in_window: f64,
    /// Event written → delivery recorded, by the service's clocks.
    pub lag_p50_ms: f64,
    pub lag_p99_ms: f64,
    pub lag_max_ms: f64,
}

/// Runs both, `urls[0]` without endpoints and `urls[1]` with.
pub async fn compare(
    args: &BenchArgs,
    dir: &Path,
    urls: [&str; 2],
    name: &str,
    started: Instant,
) -> anyhow::Result<NotifyComparison> {
    let key: [u8; 32] = rand::thread_rng().gen();
    let key: String = key.iter().map(|b| format!("{b:02x}")).collect();
    progress(started, &format!("{name}: (2n) {} withdrawals, no endpoints", args.withdrawals));
    let (without, _) = one(args, dir, urls[0], &key, false, &format!("{name}-without"), started).await?;
    progress(started, &format!("{name}: without notifications {:.1} withdrawals/s", without.withdrawals_per_second));
    progress(started, &format!("{name}: (2n) {} withdrawals, one endpoint per account", args.withdrawals));
    let (with, deliveries) = one(args, dir, urls[1], &key, true, &format!("{name}-with"), started).await?;
    let deliveries = deliveries.context("the run with endpoints counted no deliveries")?;
    progress(
        started,
        &format!(
            "{name}: with notifications {:.1} withdrawals/s ({:.2}×); {} of {} events delivered, the last {:.1} s after \
             the window",
            with.withdrawals_per_second,
            with.withdrawals_per_second / without.withdrawals_per_second.max(f64::MIN_POSITIVE),
            deliveries.received_events,
            deliveries.events,
            deliveries.drain_seconds
        ),
    );
    Ok(NotifyComparison {
        ratio: with.withdrawals_per_second / without.withdrawals_per_second.max(f64::MIN_POSITIVE),
        steady_state_ratio: with.steady_state_per_second.zip(without.steady_state_per_second).map(|(w, o)| w / o),
        endpoints: with.accounts,
        without,
        with,
        deliveries,
    })
}

/// One end-to-end run on the database at `url`, with or without endpoints.
async fn one(
    args: &BenchArgs,
    dir: &Path,
    url: &str,
    key: &str,
    endpoints: bool,
    name: &str,
    started: Instant,
) -> anyhow::Result<(EndToEndReport, Option<Deliveries>)> {
    let db = withdrawals::startup::open(url, PoolSettings::default()).await?;
    let mock = provider_mocks::spawn(provider_mocks::MockConfig {
        api_key: Some(PROVIDER_KEY.to_owned()),
        ..provider_mocks::MockConfig::default()
    })
    .await?;
    let accounts = (args.connections * 4).max(64);
    let usd = Currency::parse("USD")?;
    let per_account = (args.withdrawals as f64 / accounts as f64 * 50.0 * 2.0).ceil() as i64 + 1_000;
    let mut keys = Vec::with_capacity(accounts);
    for i in 0..accounts {
        let funding = Amount::new(Decimal::from(per_account), usd)?;
        let created =
            withdrawals::provisioning::create_account(&db, &format!("bench customer {i}"), Some(funding)).await?;
        keys.push(created.api_key);
    }
    let port = free_port()?;
    let (base_url, bind) = (format!("http://127.0.0.1:{port}"), format!("127.0.0.1:{port}"));
    let mock_url = mock.url();
    let env: Vec<(String, String)> = [
        ("DATABASE_URL", url),
        ("PROVIDER_URL", mock_url.as_str()),
        ("PROVIDER_API_KEY", PROVIDER_KEY),
        ("LOG_FORMAT", "json"),
        ("RUST_LOG", "warn"),
        // Both runs alike: the same key, loopback endpoints allowed; only the endpoints differ.
        ("NOTIFY_ALLOW_INSECURE", "true"),
        ("NOTIFY_SECRET_KEY", key),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    let mut serve = Proc::new(&format!("serve-{name}"), &["serve", "--role", "all", "--bind", &bind], &env, dir);
    serve.start()?;
    let receiver = match endpoints {
        true => Some(Receiver::start(false).await?),
        false => None,
    };
    let result = async {
        load::wait_ready(&format!("{base_url}/readyz"), Duration::from_secs(60), &mut serve).await?;
        if let Some(receiver) = &receiver {
            let http = reqwest::Client::builder().timeout(Duration::from_secs(30)).build()?;
            for (i, api_key) in keys.iter().enumerate() {
                let url = format!("http://{}{}", receiver.addr(), Receiver::path(i));
                receiver.set_secret(i, register_endpoint(&http, &base_url, api_key, &url).await?);
            }
        }
        let pid = serve.pid().context("the serve process has no pid")?;
        let meter = cpu::Meter::start(&db, Some(pid)).await;
        let mut e2e =
            load::end_to_end(&db, &base_url, &keys, load::Load::Count(args.withdrawals), args.connections, &mut serve)
                .await?;
        let window_end = Instant::now();
        let (cpu_used, database_work) = meter.finish(&db, e2e.accepted.max(1)).await;
        e2e.cpu = Some(cpu_used);
        e2e.database_work = database_work;
        let deliveries = match &receiver {
            None => None,
            Some(receiver) => {
                let in_window = store::delivery_times(&db).await?.len();
                progress(started, &format!("{name}: measured; waiting for the deliveries"));
                Some(drain(&db, receiver, window_end, in_window, &mut serve).await?)
            }
        };
        serve.check_alive()?;
        anyhow::Ok((e2e, deliveries))
    }
    .await;
    serve.stop(Duration::from_secs(15)).await;
    if let Some(receiver) = receiver {
        receiver.stop().await;
    }
    mock.shutdown().await;
    db.close().await;
    result
}

/// Waits until every event is fanned out and no notification is pending, then counts.
async fn drain(
    db: &withdrawals::storage::Db,
    receiver: &Receiver,
    window_end: Instant,
    delivered_in_window: usize,
    serve: &mut Proc,
) -> anyhow::Result<Deliveries> {
    let left = loop {
        let left = store::undelivered(db).await?;
        if left.is_empty() || window_end.elapsed() > DRAIN_DEADLINE {
            break left;
        }
        serve.check_alive()?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let drain_seconds = window_end.elapsed().as_secs_f64();
    let mut lags: Vec<f64> = store::delivery_times(db)
        .await?
        .into_iter()
        .map(|(event, delivered)| (delivered.0 - event.0).num_microseconds().unwrap_or(0) as f64 / 1e3)
        .collect();
    lags.sort_by(|a, b| a.total_cmp(b));
    let receipts = receiver.receipts();
    let mut received: Vec<&str> =
        receipts.iter().filter(|r| r.signature_valid && r.answer.delivered()).map(|r| r.event_id.as_str()).collect();
    received.sort_unstable();
    received.dedup();
    let events = store::events(db).await?.len() as u64;
    if receipts.iter().any(|r| !r.signature_valid) {
        bail!("the receiver got a request whose signature does not verify");
    }
    Ok(Deliveries {
        events,
        received_events: received.len() as u64,
        receiver_requests: receipts.len() as u64,
        left,
        all_delivered: left.is_empty() && received.len() as u64 == events,
        drain_seconds,
        delivered_in_window: delivered_in_window as f64 / lags.len().max(1) as f64,
        lag_p50_ms: load::percentile(&lags, 0.5),
        lag_p99_ms: load::percentile(&lags, 0.99),
        lag_max_ms: lags.last().copied().unwrap_or(0.0),
    })
}
