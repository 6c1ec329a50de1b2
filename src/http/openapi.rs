//! `/openapi.json`, generated from the handlers' annotations so it cannot drift from the code.

use axum::routing::get;
use axum::{Json, Router};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::AppState;

#[derive(OpenApi)]
#[openapi(
    info(title = "withdrawals", description = "Customer withdrawals API (SPEC §3)"),
    paths(
        super::withdrawals::create,
        super::withdrawals::read,
        super::withdrawals::list,
        super::withdrawals::cancel,
        super::balances::balances,
        super::notifications::events,
        super::notifications::create,
        super::notifications::list,
        super::notifications::remove,
        super::notifications::rotate_secret,
        super::health::healthz,
        super::health::readyz,
        super::webhooks::receive,
        super::webhooks::receive_from,
    ),
    components(schemas(super::error::Problem, super::webhooks::WebhookAck)),
    modifiers(&BearerAuth)
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).bearer_format("wdk_…").build()),
        );
    }
}

pub fn router() -> Router<AppState> {
    Router::new().route("/openapi.json", get(|| async { Json(ApiDoc::openapi()) }))
}
