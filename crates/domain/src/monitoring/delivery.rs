//! Deliveries of events through rules: queued with the event (an outbox),
//! sent by the workers, retried with exponential backoff, and their state
//! as `…/rules/{ruleId}/deliveries` lists it.

use super::rule::ChannelKind;
use crate::shared::ids::{DeliveryId, OrgId, RuleId};
use crate::shared::secret::Secret;
use time::{Duration, OffsetDateTime};
use uuid::Uuid;

/// Attempts before a delivery is given up.
pub const MAX_ATTEMPTS: u32 = 6;

/// How long a worker holds a claimed delivery; past it another may send.
pub const CLAIM: Duration = Duration::seconds(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryStatus {
    /// Waiting for its next attempt.
    Pending,
    /// A 2xx answer.
    Delivered,
    /// Given up after [`MAX_ATTEMPTS`] failures, or its rule is gone.
    Failed,
    /// The URL resolves to an address deliveries may not reach.
    Refused,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivered => "delivered",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Refused => "refused",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [DeliveryStatus::Pending, DeliveryStatus::Delivered, DeliveryStatus::Failed, DeliveryStatus::Refused]
            .into_iter()
            .find(|x| x.as_str() == s)
    }
}

/// One event on its way through one rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    pub id: DeliveryId,
    pub org_id: OrgId,
    pub rule_id: RuleId,
    /// The activity event; its id is the `webhook-id` of every attempt.
    pub event_id: Uuid,
    pub event_type: String,
    pub status: DeliveryStatus,
    pub attempts: u32,
    /// The last attempt's HTTP status, if it got one.
    pub response_code: Option<u16>,
    /// Why the last attempt failed.
    pub error: Option<String>,
    /// When the next attempt is due (pending deliveries).
    pub next_attempt_at: Option<OffsetDateTime>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// A claimed delivery with what its attempt sends.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub delivery: Delivery,
    pub kind: ChannelKind,
    pub url: String,
    pub secret: Option<Secret>,
    /// The body, the same on every attempt.
    pub body: String,
    /// The `webhook-id`.
    pub message_id: String,
}

/// How an attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AttemptResult {
    /// A 2xx answer.
    Delivered(u16),
    /// Another answer, a timeout or a connection error.
    Failed { code: Option<u16>, error: String },
    /// The URL resolves to a loopback, private or link-local address.
    Refused(String),
}

impl AttemptResult {
    /// The outcome label of the operator's counter.
    pub fn outcome(&self) -> &'static str {
        match self {
            AttemptResult::Delivered(_) => "delivered",
            AttemptResult::Failed { .. } => "failed",
            AttemptResult::Refused(_) => "refused",
        }
    }
}

/// The wait before the attempt after `done` failed ones: 10 s, 50 s,
/// about 4 min, 21 min, 1.7 h.
pub fn backoff(done: u32) -> Duration {
    let factor = 5_i64.saturating_pow(done.saturating_sub(1));
    Duration::seconds(10_i64.saturating_mul(factor).min(6 * 3600))
}

/// The delivery after one attempt ended with `result` at `now`.
pub fn after_attempt(mut d: Delivery, result: &AttemptResult, now: OffsetDateTime) -> Delivery {
    d.attempts += 1;
    d.updated_at = now;
    match result {
        AttemptResult::Delivered(code) => {
            d.status = DeliveryStatus::Delivered;
            d.response_code = Some(*code);
            d.error = None;
            d.next_attempt_at = None;
        }
        AttemptResult::Failed { code, error } => {
            d.response_code = *code;
            d.error = Some(error.clone());
            if d.attempts >= MAX_ATTEMPTS {
                d.status = DeliveryStatus::Failed;
                d.next_attempt_at = None;
            } else {
                d.next_attempt_at = Some(now + backoff(d.attempts));
            }
        }
        AttemptResult::Refused(why) => {
            d.status = DeliveryStatus::Refused;
            d.response_code = None;
            d.error = Some(why.clone());
            d.next_attempt_at = None;
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_and_give_up() {
        assert_eq!(backoff(1), Duration::seconds(10), "the first retry within 30 s");
        assert_eq!(backoff(2), Duration::seconds(50));
        assert_eq!(backoff(40), Duration::hours(6), "capped");
        let now = OffsetDateTime::UNIX_EPOCH;
        let mut d = Delivery {
            id: DeliveryId::new(),
            org_id: OrgId::new(),
            rule_id: RuleId::new(),
            event_id: Uuid::now_v7(),
            event_type: "run.failed".into(),
            status: DeliveryStatus::Pending,
            attempts: 0,
            response_code: None,
            error: None,
            next_attempt_at: Some(now),
            created_at: now,
            updated_at: now,
        };
        let failed = AttemptResult::Failed { code: Some(500), error: "HTTP 500".into() };
        for n in 1..MAX_ATTEMPTS {
            d = after_attempt(d, &failed, now);
            assert_eq!((d.status, d.attempts, d.next_attempt_at), (DeliveryStatus::Pending, n, Some(now + backoff(n))));
        }
        d = after_attempt(d, &failed, now);
        assert_eq!((d.status, d.next_attempt_at), (DeliveryStatus::Failed, None));
        let ok = after_attempt(
            Delivery { status: DeliveryStatus::Pending, attempts: 1, ..d },
            &AttemptResult::Delivered(204),
            now,
        );
        assert_eq!((ok.status, ok.response_code, ok.error), (DeliveryStatus::Delivered, Some(204), None));
    }
}
