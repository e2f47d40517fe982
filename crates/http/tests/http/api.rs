//! HTTP tests of every identity and organization endpoint, over the
//! in-memory adapters: statuses, bodies, headers and the error paths.

use crate::support::{Who, app, assert_error, create_org, request, send_resp, state, user};
use actix_web::body::MessageBody;
use actix_web::dev::{Service, ServiceResponse};
use actix_web::http::{Method, StatusCode};
use actix_web::test::{self, TestRequest};
use serde_json::{Value, json};
use sluice_domain::shared::idempotency::{IdempotencyRecord, IdempotencyStore};
use sluice_testkit::{InMemoryStore, ManualClock};

macro_rules! setup {
    () => {{
        let store = InMemoryStore::new();
        let clock = ManualClock::new(time::OffsetDateTime::now_utc());
        let app = test::init_service(app(state(&store, &clock, None))).await;
        (app, store, clock)
    }};
}

#[actix_web::test]
async fn health_is_public_and_reports_the_store() {
    let (app, _, _) = setup!();
    let r = expect_resp!(app, request(Method::GET, "/v1/health", &Who::Anonymous), StatusCode::OK);
    assert_eq!(r.body["status"], "ok");
    assert_eq!(r.body["database"], "ok");
    assert!(r.headers.contains_key("x-request-id"));
}

#[actix_web::test]
async fn a_client_request_id_is_echoed_and_a_bad_one_replaced() {
    let (app, _, _) = setup!();
    let r =
        send_resp(&app, request(Method::GET, "/v1/health", &Who::Anonymous).insert_header(("X-Request-Id", "abc-123")))
            .await;
    assert_eq!(r.headers.get("x-request-id").unwrap(), "abc-123");
    let r = send_resp(
        &app,
        request(Method::GET, "/v1/health", &Who::Anonymous).insert_header(("X-Request-Id", "has space")),
    )
    .await;
    assert_ne!(r.headers.get("x-request-id").unwrap(), "has space");
}

#[actix_web::test]
async fn requests_without_valid_credentials_are_401() {
    let (app, _, _) = setup!();
    let r = expect_resp!(app, request(Method::GET, "/v1/users/me", &Who::Anonymous), StatusCode::UNAUTHORIZED);
    assert_error(&r, "unauthenticated");
    assert_eq!(r.headers.get("www-authenticate").unwrap(), "Bearer");
    let r = expect_resp!(
        app,
        request(Method::GET, "/v1/users/me", &Who::Anonymous).insert_header(("Authorization", "Bearer nonsense")),
        StatusCode::UNAUTHORIZED
    );
    assert_error(&r, "unauthenticated");
    let r = expect_resp!(
        app,
        request(Method::GET, "/v1/organizations", &Who::Anonymous)
            .insert_header(("Authorization", "Basic dXNlcjpwdw==")),
        StatusCode::UNAUTHORIZED
    );
    assert!(r.body["error"].as_str().unwrap().contains("Bearer"));
    let r =
        expect_resp!(app, request(Method::GET, "/v1/organizations", &Who::Key("slk_junk")), StatusCode::UNAUTHORIZED);
    assert_error(&r, "unauthenticated");
    let both = request(Method::GET, "/v1/organizations", &user("ann")).insert_header(("X-Api-Key", "slk_x"));
    expect_resp!(app, both, StatusCode::UNAUTHORIZED);
}

