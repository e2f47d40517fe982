//! Connections: a connector type with its settings and credentials, what
//! it may do (read, write, both), and how its settings merge with its
//! integration's and the connector's defaults.

use super::connector::{Capability, ConnectorSpec, ResolvedConfig};
use super::integration::{Credentials, PLACEHOLDER};
use crate::shared::ids::{ConnectionId, IntegrationId, OrgId};
use crate::{Error, FieldError, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use time::OffsetDateTime;

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
            // A credential of an object setting (`catalog.password`) shows
            // inside it.
            if let Some((outer, inner)) = k.split_once('.')
                && let Some(Value::Object(m)) = out.get_mut(outer)
            {
                m.insert(inner.to_string(), Value::String(PLACEHOLDER.into()));
                continue;
            }
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
            // A credential inside an object setting (`catalog.password` of
            // `catalog`) is kept with the credentials, under that name.
            let mut v = v.clone();
            if let Value::Object(m) = &mut v {
                let inner = credential.iter().filter_map(|c| c.strip_prefix(k.as_str())?.strip_prefix('.'));
                for name in inner {
                    if let Some(secret) = m.remove(name) {
                        secret_update.insert(format!("{k}.{name}"), secret);
                    }
                }
            }
            config.insert(k.clone(), v);
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

/// The settings that do not change where a connection's secrets are sent
/// (every other setting does: server, port, database, user, TLS, path).
pub const NOT_PLACE_KEYS: [&str; 2] = ["schema", "format"];

/// Where `config` sends its secrets: its settings but [`NOT_PLACE_KEYS`].
pub fn place(config: &BTreeMap<String, Value>) -> BTreeMap<&str, &Value> {
    config.iter().filter(|(k, _)| !NOT_PLACE_KEYS.contains(&k.as_str())).map(|(k, v)| (k.as_str(), v)).collect()
}

/// The credential values a request supplies anew in `update` (a value, not
/// the placeholder, not a removal).
pub fn supplied_secrets<'a>(spec: &ConnectorSpec, update: &'a BTreeMap<String, Value>) -> Vec<&'a str> {
    let credential: Vec<&str> = spec.credential_fields().collect();
    supplied_values(update).into_iter().filter(|k| credential.contains(k)).collect()
}

/// The keys `update` sets to a value (not the placeholder, not a removal).
pub fn supplied_values(update: &BTreeMap<String, Value>) -> Vec<&str> {
    update.iter().filter(|(_, v)| v.as_str().is_some_and(|s| s != PLACEHOLDER)).map(|(k, _)| k.as_str()).collect()
}

/// The stored secrets a connection would send to a place they were not
/// entered for, which the caller must supply again (as errors on
/// `config.<key>`), for a caller who may not read them (not an Admin):
///
/// - the connection's own stored secrets, when its place (see [`place`])
///   changed from `before`;
/// - its integration's secrets (`integration`), when the connection is new
///   (`before` is `None`: created, or tested unsaved) or its place or its
///   integration changed, unless `integration_home`: another saved
///   connection already sends them to this very place.
///
/// A secret `supplied` in this request goes where the caller says.
pub fn secrets_to_resupply(
    spec: &ConnectorSpec,
    before: Option<&Connection>,
    after: &Connection,
    integration: Option<&Credentials>,
    integration_home: bool,
    supplied: &[&str],
) -> Vec<FieldError> {
    let moved = before.is_some_and(|b| place(&b.config) != place(&after.config));
    let reattached = before.is_none_or(|b| b.integration_id != after.integration_id);
    let secret = |k: &str| spec.config_fields.iter().find(|f| f.name == k).is_none_or(|f| f.credential);
    let mut keys: Vec<&str> = Vec::new();
    if moved {
        keys.extend(after.secrets.0.keys().map(String::as_str));
    }
    if (moved || reattached) && !integration_home {
        keys.extend(integration.iter().flat_map(|c| c.0.keys()).map(String::as_str).filter(|k| secret(k)));
    }
    // A secret of the connection's own removed, so that the integration's
    // would be sent in its place: as if the integration were attached.
    if let (Some(b), false) = (before, integration_home) {
        keys.extend(
            integration
                .iter()
                .flat_map(|c| c.0.keys())
                .map(String::as_str)
                .filter(|k| secret(k) && b.secrets.0.contains_key(*k) && !after.secrets.0.contains_key(*k)),
        );
    }
    keys.sort_unstable();
    keys.dedup();
    // A new connection's own secrets are entered for its place now.
    let entered_now = |k: &str| before.is_none() && after.secrets.0.contains_key(k);
    keys.into_iter()
        .filter(|k| !supplied.contains(k) && !entered_now(k))
        .map(|k| resupply(&format!("config.{k}")))
        .collect()
}

