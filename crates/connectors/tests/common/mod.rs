//! What the connector tests share: the CI switch, unique names and configs.

#![allow(dead_code)] // each test file uses its part

use sluice_domain::connect::connector::ResolvedConfig;
use std::collections::BTreeMap;

/// On CI a server that is down fails the test; elsewhere it is skipped loudly.
/// Whether the servers the tests use must be up: always, unless
/// `SLUICE_TEST_SKIP_SERVICES=1` says to skip the tests that need them.
#[allow(clippy::disallowed_methods)] // a test switch, not configuration
pub fn services_required() -> bool {
    !std::env::var("SLUICE_TEST_SKIP_SERVICES").is_ok_and(|v| v == "1")
}

/// A short random suffix for schema and database names.
pub fn tag() -> String {
    sluice_domain::shared::secret::random_base62(8).to_lowercase()
}

/// A connector config from JSON, its `password` a credential.
pub fn config(t: &str, values: serde_json::Value) -> ResolvedConfig {
    let values: BTreeMap<String, serde_json::Value> = serde_json::from_value(values).unwrap();
    ResolvedConfig { connector_type: t.into(), values, credential_keys: vec!["password".into()], org: None }
}
