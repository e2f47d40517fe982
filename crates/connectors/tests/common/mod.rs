//! What the connector tests share: the CI switch, unique names and configs.

#![allow(dead_code)] // each test file uses its part

use sluice_domain::connect::connector::ResolvedConfig;
use std::collections::BTreeMap;

#[allow(unused_imports)] // each test file uses its part
pub use sluice_testkit::services::{required as services_required, unavailable};

/// A short random suffix for schema and database names.
pub fn tag() -> String {
    sluice_domain::shared::secret::random_base62(8).to_lowercase()
}

/// A connector config from JSON, its `password` a credential.
pub fn config(t: &str, values: serde_json::Value) -> ResolvedConfig {
    let values: BTreeMap<String, serde_json::Value> = serde_json::from_value(values).unwrap();
    ResolvedConfig { connector_type: t.into(), values, credential_keys: vec!["password".into()], org: None }
}
