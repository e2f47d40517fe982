//! Plans and their limits: the monthly validation quota of the gateway.

use crate::{Error, Result};
use time::OffsetDateTime;

/// The state of an organization's subscription with the payment provider
/// (Stripe's subscription statuses; `active` for the free plan).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionStatus {
    Active,
    Trialing,
    PastDue,
    Unpaid,
    Canceled,
    Incomplete,
    IncompleteExpired,
    Paused,
}

impl SubscriptionStatus {
    const ALL: [SubscriptionStatus; 8] = [
        SubscriptionStatus::Active,
        SubscriptionStatus::Trialing,
        SubscriptionStatus::PastDue,
        SubscriptionStatus::Unpaid,
        SubscriptionStatus::Canceled,
        SubscriptionStatus::Incomplete,
        SubscriptionStatus::IncompleteExpired,
        SubscriptionStatus::Paused,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionStatus::Active => "active",
            SubscriptionStatus::Trialing => "trialing",
            SubscriptionStatus::PastDue => "past_due",
            SubscriptionStatus::Unpaid => "unpaid",
            SubscriptionStatus::Canceled => "canceled",
            SubscriptionStatus::Incomplete => "incomplete",
            SubscriptionStatus::IncompleteExpired => "incomplete_expired",
            SubscriptionStatus::Paused => "paused",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.as_str() == s)
    }
}

/// What the meter answered for one gateway validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metered {
    /// The month's quota is used up; not counted.
    Refused,
    /// Counted; `used` is the month's count with this one, for a plan
    /// with a limit (unlimited plans are counted without reading it).
    Counted { used: Option<i64> },
}

/// The shares of the monthly quota (per cent) at which `quota.threshold`
/// is recorded.
pub const THRESHOLDS: [i64; 2] = [80, 100];

/// The threshold that the validation counted as number `used` of the
/// month reaches, if any: exactly one validation reaches each.
pub fn threshold_reached(used: i64, limit: i64) -> Option<i64> {
    THRESHOLDS.into_iter().find(|p| used == ((limit.saturating_mul(*p) + 99) / 100).max(1))
}

/// What billing keeps of an organization.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subscription {
    pub plan: Plan,
    pub status: SubscriptionStatus,
    /// The end of the paid period, when a paid plan has one.
    pub current_period_end: Option<OffsetDateTime>,
    /// The payment provider's customer of the organization, once created.
    pub customer_id: Option<String>,
}

impl Subscription {
    /// An organization that never paid: the free plan.
    pub fn free() -> Self {
        Subscription {
            plan: Plan::Free,
            status: SubscriptionStatus::Active,
            current_period_end: None,
            customer_id: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    Free,
    Pro,
    Enterprise,
}

impl Plan {
    pub fn as_str(self) -> &'static str {
        match self {
            Plan::Free => "free",
            Plan::Pro => "pro",
            Plan::Enterprise => "enterprise",
        }
    }

    /// Gateway validations a month: free 1,000; pro 100,000; enterprise
    /// unlimited (`None`).
    pub fn monthly_validations(self) -> Option<i64> {
        match self {
            Plan::Free => Some(1_000),
            Plan::Pro => Some(100_000),
            Plan::Enterprise => None,
        }
    }

    /// Whether the plan is bought (through checkout), not given.
    pub fn paid(self) -> bool {
        self != Plan::Free
    }

    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "free" => Ok(Plan::Free),
            "pro" => Ok(Plan::Pro),
            "enterprise" => Ok(Plan::Enterprise),
            other => Err(Error::invalid("plan", format!("unknown plan '{other}'"))),
        }
    }
}

/// The quota month of `at`: `YYYY-MM` in UTC.
pub fn usage_month(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!("{:04}-{:02}", at.year(), u8::from(at.month()))
}

/// Seconds from `at` until the next month starts (UTC), when the quota
/// renews: the `Retry-After` of `quota_exceeded`.
pub fn seconds_to_next_month(at: OffsetDateTime) -> u64 {
    u64::try_from((next_month(at) - at).whole_seconds()).unwrap_or(0).max(1)
}

/// The start of the month after `at` (UTC): when the quota renews.
pub fn next_month(at: OffsetDateTime) -> OffsetDateTime {
    let at = at.to_offset(time::UtcOffset::UTC);
    let (y, m) =
        if at.month() == time::Month::December { (at.year() + 1, 1) } else { (at.year(), u8::from(at.month()) + 1) };
    time::Date::from_calendar_date(y, time::Month::try_from(m).unwrap_or(time::Month::January), 1)
        .map(|d| d.midnight().assume_utc())
        .unwrap_or(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_renews_at_the_next_month_utc() {
        use time::macros::datetime;
        assert_eq!(seconds_to_next_month(datetime!(2026-11-30 23:59:00 UTC)), 60);
        assert_eq!(seconds_to_next_month(datetime!(2026-12-31 23:00:00 UTC)), 3600);
        assert_eq!(seconds_to_next_month(datetime!(2027-01-01 00:30:00 +01:00)), 1800, "23:30 UTC on 31 December");
        assert_eq!(next_month(datetime!(2026-11-30 23:59:59.5 UTC)), datetime!(2026-12-01 00:00 UTC));
    }

    #[test]
    fn each_threshold_is_reached_by_one_validation() {
        let hits: Vec<(i64, i64)> = (1..=1000).filter_map(|n| threshold_reached(n, 1000).map(|p| (n, p))).collect();
        assert_eq!(hits, [(800, 80), (1000, 100)]);
        assert_eq!(threshold_reached(1, 1), Some(80), "a limit of one reaches both at once; the first wins");
    }

    #[test]
    fn usage_month_is_the_utc_calendar_month() {
        assert_eq!(usage_month(time::macros::datetime!(2026-11-30 23:30 -02:00)), "2026-12");
        assert_eq!(usage_month(time::macros::datetime!(2026-01-05 00:00 UTC)), "2026-01");
    }
}
