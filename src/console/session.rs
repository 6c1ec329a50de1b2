//! Console sign-in: an operator token is exchanged for a session cookie (`HttpOnly`,
//! `SameSite=Strict`, `Secure` over TLS) that expires and ends at sign-out. Each session derives
//! its CSRF token from its own secret, so every form carries a value an attacker's page cannot know.
//!
//! [`CsrfForm`] is how every console form post reads its session and fields: it checks the
//! form's token before the handler runs, so a new form cannot forget to, and refuses a field
//! holding text the text rule refuses (NUL, other control characters: 422 `invalid_body`).

use axum::extract::{FromRequest, FromRequestParts, Query, RawForm, Request, State};
use axum::http::request::Parts;
use axum::http::{Extensions, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use axum_extra::extract::cookie::{Cookie, CookieJar, SameSite};
use chrono::Utc;
use maud::html;
use rand::RngCore;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

pub use super::signed_in::Session;
use super::views::{self, page_without_nav, Banner};
use crate::credentials;
use crate::domain::input_text;
use crate::domain::OperatorId;
use crate::http::{public_prefix, AppState};
use crate::metrics::AuthSurface;
use crate::ops::{check_token, Audited, Operator};
use crate::storage::{sessions, DbTime};

pub const SESSION_COOKIE: &str = "wd_console";
const SIGN_IN_COOKIE: &str = "wd_console_sign_in";
const SESSION_PREFIX: &str = "wds";

/// The refusal of a form post whose CSRF token is missing or not this session's (compared in
/// constant time); `None` when the token is right.
fn csrf_refusal(session: &Session, presented: Option<&str>) -> Option<Response> {
    if presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(session.csrf().as_bytes()))) {
        return None;
    }
    tracing::warn!(operator = %session.operator.id, "console form refused: missing or wrong CSRF token");
    Some(views::refused(
        StatusCode::FORBIDDEN,
        "Form refused",
        "This form did not carry this session's CSRF token, so nothing was changed. Reload the page and try again.",
    ))
}

/// A console form post: the signed-in session and the form's fields `T`, read only after the
/// form's `csrf` field matched the session's token. A post without a live session goes to
/// sign-in; one without the right token is refused (403) before its handler runs. `T` names the
/// form's own fields; the `csrf` field is this extractor's.
pub struct CsrfForm<T>(pub Session, pub T);

/// Only the token, whatever else the form carries.
#[derive(Deserialize)]
struct CsrfField {
    csrf: Option<String>,
}

impl<T: DeserializeOwned + Send> FromRequest<AppState> for CsrfForm<T> {
    type Rejection = Response;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (mut parts, body) = request.into_parts();
        let session = Session::from_request_parts(&mut parts, state).await?;
        let RawForm(bytes) = RawForm::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(IntoResponse::into_response)?;
        let presented = serde_urlencoded::from_bytes::<CsrfField>(&bytes).ok().and_then(|f| f.csrf);
        if let Some(refused) = csrf_refusal(&session, presented.as_deref()) {
            return Err(refused);
        }
        // The ops API's text rule, on every field: refused here, before any field reaches the
        // operator core (nothing is changed, so there is nothing to audit but the attempt).
        if let Err(invalid) = input_text::check_form(&bytes) {
            tracing::warn!(operator = %session.operator.id, field = %invalid.field, "console form refused: invalid text");
            let text = format!("Nothing was changed: {invalid} (invalid_body)");
            return Err(views::refused(StatusCode::UNPROCESSABLE_ENTITY, "Form refused", &text));
        }
        let fields = serde_urlencoded::from_bytes::<T>(&bytes).map_err(|err| {
            (StatusCode::UNPROCESSABLE_ENTITY, format!("Failed to deserialize form body: {err}")).into_response()
        })?;
        Ok(CsrfForm(session, fields))
    }
}

fn csrf_for(secret: &str) -> String {
    hex::encode(Sha256::digest(format!("console-csrf:{secret}").as_bytes()))
}

/// Only paths inside the console may be returned to after sign-in (no open redirect).
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with("/ops/") && !n.starts_with("/ops/v1") && !n.contains("//") && !n.contains('\\') => {
            n.to_owned()
        }
        _ => "/ops/overview".to_owned(),
    }
}

fn sign_in_redirect(parts: &Parts) -> Response {
    // The run page's background refresh gets a plain 401, not a sign-in page to paste.
    if parts.uri.query().is_some_and(|q| q.split('&').any(|p| p == "part=progress")) {
        return (StatusCode::UNAUTHORIZED, "signed out").into_response();
    }
    let next = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/ops/overview");
    let target = if parts.method == axum::http::Method::GET {
        format!("/ops/sign-in?next={}", urlencode(next))
    } else {
        "/ops/sign-in?expired=1".to_owned()
    };
    Redirect::to(&target).into_response()
}

