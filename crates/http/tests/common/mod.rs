//! What the HTTP test files share: a session for a named user, a request
//! helper, and `expect!`, which sends a request and checks its status.

#![allow(dead_code)] // each test file uses its own part

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::{Method, StatusCode};
use actix_web::test::{self, TestRequest};
use serde_json::Value;
use sluice_domain::app::Sluice;
use sluice_domain::connect::connector::{EntitySchema, Field, FieldType};
use sluice_domain::shared::clock::Clock;
use sluice_http::AppState;
use sluice_testkit::{FakeSecrets, FakeTokens, InMemoryStore, ManualClock, MemoryConnectors, in_memory_ports_with};
use std::sync::Arc;

/// The `Authorization` header of `who`'s session.
pub fn auth(who: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {}", FakeTokens::token(who, &format!("{who}@example.com"))))
}

/// Sends `req`; answers the status and the JSON body (null when empty; a
/// body that is not JSON fails the test).
pub async fn send<S, B>(app: &S, req: TestRequest) -> (StatusCode, Value)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let res = test::call_service(app, req.to_request()).await;
    let status = res.status();
    let bytes = test::read_body(res).await;
    (status, if bytes.is_empty() { Value::Null } else { serde_json::from_slice(&bytes).unwrap() })
}

/// A request by `who`.
pub fn req(method: Method, uri: &str, who: &str) -> TestRequest {
    TestRequest::default().method(method).uri(uri).insert_header(auth(who))
}

/// Sends a request, asserts its status, and answers its JSON body.
macro_rules! expect {
    ($app:expr, $req:expr, $status:expr) => {{
        let (s, b) = common::send(&$app, $req).await;
        assert_eq!(s, $status, "body: {b}");
        b
    }};
}

/// A data asset with `fields` and a Viewer API key in `org`, as Ann (an
/// Admin): (asset id, key).
pub async fn asset_and_key<S, B>(app: &S, org: &str, fields: Value) -> (String, String)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let (s, a) = send(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/data-assets"), "ann")
            .set_json(serde_json::json!({"name": "customer", "fields": fields})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{a}");
    let (s, k) = send(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/api-keys"), "ann")
            .set_json(serde_json::json!({"name": "gw", "roles": ["Viewer"]})),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{k}");
    (a["id"].as_str().unwrap().to_string(), k["key"].as_str().unwrap().to_string())
}

/// The environment names the tests' operator grants to every organization.
pub const GRANTED_ENV: &str = "CRM_PASSWORD ARCHIVE_PW";

/// The app's state over in-memory ports with `connectors` and `secrets`,
/// its clock at now, the operator granting [`GRANTED_ENV`].
pub fn state_with(store: &InMemoryStore, connectors: &MemoryConnectors, secrets: FakeSecrets) -> AppState {
    state_with_grants(store, connectors, secrets, GRANTED_ENV)
}

/// [`state_with`], the operator granting the environment names `env_grants`
/// (a `SLUICE_ENV_REFS_ALLOW` value).
pub fn state_with_grants(
    store: &InMemoryStore,
    connectors: &MemoryConnectors,
    secrets: FakeSecrets,
    env_grants: &str,
) -> AppState {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    state_on(in_memory_ports_with(store, clock, connectors, secrets), env_grants)
}

/// The app's state over `ports`, the operator granting the environment
/// names `env_grants`.
pub fn state_on(ports: sluice_domain::app::Ports, env_grants: &str) -> AppState {
    let options = sluice_domain::app::Options {
        secret_policy: sluice_domain::connect::secret_policy::SecretPolicy::parse(env_grants, "").unwrap(),
        ..Default::default()
    };
    AppState {
        sluice: Sluice::with_options(ports, options),
        internal_api_key: None,
        console_url: "http://console.example".into(),
        rate_limits: None,
        metrics: Default::default(),
        console: Default::default(),
    }
}

/// A table whose first field, `id`, is its integer primary key.
pub fn keyed(name: &str, fields: &[(&str, FieldType)]) -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.primary_key = true;
    id.nullable = false;
    let rest = fields.iter().map(|(n, t)| Field::new(*n, *t));
    EntitySchema { name: name.into(), fields: std::iter::once(id).chain(rest).collect() }
}

/// Creates organization "Acme" as Ann; answers its id.
#[macro_export]
macro_rules! acme {
    ($app:expr) => {
        expect!(
            $app,
            common::req(actix_web::http::Method::POST, "/v1/organizations", "ann")
                .set_json(serde_json::json!({"name": "Acme"})),
            actix_web::http::StatusCode::CREATED
        )["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
}
