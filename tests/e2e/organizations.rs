//! An organization's life through the real application, on each backend.

use serde_json::json;
use sluice_tests::{Auth, Backend, TestApp, check, spawn_app};

/// create, invite, accept, change role, API key use and revocation,
/// idempotent retries, audit log.
async fn an_organizations_life(app: TestApp) {
    let ann = app.token("ann@example.com");
    let bob = app.token("bob@example.com");

    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme Data"})).await, 201).id();
    let base = format!("/v1/organizations/{org}");

    // Invite Bob as a Viewer; he accepts.
    let inv = check!(
        app.post(&format!("{base}/invitations"), &ann, json!({"email": "bob@example.com", "role": "Viewer"})).await,
        201
    );
    let token = inv.body["token"].as_str().unwrap().to_string();
    let accepted = check!(app.post("/v1/invitations/accept", &bob, json!({"token": token})).await, 200);
    assert_eq!(accepted.body["role"], "Viewer");
    check!(app.post("/v1/invitations/accept", &bob, json!({"token": token})).await, 409);

    // Bob can read but not administer; Ann promotes him to Editor.
    check!(app.get(&base, &bob).await, 200);
    check!(app.put(&base, &bob, json!({"name": "x"})).await, 403);
    let bob_id = check!(app.get("/v1/users/me", &bob).await, 200).id();
    let m = check!(app.put(&format!("{base}/members/{bob_id}"), &ann, json!({"role": "Editor"})).await, 200);
    assert_eq!(m.body["role"], "Editor");
    let members = check!(app.get(&format!("{base}/members"), &bob).await, 200);
    assert_eq!(members.body["data"].as_array().unwrap().len(), 2);

    // The last Admin stays.
    let ann_id = check!(app.get("/v1/users/me", &ann).await, 200).id();
    let r = check!(app.put(&format!("{base}/members/{ann_id}"), &ann, json!({"role": "Viewer"})).await, 409);
    assert_eq!(r.body["code"], "last_admin");

    // An Editor key reads and cannot administer; once revoked it is refused.
    let k = check!(app.post(&format!("{base}/api-keys"), &ann, json!({"name": "ci", "roles": ["Editor"]})).await, 201);
    let key = Auth::Key(k.body["key"].as_str().unwrap().to_string());
    check!(app.get(&base, &key).await, 200);
    check!(app.put(&base, &key, json!({"name": "x"})).await, 403);
    let listed = check!(app.get(&format!("{base}/api-keys"), &ann).await, 200);
    assert!(listed.body["data"][0]["last_used_at"].is_string(), "{}", listed.body);
    assert!(listed.body["data"][0].get("key").is_none());
    check!(app.delete(&format!("{base}/api-keys/{}", k.id()), &ann).await, 204);
    check!(app.get(&base, &key).await, 401);

    // An idempotent retry replays; a reused key with another body is refused.
    let idem = |name: &str| {
        app.send(
            reqwest::Method::POST,
            "/v1/organizations",
            &ann,
            Some(json!({"name": name})),
            &[("X-Idempotency-Key", "e2e-retry-1")],
        )
    };
    let first = check!(idem("Second").await, 201);
    let again = check!(idem("Second").await, 201);
    assert_eq!(again.headers.get("idempotent-replayed").unwrap(), "true");
    assert_eq!(again.body, first.body);
    check!(idem("Third").await, 422);
    let orgs = check!(app.get("/v1/organizations", &ann).await, 200);
    assert_eq!(orgs.body["data"].as_array().unwrap().len(), 2, "the retry created nothing");

    // The audit log holds every change, newest first, secrets removed.
    let log = check!(app.get(&format!("{base}/audit-logs"), &ann).await, 200);
    let actions: Vec<&str> =
        log.body["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "api_key.revoked",
            "api_key.created",
            "member.role_updated",
            "invitation.accepted",
            "invitation.created",
            "organization.created"
        ]
    );
    assert!(!log.body.to_string().contains(k.body["key"].as_str().unwrap()));
    let filtered = check!(app.get(&format!("{base}/audit-logs?action=member.role_updated"), &ann).await, 200);
    assert_eq!(filtered.body["data"][0]["details"]["after"]["role"], "Editor");
    // An action's start, up to a dot, finds the actions below it; a part
    // of a word finds nothing (`_` and `%` are no wildcards).
    for (wanted, want) in [
        ("api_key", &["api_key.revoked", "api_key.created"][..]),
        ("api_key.", &["api_key.revoked", "api_key.created"][..]),
        ("invitation.accepted", &["invitation.accepted"][..]),
        ("api_", &[][..]),
        ("api%25", &[][..]),
        ("invitation.acc", &[][..]),
    ] {
        let found = check!(app.get(&format!("{base}/audit-logs?action={wanted}"), &ann).await, 200);
        let actions: Vec<&str> =
            found.body["data"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
        assert_eq!(actions, want, "{wanted}");
    }

    // Deleting the organization removes it for its members.
    check!(app.delete(&base, &ann).await, 204);
    check!(app.get(&base, &bob).await, 404);
}

