//! Notification rules: which events of an organization go where (a
//! webhook signed the Standard Webhooks way, or a Slack incoming webhook),
//! and the message each channel gets.

use super::activity::{ActivityEvent, EventType};
use crate::shared::ids::{FlowId, OrgId, RuleId};
use crate::shared::secret::{Secret, random_bytes};
use crate::{Error, FieldError, Result};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use time::OffsetDateTime;

/// The events a rule can name.
pub const EVENTS: [&str; 8] = [
    EventType::RunSucceeded.as_str(),
    EventType::RunFailed.as_str(),
    EventType::RunDriftDetected.as_str(),
    EventType::SchemaDrift.as_str(),
    EventType::QuotaThreshold.as_str(),
    EventType::ConnectionFailing.as_str(),
    EventType::CdcRetainedOverBudget.as_str(),
    EventType::VerifyMismatch.as_str(),
];

/// The prefix of a webhook signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelKind {
    /// A JSON POST signed the Standard Webhooks way.
    Webhook,
    /// A Slack incoming webhook: `{"text"}`, unsigned.
    Slack,
}

impl ChannelKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Webhook => "webhook",
            ChannelKind::Slack => "slack",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [ChannelKind::Webhook, ChannelKind::Slack].into_iter().find(|k| k.as_str() == s)
    }
}

/// Where a rule sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Channel {
    pub kind: ChannelKind,
    pub url: String,
    /// The signing secret (`whsec_…`) of a webhook channel.
    pub secret: Option<Secret>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotificationRule {
    pub id: RuleId,
    pub org_id: OrgId,
    pub name: String,
    pub event: String,
    /// Only events of this flow, when set.
    pub flow_id: Option<FlowId>,
    pub channel: Channel,
    pub enabled: bool,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

impl NotificationRule {
    /// Whether `event` goes through this rule.
    pub fn matches(&self, event: &ActivityEvent) -> bool {
        self.enabled
            && self.org_id == event.org_id
            && self.event == event.event_type.as_str()
            && self.flow_id.is_none_or(|f| event.data.get("flow_id").and_then(Value::as_str) == Some(&f.to_string()))
    }
}

/// A rule as a request writes it (create, or replace with `PUT`).
#[derive(Debug, Clone, Default)]
pub struct RuleInput {
    pub name: String,
    pub event: String,
    pub flow_id: Option<String>,
    pub channel_type: String,
    pub url: String,
    /// A webhook's signing secret; one is generated when absent.
    pub secret: Option<String>,
    pub enabled: Option<bool>,
}

/// What a valid [`RuleInput`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckedRule {
    pub name: String,
    pub event: String,
    pub flow_id: Option<FlowId>,
    pub kind: ChannelKind,
    pub url: String,
    pub secret: Option<String>,
    pub enabled: bool,
}

/// An absolute http(s) URL with a host, of a sane length.
pub fn check_url(url: &str) -> std::result::Result<(), &'static str> {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    let rest = if lower.starts_with("https://") {
        &url[8..]
    } else if lower.starts_with("http://") {
        &url[7..]
    } else {
        return Err("must be an http(s) URL");
    };
    let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
    if host.contains('@') {
        return Err("must not carry credentials (user:password@); put a secret in the path or use the signature");
    }
    if host.is_empty() || host.starts_with(':') || host.contains('%') {
        return Err("must name a host");
    }
    if url.len() > 2048 || url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("must be at most 2048 characters without spaces");
    }
    Ok(())
}

