//! HTTP tests of infrastructure as code over the in-memory adapters: the
//! apply round trip, dry runs, every error class and body, roles,
//! atomicity, export, concurrent applies and validate-drift.

use crate::support::{self, app, req, send};
use actix_web::http::{Method, StatusCode};
use actix_web::test::{self, TestRequest};
use serde_json::{Value, json};
use sluice_domain::connect::connector::{EntitySchema, FieldType, Value as V};
use sluice_testkit::{FakeSecrets, InMemoryStore, MemoryConnectors};

fn yaml(uri: &str, who: &str, body: &str) -> TestRequest {
    req(Method::POST, uri, who).insert_header(("Content-Type", "application/x-yaml")).set_payload(body.to_string())
}

fn orders() -> EntitySchema {
    support::keyed("orders", &[("amount", FieldType::Integer), ("updated_at", FieldType::Timestamp)])
}

macro_rules! setup {
    () => {{
        let store = InMemoryStore::new();
        let connectors = MemoryConnectors::new();
        connectors.put("shop", orders(), vec![vec![V::Int(1), V::Int(10), V::Null]]);
        let app = test::init_service(app(support::state_with(&store, &connectors, FakeSecrets::default()))).await;
        let org = acme!(app);
        (app, store, org)
    }};
}

const DOC: &str = r#"
version: "1"
integrations:
  - name: shop-creds
    type: memory
    credentials: {password: s3cret-pw}
connections:
  - {name: shop, integration: shop-creds, type: memory, capability: source, config: {dataset: shop}}
  - {name: lake, type: memory, capability: destination, config: {dataset: lake}}
  - {name: archive, type: memory, capability: both, config: {dataset: archive, password: "env:ARCHIVE_PW"}}
flows:
  - name: orders
    source_connection: shop
    destination_connection: lake
    schedule: "*/15 * * * *"
    config:
      mappings:
        - {source_entity: orders, sync_mode: incremental_deduped, cursor_field: updated_at, primary_key: id}
  - name: orders-archive
    source_connection: shop
    destination_connection: archive
    config:
      mappings: [{source_entity: orders, sync_mode: full_refresh_append}]
      depends_on: [{flow: orders, on: success}]
"#;

fn summary(b: &Value) -> (u64, u64, u64) {
    let s = &b["summary"];
    (s["created"].as_u64().unwrap(), s["updated"].as_u64().unwrap(), s["unchanged"].as_u64().unwrap())
}