pub fn urlencode(s: &str) -> String {
    serde_urlencoded::to_string([("", s)]).map(|e| e[1..].to_owned()).unwrap_or_default()
}

impl FromRequestParts<AppState> for Session {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let jar = CookieJar::from_headers(&parts.headers);
        let Some(cookie) = jar.get(SESSION_COOKIE) else { return Err(sign_in_redirect(parts)) };
        let Some((id, secret)) = credentials::parse(SESSION_PREFIX, cookie.value()) else {
            return Err(sign_in_redirect(parts));
        };
        let stored = match sessions::find(state.db(), crate::domain::SessionId(id)).await {
            Ok(Some(stored)) => stored,
            Ok(None) => return Err(sign_in_redirect(parts)),
            Err(err) => {
                tracing::error!(error = format!("{:#}", anyhow::Error::from(err)), "cannot read console session");
                return Err(views::refused(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "Unavailable",
                    "The console cannot reach its database right now. Try again shortly.",
                ));
            }
        };
        let live = stored.ended_at.is_none()
            && stored.expires_at.0 > Utc::now()
            && stored.operator_disabled_at.is_none()
            && credentials::verify(secret, &stored.secret_hash);
        if !live {
            return Err(sign_in_redirect(parts));
        }
        Ok(Session {
            id,
            operator: Operator {
                id: OperatorId(stored.operator_id),
                name: stored.operator_name,
                role: stored.operator_role,
            },
            csrf: csrf_for(secret),
        })
    }
}

/// `Secure` when configured, or when a TLS-terminating proxy says the browser used HTTPS.
fn secure(state: &AppState, headers: &HeaderMap) -> bool {
    state.config().console.secure_cookie
        || headers
            .get("x-forwarded-proto")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|p| p.eq_ignore_ascii_case("https"))
}

fn cookie(name: &'static str, value: String, secure: bool, max_age: chrono::TimeDelta) -> Cookie<'static> {
    Cookie::build((name, value))
        .path("/ops")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure)
        .max_age(time::Duration::seconds(max_age.num_seconds()))
        .build()
}

#[derive(Debug, Deserialize)]
pub struct SignInQuery {
    next: Option<String>,
    expired: Option<String>,
    signed_out: Option<String>,
}

/// `GET /ops/sign-in`: the token form. A fresh random value in a short-lived cookie and in the
/// form (double submit) stops another site from signing a browser in as someone else.
pub async fn sign_in_form(State(state): State<AppState>, headers: HeaderMap, Query(q): Query<SignInQuery>) -> Response {
    let banner = if q.expired.is_some() {
        Some(Banner::error("Your session has ended. Sign in again; nothing was changed."))
    } else if q.signed_out.is_some() {
        Some(Banner::ok("You are signed out."))
    } else {
        None
    };
    sign_in_page(&state, &headers, q.next.as_deref(), banner, StatusCode::OK)
}

fn sign_in_page(
    state: &AppState,
    headers: &HeaderMap,
    next: Option<&str>,
    banner: Option<Banner>,
    status: StatusCode,
) -> Response {
    let mut nonce = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let nonce = hex::encode(nonce);
    let next = safe_next(next);
    let body = html! {
        h1 { "Sign in to the operator console" }
        form method="post" action="/ops/sign-in" {
            input type="hidden" name="csrf" value=(nonce);
            input type="hidden" name="next" value=(next);
            p {
                label for="token" { "Operator token" }
                br;
                input #token type="password" name="token" autocomplete="off" required size="60"
                    aria-describedby="token-help";
            }
            p #token-help .hint { "The " code { "wdo_…" } " token from " code { "withdrawals operators create" } ". It is checked, then forgotten: the browser keeps only a session cookie." }
            button type="submit" { "Sign in" }
        }
    };
    let jar =
        CookieJar::new().add(cookie(SIGN_IN_COOKIE, nonce, secure(state, headers), chrono::TimeDelta::minutes(30)));
    (status, jar, page_without_nav("Sign in", banner, body)).into_response()
}

#[derive(Debug, Deserialize)]
pub struct SignInForm {
    token: Option<String>,
    csrf: Option<String>,
    next: Option<String>,
}

