//! What the HTTP tests share: requests as someone ([`Who`]: a user's
//! session, an API key, nobody), [`send_resp`], which answers the status,
//! headers and body ([`send`] the status and body), `expect_resp!` and
//! `expect!`, which also check the status, the app's state over the
//! in-memory adapters, and fixtures.

#![allow(dead_code)] // each test module uses its own part

use actix_web::App;
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceFactory, ServiceRequest, ServiceResponse};
use actix_web::http::{Method, StatusCode, header::HeaderMap};
use actix_web::test::{self, TestRequest};
use serde_json::{Value, json};
use sluice_domain::app::Sluice;
use sluice_domain::connect::connector::{EntitySchema, Field, FieldType};
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::secret::Secret;
use sluice_http::AppState;
use sluice_testkit::{
    FakeSecrets, FakeTokens, InMemoryStore, ManualClock, MemoryConnectors, in_memory_ports, in_memory_ports_with,
};
use std::sync::Arc;

/// The API alone (no console pages), as the tests drive it.
pub fn app(
    state: AppState,
) -> App<
    impl ServiceFactory<
        ServiceRequest,
        Config = (),
        Response = ServiceResponse<impl MessageBody>,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    sluice_http::app(state, |_| {})
}

/// A response: its status, headers and body (JSON; a body that is not JSON
/// as a string, an empty one as null).
pub struct Resp {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

/// Who sends a request.
pub enum Who<'a> {
    Anonymous,
    User(&'a str),
    Key(&'a str),
}

pub fn user(name: &str) -> Who<'_> {
    Who::User(name)
}

/// The `Authorization` header of `who`'s session.
pub fn auth(who: &str) -> (&'static str, String) {
    ("Authorization", format!("Bearer {}", FakeTokens::token(who, &format!("{who}@example.com"))))
}

/// A request by `who`.
pub fn request(method: Method, uri: &str, who: &Who) -> TestRequest {
    let r = TestRequest::default().method(method).uri(uri);
    match who {
        Who::Anonymous => r,
        Who::User(n) => r.insert_header(auth(n)),
        Who::Key(k) => r.insert_header(("X-Api-Key", k.to_string())),
    }
}

/// A request by the user `who`.
pub fn req(method: Method, uri: &str, who: &str) -> TestRequest {
    request(method, uri, &Who::User(who))
}

/// Sends `req`; answers its status, headers and body.
pub async fn send_resp<S, B>(app: &S, req: TestRequest) -> Resp
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let res = test::call_service(app, req.to_request()).await;
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = test::read_body(res).await;
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::String(String::from_utf8_lossy(&bytes).into()))
    };
    Resp { status, headers, body }
}

/// Sends `req`; answers its status and body.
pub async fn send<S, B>(app: &S, req: TestRequest) -> (StatusCode, Value)
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let r = send_resp(app, req).await;
    (r.status, r.body)
}

/// Sends a request, asserts its status, and answers the response.
macro_rules! expect_resp {
    ($app:expr, $req:expr, $status:expr) => {{
        let r = $crate::support::send_resp(&$app, $req).await;
        assert_eq!(r.status, $status, "body: {}", r.body);
        r
    }};
}

/// Sends a request, asserts its status, and answers its body.
macro_rules! expect {
    ($app:expr, $req:expr, $status:expr) => {{
        let (s, b) = $crate::support::send(&$app, $req).await;
        assert_eq!(s, $status, "body: {b}");
        b
    }};
}

/// An error body of `code`, whose `request_id` is the response's.
pub fn assert_error(r: &Resp, code: &str) {
    assert_eq!(r.body["code"], code, "body: {}", r.body);
    assert!(r.body["error"].as_str().is_some_and(|e| !e.is_empty()));
    let rid = r.headers.get("x-request-id").unwrap().to_str().unwrap();
    assert_eq!(r.body["request_id"], rid, "the body's request_id is the header's");
}

/// Creates the organization `name` as `who`; answers its id.
pub async fn create_org<S, B>(app: &S, who: &Who<'_>, name: &str) -> String
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let r = send_resp(app, request(Method::POST, "/v1/organizations", who).set_json(json!({"name": name}))).await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
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
    app_state(Sluice::with_options(ports, options), None)
}

/// The app's state over the in-memory adapters and `clock`, with the
/// internal API key `internal`.
pub fn state(store: &InMemoryStore, clock: &ManualClock, internal: Option<&str>) -> AppState {
    let clock: Arc<dyn Clock> = Arc::new(clock.clone());
    app_state(Sluice::new(in_memory_ports(store, clock)), internal)
}

fn app_state(sluice: Sluice, internal: Option<&str>) -> AppState {
    AppState {
        sluice,
        internal_api_key: internal.map(Secret::new),
        console_url: "http://console.example".into(),
        rate_limits: None,
        metrics: Default::default(),
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
            $crate::support::req(actix_web::http::Method::POST, "/v1/organizations", "ann")
                .set_json(serde_json::json!({"name": "Acme"})),
            actix_web::http::StatusCode::CREATED
        )["id"]
            .as_str()
            .unwrap()
            .to_string()
    };
}