#[actix_web::test]
async fn apply_reapply_change_and_dry_run() {
    let (app, store, org) = setup!();
    let apply = format!("/v1/organizations/{org}/iac/apply");
    let b = expect!(app, yaml(&apply, "ann", DOC), StatusCode::OK);
    assert_eq!(summary(&b), (6, 0, 0), "{b}");
    assert_eq!(b["dry_run"], false);
    let kinds: Vec<(&str, &str)> = b["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["kind"].as_str().unwrap(), c["name"].as_str().unwrap()))
        .collect();
    assert_eq!(kinds[0], ("integration", "shop-creds"));
    assert_eq!(kinds[4..], [("flow", "orders"), ("flow", "orders-archive")]);
    assert!(!b.to_string().contains("s3cret-pw"));
    let apply_id = b["apply_id"].as_str().unwrap().to_string();

    // The resources exist, reference each other, and the audit log names the apply.
    let flows = expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/flows"), "ann"), StatusCode::OK);
    assert_eq!(flows["data"].as_array().unwrap().len(), 2);
    let archive = flows["data"].as_array().unwrap().iter().find(|f| f["name"] == "orders-archive").unwrap().clone();
    let orders_id = b["changes"][4]["id"].as_str().unwrap();
    assert_eq!(archive["config"]["depends_on"][0]["flow"], orders_id);
    let entries: Vec<_> = store.audit_entries().into_iter().filter(|e| e.details["apply_id"] == apply_id).collect();
    assert_eq!(entries.len(), 7, "six resources and the apply itself");
    assert!(entries.iter().any(|e| e.action == "iac.applied"));
    assert!(!format!("{entries:?}").contains("s3cret-pw"));

    // The same document again: nothing changes.
    let b = expect!(app, yaml(&apply, "ann", DOC), StatusCode::OK);
    assert_eq!(summary(&b), (0, 0, 6), "{b}");
    assert_eq!(b["apply_id"], Value::Null);

    // A dry run of an edit answers the plan and writes nothing.
    let edited = DOC.replace("*/15 * * * *", "0 * * * *");
    let b = expect!(app, yaml(&format!("{apply}?dry_run=true"), "ann", &edited), StatusCode::OK);
    assert_eq!(b["dry_run"], true);
    assert_eq!(summary(&b), (0, 1, 5));
    let change = b["changes"].as_array().unwrap().iter().find(|c| c["action"] == "updated").unwrap();
    assert_eq!(change["diff"], json!([{"path": "schedule", "before": "*/15 * * * *", "after": "0 * * * *"}]));
    let f =
        expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/flows/{orders_id}"), "ann"), StatusCode::OK);
    assert_eq!(f["schedule"], "*/15 * * * *");

    // A dry run of something new shows no id.
    let more = format!(
        "{DOC}  - {{name: extra, source_connection: shop, destination_connection: lake, config: {{mappings: [{{source_entity: orders, dest_entity: o2, sync_mode: full_refresh_overwrite}}]}}}}\n"
    );
    let b = expect!(app, yaml(&format!("{apply}?dry_run=true"), "ann", &more), StatusCode::OK);
    let extra = b["changes"].as_array().unwrap().iter().find(|c| c["name"] == "extra").unwrap();
    assert_eq!((extra["action"].as_str(), &extra["id"]), (Some("created"), &Value::Null));

    // The edit for real; its audit entry carries the diff.
    let b = expect!(app, yaml(&apply, "ann", &edited), StatusCode::OK);
    assert_eq!(summary(&b), (0, 1, 5));
    let updated: Vec<_> = store.audit_entries().into_iter().filter(|e| e.action == "flow.updated").collect();
    assert_eq!(updated.len(), 1);
    assert_eq!(updated[0].resource_id.as_deref(), Some(orders_id));
    assert_eq!(updated[0].details["diff"][0]["path"], "schedule");
    let f =
        expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/flows/{orders_id}"), "ann"), StatusCode::OK);
    assert_eq!(f["schedule"], "0 * * * *");
}

#[actix_web::test]
async fn bodies_of_every_refusal() {
    let (app, _, org) = setup!();
    let apply = format!("/v1/organizations/{org}/iac/apply");

    // 415: not YAML.
    let b = expect!(
        app,
        req(Method::POST, &apply, "ann").set_json(json!({"version": "1"})),
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    assert_eq!(b["code"], "unsupported_media_type");
    // application/yaml with a charset is fine.
    expect!(
        app,
        req(Method::POST, &apply, "ann")
            .insert_header(("Content-Type", "application/yaml; charset=utf-8"))
            .set_payload("version: '1'\n"),
        StatusCode::OK
    );

    // 400: not YAML at all, with line and column.
    let b = expect!(app, yaml(&apply, "ann", "version: '1'\nflows: [\n  {name: x\n"), StatusCode::BAD_REQUEST);
    assert_eq!(b["code"], "malformed_yaml");
    assert!(b["details"]["line"].as_u64().is_some() && b["details"]["column"].as_u64().is_some(), "{b}");
    assert!(b["request_id"].is_string());

    // 422: a wrong shape, with its YAML path, line and column.
    let b = expect!(
        app,
        yaml(
            &apply,
            "ann",
            "version: '1'\nflows:\n  - name: x\n    source_connection: a\n    destination_connection: b\n    shedule: '* * * * *'\n    config: {mappings: []}\n"
        ),
        StatusCode::UNPROCESSABLE_ENTITY
    );
    assert_eq!(b["code"], "validation_failed");
    assert_eq!(b["details"]["errors"][0]["field"], "flows[0].shedule");
    assert_eq!(b["details"]["errors"][0]["line"], 6);
    assert!(b["details"]["errors"][0]["message"].as_str().unwrap().contains("unknown field"));

    // 422: an unsupported version.
    let b = expect!(app, yaml(&apply, "ann", "version: '7'\n"), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["errors"][0]["field"], "version");

    // 422: every validation problem at once, each with its path.
    let bad = r#"
version: "1"
integrations:
  - {name: dup, type: memory}
  - {name: dup, type: oracle}
connections:
  - {name: src, type: memory, capability: source, integration: ghost, config: {dataset: shop}}
  - {name: nope, type: carrier-pigeon, capability: source}
  - {name: dst, type: memory, capability: destination, config: {}}
flows:
  - name: f
    source_connection: dst
    destination_connection: missing
    schedule: "every tuesday"
    config:
      mappings: [{source_entity: orders, sync_mode: incremental_append}]
      depends_on: [{flow: g, on: success}]
"#;
    let b = expect!(app, yaml(&apply, "ann", bad), StatusCode::UNPROCESSABLE_ENTITY);
    let fields: Vec<&str> =
        b["details"]["errors"].as_array().unwrap().iter().map(|e| e["field"].as_str().unwrap()).collect();
    for want in [
        "integrations[1].name",
        "integrations[1].type",
        "connections[0].integration",
        "connections[1].type",
        "connections[2].config.dataset",
        "flows[0].schedule",
        "flows[0].config.mappings[0].cursor_field",
        "flows[0].source_connection",
        "flows[0].destination_connection",
        "flows[0].config.depends_on[0].flow",
    ] {
        assert!(fields.contains(&want), "{want} missing from {fields:?}");
    }

    // Nothing of it was written.
    let c = expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/connections"), "ann"), StatusCode::OK);
    assert_eq!(c["data"], json!([]));

    // Another organization's apply answers 404; a stranger cannot see it.
    expect!(app, yaml(&apply, "bob", DOC), StatusCode::NOT_FOUND);
}

#[actix_web::test]
async fn a_document_whose_last_flow_is_invalid_leaves_nothing_created() {
    let (app, _, org) = setup!();
    let apply = format!("/v1/organizations/{org}/iac/apply");
    let broken = format!(
        "{DOC}  - {{name: bad, source_connection: shop, destination_connection: lake, schedule: '99 * * * *', config: {{mappings: [{{source_entity: orders, dest_entity: b, sync_mode: full_refresh_append}}]}}}}\n"
    );
    let b = expect!(app, yaml(&apply, "ann", &broken), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(b["details"]["errors"][0]["field"], "flows[2].schedule");
    for kind in ["integrations", "connections", "flows"] {
        let l = expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/{kind}"), "ann"), StatusCode::OK);
        assert_eq!(l["data"], json!([]), "{kind}");
    }
}

#[actix_web::test]
async fn viewers_may_export_but_not_apply() {
    let (app, _, org) = setup!();
    let key = expect!(
        app,
        req(Method::POST, &format!("/v1/organizations/{org}/api-keys"), "ann")
            .set_json(json!({"name": "ro", "roles": ["Viewer"]})),
        StatusCode::CREATED
    )["key"]
        .as_str()
        .unwrap()
        .to_string();
    let as_viewer = |r: TestRequest| r.insert_header(("X-Api-Key", key.clone()));
    let b = expect!(
        app,
        as_viewer(TestRequest::post().uri(&format!("/v1/organizations/{org}/iac/apply")))
            .insert_header(("Content-Type", "application/x-yaml"))
            .set_payload(DOC),
        StatusCode::FORBIDDEN
    );
    assert_eq!(b["code"], "forbidden");
    let export = as_viewer(TestRequest::get().uri(&format!("/v1/organizations/{org}/iac/export")));
    assert_eq!(test::call_service(&app, export.to_request()).await.status(), StatusCode::OK);
}

#[actix_web::test]
async fn an_export_applies_back_unchanged_and_hides_secrets() {
    let (app, _, org) = setup!();
    expect!(app, yaml(&format!("/v1/organizations/{org}/iac/apply"), "ann", DOC), StatusCode::OK);
    let res =
        test::call_service(&app, req(Method::GET, &format!("/v1/organizations/{org}/iac/export"), "ann").to_request())
            .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers().get("content-type").unwrap(), "application/x-yaml");
    let text = String::from_utf8(test::read_body(res).await.to_vec()).unwrap();
    assert!(!text.contains("s3cret-pw") && !text.contains("ARCHIVE_PW"), "{text}");
    assert!(text.contains("password: '***'") || text.contains("password: \"***\""), "{text}");
    let b = expect!(app, yaml(&format!("/v1/organizations/{org}/iac/apply"), "ann", &text), StatusCode::OK);
    assert_eq!(summary(&b), (0, 0, 6), "{text}\n{b}");
}

#[actix_web::test]
async fn concurrent_applies_create_each_resource_once() {
    let (app, _, org) = setup!();
    let apply = format!("/v1/organizations/{org}/iac/apply");
    let (a, b) = futures_util::join!(send(&app, yaml(&apply, "ann", DOC)), send(&app, yaml(&apply, "ann", DOC)));
    assert_eq!((a.0, b.0), (StatusCode::OK, StatusCode::OK), "{} / {}", a.1, b.1);
    let created = summary(&a.1).0 + summary(&b.1).0;
    assert_eq!(created, 6, "each resource is created by exactly one apply");
    let l = expect!(app, req(Method::GET, &format!("/v1/organizations/{org}/connections"), "ann"), StatusCode::OK);
    assert_eq!(l["data"].as_array().unwrap().len(), 3);
}

#[actix_web::test]
async fn idempotency_keys_replay_an_apply() {
    let (app, _, org) = setup!();
    let apply = format!("/v1/organizations/{org}/iac/apply");
    let first = expect!(app, yaml(&apply, "ann", DOC).insert_header(("X-Idempotency-Key", "k-1")), StatusCode::OK);
    let res =
        test::call_service(&app, yaml(&apply, "ann", DOC).insert_header(("X-Idempotency-Key", "k-1")).to_request())
            .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().contains_key("idempotent-replayed"));
    let again: Value = serde_json::from_slice(&test::read_body(res).await).unwrap();
    assert_eq!(again, first, "the replay is the first answer, not a second apply");
    let reuse = yaml(&apply, "ann", &DOC.replace("*/15", "*/5")).insert_header(("X-Idempotency-Key", "k-1"));
    expect!(app, reuse, StatusCode::UNPROCESSABLE_ENTITY);
}

#[actix_web::test]
async fn drift_is_checked_against_the_schema_the_flow_last_saw() {
    let (app, _, org) = setup!();
    expect!(app, yaml(&format!("/v1/organizations/{org}/iac/apply"), "ann", DOC), StatusCode::OK);
    let uri = format!("/v1/organizations/{org}/iac/validate-drift");
    let body = |schema: Value| json!({"flow_id": "orders", "entity_name": "orders", "proposed_schema": schema});
    let same = json!([
        {"name": "id", "type": "integer", "required": true},
        {"name": "amount", "type": "integer"},
        {"name": "updated_at", "type": "timestamp"}
    ]);
    let b = expect!(app, req(Method::POST, &uri, "ann").set_json(body(same)), StatusCode::OK);
    assert_eq!(b, json!({"has_drift": false, "drift_type": "none", "impacts": [], "suggested_actions": []}));
    let evolved = json!([
        {"name": "id", "type": "integer", "required": true},
        {"name": "amount", "type": "number"},
        {"name": "updated_at", "type": "timestamp"},
        {"name": "currency", "type": "string"}
    ]);
    let b = expect!(app, req(Method::POST, &uri, "ann").set_json(body(evolved)), StatusCode::OK);
    assert_eq!(b["drift_type"], "evolution");
    assert_eq!(b["impacts"].as_array().unwrap().len(), 2);
    let broken = json!([{"name": "amount", "type": "integer", "required": true}]);
    let b = expect!(app, req(Method::POST, &uri, "ann").set_json(body(broken)), StatusCode::OK);
    assert_eq!(b["drift_type"], "breaking");
    let kinds: Vec<&str> = b["impacts"].as_array().unwrap().iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["primary_key_removed", "became_required", "cursor_field_removed"]);
    assert!(!b["suggested_actions"].as_array().unwrap().is_empty());

    let b = expect!(
        app,
        req(Method::POST, &uri, "ann")
            .set_json(json!({"flow_id": "ghost", "entity_name": "orders", "proposed_schema": []})),
        StatusCode::NOT_FOUND
    );
    assert_eq!(b["code"], "not_found");
    expect!(
        app,
        req(Method::POST, &uri, "ann")
            .set_json(json!({"flow_id": "orders", "entity_name": "nope", "proposed_schema": []})),
        StatusCode::NOT_FOUND
    );
    expect!(
        app,
        req(Method::POST, &uri, "ann").set_json(
            json!({"flow_id": "orders", "entity_name": "orders", "proposed_schema": [{"name": "x", "type": "blob"}]})
        ),
        StatusCode::UNPROCESSABLE_ENTITY
    );
}