/// A second organization's Admin and API key see nothing of the first.
async fn tenants_are_isolated(app: TestApp) {
    let ann = app.token("ann@example.com");
    let mal = app.token("mallory@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let key_id = check!(
        app.post(&format!("/v1/organizations/{org}/api-keys"), &ann, json!({"name": "k", "roles": ["Admin"]})).await,
        201
    )
    .id();
    let ann_id = check!(app.get("/v1/users/me", &ann).await, 200).id();

    let evil = check!(app.post("/v1/organizations", &mal, json!({"name": "Evil"})).await, 201).id();
    let evil_key = check!(
        app.post(&format!("/v1/organizations/{evil}/api-keys"), &mal, json!({"name": "k", "roles": ["Admin"]})).await,
        201
    );
    let evil_key = Auth::Key(evil_key.body["key"].as_str().unwrap().to_string());

    for who in [&mal, &evil_key] {
        let b = format!("/v1/organizations/{org}");
        for r in [
            app.get(&b, who).await,
            app.put(&b, who, json!({"name": "pwned"})).await,
            app.get(&format!("{b}/members"), who).await,
            app.put(&format!("{b}/members/{ann_id}"), who, json!({"role": "Viewer"})).await,
            app.delete(&format!("{b}/members/{ann_id}"), who).await,
            app.post(&format!("{b}/invitations"), who, json!({"email": "m@example.com", "role": "Admin"})).await,
            app.get(&format!("{b}/api-keys"), who).await,
            app.delete(&format!("{b}/api-keys/{key_id}"), who).await,
            app.get(&format!("{b}/audit-logs"), who).await,
            app.delete(&b, who).await,
        ] {
            assert_eq!(r.status.as_u16(), 404, "{}", r.body);
        }
    }
    check!(app.get(&format!("/v1/organizations/{org}"), &ann).await, 200);
}

/// Two Admins demoting each other at once: the store's transaction lets only
/// one through, so the organization keeps an Admin.
async fn concurrent_demotions_keep_an_admin(app: TestApp) {
    let ann = app.token("ann@example.com");
    let bob = app.token("bob@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Race"})).await, 201).id();
    let inv = check!(
        app.post(
            &format!("/v1/organizations/{org}/invitations"),
            &ann,
            json!({"email": "bob@example.com", "role": "Admin"})
        )
        .await,
        201
    );
    check!(app.post("/v1/invitations/accept", &bob, json!({"token": inv.body["token"]})).await, 200);
    let ann_id = check!(app.get("/v1/users/me", &ann).await, 200).id();
    let bob_id = check!(app.get("/v1/users/me", &bob).await, 200).id();
    for _ in 0..5 {
        let (to_bob, to_ann) =
            (format!("/v1/organizations/{org}/members/{bob_id}"), format!("/v1/organizations/{org}/members/{ann_id}"));
        let (a, b) = tokio::join!(
            app.put(&to_bob, &ann, json!({"role": "Viewer"})),
            app.put(&to_ann, &bob, json!({"role": "Viewer"})),
        );
        let mut statuses = [a.status.as_u16(), b.status.as_u16()];
        statuses.sort();
        // One demotion wins; the other is refused as the last Admin or, if
        // its caller was demoted first, as no longer an Admin.
        assert!(statuses == [200, 403] || statuses == [200, 409], "{statuses:?}: {} {}", a.body, b.body);
        let members = check!(app.get(&format!("/v1/organizations/{org}/members"), &ann).await, 200);
        let admins: Vec<_> = members.body["data"].as_array().unwrap().iter().filter(|m| m["role"] == "Admin").collect();
        assert_eq!(admins.len(), 1, "{}", members.body);
        // Restore two Admins for the next round.
        let admin = if admins[0]["user_id"] == ann_id.as_str() { &ann } else { &bob };
        let other = if admins[0]["user_id"] == ann_id.as_str() { &bob_id } else { &ann_id };
        check!(
            app.put(&format!("/v1/organizations/{org}/members/{other}"), admin, json!({"role": "Admin"})).await,
            200
        );
    }
}

/// Concurrent requests with one idempotency key create one resource.
async fn concurrent_idempotent_requests_create_once(app: TestApp) {
    let ann = app.token("ann@example.com");
    let send = || {
        app.send(
            reqwest::Method::POST,
            "/v1/organizations",
            &ann,
            Some(json!({"name": "Once"})),
            &[("X-Idempotency-Key", "same-key")],
        )
    };
    let (a, b, c) = tokio::join!(send(), send(), send());
    for r in [&a, &b, &c] {
        assert!([201, 409].contains(&r.status.as_u16()), "{}", r.body);
    }
    let orgs = check!(app.get("/v1/organizations", &ann).await, 200);
    assert_eq!(orgs.body["data"].as_array().unwrap().len(), 1, "{}", orgs.body);
}

sluice_tests::on_both_backends!(
    an_organizations_life,
    tenants_are_isolated,
    concurrent_demotions_keep_an_admin,
    concurrent_idempotent_requests_create_once
);