/// `POST /ops/sign-in`.
pub async fn sign_in(
    State(state): State<AppState>,
    headers: HeaderMap,
    extensions: Extensions,
    jar: CookieJar,
    Form(form): Form<SignInForm>,
) -> Response {
    let expected = jar.get(SIGN_IN_COOKIE).map(|c| c.value().to_owned());
    let csrf_ok = matches!((&expected, &form.csrf), (Some(e), Some(p)) if !e.is_empty() && bool::from(e.as_bytes().ct_eq(p.as_bytes())));
    if !csrf_ok {
        let banner = Banner::error("The sign-in form had expired or did not come from this console. Try again.");
        return sign_in_page(&state, &headers, form.next.as_deref(), Some(banner), StatusCode::FORBIDDEN);
    }
    // Failed sign-ins are counted and slowed per source like failed API credentials (issue 27);
    // an empty form guesses nothing and is only refused.
    let token = form.token.as_deref().unwrap_or("").trim();
    let guard = state.auth_guard();
    let source = guard.source(&headers, &extensions);
    if let Err(wait) = guard.admit(source) {
        return too_many_failures(wait);
    }
    let refused = match check_token(state.db(), token).await {
        Ok(Ok(operator)) => Ok(operator),
        Ok(Err(reason)) if !token.is_empty() => {
            let prefix = public_prefix(credentials::OPERATOR_TOKEN_PREFIX, token);
            guard.failed(AuthSurface::Console, source, prefix.as_deref(), reason);
            Err(StatusCode::UNAUTHORIZED)
        }
        Ok(Err(_)) => Err(StatusCode::UNAUTHORIZED),
        Err(err) => {
            if let crate::ops::OpsError::Internal(err) = err {
                tracing::error!(error = format!("{err:#}"), "cannot check a console sign-in");
            }
            Err(StatusCode::SERVICE_UNAVAILABLE)
        }
    };
    let operator = match refused {
        Ok(operator) => operator,
        Err(status) => {
            let banner = Banner::error("That token is not a valid, enabled operator token.");
            return sign_in_page(&state, &headers, form.next.as_deref(), Some(banner), status);
        }
    };
    let ttl = state.config().console.session_ttl;
    let issued = credentials::issue(SESSION_PREFIX);
    let audited = Audited {
        action: "console.sign_in",
        target_type: "console_session",
        target_id: issued.id.to_string(),
        reason: "signed in to the operator console",
        parameters: json!({"expires_in_seconds": ttl.num_seconds()}),
    };
    let stored = async {
        let mut tx = state.db().begin().await?;
        sessions::insert(
            &mut tx,
            crate::domain::SessionId(issued.id),
            operator.id,
            &issued.secret_hash,
            DbTime::from(Utc::now() + ttl),
        )
        .await?;
        audited.record_ok(&mut tx, &operator).await?;
        tx.commit().await?;
        Ok::<_, crate::http::error::ApiError>(())
    };
    if let Err(err) = stored.await {
        if let crate::http::error::ApiError::Internal(err) = err {
            tracing::error!(error = format!("{err:#}"), "cannot create a console session");
        }
        return views::refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            "Could not sign you in right now. Try again shortly.",
        );
    }
    let secure = secure(&state, &headers);
    let jar =
        jar.remove(Cookie::build(SIGN_IN_COOKIE).path("/ops")).add(cookie(SESSION_COOKIE, issued.token, secure, ttl));
    (jar, Redirect::to(&safe_next(form.next.as_deref()))).into_response()
}

/// 429 with `Retry-After`: this address failed to sign in too often and is not heard until then.
fn too_many_failures(wait: std::time::Duration) -> Response {
    let secs = (wait.as_secs() + u64::from(wait.subsec_nanos() > 0)).max(1);
    let mut response = views::refused(
        StatusCode::TOO_MANY_REQUESTS,
        "Too many failed sign-ins",
        &format!("Too many failed sign-ins came from this address. Try again in {secs} seconds."),
    );
    response.headers_mut().insert(axum::http::header::RETRY_AFTER, axum::http::HeaderValue::from(secs));
    response
}

/// A form with no fields of its own (only the token).
#[derive(Debug, Deserialize)]
pub struct NoFields {}

/// `POST /ops/sign-out`: ends the session in the database (the cookie stops working everywhere)
/// and clears the cookie.
pub async fn sign_out(
    State(state): State<AppState>,
    jar: CookieJar,
    CsrfForm(session, NoFields {}): CsrfForm<NoFields>,
) -> Response {
    let audited = Audited {
        action: "console.sign_out",
        target_type: "console_session",
        target_id: session.id.to_string(),
        reason: "signed out of the operator console",
        parameters: json!({}),
    };
    let ended = async {
        let mut tx = state.db().begin().await?;
        sessions::end(&mut tx, crate::domain::SessionId(session.id)).await?;
        audited.record_ok(&mut tx, &session.operator).await?;
        tx.commit().await?;
        Ok::<_, crate::http::error::ApiError>(())
    };
    if let Err(crate::http::error::ApiError::Internal(err)) = ended.await {
        tracing::error!(error = format!("{err:#}"), "cannot end a console session");
        return views::refused(
            StatusCode::SERVICE_UNAVAILABLE,
            "Unavailable",
            "Could not sign you out right now. Try again.",
        );
    }
    let jar = jar.remove(Cookie::build(SESSION_COOKIE).path("/ops"));
    (jar, Redirect::to("/ops/sign-in?signed_out=1")).into_response()
}
