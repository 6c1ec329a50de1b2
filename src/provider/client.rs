//! The reqwest implementation of [`Provider`]: bearer auth from a `secrecy` secret, connect and
//! overall timeouts, the correlation id forwarded as a header.

use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};

pub use crate::config::ProviderConfig;

use super::classify::{classify_error, classify_get, classify_lookup, classify_response};
use super::{BoxFuture, LookupOutcome, Provider, ProviderError, ReportFetch, SubmitOutcome, TransferRequest};

pub struct HttpProvider {
    base_url: String,
    api_key: SecretString,
    http: reqwest::Client,
}

impl HttpProvider {
    pub fn new(config: ProviderConfig) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .timeout(config.request_timeout)
            .pool_idle_timeout(Duration::from_secs(30))
            // A redirect would turn the POST into a GET; the provider contract has none.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self { base_url: config.base_url.trim_end_matches('/').to_owned(), api_key: config.api_key, http })
    }

    fn bearer(&self) -> String {
        format!("Bearer {}", self.api_key.expose_secret())
    }
}

impl Provider for HttpProvider {
    fn submit<'a>(
        &'a self,
        idempotency_key: &'a str,
        correlation_id: &'a str,
        request: &'a TransferRequest,
    ) -> BoxFuture<'a, SubmitOutcome> {
        Box::pin(async move {
            let sent = self
                .http
                .post(format!("{}/v1/transfers", self.base_url))
                .header("Authorization", self.bearer())
                .header("Idempotency-Key", idempotency_key)
                .header("X-Correlation-Id", correlation_id)
                .json(request)
                .send()
                .await;
            let response = match sent {
                Ok(response) => response,
                Err(err) => return classify_error(&err),
            };
            let status = response.status();
            let headers = response.headers().clone();
            match response.bytes().await {
                Ok(body) => classify_response(status, &headers, &body),
                // The status line arrived, so the request was received: the body broke off.
                Err(err) => match classify_error(&err) {
                    SubmitOutcome::Retryable(e) => SubmitOutcome::Unknown(e),
                    other => other,
                },
            }
        })
    }

    fn lookup<'a>(&'a self, idempotency_key: &'a str, correlation_id: &'a str) -> BoxFuture<'a, LookupOutcome> {
        let request =
            self.http.get(format!("{}/v1/transfers", self.base_url)).query(&[("idempotency_key", idempotency_key)]);
        Box::pin(self.read(request, correlation_id, classify_lookup))
    }

    fn get<'a>(&'a self, transfer_id: &'a str, correlation_id: &'a str) -> BoxFuture<'a, LookupOutcome> {
        // The id is the provider's own; it goes into the path as one escaped segment.
        let mut url = match reqwest::Url::parse(&format!("{}/v1/transfers/", self.base_url)) {
            Ok(url) => url,
            Err(err) => {
                return Box::pin(std::future::ready(LookupOutcome::Unavailable(ProviderError {
                    code: "invalid_provider_url".into(),
                    http_status: None,
                    message: err.to_string(),
                    retry_after: None,
                })))
            }
        };
        url.path_segments_mut()
            .map(|mut p| {
                p.pop_if_empty().push(transfer_id);
            })
            .ok();
        Box::pin(self.read(self.http.get(url), correlation_id, classify_get))
    }

    fn settlement_report<'a>(
        &'a self,
        date: chrono::NaiveDate,
        correlation_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, ReportFetch>> {
        Box::pin(async move {
            let unavailable = |code: &str, status: Option<u16>, message: String| {
                ReportFetch::Unavailable(ProviderError {
                    code: code.to_owned(),
                    http_status: status,
                    message,
                    retry_after: None,
                })
            };
            let response = self
                .http
                .get(format!("{}/v1/reports/settlements", self.base_url))
                .query(&[("date", date.format("%Y-%m-%d").to_string())])
                .header("Authorization", self.bearer())
                .header("X-Correlation-Id", correlation_id)
                .send()
                .await
                .map_err(|e| {
                    let code = if e.is_timeout() { "report_timeout" } else { "report_unreachable" };
                    unavailable(code, None, "the provider could not be asked".into())
                })?;
            let status = response.status();
            if status == reqwest::StatusCode::NOT_FOUND {
                return Err(ReportFetch::NotPublished);
            }
            if !status.is_success() {
                return Err(unavailable(
                    &format!("http_{}", status.as_u16()),
                    Some(status.as_u16()),
                    "report fetch refused".into(),
                ));
            }
            let body = response
                .bytes()
                .await
                .map_err(|_| unavailable("report_body_lost", Some(status.as_u16()), "the report broke off".into()))?;
            Ok(body.to_vec())
        })
    }
}

impl HttpProvider {
    /// Sends a read and classifies its answer; a read never changes anything at the provider,
    /// so every transport failure is simply "could not be asked".
    async fn read(
        &self,
        request: reqwest::RequestBuilder,
        correlation_id: &str,
        classify: fn(reqwest::StatusCode, &[u8]) -> LookupOutcome,
    ) -> LookupOutcome {
        let sent =
            request.header("Authorization", self.bearer()).header("X-Correlation-Id", correlation_id).send().await;
        let response = match sent {
            Ok(response) => response,
            Err(err) => {
                return LookupOutcome::Unavailable(ProviderError {
                    code: if err.is_timeout() { "lookup_timeout".into() } else { "lookup_unreachable".into() },
                    http_status: None,
                    message: "the provider could not be asked".into(),
                    retry_after: None,
                })
            }
        };
        let status = response.status();
        match response.bytes().await {
            Ok(body) => classify(status, &body),
            Err(_) => LookupOutcome::Unavailable(ProviderError {
                code: "lookup_body_lost".into(),
                http_status: Some(status.as_u16()),
                message: "the lookup response broke off".into(),
                retry_after: None,
            }),
        }
    }
}
