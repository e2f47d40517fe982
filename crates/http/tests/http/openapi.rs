//! `docs/openapi.json` is generated from the code and committed; this test
//! fails when it drifts. `just openapi` (SLUICE_UPDATE_OPENAPI=1, with the
//! workspace's features: `cargo test --workspace --test http -- openapi::`)
//! rewrites it.

#[test]
#[allow(clippy::disallowed_methods)] // a test switch, not configuration
fn the_committed_openapi_document_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json");
    let generated = serde_json::to_string_pretty(&sluice_http::openapi()).unwrap() + "\n";
    if std::env::var("SLUICE_UPDATE_OPENAPI").is_ok_and(|v| v == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is out of date with the code; run `just openapi` (SLUICE_UPDATE_OPENAPI=1 cargo test --workspace --test http -- openapi::, with the workspace's features, as CI builds it)"
    );
}

/// What OpenAPI requires and clients rely on: unique operation ids, a
/// description on every response, and an example of every body.
#[test]
fn every_operation_is_unique_described_and_exemplified() {
    let doc = serde_json::to_value(sluice_http::openapi()).unwrap();
    let mut ids = std::collections::BTreeSet::new();
    let mut operations = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            operations += 1;
            let id = op["operationId"].as_str().unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_string()), "operationId {id} repeats ({method} {path})");
            assert!(op["summary"].as_str().is_some_and(|s| !s.is_empty()), "{method} {path} has no summary");
            for (status, response) in op["responses"].as_object().unwrap() {
                assert!(
                    response["description"].as_str().is_some_and(|d| !d.is_empty()),
                    "{method} {path} {status}: no description"
                );
                for (media, content) in response["content"].as_object().into_iter().flatten() {
                    assert!(content.get("example").is_some(), "{method} {path} {status} {media}: no example");
                }
            }
            if let Some(body) = op.get("requestBody") {
                for (media, content) in body["content"].as_object().unwrap() {
                    let schema = &content["schema"];
                    let named = schema["$ref"].as_str().and_then(|r| r.rsplit('/').next());
                    let has = content.get("example").is_some()
                        || named.is_some_and(|n| doc["components"]["schemas"][n].get("examples").is_some())
                        || media != "application/json";
                    assert!(has, "{method} {path}: the {media} request body has no example");
                }
            }
        }
    }
    assert!(operations > 80, "{operations}");
}