/// Checks every field, reporting each problem with its path.
///
/// # Errors
/// `Validation` listing the problems.
pub fn check(input: &RuleInput) -> Result<CheckedRule> {
    let mut errors = Vec::new();
    let name = input.name.trim().to_string();
    if name.is_empty() || name.chars().count() > 200 {
        errors.push(FieldError::new("name", "must be 1 to 200 characters"));
    }
    if !EVENTS.contains(&input.event.as_str()) {
        errors.push(FieldError::new("event", format!("must be one of {}", EVENTS.join(", "))));
    }
    let flow_id = match input.flow_id.as_deref() {
        None => None,
        Some(f) => match f.parse::<FlowId>() {
            Ok(id) => Some(id),
            Err(_) => {
                errors.push(FieldError::new("filter.flow_id", "must be a flow id"));
                None
            }
        },
    };
    let kind = ChannelKind::parse(&input.channel_type);
    if kind.is_none() {
        errors.push(FieldError::new("channel.type", "must be webhook or slack"));
    }
    if let Err(m) = check_url(&input.url) {
        errors.push(FieldError::new("channel.url", m));
    }
    match (&input.secret, kind) {
        (Some(_), Some(ChannelKind::Slack)) => {
            errors.push(FieldError::new("channel.secret", "a slack channel takes no secret"))
        }
        (Some(s), _) if secret_key(s).is_none() => {
            errors.push(FieldError::new("channel.secret", "must be whsec_ followed by base64 of 24 to 64 bytes"))
        }
        _ => {}
    }
    if !errors.is_empty() {
        return Err(Error::Validation(errors));
    }
    Ok(CheckedRule {
        name,
        event: input.event.clone(),
        flow_id,
        kind: kind.unwrap_or(ChannelKind::Webhook),
        url: input.url.clone(),
        secret: input.secret.clone(),
        enabled: input.enabled.unwrap_or(true),
    })
}

/// A new signing secret: `whsec_` and base64 of 24 random bytes.
pub fn new_secret() -> Secret {
    Secret::new(format!("{SECRET_PREFIX}{}", B64.encode(random_bytes::<24>())))
}

/// The HMAC key of a `whsec_…` secret: the base64-decoded part after the
/// prefix (24 to 64 bytes).
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    let key = B64.decode(secret.strip_prefix(SECRET_PREFIX)?).ok()?;
    (24..=64).contains(&key.len()).then_some(key)
}

/// The `webhook-signature` of a message: `v1,` and base64 of the
/// HMAC-SHA256 of `"{id}.{timestamp}.{body}"`, keyed with the secret's key
/// (Standard Webhooks).
pub fn sign(id: &str, timestamp: i64, body: &str, key: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(format!("{id}.{timestamp}.").as_bytes());
    mac.update(body.as_bytes());
    format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
}

/// The `webhook-id` of an event: the same for every attempt.
pub fn message_id(event: &ActivityEvent) -> String {
    format!("msg_{}", event.id.simple())
}

/// The JSON body a webhook channel gets: `{type, timestamp, data}`, the
/// event's data with `organization_id` and `message`.
pub fn webhook_body(event: &ActivityEvent) -> String {
    let mut data = match &event.data {
        Value::Object(m) => m.clone(),
        Value::Null => serde_json::Map::new(),
        other => serde_json::Map::from_iter([("value".to_string(), other.clone())]),
    };
    data.insert("organization_id".into(), json!(event.org_id));
    data.insert("message".into(), json!(event.message));
    json!({
        "type": event.event_type.as_str(),
        "timestamp": crate::shared::record::format_timestamp(event.created_at),
        "data": data,
    })
    .to_string()
}

/// The body a Slack channel gets. `&`, `<` and `>` are escaped as Slack
/// asks, so text in an event cannot become a mention or a link.
pub fn slack_body(event: &ActivityEvent) -> String {
    let text = format!("[{}] {}", event.event_type, event.message);
    let text = text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;");
    json!({"text": text}).to_string()
}