#[actix_web::test]
async fn the_first_request_creates_the_user_and_me_can_be_updated() {
    let (app, store, _) = setup!();
    let r = expect_resp!(app, request(Method::GET, "/v1/users/me", &user("ann")), StatusCode::OK);
    assert_eq!(r.body["email"], "ann@example.com");
    let id = r.body["id"].clone();
    let r = expect_resp!(app, request(Method::GET, "/v1/users/me", &user("ann")), StatusCode::OK);
    assert_eq!(r.body["id"], id, "the same identity is the same user");

    let r = expect_resp!(
        app,
        request(Method::PATCH, "/v1/users/me", &user("ann")).set_json(json!({"name": "Ann Lee"})),
        StatusCode::OK
    );
    assert_eq!(r.body["name"], "Ann Lee");
    let r = expect_resp!(
        app,
        request(Method::PATCH, "/v1/users/me", &user("ann")).set_json(json!({"email": "not-an-email"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_error(&r, "validation_failed");
    assert_eq!(r.body["details"]["errors"][0]["field"], "email");
    assert!(store.audit_entries().iter().any(|e| e.action == "user.updated"));

    let r = expect_resp!(app, request(Method::POST, "/v1/users/sync-profile", &user("ann")), StatusCode::OK);
    assert_eq!(r.body["name"], "ann", "the token's name claim wins on sync");
}

#[actix_web::test]
async fn malformed_wrongly_shaped_empty_and_oversized_bodies_are_4xx() {
    let (app, _, _) = setup!();
    let post =
        || request(Method::POST, "/v1/organizations", &user("ann")).insert_header(("Content-Type", "application/json"));
    let r = expect_resp!(app, post().set_payload("{\"name\": "), StatusCode::BAD_REQUEST);
    assert_error(&r, "malformed_json");
    assert_eq!(r.body["details"]["line"], 1);
    let r = expect_resp!(app, post().set_payload("{\"name\": 5}"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&r, "validation_failed");
    let r = expect_resp!(app, post().set_payload(""), StatusCode::BAD_REQUEST);
    assert_error(&r, "malformed_json");
    let r = expect_resp!(app, post().set_payload("[1,2]"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&r, "validation_failed");
    let big = format!("{{\"name\": \"{}\"}}", "x".repeat(1024 * 1024 + 10));
    let r = expect_resp!(app, post().set_payload(big), StatusCode::PAYLOAD_TOO_LARGE);
    assert_error(&r, "payload_too_large");
    let r = expect_resp!(app, post().set_payload("{\"name\": \"  \"}"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.body["details"]["errors"][0]["field"], "name");
}

#[actix_web::test]
async fn unknown_routes_and_non_uuid_ids_are_404_in_the_error_shape() {
    let (app, _, _) = setup!();
    let r = expect_resp!(app, request(Method::GET, "/v1/nope", &Who::Anonymous), StatusCode::NOT_FOUND);
    assert_error(&r, "not_found");
    let r =
        expect_resp!(app, request(Method::GET, "/v1/organizations/not-a-uuid", &user("ann")), StatusCode::NOT_FOUND);
    assert_error(&r, "not_found");
}

#[actix_web::test]
async fn an_organization_lives_and_dies() {
    let (app, store, _) = setup!();
    let r = expect_resp!(
        app,
        request(Method::POST, "/v1/organizations", &user("ann")).set_json(json!({"name": "Acme Data, Inc."})),
        StatusCode::CREATED
    );
    let id = r.body["id"].as_str().unwrap().to_string();
    assert_eq!(r.body["slug"], "acme-data-inc");
    assert_eq!(r.body["plan"], "free");
    assert_eq!(r.headers.get("location").unwrap().to_str().unwrap(), format!("/v1/organizations/{id}"));

    let r = expect_resp!(app, request(Method::GET, &format!("/v1/organizations/{id}"), &user("ann")), StatusCode::OK);
    assert_eq!(r.body["name"], "Acme Data, Inc.");
    let r = expect_resp!(
        app,
        request(Method::PUT, &format!("/v1/organizations/{id}"), &user("ann"))
            .set_json(json!({"name": "Acme", "slug": "acme"})),
        StatusCode::OK
    );
    assert_eq!(r.body["slug"], "acme");
    let r = expect_resp!(
        app,
        request(Method::PUT, &format!("/v1/organizations/{id}"), &user("ann")).set_json(json!({"slug": "Bad Slug"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(r.body["details"]["errors"][0]["field"], "slug");
    expect_resp!(
        app,
        request(Method::DELETE, &format!("/v1/organizations/{id}"), &user("ann")),
        StatusCode::NO_CONTENT
    );
    expect_resp!(app, request(Method::GET, &format!("/v1/organizations/{id}"), &user("ann")), StatusCode::NOT_FOUND);

    let actions: Vec<String> = store.audit_entries().iter().map(|e| e.action.clone()).collect();
    assert_eq!(actions, ["organization.created", "organization.updated", "organization.deleted"]);
}

#[actix_web::test]
async fn a_taken_explicit_slug_is_409_and_a_derived_one_gets_a_suffix() {
    let (app, _, _) = setup!();
    expect_resp!(
        app,
        request(Method::POST, "/v1/organizations", &user("ann")).set_json(json!({"name": "Acme", "slug": "acme"})),
        StatusCode::CREATED
    );
    let r = expect_resp!(
        app,
        request(Method::POST, "/v1/organizations", &user("bob")).set_json(json!({"name": "Other", "slug": "acme"})),
        StatusCode::CONFLICT
    );
    assert_error(&r, "conflict");
    let r = expect_resp!(
        app,
        request(Method::POST, "/v1/organizations", &user("bob")).set_json(json!({"name": "Acme"})),
        StatusCode::CREATED
    );
    assert!(r.body["slug"].as_str().unwrap().starts_with("acme-"));
}

#[actix_web::test]
async fn lists_paginate_with_limit_and_cursor() {
    let (app, _, _) = setup!();
    let mut ids = Vec::new();
    for n in 0..3 {
        ids.push(create_org(&app, &user("ann"), &format!("Org {n}")).await);
    }
    let r = expect_resp!(app, request(Method::GET, "/v1/organizations?limit=2", &user("ann")), StatusCode::OK);
    let page1: Vec<&str> = r.body["data"].as_array().unwrap().iter().map(|o| o["id"].as_str().unwrap()).collect();
    assert_eq!(page1, [ids[2].as_str(), ids[1].as_str()], "newest first");
    let cursor = r.body["next_cursor"].as_str().unwrap().to_string();
    let r = expect_resp!(
        app,
        request(Method::GET, &format!("/v1/organizations?limit=2&cursor={cursor}"), &user("ann")),
        StatusCode::OK
    );
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert_eq!(r.body["data"][0]["id"], ids[0].as_str());
    assert_eq!(r.body["next_cursor"], Value::Null);

    for bad in ["limit=0", "limit=201", "limit=abc", "cursor=zzz"] {
        let r = expect_resp!(
            app,
            request(Method::GET, &format!("/v1/organizations?{bad}"), &user("ann")),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_error(&r, "validation_failed");
    }
}

#[actix_web::test]
async fn the_last_admin_can_be_neither_demoted_nor_removed() {
    let (app, _, _) = setup!();
    let org = create_org(&app, &user("ann"), "Acme").await;
    let me = expect_resp!(app, request(Method::GET, "/v1/users/me", &user("ann")), StatusCode::OK).body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let member = format!("/v1/organizations/{org}/members/{me}");
    let r = expect_resp!(
        app,
        request(Method::PUT, &member, &user("ann")).set_json(json!({"role": "Editor"})),
        StatusCode::CONFLICT
    );
    assert_error(&r, "last_admin");
    let r = expect_resp!(app, request(Method::DELETE, &member, &user("ann")), StatusCode::CONFLICT);
    assert_error(&r, "last_admin");
    let r = expect_resp!(
        app,
        request(Method::PUT, &member, &user("ann")).set_json(json!({"role": "Owner"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_error(&r, "validation_failed");
    let r = expect_resp!(
        app,
        request(Method::GET, &format!("/v1/organizations/{org}/members"), &user("ann")),
        StatusCode::OK
    );
    assert_eq!(r.body["data"][0]["role"], "Admin");
}

/// Invites `who` into `org` with `role` and accepts; answers the user's id.
async fn join<S, B>(app: &S, org: &str, admin: &Who<'_>, who: &str, role: &str) -> String
where
    S: Service<actix_http::Request, Response = ServiceResponse<B>, Error = actix_web::Error>,
    B: MessageBody,
{
    let r = send_resp(
        app,
        request(Method::POST, &format!("/v1/organizations/{org}/invitations"), admin)
            .set_json(json!({"email": format!("{who}@example.com"), "role": role})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED, "{}", r.body);
    let token = r.body["token"].as_str().unwrap().to_string();
    let r =
        send_resp(app, request(Method::POST, "/v1/invitations/accept", &user(who)).set_json(json!({"token": token})))
            .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.body);
    let r = send_resp(app, request(Method::GET, "/v1/users/me", &user(who))).await;
    r.body["id"].as_str().unwrap().to_string()
}

#[actix_web::test]
async fn invitations_are_single_use_email_bound_and_expire() {
    let (app, _, clock) = setup!();
    let org = create_org(&app, &user("ann"), "Acme").await;
    let invite = |email: &str| {
        request(Method::POST, &format!("/v1/organizations/{org}/invitations"), &user("ann"))
            .set_json(json!({"email": email, "role": "Editor"}))
    };
    let r = expect_resp!(app, invite("bob@example.com"), StatusCode::CREATED);
    assert_eq!(r.body["status"], "pending");
    let token = r.body["token"].as_str().unwrap().to_string();
    assert!(token.starts_with("sli_"));

    let r = expect_resp!(
        app,
        request(Method::GET, &format!("/v1/organizations/{org}/invitations"), &user("ann")),
        StatusCode::OK
    );
    assert!(r.body["data"][0].get("token").is_none(), "the token is shown once");

    let accept = |who: &'static str, t: &str| {
        request(Method::POST, "/v1/invitations/accept", &user(who)).set_json(json!({"token": t}))
    };
    let r = expect_resp!(app, accept("eve", &token), StatusCode::FORBIDDEN);
    assert_error(&r, "forbidden");
    let r = expect_resp!(app, accept("bob", &token), StatusCode::OK);
    assert_eq!(r.body["role"], "Editor");
    assert_eq!(r.body["organization"]["id"], org.as_str());
    let r = expect_resp!(app, accept("bob", &token), StatusCode::CONFLICT);
    assert_error(&r, "invitation_not_pending");
    expect_resp!(app, accept("bob", "sli_doesnotexist"), StatusCode::NOT_FOUND);
    expect_resp!(app, accept("bob", "garbage"), StatusCode::NOT_FOUND);

    let r = expect_resp!(app, invite("carl@example.com"), StatusCode::CREATED);
    let late = r.body["token"].as_str().unwrap().to_string();
    clock.advance(time::Duration::days(8));
    let r = expect_resp!(app, accept("carl", &late), StatusCode::CONFLICT);
    assert_error(&r, "invitation_expired");

    let r = expect_resp!(app, invite("dan@example.com"), StatusCode::CREATED);
    let (id, t) = (r.body["id"].as_str().unwrap().to_string(), r.body["token"].as_str().unwrap().to_string());
    expect_resp!(
        app,
        request(Method::DELETE, &format!("/v1/organizations/{org}/invitations/{id}"), &user("ann")),
        StatusCode::NO_CONTENT
    );
    expect_resp!(app, accept("dan", &t), StatusCode::CONFLICT);
    expect_resp!(app, invite("not an email"), StatusCode::UNPROCESSABLE_ENTITY);
}

#[actix_web::test]
async fn roles_gate_what_members_may_do() {
    let (app, _, _) = setup!();
    let org = create_org(&app, &user("ann"), "Acme").await;
    let viewer = join(&app, &org, &user("ann"), "vic", "Viewer").await;
    let _editor = join(&app, &org, &user("ann"), "ed", "Editor").await;

    for who in ["vic", "ed"] {
        expect_resp!(app, request(Method::GET, &format!("/v1/organizations/{org}"), &user(who)), StatusCode::OK);
        expect_resp!(
            app,
            request(Method::GET, &format!("/v1/organizations/{org}/members"), &user(who)),
            StatusCode::OK
        );
        expect_resp!(
            app,
            request(Method::GET, &format!("/v1/organizations/{org}/audit-logs"), &user(who)),
            StatusCode::OK
        );
        let forbidden = [
            request(Method::PUT, &format!("/v1/organizations/{org}"), &user(who)).set_json(json!({"name": "x"})),
            request(Method::DELETE, &format!("/v1/organizations/{org}"), &user(who)),
            request(Method::PUT, &format!("/v1/organizations/{org}/members/{viewer}"), &user(who))
                .set_json(json!({"role": "Admin"})),
            request(Method::DELETE, &format!("/v1/organizations/{org}/members/{viewer}"), &user(who)),
            request(Method::POST, &format!("/v1/organizations/{org}/invitations"), &user(who))
                .set_json(json!({"email": "z@example.com", "role": "Viewer"})),
            request(Method::GET, &format!("/v1/organizations/{org}/api-keys"), &user(who)),
            request(Method::POST, &format!("/v1/organizations/{org}/api-keys"), &user(who))
                .set_json(json!({"name": "k", "roles": ["Viewer"]})),
        ];
        for req in forbidden {
            let r = send_resp(&app, req).await;
            assert_eq!(r.status, StatusCode::FORBIDDEN, "{who}: {}", r.body);
            assert_error(&r, "forbidden");
        }
    }

    // The Admin promotes the viewer; there are then two Admins and one can go.
    expect_resp!(
        app,
        request(Method::PUT, &format!("/v1/organizations/{org}/members/{viewer}"), &user("ann"))
            .set_json(json!({"role": "Admin"})),
        StatusCode::OK
    );
    let ann = expect_resp!(app, request(Method::GET, "/v1/users/me", &user("ann")), StatusCode::OK).body["id"]
        .as_str()
        .unwrap()
        .to_string();
    expect_resp!(
        app,
        request(Method::DELETE, &format!("/v1/organizations/{org}/members/{ann}"), &user("vic")),
        StatusCode::NO_CONTENT
    );
    expect_resp!(app, request(Method::GET, &format!("/v1/organizations/{org}"), &user("ann")), StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn api_keys_are_shown_once_act_with_their_roles_and_die_when_revoked() {
    let (app, store, _) = setup!();
    let org = create_org(&app, &user("ann"), "Acme").await;
    let keys = format!("/v1/organizations/{org}/api-keys");
    let r = expect_resp!(
        app,
        request(Method::POST, &keys, &user("ann")).set_json(json!({"name": "ci", "roles": ["Viewer"]})),
        StatusCode::CREATED
    );
    let key = r.body["key"].as_str().unwrap().to_string();
    let key_id = r.body["id"].as_str().unwrap().to_string();
    assert!(key.starts_with("slk_") && key.len() >= 36);
    assert_eq!(r.body["prefix"], &key[..8]);

    let r = expect_resp!(app, request(Method::GET, &keys, &user("ann")), StatusCode::OK);
    assert!(r.body["data"][0].get("key").is_none());
    assert_eq!(r.body["data"][0]["last_used_at"], Value::Null);
    assert!(!r.body.to_string().contains(&key));

    // The key reads its organization, and only its own.
    let r = expect_resp!(app, request(Method::GET, "/v1/organizations", &Who::Key(&key)), StatusCode::OK);
    assert_eq!(r.body["data"][0]["id"], org.as_str());
    expect_resp!(
        app,
        request(Method::GET, &format!("/v1/organizations/{org}/members"), &Who::Key(&key)),
        StatusCode::OK
    );
    let r = expect_resp!(
        app,
        request(Method::PUT, &format!("/v1/organizations/{org}"), &Who::Key(&key)).set_json(json!({"name": "x"})),
        StatusCode::FORBIDDEN
    );
    assert_error(&r, "forbidden");
    let r = expect_resp!(app, request(Method::GET, "/v1/users/me", &Who::Key(&key)), StatusCode::FORBIDDEN);
    assert_error(&r, "forbidden");
    expect_resp!(
        app,
        request(Method::POST, "/v1/organizations", &Who::Key(&key)).set_json(json!({"name": "x"})),
        StatusCode::FORBIDDEN
    );

    let r = expect_resp!(app, request(Method::GET, &keys, &user("ann")), StatusCode::OK);
    assert_ne!(r.body["data"][0]["last_used_at"], Value::Null, "use is recorded");

    expect_resp!(
        app,
        request(Method::POST, &keys, &user("ann")).set_json(json!({"name": "x", "roles": []})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    expect_resp!(
        app,
        request(Method::POST, &keys, &user("ann")).set_json(json!({"name": "x", "roles": ["Root"]})),
        StatusCode::UNPROCESSABLE_ENTITY
    );

    expect_resp!(app, request(Method::DELETE, &format!("{keys}/{key_id}"), &user("ann")), StatusCode::NO_CONTENT);
    let r = expect_resp!(app, request(Method::GET, "/v1/organizations", &Who::Key(&key)), StatusCode::UNAUTHORIZED);
    assert_error(&r, "unauthenticated");
    expect_resp!(app, request(Method::DELETE, &format!("{keys}/{key_id}"), &user("ann")), StatusCode::NOT_FOUND);
    assert!(
        store.audit_entries().iter().all(|e| !e.details.to_string().contains(&key)),
        "the plain key never reaches the audit log"
    );
}

#[actix_web::test]
async fn an_admin_key_can_administer_its_organization() {
    let (app, _, _) = setup!();
    let org = create_org(&app, &user("ann"), "Acme").await;
    let r = expect_resp!(
        app,
        request(Method::POST, &format!("/v1/organizations/{org}/api-keys"), &user("ann"))
            .set_json(json!({"name": "ops", "roles": ["Viewer", "Admin"]})),
        StatusCode::CREATED
    );
    let key = r.body["key"].as_str().unwrap().to_string();
    let r = expect_resp!(
        app,
        request(Method::PUT, &format!("/v1/organizations/{org}"), &Who::Key(&key)).set_json(json!({"name": "Acme 2"})),
        StatusCode::OK
    );
    assert_eq!(r.body["name"], "Acme 2");
    let r = expect_resp!(
        app,
        request(Method::GET, &format!("/v1/organizations/{org}/audit-logs?action=organization.updated"), &user("ann")),
        StatusCode::OK
    );
    assert_eq!(r.body["data"][0]["actor"]["type"], "api_key");
    assert_eq!(r.body["data"][0]["actor"]["name"], "ops");
}

#[actix_web::test]
async fn another_organizations_admin_and_key_get_404_on_every_path() {
    let (app, _, _) = setup!();
    let org = create_org(&app, &user("ann"), "Acme").await;
    let ann = expect_resp!(app, request(Method::GET, "/v1/users/me", &user("ann")), StatusCode::OK).body["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = expect_resp!(
        app,
        request(Method::POST, &format!("/v1/organizations/{org}/invitations"), &user("ann"))
            .set_json(json!({"email": "x@example.com", "role": "Viewer"})),
        StatusCode::CREATED
    );
    let inv = r.body["id"].as_str().unwrap().to_string();
    let r = expect_resp!(
        app,
        request(Method::POST, &format!("/v1/organizations/{org}/api-keys"), &user("ann"))
            .set_json(json!({"name": "k", "roles": ["Admin"]})),
        StatusCode::CREATED
    );
    let key_id = r.body["id"].as_str().unwrap().to_string();

    let other = create_org(&app, &user("mallory"), "Evil").await;
    let r = expect_resp!(
        app,
        request(Method::POST, &format!("/v1/organizations/{other}/api-keys"), &user("mallory"))
            .set_json(json!({"name": "k", "roles": ["Admin"]})),
        StatusCode::CREATED
    );
    let evil_key = r.body["key"].as_str().unwrap().to_string();

    let paths: Vec<(Method, String, Option<Value>)> = vec![
        (Method::GET, format!("/v1/organizations/{org}"), None),
        (Method::PUT, format!("/v1/organizations/{org}"), Some(json!({"name": "pwned"}))),
        (Method::DELETE, format!("/v1/organizations/{org}"), None),
        (Method::GET, format!("/v1/organizations/{org}/members"), None),
        (Method::PUT, format!("/v1/organizations/{org}/members/{ann}"), Some(json!({"role": "Viewer"}))),
        (Method::DELETE, format!("/v1/organizations/{org}/members/{ann}"), None),
        (
            Method::POST,
            format!("/v1/organizations/{org}/invitations"),
            Some(json!({"email": "m@example.com", "role": "Admin"})),
        ),
        (Method::GET, format!("/v1/organizations/{org}/invitations"), None),
        (Method::DELETE, format!("/v1/organizations/{org}/invitations/{inv}"), None),
        (Method::POST, format!("/v1/organizations/{org}/api-keys"), Some(json!({"name": "k", "roles": ["Admin"]}))),
        (Method::GET, format!("/v1/organizations/{org}/api-keys"), None),
        (Method::DELETE, format!("/v1/organizations/{org}/api-keys/{key_id}"), None),
        (Method::GET, format!("/v1/organizations/{org}/audit-logs"), None),
    ];
    for who in [user("mallory"), Who::Key(&evil_key)] {
        for (method, path, body) in &paths {
            let mut req = request(method.clone(), path, &who);
            if let Some(b) = body {
                req = req.set_json(b);
            }
            let r = send_resp(&app, req).await;
            assert_eq!(r.status, StatusCode::NOT_FOUND, "{method} {path}: {}", r.body);
            assert_error(&r, "not_found");
        }
    }
    let r = expect_resp!(app, request(Method::GET, "/v1/organizations", &user("mallory")), StatusCode::OK);
    assert!(!r.body.to_string().contains(&org));
    expect_resp!(app, request(Method::GET, &format!("/v1/organizations/{org}"), &user("ann")), StatusCode::OK);
}

#[actix_web::test]
async fn an_idempotent_retry_replays_and_creates_nothing_new() {
    let (app, store, _) = setup!();
    let post = |name: &str, key: &str| {
        request(Method::POST, "/v1/organizations", &user("ann"))
            .insert_header(("X-Idempotency-Key", key.to_string()))
            .set_json(json!({"name": name}))
    };
    let first = expect_resp!(app, post("Acme", "k-1"), StatusCode::CREATED);
    assert!(first.headers.get("idempotent-replayed").is_none());
    let again = expect_resp!(app, post("Acme", "k-1"), StatusCode::CREATED);
    assert_eq!(again.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(again.body, first.body);
    assert_eq!(again.headers.get("location"), first.headers.get("location"));
    let r = expect_resp!(app, request(Method::GET, "/v1/organizations", &user("ann")), StatusCode::OK);
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);

    let r = expect_resp!(app, post("Other", "k-1"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&r, "idempotency_key_reused");

    // Keys are scoped per caller: another user may use the same key.
    let r = send_resp(
        &app,
        request(Method::POST, "/v1/organizations", &user("bob"))
            .insert_header(("X-Idempotency-Key", "k-1"))
            .set_json(json!({"name": "Bob"})),
    )
    .await;
    assert_eq!(r.status, StatusCode::CREATED);
    assert!(r.headers.get("idempotent-replayed").is_none());

    // A 4xx is stored and replayed too.
    let bad = || {
        request(Method::POST, "/v1/organizations", &user("ann"))
            .insert_header(("X-Idempotency-Key", "k-2"))
            .set_json(json!({"name": ""}))
    };
    expect_resp!(app, bad(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = expect_resp!(app, bad(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(r.headers.get("idempotent-replayed").unwrap(), "true");

    // A request still in flight under the key: 409.
    let me = expect_resp!(app, request(Method::GET, "/v1/users/me", &user("ann")), StatusCode::OK).body["id"]
        .as_str()
        .unwrap()
        .to_string();
    store
        .try_insert(&IdempotencyRecord {
            scope: format!("user:{me}"),
            key: "k-3".into(),
            fingerprint: sluice_domain::shared::idempotency::fingerprint(
                "POST",
                "/v1/organizations",
                b"{\"name\":\"Acme\"}",
            ),
            response: None,
            created_at: time::OffsetDateTime::now_utc(),
        })
        .await
        .unwrap();
    let r = expect_resp!(app, post("Acme", "k-3"), StatusCode::CONFLICT);
    assert_error(&r, "idempotency_in_progress");

    let r = expect_resp!(app, post("Acme", "has space"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_error(&r, "validation_failed");
}

#[actix_web::test]
async fn every_mutation_is_in_the_audit_log_and_the_log_filters() {
    let (app, _, _) = setup!();
    let org = create_org(&app, &user("ann"), "Acme").await;
    let bob = join(&app, &org, &user("ann"), "bob", "Viewer").await;
    expect_resp!(
        app,
        request(Method::PUT, &format!("/v1/organizations/{org}/members/{bob}"), &user("ann"))
            .set_json(json!({"role": "Editor"})),
        StatusCode::OK
    );
    expect_resp!(
        app,
        request(Method::POST, &format!("/v1/organizations/{org}/api-keys"), &user("ann"))
            .set_json(json!({"name": "k", "roles": ["Viewer"]})),
        StatusCode::CREATED
    );
    let logs = format!("/v1/organizations/{org}/audit-logs");
    let r = expect_resp!(app, request(Method::GET, &logs, &user("ann")), StatusCode::OK);
    let actions: Vec<&str> = r.body["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["api_key.created", "member.role_updated", "invitation.accepted", "invitation.created", "organization.created"]
    );

    let r = expect_resp!(
        app,
        request(Method::GET, &format!("{logs}?action=member.role_updated"), &user("ann")),
        StatusCode::OK
    );
    let e = &r.body["data"][0];
    assert_eq!(e["actor"]["type"], "user");
    assert_eq!(e["resource_type"], "member");
    assert_eq!(e["resource_id"], bob.as_str());
    assert_eq!(e["details"]["before"]["role"], "Viewer");
    assert_eq!(e["details"]["after"]["role"], "Editor");

    let r = expect_resp!(
        app,
        request(Method::GET, &format!("{logs}?resource_type=invitation&limit=1"), &user("ann")),
        StatusCode::OK
    );
    assert_eq!(r.body["data"].as_array().unwrap().len(), 1);
    assert!(r.body["next_cursor"].is_string());
    let r = expect_resp!(
        app,
        request(Method::GET, &format!("{logs}?since=2999-01-01T00:00:00Z"), &user("ann")),
        StatusCode::OK
    );
    assert_eq!(r.body["data"].as_array().unwrap().len(), 0);
    let r = expect_resp!(
        app,
        request(Method::GET, &format!("{logs}?since=yesterday"), &user("ann")),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(r.body["details"]["errors"][0]["field"], "since");
}

#[actix_web::test]
async fn the_openapi_document_describes_the_api() {
    let (app, _, _) = setup!();
    let r = expect_resp!(app, request(Method::GET, "/v1/openapi.json", &Who::Anonymous), StatusCode::OK);
    assert!(r.body["openapi"].as_str().unwrap().starts_with("3."));
    let paths = r.body["paths"].as_object().unwrap();
    for p in [
        "/v1/health",
        "/v1/users/me",
        "/v1/organizations/{orgId}/members/{userId}",
        "/v1/organizations/{orgId}/audit-logs",
    ] {
        assert!(paths.contains_key(p), "{p} missing");
    }
    assert!(r.body["components"]["securitySchemes"]["api_key"].is_object());
    // The document served is the one committed (with its descriptions,
    // examples and unique operation ids).
    assert_eq!(r.body, serde_json::to_value(sluice_http::openapi()).unwrap());
    let r = send_resp(&app, request(Method::GET, "/docs/", &Who::Anonymous)).await;
    assert_eq!(r.status, StatusCode::OK);
    // A known path asked with another method is 405 with Allow; an unknown one 404.
    let r = send_resp(
        &app,
        request(Method::PATCH, &format!("/v1/organizations/{}", uuid::Uuid::now_v7()), &Who::Anonymous),
    )
    .await;
    assert_eq!(r.status, StatusCode::METHOD_NOT_ALLOWED, "{}", r.body);
    assert_eq!(r.headers.get("allow").unwrap(), "GET, PUT, DELETE");
    assert_eq!(r.body["code"], "method_not_allowed");
    let r = send_resp(&app, request(Method::PATCH, "/v1/nowhere", &Who::Anonymous)).await;
    assert_eq!(r.status, StatusCode::NOT_FOUND);
    let r = send_resp(&app, request(Method::GET, "/docs", &Who::Anonymous)).await;
    assert_eq!(r.status, StatusCode::PERMANENT_REDIRECT);
    assert_eq!(r.headers.get("location").unwrap(), "/docs/");
}

mod internal {
    use super::*;
    use actix_web::{HttpResponse, web};
    use sluice_http::extract::InternalCaller;

    async fn probe(_: InternalCaller) -> HttpResponse {
        HttpResponse::NoContent().finish()
    }

    #[actix_web::test]
    async fn the_internal_key_is_required_and_disabled_when_unset() {
        let store = InMemoryStore::new();
        let clock = ManualClock::new(time::OffsetDateTime::now_utc());
        for (configured, header, status) in [
            (None, Some("k"), StatusCode::SERVICE_UNAVAILABLE),
            (Some("right-key"), None, StatusCode::UNAUTHORIZED),
            (Some("right-key"), Some("wrong-key"), StatusCode::UNAUTHORIZED),
            (Some("right-key"), Some("right-key"), StatusCode::NO_CONTENT),
        ] {
            let app = test::init_service(
                actix_web::App::new()
                    .app_data(web::Data::new(state(&store, &clock, configured)))
                    .route("/v1/internal/probe", web::post().to(probe)),
            )
            .await;
            let mut req = TestRequest::post().uri("/v1/internal/probe");
            if let Some(h) = header {
                req = req.insert_header(("X-Internal-Api-Key", h));
            }
            let r = send_resp(&app, req).await;
            assert_eq!(r.status, status, "{configured:?} {header:?}: {}", r.body);
        }
    }
}
