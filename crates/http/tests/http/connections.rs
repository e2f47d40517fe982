//! HTTP tests of connector capabilities, integrations and connections over
//! the in-memory adapters and the in-memory connector type.

use crate::support::{self, app, req, send};
use actix_web::http::{Method, StatusCode};
use actix_web::test::{self, TestRequest};
use serde_json::{Value, json};
use sluice_domain::connect::connector::{EntitySchema, FieldType, Value as V};
use sluice_testkit::{FakeSecrets, InMemoryStore, MemoryConnectors};

fn people() -> EntitySchema {
    support::keyed("people", &[("email", FieldType::String), ("age", FieldType::String)])
}

macro_rules! setup {
    () => {{
        let store = InMemoryStore::new();
        let connectors = MemoryConnectors::new();
        connectors.put(
            "crm",
            people(),
            (1..=30)
                .map(|i| vec![V::Int(i), V::String(format!("user{i}@example.com")), V::String(format!("{}", 20 + i))])
                .collect(),
        );
        connectors.require_password("crm", "s3cret-pw");
        let secrets = FakeSecrets([("CRM_PASSWORD".to_string(), "s3cret-pw".to_string())].into());
        let app = test::init_service(app(support::state_with(&store, &connectors, secrets))).await;
        let org = acme!(app);
        (app, store, org)
    }};
}

#[actix_web::test]
async fn capabilities_are_public_and_mark_credentials() {
    let (app, _, _) = setup!();
    let (s, b) = send(&app, TestRequest::get().uri("/v1/connectors/capabilities")).await;
    assert_eq!(s, StatusCode::OK);
    let memory = &b["connectors"][0];
    assert_eq!(memory["type"], "memory");
    let password = memory["config_fields"].as_array().unwrap().iter().find(|f| f["name"] == "password").unwrap();
    assert_eq!(password["credential"], true);
    assert!(memory["sync_modes"].as_array().unwrap().iter().any(|m| m == "incremental_deduped"));
}

#[actix_web::test]
async fn integration_secrets_are_encrypted_masked_and_shown_only_to_admins() {
    let (app, store, org) = setup!();
    let base = format!("/v1/organizations/{org}/integrations");
    let created = expect!(
        app,
        req(Method::POST, &base, "ann")
            .set_json(json!({"name": "crm", "type": "memory", "credentials": {"password": "s3cret-pw"}})),
        StatusCode::CREATED
    );
    assert_eq!(created["credentials"]["password"], "***");
    let id = created["id"].as_str().unwrap().to_string();
    let listed = expect!(app, req(Method::GET, &base, "ann"), StatusCode::OK);
    assert!(!listed.to_string().contains("s3cret-pw"));
    let details = expect!(app, req(Method::GET, &format!("{base}/{id}/details"), "ann"), StatusCode::OK);
    assert_eq!(details["credentials"]["password"], "s3cret-pw");

    // The placeholder keeps the secret; a reference replaces it.
    expect!(
        app,
        req(Method::PATCH, &format!("{base}/{id}"), "ann").set_json(json!({"credentials": {"password": "***"}})),
        StatusCode::OK
    );
    let details = expect!(app, req(Method::GET, &format!("{base}/{id}/details"), "ann"), StatusCode::OK);
    assert_eq!(details["credentials"]["password"], "s3cret-pw");
    expect!(
        app,
        req(Method::PATCH, &format!("{base}/{id}"), "ann")
            .set_json(json!({"credentials": {"password": "env:CRM_PASSWORD"}})),
        StatusCode::OK
    );
    let details = expect!(app, req(Method::GET, &format!("{base}/{id}/details"), "ann"), StatusCode::OK);
    assert_eq!(details["credentials"]["password"], "env:CRM_PASSWORD");

    let err = expect!(
        app,
        req(Method::POST, &base, "ann").set_json(json!({"name": "x", "type": "oracle"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "type");
    expect!(
        app,
        req(Method::POST, &base, "ann").set_json(json!({"name": "crm", "type": "memory"})),
        StatusCode::CONFLICT
    );
    let err = expect!(
        app,
        req(Method::POST, &base, "ann")
            .set_json(json!({"name": "y", "type": "memory", "credentials": {"password": "env:bad name"}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "credentials.password");
    assert!(
        store.audit_entries().iter().all(|e| !e.details.to_string().contains("s3cret-pw")),
        "secrets never reach the audit log"
    );
}

#[actix_web::test]
async fn viewers_read_but_cannot_write_or_see_details() {
    let (app, _, org) = setup!();
    let inv = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/invitations"), "ann")
            .set_json(json!({"email": "vic@example.com", "role": "Viewer"})),
        StatusCode::CREATED
    );
    expect!(
        app,
        req(Method::POST, "/v1/invitations/accept", "vic").set_json(json!({"token": inv["token"]})),
        StatusCode::OK
    );
    let i = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/integrations"), "ann")
            .set_json(json!({"name": "crm", "type": "memory", "credentials": {"password": "s3cret-pw"}})),
        StatusCode::CREATED
    );
    let iid = i["id"].as_str().unwrap();
    let c = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/connections"), "ann").set_json(json!({
            "name": "crm", "type": "memory", "capability": "source", "integration_id": iid, "config": {"dataset": "crm"}
        })),
        StatusCode::CREATED
    );
    let cid = c["id"].as_str().unwrap();
    expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/integrations"), "vic"), StatusCode::OK);
    expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/connections/{cid}"), "vic"), StatusCode::OK);
    expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/connections/{cid}/preview"), "vic")
            .set_json(json!({"entity": "people"})),
        StatusCode::OK
    );
    for r in [
        req(Method::GET, &format!("/v1/organizations/{org}/integrations/{iid}/details"), "vic"),
        req(Method::POST, &format!("/v1/organizations/{org}/integrations"), "vic")
            .set_json(json!({"name": "x", "type": "memory"})),
        req(Method::PATCH, &format!("/v1/organizations/{org}/integrations/{iid}"), "vic")
            .set_json(json!({"name": "x"})),
        req(Method::DELETE, &format!("/v1/organizations/{org}/integrations/{iid}"), "vic"),
        req(Method::POST, &format!("/v1/organizations/{org}/connections"), "vic")
            .set_json(json!({"name": "x", "type": "memory", "capability": "source", "config": {"dataset": "crm"}})),
        req(Method::PATCH, &format!("/v1/organizations/{org}/connections/{cid}"), "vic").set_json(json!({"name": "x"})),
        req(Method::DELETE, &format!("/v1/organizations/{org}/connections/{cid}"), "vic"),
        req(Method::POST, &format!("/v1/organizations/{org}/connections/{cid}/test"), "vic"),
        req(Method::POST, &format!("/v1/organizations/{org}/connections/{cid}/discover"), "vic"),
    ] {
        let (s, b) = send(&app, r).await;
        assert_eq!(s, StatusCode::FORBIDDEN, "{b}");
    }
    // Another organization sees none of it.
    expect!(
        app,
        req(Method::GET, &format!("/v1/organizations/{org}/connections/{cid}"), "mallory"),
        StatusCode::NOT_FOUND
    );
}

