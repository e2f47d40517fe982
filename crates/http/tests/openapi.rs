//! `docs/openapi.json` is generated from the code and committed; this test
//! fails when it drifts. `just openapi` (SLUICE_UPDATE_OPENAPI=1) rewrites it.

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
        "docs/openapi.json is out of date with the code; run `just openapi` (SLUICE_UPDATE_OPENAPI=1 cargo test -p sluice-http --test openapi)"
    );
}
