//! The chaos run's customers: many accounts creating withdrawals over HTTP, resending the same
//! idempotency key after errors, sometimes twice at once, sometimes cancelling.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use tokio::sync::{Mutex, Semaphore};

/// What the customers did and saw.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LoadStats {
    pub requested: u64,
    pub accepted: u64,
    pub rejected: u64,
    pub client_retries: u64,
    pub sequential_duplicates: u64,
    pub concurrent_duplicates: u64,
    pub replays_seen: u64,
    pub cancels_requested: u64,
    pub cancels_accepted: u64,
    pub invalid_destinations: u64,
    /// Idempotency broken from the outside: one key answered with two ids.
    pub key_mismatches: Vec<String>,
    /// Answers no customer should ever get (5xx after all retries, unexpected statuses).
    pub unexpected: Vec<String>,
}

/// One accepted withdrawal as the customer knows it.
#[derive(Debug, Clone)]
pub struct Accepted {
    pub id: String,
}

pub struct Customer {
    pub api_key: String,
}

pub struct Load {
    pub base_url: String,
    pub customers: Vec<Customer>,
    pub count: u64,
    pub concurrency: usize,
    pub seed: u64,
    /// Creations are spread evenly over this long, so faults meet work in flight.
    pub spread: Duration,
}

/// Every account number used, so the checks can prove none was stored or logged in full.
pub fn account_number(seed: u64, i: u64) -> (String, bool) {
    let mut rng = StdRng::seed_from_u64(seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    if i % 37 == 5 {
        // The known slice the provider rejects as invalid accounts.
        return (format!("7{:04}0000{}", i % 10_000, rng.gen_range(10..100)), true);
    }
    loop {
        let n: u64 = rng.gen_range(1_000_000_000..10_000_000_000);
        let s = n.to_string();
        if !s.contains("0000") {
            return (s, false);
        }
    }
}

impl Load {
    pub async fn run(self) -> (HashMap<String, Accepted>, LoadStats) {
        let http = reqwest::Client::builder().timeout(Duration::from_secs(15)).build().expect("http client");
        let accepted = Arc::new(Mutex::new(HashMap::new()));
        let stats = Arc::new(Mutex::new(LoadStats::default()));
        let permits = Arc::new(Semaphore::new(self.concurrency));
        let shared = Arc::new(self);
        let mut tasks = tokio::task::JoinSet::new();
        let start = tokio::time::Instant::now();
        for i in 0..shared.count {
            tokio::time::sleep_until(start + shared.spread.mul_f64(i as f64 / shared.count.max(1) as f64)).await;
            let permit = permits.clone().acquire_owned().await.expect("semaphore");
            let (shared, http, accepted, stats) = (shared.clone(), http.clone(), accepted.clone(), stats.clone());
            tasks.spawn(async move {
                shared.one(i, &http, &accepted, &stats).await;
                drop(permit);
            });
        }
        while tasks.join_next().await.is_some() {}
        let accepted = Arc::try_unwrap(accepted).expect("all tasks done").into_inner();
        let stats = Arc::try_unwrap(stats).expect("all tasks done").into_inner();
        (accepted, stats)
    }

    async fn one(
        &self,
        i: u64,
        http: &reqwest::Client,
        accepted: &Mutex<HashMap<String, Accepted>>,
        stats: &Mutex<LoadStats>,
    ) {
        let mut rng = StdRng::seed_from_u64(self.seed.wrapping_add(i).wrapping_mul(31));
        let customer = &self.customers[(i % self.customers.len() as u64) as usize];
        let key = format!("chaos-{}-{i}", self.seed);
        let (number, invalid) = account_number(self.seed, i);
        let cents: u64 = rng.gen_range(100..5_000);
        let body = json!({
            "amount": format!("{}.{:02}", cents / 100, cents % 100),
            "currency": "USD",
            "destination": {"type": "bank_account", "account_number": number, "bank_code": "021000021"},
            "reference": format!("chaos {i}"),
        });
        let pattern: f64 = rng.gen();
        stats.lock().await.requested += 1;
        if invalid {
            stats.lock().await.invalid_destinations += 1;
        }

        let ids: Vec<Option<String>> = if pattern < 0.08 {
            // Two at once with one key: exactly one withdrawal may come of it.
            stats.lock().await.concurrent_duplicates += 1;
            let (a, b) = tokio::join!(
                self.create(http, customer, &key, &body, stats),
                self.create(http, customer, &key, &body, stats)
            );
            vec![a, b]
        } else {
            vec![self.create(http, customer, &key, &body, stats).await]
        };
        let mut ids: Vec<String> = ids.into_iter().flatten().collect();
        if (0.08..0.18).contains(&pattern) && !ids.is_empty() {
            stats.lock().await.sequential_duplicates += 1;
            if let Some(again) = self.create(http, customer, &key, &body, stats).await {
                ids.push(again);
            }
        }
        ids.dedup();
        let Some(id) = ids.first().cloned() else {
            stats.lock().await.rejected += 1;
            return;
        };
        if ids.iter().any(|other| *other != id) {
            stats.lock().await.key_mismatches.push(format!("{key}: {ids:?}"));
        }
        stats.lock().await.accepted += 1;
        accepted.lock().await.insert(key.clone(), Accepted { id: id.clone() });

        if (0.18..0.23).contains(&pattern) {
            stats.lock().await.cancels_requested += 1;
            let url = format!("{}/v1/withdrawals/{id}/cancel", self.base_url);
            for _ in 0..20 {
                match http.post(&url).bearer_auth(&customer.api_key).send().await {
                    Ok(r) if r.status().is_success() => {
                        stats.lock().await.cancels_accepted += 1;
                        break;
                    }
                    // Too late: a worker took it. That is an answer, not an error.
                    Ok(r) if r.status().is_client_error() => break,
                    _ => tokio::time::sleep(Duration::from_millis(200)).await,
                }
            }
        }
    }

    /// POSTs until the service gives an answer: resends the same key after transport errors,
    /// 5xx and "in progress", as a careful client would.
    async fn create(
        &self,
        http: &reqwest::Client,
        customer: &Customer,
        key: &str,
        body: &Value,
        stats: &Mutex<LoadStats>,
    ) -> Option<String> {
        let url = format!("{}/v1/withdrawals", self.base_url);
        let mut delay = Duration::from_millis(100);
        for attempt in 0..60 {
            if attempt > 0 {
                stats.lock().await.client_retries += 1;
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            let response =
                http.post(&url).bearer_auth(&customer.api_key).header("Idempotency-Key", key).json(body).send().await;
            let Ok(response) = response else { continue };
            let status = response.status().as_u16();
            let replayed = response.headers().contains_key("idempotent-replayed");
            let body: Value = response.json().await.unwrap_or(Value::Null);
            match status {
                201 => {
                    if replayed {
                        stats.lock().await.replays_seen += 1;
                    }
                    return body["id"].as_str().map(str::to_owned);
                }
                409 | 500..=599 => continue,
                _ => {
                    stats.lock().await.unexpected.push(format!("{key}: {status} {body}"));
                    return None;
                }
            }
        }
        stats.lock().await.unexpected.push(format!("{key}: no answer after 60 tries"));
        None
    }
}
