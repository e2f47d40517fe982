//! Integrations (reusable credentials) and connections (sources and
//! destinations built on them), with the rules for credentials: secret
//! references, the `***` placeholder, and the order in which settings merge.

use crate::connect::connector::{Capability, ConnectorSpec, ResolvedConfig};
use crate::shared::ids::{ConnectionId, IntegrationId, OrgId};
use crate::{Error, FieldError, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;
use time::OffsetDateTime;

/// What reads show in place of a secret, and what writes may send to keep
/// the stored one.
pub const PLACEHOLDER: &str = "***";

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

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectionStatus {
    Untested,
    Healthy,
    Failing,
}

impl ConnectionStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectionStatus::Untested => "untested",
            ConnectionStatus::Healthy => "healthy",
            ConnectionStatus::Failing => "failing",
        }
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "untested" => Ok(Self::Untested),
            "healthy" => Ok(Self::Healthy),
            "failing" => Ok(Self::Failing),
            other => Err(Error::Internal(anyhow::anyhow!("unknown connection status {other}"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Connection {
    pub id: ConnectionId,
    pub org_id: OrgId,
    pub name: String,
    pub integration_id: Option<IntegrationId>,
    pub connector_type: String,
    pub capability: Capability,
    /// Settings that are not credentials.
    pub config: BTreeMap<String, Value>,
    /// Credential settings of this connection (override the integration's).
    pub secrets: Credentials,
    pub status: ConnectionStatus,
    pub last_tested_at: Option<OffsetDateTime>,
    pub last_error: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl Connection {
    /// The config as reads show it: settings, and each secret as `***`.
    pub fn public_config(&self) -> BTreeMap<String, Value> {
        let mut out = self.config.clone();
        for k in self.secrets.0.keys() {
            out.insert(k.clone(), Value::String(PLACEHOLDER.into()));
        }
        out
    }
}

/// Splits a config object into settings and credentials per `spec`,
/// applying it over `existing` (updates) with the placeholder rule.
pub fn split_config(
    spec: &ConnectorSpec,
    update: &BTreeMap<String, Value>,
    existing_config: &BTreeMap<String, Value>,
    existing_secrets: &Credentials,
) -> Result<(BTreeMap<String, Value>, Credentials), Vec<FieldError>> {
    let credential: Vec<&str> = spec.credential_fields().collect();
    let mut config = existing_config.clone();
    let mut secret_update = BTreeMap::new();
    for (k, v) in update {
        if credential.contains(&k.as_str()) {
            secret_update.insert(k.clone(), v.clone());
        } else if v.is_null() {
            config.remove(k);
        } else {
            config.insert(k.clone(), v.clone());
        }
    }
    let mut secrets = existing_secrets.clone();
    secrets.merge("config", &secret_update)?;
    // Validate the settings a connection would run with (credentials count
    // as present whether plain or referenced).
    let mut merged = config.clone();
    for k in secrets.0.keys() {
        merged.insert(k.clone(), Value::String(PLACEHOLDER.into()));
    }
    let errors = spec.validate(&merged);
    if errors.is_empty() { Ok((config, secrets)) } else { Err(errors) }
}

/// Checks that a connector type offers `capability`.
pub fn check_capability(spec: &ConnectorSpec, capability: Capability) -> Result<(), FieldError> {
    let offered = spec.capabilities.iter().any(|c| *c == capability || *c == Capability::Both);
    if offered {
        Ok(())
    } else {
        Err(FieldError::new(
            "capability",
            format!("{} connections cannot be a {}", spec.connector_type, capability.as_str()),
        ))
    }
}

/// The settings a connector runs with, before secret references are
/// resolved: the spec's defaults, then the integration's credentials, then
/// the connection's settings and credentials.
pub fn merge_settings(
    spec: &ConnectorSpec,
    integration: Option<&Credentials>,
    config: &BTreeMap<String, Value>,
    secrets: &Credentials,
) -> (BTreeMap<String, Value>, Vec<String>) {
    let mut values = BTreeMap::new();
    for f in &spec.config_fields {
        if let Some(d) = &f.default {
            values.insert(f.name.to_string(), d.clone());
        }
    }
    for (k, v) in integration.iter().flat_map(|c| c.0.iter()) {
        values.insert(k.clone(), Value::String(v.clone()));
    }
    values.extend(config.iter().map(|(k, v)| (k.clone(), v.clone())));
    values.extend(secrets.0.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))));
    let mut credential_keys: Vec<String> = spec.credential_fields().map(str::to_string).collect();
    for k in integration.iter().flat_map(|c| c.0.keys()).chain(secrets.0.keys()) {
        if !credential_keys.contains(k) {
            credential_keys.push(k.clone());
        }
    }
    (values, credential_keys)
}

/// The settings of a connection as written, for checks that need no
/// secret (a file path, say): credentials stay unresolved.
pub fn unresolved(
    org: crate::shared::ids::OrgId,
    spec: &ConnectorSpec,
    config: &BTreeMap<String, Value>,
    secrets: &Credentials,
) -> ResolvedConfig {
    let (values, credential_keys) = merge_settings(spec, None, config, secrets);
    ResolvedConfig { connector_type: spec.connector_type.to_string(), values, credential_keys, org: Some(org) }
}

/// Resolves secret references in `values` (only under credential keys).
pub async fn resolve(
    org: crate::shared::ids::OrgId,
    connector_type: &str,
    mut values: BTreeMap<String, Value>,
    credential_keys: Vec<String>,
    resolver: &dyn crate::ports::SecretResolver,
) -> std::result::Result<ResolvedConfig, crate::connect::connector::ConnectorError> {
    for k in &credential_keys {
        if let Some(Value::String(s)) = values.get(k) {
            let parsed = SecretValue::parse(s);
            if parsed.is_reference() {
                let resolved = resolver.resolve(s).await?;
                values.insert(k.clone(), Value::String(resolved));
            }
        }
    }
    Ok(ResolvedConfig { connector_type: connector_type.to_string(), values, credential_keys, org: Some(org) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::connector::{ConfigField, ConfigFieldType};
    use serde_json::json;

    fn spec() -> ConnectorSpec {
        let f = |name, credential, required| ConfigField {
            name,
            field_type: ConfigFieldType::String,
            required,
            credential,
            default: None,
            description: "",
        };
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
        }
    }

    fn map(v: Value) -> BTreeMap<String, Value> {
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

    #[test]
    fn config_splits_into_settings_and_secrets_and_is_validated() {
        let (config, secrets) = split_config(
            &spec(),
            &map(json!({"host": "db", "password": "pw"})),
            &BTreeMap::new(),
            &Credentials::default(),
        )
        .unwrap();
        assert_eq!(config, map(json!({"host": "db"})));
        assert_eq!(secrets.0["password"], "pw");
        let (_, kept) = split_config(&spec(), &map(json!({"password": "***"})), &config, &secrets).unwrap();
        assert_eq!(kept.0["password"], "pw");
        let errs =
            split_config(&spec(), &map(json!({"hots": "x"})), &BTreeMap::new(), &Credentials::default()).unwrap_err();
        let fields: Vec<_> = errs.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["config.host", "config.hots"]);
    }

    #[test]
    fn connection_settings_override_the_integration_and_defaults_fill_gaps() {
        let integration =
            Credentials([("password".to_string(), "from-integration".to_string()), ("user".into(), "u".into())].into());
        let (values, keys) =
            merge_settings(&spec(), Some(&integration), &map(json!({"host": "db"})), &Credentials::default());
        assert_eq!(values["password"], "from-integration");
        assert_eq!(values["port"], 5432);
        assert_eq!(values["host"], "db");
        assert!(keys.contains(&"password".to_string()) && keys.contains(&"user".to_string()));
        let own = Credentials([("password".to_string(), "own".to_string())].into());
        let (values, _) = merge_settings(&spec(), Some(&integration), &map(json!({"host": "db"})), &own);
        assert_eq!(values["password"], "own");
        let (values, _) = merge_settings(&spec(), None, &map(json!({"host": "db", "port": 6543})), &own);
        assert_eq!(values["port"], 6543);
        assert_eq!(values["password"], "own");
    }

    #[test]
    fn capabilities_are_checked() {
        let mut s = spec();
        check_capability(&s, Capability::Source).unwrap();
        s.capabilities = vec![Capability::Source];
        assert!(check_capability(&s, Capability::Destination).is_err());
        assert!(check_capability(&s, Capability::Both).is_err());
    }
}
