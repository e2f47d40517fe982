//! The audit log: one entry per mutation, with secrets removed from the
//! before/after snapshots.

use crate::shared::ids::{AuditId, OrgId};
use crate::shared::page::{Page, PageRequest};
use crate::{Error, Result};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::str::FromStr;
use time::OffsetDateTime;

/// Who did something, as recorded in the audit log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Actor {
    #[serde(rename = "type")]
    pub kind: ActorKind,
    pub id: Option<String>,
    pub name: Option<String>,
}

impl Actor {
    pub fn system() -> Self {
        Actor { kind: ActorKind::System, id: None, name: Some("sluice".into()) }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActorKind {
    User,
    ApiKey,
    System,
}

impl ActorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::User => "user",
            ActorKind::ApiKey => "api_key",
            ActorKind::System => "system",
        }
    }
}

impl FromStr for ActorKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "user" => Ok(ActorKind::User),
            "api_key" => Ok(ActorKind::ApiKey),
            "system" => Ok(ActorKind::System),
            other => Err(Error::invalid("actor_type", format!("unknown actor type '{other}'"))),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    pub id: AuditId,
    /// `None` for changes that belong to no organization (a user's profile).
    pub org_id: Option<OrgId>,
    pub actor: Actor,
    /// `<resource>.<verb>`, e.g. `member.role_updated`.
    pub action: String,
    pub resource_type: String,
    pub resource_id: Option<String>,
    pub details: Value,
    pub created_at: OffsetDateTime,
}

impl AuditEntry {
    /// An entry with empty details.
    pub fn new(
        org_id: Option<OrgId>,
        actor: Actor,
        action: &str,
        resource_type: &str,
        resource_id: impl ToString,
        now: OffsetDateTime,
    ) -> Self {
        AuditEntry {
            id: AuditId::new(),
            org_id,
            actor,
            action: action.to_string(),
            resource_type: resource_type.to_string(),
            resource_id: Some(resource_id.to_string()),
            details: json!({}),
            created_at: now,
        }
    }

    /// Sets `details` to `before` and `after` with secrets removed. Either
    /// side may be `Value::Null`.
    pub fn with_change(mut self, before: Value, after: Value) -> Self {
        self.details = json!({ "before": redact(before), "after": redact(after) });
        self
    }

    /// Sets `details` to `details` with secrets removed.
    pub fn with_details(mut self, details: Value) -> Self {
        self.details = redact(details);
        self
    }
}

/// Filters of `GET …/audit-logs`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AuditFilter {
    /// An action, or the start of actions up to a dot (see
    /// [`action_matches`]).
    pub action: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    pub actor_id: Option<String>,
    pub entity: Option<String>,
    pub since: Option<OffsetDateTime>,
    pub until: Option<OffsetDateTime>,
}

impl AuditFilter {
    /// Whether `e` passes the filter (used by in-memory adapters and to
    /// finish filtering that a store cannot express in SQL).
    pub fn matches(&self, e: &AuditEntry) -> bool {
        self.action.as_ref().is_none_or(|a| action_matches(a, &e.action))
            && self.resource_type.as_ref().is_none_or(|t| &e.resource_type == t)
            && self.resource_id.as_ref().is_none_or(|r| e.resource_id.as_ref() == Some(r))
            && self.actor_id.as_ref().is_none_or(|a| e.actor.id.as_ref() == Some(a))
            && self.entity.as_ref().is_none_or(|x| e.details.get("entity").and_then(Value::as_str) == Some(x))
            && self.since.is_none_or(|s| e.created_at >= s)
            && self.until.is_none_or(|u| e.created_at < u)
    }
}

/// Whether `action` is `wanted` or one of the actions below it: `flow` and
/// `flow.` find `flow.created` and `flow.cursor.reset`, `flow.cursor` finds
/// `flow.cursor.reset`; a whole action finds itself, and a part of a word
/// (`flo`, `api_`) finds nothing.
pub fn action_matches(wanted: &str, action: &str) -> bool {
    let stem = wanted.trim_end_matches('.');
    action == wanted || (!stem.is_empty() && action.strip_prefix(stem).is_some_and(|rest| rest.starts_with('.')))
}

