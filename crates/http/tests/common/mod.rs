//! What the HTTP test files share: a session for a named user, a request
//! helper, and `expect!`, which sends a request and checks its status.

#![allow(dead_code)] // each test file uses its own part

use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::{Method, StatusCode};
use actix_web::test::{self, TestRequest};
use serde_json::Value;
use sluice_testkit::FakeTokens;

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