/// Hides a Slack URL's path (the credential) from a role that cannot
/// write rules; webhook URLs are addresses, not credentials, and stay.
pub fn mask_for(role: crate::identity::access::Role, rule: &mut NotificationRule) {
    if rule.channel.kind == ChannelKind::Slack && !role.allows(crate::identity::Permission::Write) {
        let (scheme, rest) = rule.channel.url.split_once("://").unwrap_or(("https", rule.channel.url.as_str()));
        let host = rest.split('/').next().unwrap_or("");
        rule.channel.url = format!("{scheme}://{host}/{}", crate::shared::audit::REDACTED);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slack_url_is_masked_for_viewers_only() {
        use crate::identity::access::Role;
        let now = time::OffsetDateTime::UNIX_EPOCH;
        let rule = |kind, url: &str| NotificationRule {
            id: RuleId::new(),
            org_id: crate::shared::ids::OrgId::new(),
            name: "r".into(),
            event: "run.failed".into(),
            flow_id: None,
            channel: Channel { kind, url: url.into(), secret: None },
            enabled: true,
            created_at: now,
            updated_at: now,
        };
        let slack = "https://hooks.slack.com/services/T000/B000/XXXX";
        let mut r = rule(ChannelKind::Slack, slack);
        mask_for(Role::Viewer, &mut r);
        assert_eq!(r.channel.url, format!("https://hooks.slack.com/{}", crate::shared::audit::REDACTED));
        let mut r = rule(ChannelKind::Slack, slack);
        mask_for(Role::Editor, &mut r);
        assert_eq!(r.channel.url, slack);
        let mut r = rule(ChannelKind::Webhook, "https://hooks.example.com/sluice");
        mask_for(Role::Viewer, &mut r);
        assert_eq!(r.channel.url, "https://hooks.example.com/sluice");
    }

    #[test]
    fn signatures_match_the_standard_webhooks_test_vector() {
        // The vector of the standard's reference libraries.
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            sign("msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, r#"{"test": 2432232314}"#, &key),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let fresh = new_secret();
        assert_eq!(secret_key(fresh.expose()).map(|k| k.len()), Some(24));
    }

    #[test]
    fn rules_are_checked_field_by_field() {
        let ok = RuleInput {
            name: "ops".into(),
            event: "run.failed".into(),
            channel_type: "webhook".into(),
            url: "https://hooks.example.com/in".into(),
            ..Default::default()
        };
        assert_eq!(check(&ok).unwrap().kind, ChannelKind::Webhook);
        let bad = RuleInput {
            name: " ".into(),
            event: "run.exploded".into(),
            flow_id: Some("x".into()),
            channel_type: "pager".into(),
            url: "ftp://x".into(),
            secret: Some("nope".into()),
            enabled: None,
        };
        let Error::Validation(errors) = check(&bad).unwrap_err() else { panic!() };
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["name", "event", "filter.flow_id", "channel.type", "channel.url", "channel.secret"]);
        assert!(check_url("HTTPS://Hooks.Example.com/in").is_ok(), "schemes are case-insensitive");
        for url in
            ["http://", "https:///x", "http://a b", "https://:80/", "http://user:pw@host/", "http://[::1%25lo]:80/"]
        {
            assert!(check_url(url).is_err(), "{url}");
        }
        let slack_secret = RuleInput { channel_type: "slack".into(), secret: Some(new_secret().expose().into()), ..ok };
        assert!(check(&slack_secret).is_err());
    }

    #[test]
    fn a_rule_matches_its_event_its_flow_and_only_when_enabled() {
        let org = OrgId::new();
        let flow = FlowId::new();
        let now = OffsetDateTime::UNIX_EPOCH;
        let rule = NotificationRule {
            id: RuleId::new(),
            org_id: org,
            name: "r".into(),
            event: "run.failed".into(),
            flow_id: Some(flow),
            channel: Channel { kind: ChannelKind::Webhook, url: "https://x.example".into(), secret: None },
            enabled: true,
            created_at: now,
            updated_at: now,
        };
        let event = |kind: &str, f: FlowId| ActivityEvent {
            id: uuid::Uuid::now_v7(),
            org_id: org,
            event_type: EventType::parse(kind),
            severity: "error".into(),
            message: "m".into(),
            data: json!({"flow_id": f}),
            created_at: now,
        };
        assert!(rule.matches(&event("run.failed", flow)));
        assert!(!rule.matches(&event("run.succeeded", flow)));
        assert!(!rule.matches(&event("run.failed", FlowId::new())));
        assert!(!NotificationRule { enabled: false, ..rule.clone() }.matches(&event("run.failed", flow)));
        let body: Value = serde_json::from_str(&webhook_body(&event("run.failed", flow))).unwrap();
        assert_eq!((body["type"].as_str(), body["data"]["message"].as_str()), (Some("run.failed"), Some("m")));
        assert_eq!(body["data"]["organization_id"], json!(org));
    }
}