/// The stored secrets of an integration that an update of its
/// credentials (`before` to `after`) would send to a place they were not
/// entered for, which a caller who may not read them (not an Admin) must
/// supply again (as errors on `<field>.<key>`): every stored secret, when
/// a setting that is not a secret (a port, a TLS mode, a host: anything
/// but the spec's credential fields and [`NOT_PLACE_KEYS`]) is set,
/// changed or removed. A connection attached to the integration takes
/// such settings where it does not set them itself.
pub fn integration_secrets_to_resupply(
    spec: &ConnectorSpec,
    field: &str,
    before: &Credentials,
    after: &Credentials,
    supplied: &[&str],
) -> Vec<FieldError> {
    let credential: Vec<&str> = spec.credential_fields().collect();
    let place = |c: &Credentials| -> Vec<(String, String)> {
        c.0.iter()
            .filter(|(k, _)| !credential.contains(&k.as_str()) && !NOT_PLACE_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    };
    if place(before) == place(after) {
        return Vec::new();
    }
    after
        .0
        .keys()
        .filter(|k| credential.contains(&k.as_str()) && before.0.contains_key(*k) && !supplied.contains(&k.as_str()))
        .map(|k| resupply(&format!("{field}.{k}")))
        .collect()
}

/// The error on a stored secret the caller must supply again.
fn resupply(field: &str) -> FieldError {
    FieldError::new(
        field,
        "this would send a stored secret to a server, database or TLS setting it was not entered for: \
         supply it again, or ask an Admin to make this change",
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connect::integration::tests::{map, spec};
    use serde_json::json;

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
    fn a_credential_inside_an_object_setting_is_kept_and_shown_as_a_credential() {
        let mut spec = spec();
        spec.config_fields.push(crate::connect::connector::ConfigField {
            name: "catalog",
            field_type: crate::connect::connector::ConfigFieldType::Object,
            required: false,
            credential: false,
            default: None,
            description: "",
        });
        spec.config_fields.push(crate::connect::connector::ConfigField {
            name: "catalog.password",
            field_type: crate::connect::connector::ConfigFieldType::String,
            required: false,
            credential: true,
            default: None,
            description: "",
        });
        let update = map(json!({"host": "db", "catalog": {"type": "postgres", "host": "c", "password": "pw"}}));
        let (config, secrets) = split_config(&spec, &update, &BTreeMap::new(), &Credentials::default()).unwrap();
        assert_eq!(config["catalog"], json!({"type": "postgres", "host": "c"}), "the password is not a setting");
        assert_eq!(secrets.0["catalog.password"], "pw");
        let c = Connection {
            id: ConnectionId::new(),
            org_id: OrgId::new(),
            name: "lake".into(),
            integration_id: None,
            connector_type: "x".into(),
            capability: Capability::Destination,
            config: config.clone(),
            secrets: secrets.clone(),
            status: ConnectionStatus::Untested,
            last_tested_at: None,
            last_error: None,
            created_at: OffsetDateTime::UNIX_EPOCH,
            updated_at: OffsetDateTime::UNIX_EPOCH,
        };
        assert_eq!(c.public_config()["catalog"], json!({"type": "postgres", "host": "c", "password": "***"}));
        // Sent back as read, the password is kept; the catalog changed.
        let again = map(json!({"catalog": {"type": "postgres", "host": "d", "password": "***"}}));
        let (config, kept) = split_config(&spec, &again, &config, &secrets).unwrap();
        assert_eq!(kept.0["catalog.password"], "pw");
        assert_eq!(config["catalog"]["host"], "d");
        let (values, keys) = merge_settings(&spec, None, &config, &kept);
        assert_eq!(values["catalog.password"], "pw");
        assert!(keys.contains(&"catalog.password".to_string()));
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
