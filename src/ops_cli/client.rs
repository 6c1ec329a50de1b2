//! The CLI's client of `/ops/v1`: over HTTP, or in process (`--direct`); answers read into
//! the DTOs of `ops::types` and kept as JSON for `--json`; refusals as one line.

use anyhow::{bail, Context};
use axum::http::{header, Method};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tower::ServiceExt;

use super::{Connection, Remote};
use crate::http::AppState;

pub(super) enum Transport {
    Http {
        http: reqwest::Client,
        base: String,
    },
    /// `/ops/v1` served in process, on a database this process opened.
    Local(AppState),
}

pub(super) struct Client {
    transport: Transport,
    token: String,
    /// Sent as `Idempotency-Key` on every request (`accounts fund`).
    pub(super) idempotency_key: Option<String>,
}

/// An answer of the API: read into its DTO, and kept as the API wrote it for `--json`.
pub(super) struct Answer<T> {
    pub(super) typed: T,
    pub(super) json: Value,
}

impl<T> Answer<T> {
    /// With `--json`, prints the API's JSON and gives nothing to print as a table.
    pub(super) fn unless_json(self, json: bool) -> Option<T> {
        if json {
            println!("{}", self.json);
            None
        } else {
            Some(self.typed)
        }
    }
}

/// The parts of a problem+json refusal the CLI reports.
#[derive(Deserialize)]
struct ProblemBody {
    code: Option<String>,
    detail: Option<String>,
}

/// Largest in-process response read (a list of keys or operators is far smaller).
const MAX_LOCAL_RESPONSE_BYTES: usize = 8 * 1024 * 1024;

impl Client {
    pub(super) fn new(conn: &Connection) -> anyhow::Result<Self> {
        let token = conn.token.clone().context("WITHDRAWALS_TOKEN (or --token) is required")?;
        let transport =
            Transport::Http { http: reqwest::Client::new(), base: conn.url.trim_end_matches('/').to_owned() };
        Ok(Self { transport, token, idempotency_key: None })
    }

    /// Over HTTP, or with `--direct` in process on `database_url` (migrated first, like every
    /// command that opens the database).
    pub(super) async fn for_remote(remote: &Remote, database_url: &str) -> anyhow::Result<Self> {
        let mut client = Self::new(&remote.conn)?;
        if remote.direct {
            let db = crate::startup::open(database_url, crate::storage::PoolSettings::default()).await?;
            client.transport = Transport::Local(AppState::new(db, crate::config::AppConfig::default()));
        }
        Ok(client)
    }

    pub(super) fn describe(&self) -> String {
        match &self.transport {
            Transport::Http { base, .. } => base.clone(),
            Transport::Local(_) => "the database (--direct)".to_owned(),
        }
    }

    /// `uri` is the path and query; `body` JSON. `Ok` holds a 2xx answer's JSON.
    pub(super) async fn call(&self, method: Method, uri: &str, body: Option<Vec<u8>>) -> anyhow::Result<Value> {
        let (status, bytes) = match &self.transport {
            Transport::Http { http, base } => {
                let mut request = http.request(method, format!("{base}{uri}")).bearer_auth(&self.token);
                if let Some(key) = &self.idempotency_key {
                    request = request.header("idempotency-key", key);
                }
                if let Some(body) = body {
                    request = request.header(header::CONTENT_TYPE, "application/json").body(body);
                }
                let response = request.send().await.with_context(|| format!("cannot reach {}", self.describe()))?;
                let status = response.status();
                (status, response.bytes().await.unwrap_or_default())
            }
            Transport::Local(state) => {
                let mut request = axum::http::Request::builder()
                    .method(method)
                    .uri(uri)
                    .header(header::AUTHORIZATION, format!("Bearer {}", self.token))
                    .header(header::CONTENT_TYPE, "application/json");
                if let Some(key) = &self.idempotency_key {
                    request = request.header("idempotency-key", key);
                }
                let request = request.body(body.map(axum::body::Body::from).unwrap_or_else(axum::body::Body::empty))?;
                let response = crate::http::ops::router().with_state(state.clone()).oneshot(request).await?;
                let status = response.status();
                (status, axum::body::to_bytes(response.into_body(), MAX_LOCAL_RESPONSE_BYTES).await?)
            }
        };
        if !status.is_success() {
            let problem = serde_json::from_slice::<ProblemBody>(&bytes).ok();
            let code = problem.as_ref().and_then(|p| p.code.as_deref()).unwrap_or("error");
            let detail = problem.as_ref().and_then(|p| p.detail.as_deref()).unwrap_or("");
            bail!("{} {code}: {detail}", status.as_u16());
        }
        Ok(serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    pub(super) async fn answer<T: DeserializeOwned>(
        &self,
        method: Method,
        uri: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Answer<T>> {
        let json = self.call(method, uri, body).await?;
        let typed = T::deserialize(&json).context("the API's answer is not what this CLI expects (a newer server?)")?;
        Ok(Answer { typed, json })
    }

    /// `GET path?query`; `query` is a list query of `ops::types` (or `()` for none).
    pub(super) async fn get<T: DeserializeOwned>(
        &self,
        path: &str,
        query: &impl Serialize,
    ) -> anyhow::Result<Answer<T>> {
        let query = serde_urlencoded::to_string(query)?;
        let uri = if query.is_empty() { path.to_owned() } else { format!("{path}?{query}") };
        self.answer(Method::GET, &uri, None).await
    }

    pub(super) async fn post<B: Serialize, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> anyhow::Result<Answer<T>> {
        self.answer(Method::POST, path, Some(serde_json::to_vec(body)?)).await
    }
}
