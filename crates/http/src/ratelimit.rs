//! Per-client rate limits (GCRA, `governor`), applied by the middleware once
//! it knows who is calling:
//!
//! - an authenticated caller by its API key or user,
//! - a request without credentials by its address,
//! - a request whose credentials failed by its address, much more tightly
//!   (brute force of keys or tokens meets 429 within a fraction of a
//!   second; a valid caller from the same address is not slowed).
//!
//! Over a limit the answer is 429 `rate_limited` with `Retry-After`. The
//! defaults stay out of the way of real automation (see
//! `docs/security.md`); `SLUICE_RATE_LIMITS=off` switches them off.

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use std::net::IpAddr;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A sustained rate and the burst allowed on top of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limit {
    pub per_second: u32,
    pub burst: u32,
}

impl Limit {
    /// Parses `<per second>` or `<per second>:<burst>` (burst defaults to
    /// twice the rate).
    ///
    /// # Errors
    /// A message naming what is wrong.
    pub fn parse(s: &str) -> Result<Self, String> {
        let (rate, burst) = match s.trim().split_once(':') {
            Some((r, b)) => (r, Some(b)),
            None => (s.trim(), None),
        };
        let n = |v: &str| v.trim().parse::<u32>().ok().filter(|n| *n > 0);
        let per_second = n(rate).ok_or_else(|| format!("'{s}' is not <per second>[:<burst>]"))?;
        let burst = match burst {
            Some(b) => n(b).ok_or_else(|| format!("'{s}' is not <per second>[:<burst>]"))?,
            None => per_second.saturating_mul(2),
        };
        Ok(Self { per_second, burst })
    }

    fn quota(self) -> Quota {
        let one = NonZeroU32::MIN;
        Quota::per_second(NonZeroU32::new(self.per_second).unwrap_or(one))
            .allow_burst(NonZeroU32::new(self.burst).unwrap_or(one))
    }
}

/// The three limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimitConfig {
    /// Per API key or user.
    pub client: Limit,
    /// Per address, for requests without credentials.
    pub anonymous: Limit,
    /// Per address, for requests whose credentials failed.
    pub failed_auth: Limit,
}

impl Default for RateLimitConfig {
    /// Well above what one client's automation sends (the gateway is
    /// benchmarked at over 20,000 requests/s from one key on two cores), so that only
    /// floods meet them; failed authentications are held to 10/s (burst
    /// 50), far above a misconfigured client's retries and far below a
    /// brute force.
    fn default() -> Self {
        Self {
            client: Limit { per_second: 50_000, burst: 100_000 },
            anonymous: Limit { per_second: 200, burst: 400 },
            failed_auth: Limit { per_second: 10, burst: 50 },
        }
    }
}

/// The limiters, keyed; entries idle long enough to be full again are
/// dropped once a minute, so memory follows the number of active clients.
pub struct RateLimits {
    client: DefaultKeyedRateLimiter<Client>,
    anonymous: DefaultKeyedRateLimiter<IpAddr>,
    failed_auth: DefaultKeyedRateLimiter<IpAddr>,
    /// Addresses whose failures ran over their budget, until when: their
    /// credentials are not even checked meanwhile, so a right guess in a
    /// flood of wrong ones gains nothing, and a flood costs no lookups.
    blocked: std::sync::Mutex<std::collections::HashMap<IpAddr, std::time::Instant>>,
    any_blocked: std::sync::atomic::AtomicBool,
    last_cleanup: AtomicU64,
}

impl std::fmt::Debug for RateLimits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimits").field("clients", &self.client.len()).finish()
    }
}

/// Seconds to wait before trying again.
pub type RetryAfter = u64;

/// Whose budget an authenticated request spends: its API key's, or its
/// user's (all of a user's sessions share one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Client {
    ApiKey(uuid::Uuid),
    User(uuid::Uuid),
}

impl RateLimits {
    pub fn new(config: RateLimitConfig) -> Self {
        Self {
            client: RateLimiter::dashmap(config.client.quota()),
            anonymous: RateLimiter::dashmap(config.anonymous.quota()),
            failed_auth: RateLimiter::dashmap(config.failed_auth.quota()),
            blocked: Default::default(),
            any_blocked: Default::default(),
            last_cleanup: AtomicU64::new(now_secs()),
        }
    }