/// Keys whose values are secrets wherever they appear.
const SECRET_KEYS: &[&str] = &[
    "password",
    "secret",
    "token",
    "access_token",
    "refresh_token",
    "client_secret",
    "api_key",
    "key",
    "key_hash",
    "token_hash",
    "private_key",
    "credentials",
];

pub const REDACTED: &str = "***";

/// Replaces every value under a secret-named key with `"***"`, recursively;
/// under `credentials`, each value of the object is replaced and its keys kept.
pub fn redact(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            for (k, v) in map {
                let lower = k.to_ascii_lowercase();
                let v = if lower == "credentials" {
                    match v {
                        Value::Object(inner) => Value::Object(
                            inner.into_iter().map(|(ik, _)| (ik, Value::String(REDACTED.into()))).collect(),
                        ),
                        Value::Null => Value::Null,
                        _ => Value::String(REDACTED.into()),
                    }
                } else if SECRET_KEYS.contains(&lower.as_str()) && !v.is_null() {
                    Value::String(REDACTED.into())
                } else {
                    redact(v)
                };
                out.insert(k, v);
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(redact).collect()),
        other => other,
    }
}

/// Where audit entries are kept (written by the adapters in the
/// transaction of the change they record).
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait]
pub trait AuditRepository: Send + Sync {
    async fn append(&self, entry: &AuditEntry) -> Result<()>;
    async fn list(&self, org: OrgId, filter: &AuditFilter, page: PageRequest) -> Result<Page<AuditEntry>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_hides_secrets_at_any_depth_and_keeps_the_rest() {
        let v = json!({
            "name": "pg",
            "config": {"host": "db", "password": "hunter2", "nested": [{"token": "t"}]},
            "credentials": {"user": "u", "password": "p"},
            "secret": null
        });
        let r = redact(v);
        assert_eq!(r["name"], "pg");
        assert_eq!(r["config"]["host"], "db");
        assert_eq!(r["config"]["password"], "***");
        assert_eq!(r["config"]["nested"][0]["token"], "***");
        assert_eq!(r["credentials"], json!({"user": "***", "password": "***"}));
        assert_eq!(r["secret"], Value::Null);
        assert!(!r.to_string().contains("hunter2"));
    }

    #[test]
    fn the_filter_matches_on_every_field() {
        let now = time::OffsetDateTime::now_utc();
        let e = AuditEntry {
            id: AuditId::new(),
            org_id: None,
            actor: Actor::system(),
            action: "flow.cursor.updated".into(),
            resource_type: "flow".into(),
            resource_id: Some("f1".into()),
            details: json!({"entity": "orders"}),
            created_at: now,
        };
        assert!(AuditFilter::default().matches(&e));
        assert!(AuditFilter { entity: Some("orders".into()), ..Default::default() }.matches(&e));
        assert!(!AuditFilter { entity: Some("users".into()), ..Default::default() }.matches(&e));
        assert!(!AuditFilter { action: Some("flow.updated".into()), ..Default::default() }.matches(&e));
        for (wanted, found) in [
            ("flow.cursor.updated", true),
            ("flow", true),
            ("flow.", true),
            ("flow.cursor", true),
            ("flo", false),
            ("flow.cursor.up", false),
            ("", false),
            (".", false),
        ] {
            assert_eq!(
                AuditFilter { action: Some(wanted.into()), ..Default::default() }.matches(&e),
                found,
                "{wanted}"
            );
        }
        assert!(!AuditFilter { since: Some(now + time::Duration::SECOND), ..Default::default() }.matches(&e));
        assert!(AuditFilter { until: Some(now + time::Duration::SECOND), ..Default::default() }.matches(&e));
    }
}