#[actix_web::test]
async fn a_connection_is_tested_discovered_previewed_and_transformed() {
    let (app, _, org) = setup!();
    let conns = format!("/v1/organizations/{org}/connections");
    // An unsaved test with a wrong password is ok: false, not an HTTP error.
    let t = expect!(
        app,
        req(Method::POST, &format!("{conns}/test"), "ann").set_json(
            json!({"type": "memory", "capability": "source", "config": {"dataset": "crm", "password": "wrong"}})
        ),
        StatusCode::OK
    );
    assert_eq!(t["ok"], false);
    assert_eq!(t["error_code"], "auth_failed");
    assert!(!t.to_string().contains("wrong\""), "{t}");

    let c = expect!(
        app,
        req(Method::POST, &conns, "ann").set_json(json!({
            "name": "crm", "type": "memory", "capability": "source", "config": {"dataset": "crm", "password": "env:CRM_PASSWORD"}
        })),
        StatusCode::CREATED
    );
    assert_eq!(c["status"], "untested");
    assert_eq!(c["config"]["password"], "***");
    let cid = c["id"].as_str().unwrap().to_string();
    let t = expect!(app, req(Method::POST, &format!("{conns}/{cid}/test"), "ann"), StatusCode::OK);
    assert_eq!(t["ok"], true, "{t}");
    let c = expect!(app, req(Method::GET, &format!("{conns}/{cid}"), "ann"), StatusCode::OK);
    assert_eq!(c["status"], "healthy");
    assert!(c["last_tested_at"].is_string());

    let d = expect!(app, req(Method::POST, &format!("{conns}/{cid}/discover"), "ann"), StatusCode::OK);
    assert_eq!(d["entities"][0]["name"], "people");
    assert_eq!(
        d["entities"][0]["fields"][0],
        json!({"name": "id", "type": "integer", "nullable": false, "primary_key": true})
    );

    let p = expect!(
        app,
        req(Method::POST, &format!("{conns}/{cid}/preview"), "ann").set_json(json!({"entity": "people"})),
        StatusCode::OK
    );
    assert_eq!(p["records"].as_array().unwrap().len(), 20, "default limit");
    let p = expect!(
        app,
        req(Method::POST, &format!("{conns}/{cid}/preview"), "ann").set_json(json!({"entity": "people", "limit": 3})),
        StatusCode::OK
    );
    assert_eq!(p["records"][2], json!({"id": 3, "email": "user3@example.com", "age": "23"}));
    for bad in
        [json!({"entity": "people", "limit": 0}), json!({"entity": "people", "limit": 1001}), json!({"entity": ""})]
    {
        expect!(
            app,
            req(Method::POST, &format!("{conns}/{cid}/preview"), "ann").set_json(bad),
            StatusCode::UNPROCESSABLE_ENTITY
        );
    }
    let e = expect!(
        app,
        req(Method::POST, &format!("{conns}/{cid}/preview"), "ann").set_json(json!({"entity": "nope"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(e["code"], "entity_not_found");

    let p = expect!(
        app,
        req(Method::POST, &format!("{conns}/{cid}/preview/transform"), "ann").set_json(json!({
            "entity": "people", "limit": 5,
            "transform": [
                {"op": "cast", "field": "age", "to": "integer"},
                {"op": "filter", "field": "age", "gt": 22},
                {"op": "mask", "field": "email"},
                {"op": "rename", "from": "email", "to": "contact"},
                {"op": "set", "field": "source", "value": "crm"}
            ]
        })),
        StatusCode::OK
    );
    assert_eq!(p["records"].as_array().unwrap().len(), 3);
    assert_eq!(p["records"][0], json!({"id": 3, "contact": "u****@example.com", "age": 23, "source": "crm"}));
    assert_eq!(p["fields"][2]["type"], "integer");
    let e = expect!(
        app,
        req(Method::POST, &format!("{conns}/{cid}/preview/transform"), "ann")
            .set_json(json!({"entity": "people", "transform": [{"op": "explode"}, {"op": "drop", "field": "nope"}]})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(e["details"]["errors"][0]["field"], "transform[0]");
    let e = expect!(
        app,
        req(Method::POST, &format!("{conns}/{cid}/preview/transform"), "ann")
            .set_json(json!({"entity": "people", "transform": [{"op": "drop", "field": "nope"}]})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert!(e["details"]["errors"][0]["message"].as_str().unwrap().contains("nope"));
}

#[actix_web::test]
async fn connection_validation_names_every_problem() {
    let (app, _, org) = setup!();
    let conns = format!("/v1/organizations/{org}/connections");
    let e = expect!(
        app,
        req(Method::POST, &conns, "ann")
            .set_json(json!({"name": "", "type": "memory", "capability": "source", "config": {"nope": 1}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let fields: Vec<&str> =
        e["details"]["errors"].as_array().unwrap().iter().map(|x| x["field"].as_str().unwrap()).collect();
    assert_eq!(fields, ["name", "config.dataset", "config.nope"]);
    expect!(
        app,
        req(Method::POST, &conns, "ann").set_json(json!({"name": "x", "type": "memory", "capability": "sideways"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let e = expect!(
        app,
        req(Method::POST, &conns, "ann").set_json(json!({
            "name": "x", "type": "memory", "capability": "source", "integration_id": uuid::Uuid::new_v4(), "config": {"dataset": "crm"}
        })),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(e["details"]["errors"][0]["field"], "integration_id");
    // A destination cannot be previewed.
    let c = expect!(
        app,
        req(Method::POST, &conns, "ann").set_json(
            json!({"name": "sink", "type": "memory", "capability": "destination", "config": {"dataset": "out"}})
        ),
        StatusCode::CREATED
    );
    let e = expect!(
        app,
        req(Method::POST, &format!("{conns}/{}/preview", c["id"].as_str().unwrap()), "ann")
            .set_json(json!({"entity": "people"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(e["code"], "not_a_source");
    // An integration in use cannot be deleted.
    let i = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/integrations"), "ann")
            .set_json(json!({"name": "crm", "type": "memory"})),
        StatusCode::CREATED
    );
    let iid = i["id"].as_str().unwrap();
    expect!(
        app,
        req(Method::POST, &conns, "ann").set_json(json!({"name": "y", "type": "memory", "capability": "source", "integration_id": iid, "config": {"dataset": "crm"}})),
        StatusCode::CREATED
    );
    let e = expect!(
        app,
        req(Method::DELETE, &format!("/v1/organizations/{org}/integrations/{iid}"), "ann"),
        StatusCode::CONFLICT
    );
    assert_eq!(e["code"], "in_use");
}

#[actix_web::test]
async fn data_assets_crud_with_versions() {
    let (app, _store, org) = setup!();
    let base = format!("/v1/organizations/{org}/data-assets");
    let fields = json!([
        {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
        {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}
    ]);

    let err = expect!(
        app,
        req(Method::POST, &base, "ann").set_json(json!({"name": "profile", "fields": [{"name": "x", "type": "text"}]})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "fields[0].type");

    let (status, a) = send(
        &app,
        req(Method::POST, &base, "ann")
            .set_json(json!({"name": "profile", "fields": fields, "description": "model output"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{a}");
    assert_eq!((a["kind"].as_str(), a["version"].as_i64()), (Some("virtual"), Some(1)));
    assert_eq!(
        a["fields"],
        json!([
            {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
            {"name": "address", "type": "object", "required": false, "tags": [],
             "fields": [{"name": "zip", "type": "string", "required": false, "tags": []}]}
        ]),
        "fields read back with their defaults filled in"
    );
    let id = a["id"].as_str().unwrap().to_string();
    let one = format!("{base}/{id}");
    expect!(
        app,
        req(Method::POST, &base, "ann").set_json(json!({"name": "profile", "fields": []})),
        StatusCode::CONFLICT
    );

    // Clearing the description keeps the version; removing a field is a breaking version 2.
    let b = expect!(app, req(Method::PATCH, &one, "ann").set_json(json!({"description": null})), StatusCode::OK);
    assert_eq!((b["description"].clone(), b["version"].as_i64()), (Value::Null, Some(1)));
    let c = expect!(
        app,
        req(Method::PATCH, &one, "ann")
            .set_json(json!({"fields": [{"name": "email", "type": "string", "required": true}]})),
        StatusCode::OK
    );
    assert_eq!(c["version"], 2);
    let v = expect!(app, req(Method::GET, &format!("{one}/versions"), "ann"), StatusCode::OK);
    let changes: Vec<_> =
        v["data"].as_array().unwrap().iter().map(|v| (v["version"].clone(), v["change"].clone())).collect();
    assert_eq!(changes, [(json!(1), json!("compatible")), (json!(2), json!("breaking"))]);
    assert_eq!(v["data"][1]["created_by"], "ann");

    let list = expect!(app, req(Method::GET, &base, "ann"), StatusCode::OK);
    assert_eq!(list["data"].as_array().unwrap().len(), 1);
    // Someone outside the organization sees nothing of it.
    expect!(app, req(Method::GET, &one, "eve"), StatusCode::NOT_FOUND);

    // A flow whose mapping names the asset as its contract depends on it; deleting then needs ?force=true.
    let conn = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/connections"), "ann").set_json(
            json!({"name": "m", "type": "memory", "capability": "both", "config": {"dataset": "crm", "password": "s3cret-pw"}})
        ),
        StatusCode::CREATED
    )["id"]
        .clone();
    let flow = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/flows"), "ann").set_json(json!({
            "name": "people", "source_connection_id": conn, "destination_connection_id": conn,
            "config": {"mappings": [{"source_entity": "people", "dest_entity": "people_copy",
                                     "sync_mode": "full_refresh_overwrite", "asset": "profile"}]}
        })),
        StatusCode::CREATED
    );
    let deps = expect!(app, req(Method::GET, &format!("{one}/dependencies"), "ann"), StatusCode::OK);
    assert_eq!(deps["data"], json!([{"flow_id": flow["id"], "flow_name": "people", "relation": "contract"}]));
    let e = expect!(app, req(Method::DELETE, &one, "ann"), StatusCode::CONFLICT);
    assert_eq!(e["code"], "in_use", "{e}");
    assert!(e["error"].as_str().unwrap().contains("people"), "{e}");
    expect!(app, req(Method::GET, &one, "ann"), StatusCode::OK);

    expect!(app, req(Method::DELETE, &format!("{one}?force=true"), "ann"), StatusCode::NO_CONTENT);
    expect!(app, req(Method::GET, &one, "ann"), StatusCode::NOT_FOUND);
    expect!(app, req(Method::GET, &format!("{one}/versions"), "ann"), StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn gateway_validates_llm_output_against_an_asset() {
    let (app, _store, org) = setup!();
    let (asset, key) = support::asset_and_key(
        &app,
        &org,
        json!([
            {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
            {"name": "age", "type": "integer", "required": true},
            {"name": "active", "type": "boolean"}
        ]),
    )
    .await;
    let gw = |body: Value| {
        TestRequest::default()
            .method(Method::POST)
            .uri("/v1/gateway/validate")
            .insert_header(("X-Api-Key", key.clone()))
            .set_json(body)
    };

    let raw = "Sure! Here is the customer:\n```json\n{\"email\": \"john@example.com\", \"age\": \"42\", \"active\": \"yes\", \"note\": \"x\"}\n```\nAnything else?";
    let ok = expect!(app, gw(json!({"asset_id": asset, "payload_raw": raw})), StatusCode::OK);
    assert_eq!(ok["success"], true);
    assert_eq!(ok["data"], json!({"email": "j****@example.com", "age": 42, "active": true}));
    assert_eq!(ok["metadata"]["governance_applied"], json!(["email_MASK"]));
    assert_eq!(ok["metadata"]["safety_findings"], json!([]));

    // `raw_output` is an alias; a missing field and an uncoercible value make the drift report.
    let bad = expect!(
        app,
        gw(json!({"asset_id": asset, "raw_output": "{\"age\": \"forty\"}"})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(
        (bad["success"].clone(), bad["error"].clone(), bad["code"].clone()),
        (json!(false), json!("Schema Validation Failed"), json!("schema_validation_failed"))
    );
    assert_eq!(bad["drift_details"]["missing_fields"], json!(["email"]));
    assert_eq!(
        bad["drift_details"]["type_mismatches"],
        json!([{"field": "age", "expected": "integer", "received": "string"}])
    );

    // The failure is on the activity feed as schema.drift.
    let feed = expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/activity"), "ann"), StatusCode::OK);
    let drift: Vec<&Value> = feed["data"].as_array().unwrap().iter().filter(|e| e["type"] == "schema.drift").collect();
    assert_eq!(drift.len(), 1, "{feed}");
    assert_eq!(drift[0]["data"]["missing_fields"], json!(["email"]), "{feed}");
    assert_eq!(drift[0]["data"]["asset_id"], json!(asset));

    let none = expect!(
        app,
        gw(json!({"asset_id": asset, "payload_raw": "I cannot help with that."})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!((none["code"].clone(), none["error"].clone()), (json!("no_json_found"), json!("No JSON object found")));

    expect!(app, gw(json!({"asset_id": uuid::Uuid::now_v7(), "payload_raw": "{}"})), StatusCode::NOT_FOUND);
    let e = expect!(app, gw(json!({"asset_id": "nope", "payload_raw": "{}"})), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(e["details"]["errors"][0]["field"], "asset_id");
    // The free plan's 1,000 validations a month: every call that reached an asset counts.
    for _ in 0..997 {
        expect!(app, gw(json!({"asset_id": asset, "payload_raw": raw})), StatusCode::OK);
    }
    let over = expect!(app, gw(json!({"asset_id": asset, "payload_raw": raw})), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(over["code"], "quota_exceeded", "{over}");
    // The 800th and the 1,000th validation each recorded quota.threshold, once.
    let feed =
        expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/activity?limit=200"), "ann"), StatusCode::OK);
    let mut reached: Vec<(i64, i64)> = feed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "quota.threshold")
        .map(|e| (e["data"]["percent"].as_i64().unwrap(), e["data"]["used"].as_i64().unwrap()))
        .collect();
    reached.sort_unstable();
    assert_eq!(reached, [(80, 800), (100, 1000)], "{feed}");
    // Every 429 says when to try again: here, when the month rolls over.
    let res = test::call_service(&app, gw(json!({"asset_id": asset, "payload_raw": raw})).to_request()).await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let wait: u64 = res.headers().get("retry-after").expect("Retry-After").to_str().unwrap().parse().unwrap();
    assert!((1..=31 * 86_400).contains(&wait), "{wait}");
    // A session token is not an organization key.
    expect!(
        app,
        req(Method::POST, "/v1/gateway/validate", "ann").set_json(json!({"asset_id": asset, "payload_raw": "{}"})),
        StatusCode::UNAUTHORIZED
    );
}

#[actix_web::test]
async fn gateway_gives_the_spec_success_body_and_keeps_tenants_apart() {
    let (app, _store, org) = setup!();
    let asset = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/data-assets"), "ann").set_json(json!({
            "name": "user",
            "fields": [
                {"name": "user_id", "type": "integer", "required": true},
                {"name": "is_active", "type": "boolean", "required": true},
                {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]}
            ]
        })),
        StatusCode::CREATED
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    let key_of = |who: &'static str, org: String| {
        req(Method::POST, &format!("/v1/organizations/{org}/api-keys"), who)
            .set_json(json!({"name": "gw", "roles": ["Viewer"]}))
    };
    let ann_key = expect!(app, key_of("ann", org.clone()), StatusCode::CREATED)["key"].as_str().unwrap().to_string();
    let raw = "Here is the user you asked for:\n\n```json\n{\n  \"user_id\": \"42\",\n  \"is_active\": \"yes\",\n  \"email\": \"john@example.com\"\n}\n```\n\nLet me know if you need anything else.";
    let call = |key: &str| {
        TestRequest::default()
            .method(Method::POST)
            .uri("/v1/gateway/validate")
            .insert_header(("X-Api-Key", key.to_string()))
            .set_json(json!({"asset_id": asset, "payload_raw": raw}))
    };
    let mut body = expect!(app, call(&ann_key), StatusCode::OK);
    let repairs = body["metadata"].as_object_mut().unwrap().remove("repairs").expect("metadata.repairs");
    assert_eq!(
        body,
        json!({
            "success": true,
            "data": {"user_id": 42, "is_active": true, "email": "j****@example.com"},
            "metadata": {"governance_applied": ["email_MASK"], "safety_findings": []}
        })
    );
    let kinds: Vec<(&str, &str)> = repairs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["path"].as_str().unwrap(), r["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds, [("$", "extracted"), ("user_id", "coerced"), ("is_active", "coerced"), ("email", "masked")]);
    assert!(!repairs.to_string().contains("john"), "no sensitive value in a repair: {repairs}");

    // A client that accepts only clean output rejects repairs by kind.
    let reject = |kinds: Value| {
        TestRequest::default()
            .method(Method::POST)
            .uri("/v1/gateway/validate")
            .insert_header(("X-Api-Key", ann_key.clone()))
            .set_json(json!({"asset_id": asset, "payload_raw": raw, "reject": kinds}))
    };
    let refused = expect!(app, reject(json!(["coerced"])), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(refused["code"], "repair_rejected", "{refused}");
    assert_eq!(refused["metadata"]["repairs"], repairs);
    expect!(app, reject(json!(["closed_truncated", "duplicate_key"])), StatusCode::OK);
    let e = expect!(app, reject(json!(["made_up"])), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(e["code"], "validation_failed", "{e}");
    // A schema failure carries its repairs and a retry prompt.
    let failed = TestRequest::default()
        .method(Method::POST)
        .uri("/v1/gateway/validate")
        .insert_header(("X-Api-Key", ann_key.clone()))
        .set_json(json!({"asset_id": asset, "payload_raw": "{'user_id': 'x1', 'email': 'john@example.com'}"}));
    let failed = expect!(app, failed, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(failed["code"], "schema_validation_failed");
    assert_eq!(failed["metadata"]["repairs"][0]["kind"], "single_quotes", "{failed}");
    let prompt = failed["retry_prompt"].as_str().unwrap();
    assert!(prompt.contains("- user_id: expected integer, got string"), "{prompt}");
    assert!(!prompt.contains("john") && !prompt.contains("x1"), "{prompt}");

    // Another organization's key cannot reach the asset: 404, not 403.
    let bob_org = expect!(
        app,
        req(Method::POST, "/v1/organizations", "bob").set_json(json!({"name": "Bob Co"})),
        StatusCode::CREATED
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    let bob_key = expect!(app, key_of("bob", bob_org), StatusCode::CREATED)["key"].as_str().unwrap().to_string();
    let e = expect!(app, call(&bob_key), StatusCode::NOT_FOUND);
    assert_eq!(e["code"], "not_found", "{e}");
    // Without any key: 401.
    let anon = TestRequest::default()
        .method(Method::POST)
        .uri("/v1/gateway/validate")
        .set_json(json!({"asset_id": asset, "payload_raw": raw}));
    expect!(app, anon, StatusCode::UNAUTHORIZED);
}

#[actix_web::test]
async fn gateway_takes_bodies_up_to_4_mib_and_hostile_ones_get_an_answer() {
    let (app, _store, org) = setup!();
    let (asset, key) =
        support::asset_and_key(&app, &org, json!([{"name": "age", "type": "integer", "required": true}])).await;
    let gw = |raw: String| {
        TestRequest::default()
            .method(Method::POST)
            .uri("/v1/gateway/validate")
            .insert_header(("X-Api-Key", key.clone()))
            .set_json(json!({"asset_id": asset, "payload_raw": raw}))
    };
    // Long prose around the object: 3 MiB is taken (over the 1 MiB of
    // other endpoints).
    let prose = "The model thought about it at length. ".repeat((3 << 20) / 2 / 38);
    let ok = expect!(app, gw(format!("{prose}{{\"age\": 41}}{prose}")), StatusCode::OK);
    assert_eq!(ok["data"]["age"], 41);
    // What once took minutes: brackets that never close, at the limit.
    let hostile = "{[".repeat((4 << 20) / 2 - 256);
    let none = expect!(app, gw(hostile), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(none["code"], "no_json_found", "{none}");
    // Over 4 MiB: 413.
    let too_big = expect!(app, gw("x".repeat(4 << 20)), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(too_big["code"], "payload_too_large");
    // Not JSON, or the wrong shape: 400 and 422 as everywhere.
    let bad = TestRequest::default()
        .method(Method::POST)
        .uri("/v1/gateway/validate")
        .insert_header(("X-Api-Key", key.clone()))
        .insert_header(("Content-Type", "application/json"))
        .set_payload("{not json");
    expect!(app, bad, StatusCode::BAD_REQUEST);
    let shape = TestRequest::default()
        .method(Method::POST)
        .uri("/v1/gateway/validate")
        .insert_header(("X-Api-Key", key.clone()))
        .set_json(json!({"asset_id": asset}));
    expect!(app, shape, StatusCode::UNPROCESSABLE_ENTITY);
}

#[actix_web::test]
async fn secret_references_resolve_only_what_the_operator_granted() {
    let store = InMemoryStore::new();
    let connectors = MemoryConnectors::new();
    connectors.put("crm", people(), vec![]);
    connectors.require_password("crm", "s3cret-pw");
    let secrets = FakeSecrets(
        [
            ("CRM_PASSWORD".to_string(), "s3cret-pw".to_string()),
            ("SLUICE_JWT_HS256_SECRET".to_string(), "the-services-jwt-secret".to_string()),
            ("OTHER_TEAMS_PW".to_string(), "other-teams-secret".to_string()),
        ]
        .into(),
    );
    let clock = std::sync::Arc::new(sluice_testkit::ManualClock::new(time::OffsetDateTime::now_utc()));
    let ports = sluice_testkit::in_memory_ports_with(&store, clock, &connectors, secrets);
    // The operator grants everything it can: the service's own names stay out.
    let wide = test::init_service(app(support::state_on(ports.clone(), "CRM_* *"))).await;
    let org = acme!(wide);
    let conns = format!("/v1/organizations/{org}/connections");
    let body = |password: &str| json!({"name": "crm", "type": "memory", "capability": "source", "config": {"dataset": "crm", "password": password}});
    for path in [conns.clone(), format!("{conns}/test")] {
        let err = expect!(
            wide,
            req(Method::POST, &path, "ann").set_json(body("env:SLUICE_JWT_HS256_SECRET")),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        assert_eq!(err["details"]["errors"][0]["field"], "config.password", "{err}");
        let message = err["details"]["errors"][0]["message"].as_str().unwrap();
        assert!(message.contains("env:SLUICE_JWT_HS256_SECRET") && message.contains("own configuration"), "{message}");
        assert!(!err.to_string().contains("the-services-jwt-secret"), "{err}");
    }
    let err = expect!(
        wide,
        req(Method::POST, &format!("/v1/organizations/{org}/integrations"), "ann").set_json(
            json!({"name": "aws", "type": "memory", "credentials": {"password": "env:AWS_SECRET_ACCESS_KEY"}})
        ),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "credentials.password", "{err}");

    // With a narrower grant, an ungranted name is refused at every write path.
    let narrow = test::init_service(app(support::state_on(ports.clone(), "CRM_*"))).await;
    let err = expect!(
        narrow,
        req(Method::POST, &conns, "ann").set_json(body("env:OTHER_TEAMS_PW")),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let message = err["details"]["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("env:OTHER_TEAMS_PW") && message.contains("SLUICE_ENV_REFS_ALLOW"), "{message}");
    // The service's AWS identity reads nothing an operator did not assign.
    let err = expect!(
        narrow,
        req(Method::POST, &conns, "ann")
            .set_json(body("aws:secretsmanager:arn:aws:secretsmanager:us-east-1:1:secret:db")),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let message = err["details"]["errors"][0]["message"].as_str().unwrap();
    assert!(message.contains("SLUICE_AWS_SECRETS_ALLOW"), "{message}");
    let integ = expect!(
        narrow,
        req(Method::POST, &format!("/v1/organizations/{org}/integrations"), "ann")
            .set_json(json!({"name": "crm", "type": "memory", "credentials": {"password": "env:CRM_PASSWORD"}})),
        StatusCode::CREATED
    );
    let err = expect!(
        narrow,
        req(Method::PATCH, &format!("/v1/organizations/{org}/integrations/{}", integ["id"].as_str().unwrap()), "ann")
            .set_json(json!({"credentials": {"password": "env:OTHER_TEAMS_PW"}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "credentials.password", "{err}");
    let yaml = "version: \"1\"\nconnections:\n  - {name: other, type: memory, capability: source, config: {dataset: crm, password: \"env:OTHER_TEAMS_PW\"}}\n";
    let err = expect!(
        narrow,
        req(Method::POST, &format!("/v1/organizations/{org}/iac/apply"), "ann")
            .insert_header(("Content-Type", "application/x-yaml"))
            .set_payload(yaml),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "connections[0].config.password", "{err}");

    // A granted reference works; once the grant is withdrawn, its test and
    // its runs fail naming the reference, not with an empty value.
    let c = expect!(narrow, req(Method::POST, &conns, "ann").set_json(body("env:CRM_PASSWORD")), StatusCode::CREATED);
    let test_path = format!("{conns}/{}/test", c["id"].as_str().unwrap());
    let t = expect!(narrow, req(Method::POST, &test_path, "ann"), StatusCode::OK);
    assert_eq!(t["ok"], true, "{t}");
    let none = test::init_service(app(support::state_on(ports.clone(), ""))).await;
    let t = expect!(none, req(Method::POST, &test_path, "ann"), StatusCode::OK);
    assert_eq!(t["ok"], false, "{t}");
    assert_eq!(t["error_code"], "invalid_config", "{t}");
    assert!(t["error"].as_str().unwrap().contains("env:CRM_PASSWORD"), "{t}");
}

#[actix_web::test]
async fn a_stored_secret_goes_only_where_it_was_entered_for() {
    let (app, _, org) = setup!();
    let inv = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/invitations"), "ann")
            .set_json(json!({"email": "eve@example.com", "role": "Editor"})),
        StatusCode::CREATED
    );
    expect!(
        app,
        req(Method::POST, "/v1/invitations/accept", "eve").set_json(json!({"token": inv["token"]})),
        StatusCode::OK
    );
    let conns = format!("/v1/organizations/{org}/connections");
    // An Admin's integration, used by one connection (dataset crm).
    let iid = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/integrations"), "ann")
            .set_json(json!({"name": "crm", "type": "memory", "credentials": {"password": "s3cret-pw"}})),
        StatusCode::CREATED
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    let body = |name: &str, dataset: &str| json!({"name": name, "type": "memory", "capability": "source", "integration_id": iid, "config": {"dataset": dataset}});
    let cid = expect!(app, req(Method::POST, &conns, "ann").set_json(body("crm", "crm")), StatusCode::CREATED)["id"]
        .as_str()
        .unwrap()
        .to_string();

    // An Editor may not point the integration's secret at another place:
    // not by re-pointing the connection, nor by a new one, nor by an unsaved test.
    let err = expect!(
        app,
        req(Method::PATCH, &format!("{conns}/{cid}"), "eve").set_json(json!({"config": {"dataset": "evil"}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "config.password", "{err}");
    expect!(app, req(Method::POST, &conns, "eve").set_json(body("evil", "evil")), StatusCode::UNPROCESSABLE_ENTITY);
    expect!(
        app,
        req(Method::POST, &format!("{conns}/test"), "eve").set_json(body("evil", "evil")),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    // Where the integration is already used, or with the secret supplied
    // again, an Editor may; an Admin may always.
    expect!(app, req(Method::POST, &format!("{conns}/test"), "eve").set_json(body("again", "crm")), StatusCode::OK);
    expect!(app, req(Method::POST, &conns, "eve").set_json(body("crm2", "crm")), StatusCode::CREATED);
    expect!(
        app,
        req(Method::PATCH, &format!("{conns}/{cid}"), "eve")
            .set_json(json!({"config": {"dataset": "people", "password": "entered-again"}})),
        StatusCode::OK
    );
    expect!(
        app,
        req(Method::PATCH, &format!("{conns}/{cid}"), "eve").set_json(json!({"name": "renamed"})),
        StatusCode::OK
    );
    // Dropping its own password there would send the integration's instead.
    let err = expect!(
        app,
        req(Method::PATCH, &format!("{conns}/{cid}"), "eve").set_json(json!({"config": {"password": null}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "config.password", "{err}");
    expect!(
        app,
        req(Method::PATCH, &format!("{conns}/{cid}"), "ann").set_json(json!({"config": {"dataset": "elsewhere"}})),
        StatusCode::OK
    );

    // A connection's own secret, too: moving it asks for the secret again.
    let own = expect!(
        app,
        req(Method::POST, &conns, "eve").set_json(json!({
            "name": "own", "type": "memory", "capability": "source", "config": {"dataset": "crm", "password": "s3cret-pw"}
        })),
        StatusCode::CREATED
    )["id"]
        .as_str()
        .unwrap()
        .to_string();
    let err = expect!(
        app,
        req(Method::PATCH, &format!("{conns}/{own}"), "eve")
            .set_json(json!({"config": {"dataset": "evil", "password": "***"}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "config.password", "{err}");
    // Nor through an IaC document (the stored secret kept as `***`)…
    let yaml = "version: \"1\"\nconnections:\n  - {name: own, type: memory, capability: source, config: {dataset: evil, password: \"***\"}}\n";
    let iac = |who: &str| {
        req(Method::POST, &format!("/v1/organizations/{org}/iac/apply?dry_run=true"), who)
            .insert_header(("Content-Type", "application/x-yaml"))
            .set_payload(yaml)
    };
    let err = expect!(app, iac("eve"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err["details"]["errors"][0]["field"], "connections[0].config.password", "{err}");
    expect!(app, iac("ann"), StatusCode::OK);
    // Re-attaching it to the Admin's integration at a new place is refused too.
    let err = expect!(
        app,
        req(Method::PATCH, &format!("{conns}/{own}"), "eve")
            .set_json(json!({"integration_id": iid, "config": {"password": null, "dataset": "nowhere"}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "config.password", "{err}");

    // Nor by changing where the integration itself points: a setting that
    // is not a secret (a port, a TLS mode) fills in what its connections
    // leave out.
    let integration = format!("/v1/organizations/{org}/integrations/{iid}");
    let err = expect!(
        app,
        req(Method::PATCH, &integration, "eve").set_json(json!({"credentials": {"dataset": "evil"}})),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(err["details"]["errors"][0]["field"], "credentials.password", "{err}");
    let yaml = "version: \"1\"\nintegrations:\n  - {name: crm, type: memory, credentials: {password: \"***\", dataset: evil}}\n";
    let iac = |who: &str| {
        req(Method::POST, &format!("/v1/organizations/{org}/iac/apply?dry_run=true"), who)
            .insert_header(("Content-Type", "application/x-yaml"))
            .set_payload(yaml)
    };
    let err = expect!(app, iac("eve"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(err["details"]["errors"][0]["field"], "integrations[0].credentials.password", "{err}");
    expect!(app, iac("ann"), StatusCode::OK);
    // A secret supplied again, or a change of the secret alone, is the
    // Editor's to make; an Admin may always.
    expect!(
        app,
        req(Method::PATCH, &integration, "eve")
            .set_json(json!({"credentials": {"dataset": "evil", "password": "new"}})),
        StatusCode::OK
    );
    expect!(
        app,
        req(Method::PATCH, &integration, "eve").set_json(json!({"credentials": {"password": "newer"}})),
        StatusCode::OK
    );
    expect!(
        app,
        req(Method::PATCH, &integration, "ann").set_json(json!({"credentials": {"dataset": null}})),
        StatusCode::OK
    );
}
