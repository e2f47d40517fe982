//! Integrations (reusable credentials) and connections (sources and
//! destinations built on them), with the rules for credentials: secret
//! references, the `***` placeholder, and the order in which settings merge.

use crate::shared::ids::{IntegrationId, OrgId};
use crate::{FieldError, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use time::OffsetDateTime;

/// What reads show in place of a secret, and what writes may send to keep
/// the stored one.
pub const PLACEHOLDER: &str = crate::shared::audit::REDACTED;

/// Credential values by key. Values are plain secrets or references
/// (`env:NAME`, `aws:secretsmanager:ARN`). `Debug` hides every value.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials(pub BTreeMap<String, String>);

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.keys().map(|k| (k, PLACEHOLDER))).finish()
    }
}

impl Credentials {
    /// The keys with `***` for values, as reads show them.
    pub fn masked(&self) -> BTreeMap<String, String> {
        self.0.keys().map(|k| (k.clone(), PLACEHOLDER.to_string())).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Applies an update: a string sets a key (`***` keeps the stored
    /// value), `null` removes it, keys not mentioned stay.
    pub fn merge(&mut self, field: &str, update: &BTreeMap<String, Value>) -> Result<(), Vec<FieldError>> {
        let mut errors = Vec::new();
        for (k, v) in update {
            match v {
                Value::Null => {
                    self.0.remove(k);
                }
                Value::String(s) if s == PLACEHOLDER => {}
                Value::String(s) => match check_reference(s) {
                    Ok(()) => {
                        self.0.insert(k.clone(), s.clone());
                    }
                    Err(m) => errors.push(FieldError::new(format!("{field}.{k}"), m)),
                },
                _ => errors.push(FieldError::new(format!("{field}.{k}"), "must be a string")),
            }
        }
        if errors.is_empty() { Ok(()) } else { Err(errors) }
    }
}

/// A credential value as stored: a secret, or a reference resolved when used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretValue<'a> {
    Plain(&'a str),
    Env(&'a str),
    AwsSecretsManager(&'a str),
}

impl<'a> SecretValue<'a> {
    pub fn parse(v: &'a str) -> Self {
        if let Some(name) = v.strip_prefix("env:") {
            SecretValue::Env(name)
        } else if let Some(arn) = v.strip_prefix("aws:secretsmanager:") {
            SecretValue::AwsSecretsManager(arn)
        } else {
            SecretValue::Plain(v)
        }
    }

    pub fn is_reference(&self) -> bool {
        !matches!(self, SecretValue::Plain(_))
    }
}

/// A reference must name something: `env:` an environment variable name,
/// `aws:secretsmanager:` an ARN or secret name.
pub fn check_reference(v: &str) -> std::result::Result<(), String> {
    match SecretValue::parse(v) {
        SecretValue::Plain(_) => Ok(()),
        SecretValue::Env(name) => {
            let ok = !name.is_empty()
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                && !name.as_bytes()[0].is_ascii_digit();
            if ok { Ok(()) } else { Err(format!("'env:{name}' does not name an environment variable")) }
        }
        SecretValue::AwsSecretsManager(arn) => {
            if arn.is_empty() || arn.contains(char::is_whitespace) {
                Err("'aws:secretsmanager:' must be followed by a secret ARN or name".into())
            } else {
                Ok(())
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Integration {
    pub id: IntegrationId,
    pub org_id: OrgId,
    pub name: String,
    pub integration_type: String,
    pub credentials: Credentials,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::connect::connector::{Capability, ConnectorSpec};
    use crate::connect::connector::{ConfigField, ConfigFieldType};
    use serde_json::json;

    pub(crate) fn spec() -> ConnectorSpec {
        let f = ConfigField::string;
        ConnectorSpec {
            connector_type: "postgres",
            title: "PostgreSQL",
            capabilities: vec![Capability::Both],
            config_fields: vec![
                f("host", false, true),
                f("user", false, false),
                f("password", true, false),
                ConfigField {
                    name: "port",
                    field_type: ConfigFieldType::Integer,
                    required: false,
                    credential: false,
                    default: Some(json!(5432)),
                    description: "",
                },
            ],
            sync_modes: vec![],
            features: vec![],
            variants: vec![],
        }
    }

    pub(crate) fn map(v: Value) -> BTreeMap<String, Value> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_placeholder_keeps_a_stored_secret_and_null_removes_it() {
        let mut c = Credentials([("password".to_string(), "s3cret".to_string())].into());
        c.merge("credentials", &map(json!({"password": "***"}))).unwrap();
        assert_eq!(c.0["password"], "s3cret");
        c.merge("credentials", &map(json!({"password": "env:PG_PASSWORD", "user": "app"}))).unwrap();
        assert_eq!(c.0["password"], "env:PG_PASSWORD");
        c.merge("credentials", &map(json!({"user": null}))).unwrap();
        assert!(!c.0.contains_key("user"));
        let errs = c.merge("credentials", &map(json!({"password": "env:1BAD", "token": {"x": 1}}))).unwrap_err();
        assert_eq!(errs.len(), 2);
    }

    #[test]
    fn credentials_never_print_their_values() {
        let c = Credentials([("password".to_string(), "s3cret".to_string())].into());
        assert!(!format!("{c:?}").contains("s3cret"));
        assert_eq!(c.masked()["password"], "***");
    }
}