    /// One request of an authenticated client.
    ///
    /// # Errors
    /// The seconds to wait, over the limit.
    pub fn client(&self, client: Client) -> Result<(), RetryAfter> {
        self.cleanup();
        check(self.client.check_key(&client))
    }

    /// One request without credentials from `ip`.
    ///
    /// # Errors
    /// The seconds to wait, over the limit.
    pub fn anonymous(&self, ip: IpAddr) -> Result<(), RetryAfter> {
        self.cleanup();
        check(self.anonymous.check_key(&ip))
    }

    /// One failed authentication from `ip`.
    ///
    /// # Errors
    /// The seconds to wait, over the limit.
    pub fn failed_auth(&self, ip: IpAddr) -> Result<(), RetryAfter> {
        self.cleanup();
        let verdict = check(self.failed_auth.check_key(&ip));
        if let Err(wait) = verdict {
            let until = std::time::Instant::now() + Duration::from_secs(wait);
            self.blocked.lock().unwrap_or_else(|p| p.into_inner()).insert(ip, until);
            self.any_blocked.store(true, Ordering::Relaxed);
        }
        verdict
    }

    /// Whether requests with credentials from `ip` are refused unchecked
    /// (its failures ran over their budget), and for how long.
    ///
    /// # Errors
    /// The seconds to wait.
    pub fn before_auth(&self, ip: IpAddr) -> Result<(), RetryAfter> {
        if !self.any_blocked.load(Ordering::Relaxed) {
            return Ok(());
        }
        let blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
        match blocked.get(&ip) {
            Some(until) => match until.checked_duration_since(std::time::Instant::now()) {
                Some(left) if !left.is_zero() => Err(left.as_secs_f64().ceil().max(1.0) as u64),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }

    fn cleanup(&self) {
        let now = now_secs();
        let last = self.last_cleanup.load(Ordering::Relaxed);
        if now.saturating_sub(last) >= 60
            && self.last_cleanup.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            for l in [&self.anonymous, &self.failed_auth] {
                l.retain_recent();
                l.shrink_to_fit();
            }
            self.client.retain_recent();
            self.client.shrink_to_fit();
            let mut blocked = self.blocked.lock().unwrap_or_else(|p| p.into_inner());
            let now = std::time::Instant::now();
            blocked.retain(|_, until| *until > now);
            self.any_blocked.store(!blocked.is_empty(), Ordering::Relaxed);
        }
    }
}

fn check(r: Result<(), governor::NotUntil<<DefaultClock as Clock>::Instant>>) -> Result<(), RetryAfter> {
    r.map_err(|not_until| {
        let wait: Duration = not_until.wait_time_from(DefaultClock::default().now());
        // Whole seconds, rounded up: never 0.
        wait.as_secs_f64().ceil().max(1.0) as u64
    })
}

fn now_secs() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_with_a_default_burst() {
        assert_eq!(Limit::parse("10"), Ok(Limit { per_second: 10, burst: 20 }));
        assert_eq!(Limit::parse(" 5:100 "), Ok(Limit { per_second: 5, burst: 100 }));
        for bad in ["", "0", "x", "5:", "5:0", "-1"] {
            assert!(Limit::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_burst_passes_then_429s_come_with_a_wait_of_at_least_a_second() {
        let limits = RateLimits::new(RateLimitConfig {
            client: Limit { per_second: 1, burst: 3 },
            anonymous: Limit { per_second: 1, burst: 1 },
            failed_auth: Limit { per_second: 1, burst: 2 },
        });
        let (key, other) = (uuid::Uuid::from_u128(1), uuid::Uuid::from_u128(2));
        for _ in 0..3 {
            limits.client(Client::ApiKey(key)).unwrap();
        }
        let wait = limits.client(Client::ApiKey(key)).unwrap_err();
        assert!((1..=2).contains(&wait), "{wait}");
        limits.client(Client::ApiKey(other)).unwrap();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        limits.failed_auth(ip).unwrap();
        limits.failed_auth(ip).unwrap();
        limits.before_auth(ip).unwrap();
        assert!(limits.failed_auth(ip).is_err());
        // Over the budget, its credentials are refused unchecked for a while.
        assert!(limits.before_auth(ip).is_err());
        limits.before_auth("10.0.0.9".parse().unwrap()).unwrap();
        // Failures and anonymous requests are counted apart.
        limits.anonymous(ip).unwrap();
        assert!(limits.anonymous(ip).is_err());
        limits.failed_auth("10.0.0.2".parse().unwrap()).unwrap();
    }
}
