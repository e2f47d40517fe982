//! Sends notification deliveries: one JSON POST per attempt, 10 s at
//! most, no redirects followed. The URL's host is resolved here and the
//! request connects only to the addresses checked, so a name that resolves
//! (or later re-resolves) to a loopback, private or link-local address is
//! refused unless private deliveries are allowed.

use async_trait::async_trait;
use sluice_domain::monitoring::delivery::AttemptResult;
use sluice_domain::monitoring::ports::WebhookSender;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

/// The time one attempt may take.
pub const TIMEOUT: Duration = Duration::from_secs(10);

pub struct Webhooks {
    /// `SLUICE_WEBHOOK_ALLOW_PRIVATE`: deliveries may reach private addresses.
    allow_private: bool,
}

impl Webhooks {
    pub fn new(allow_private: bool) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Webhooks { allow_private }
    }
}

/// Whether deliveries may not reach `ip` by default: loopback, private,
/// link-local, unspecified, shared (100.64/10), multicast, broadcast and
/// every other special-purpose IPv4 range (documentation, benchmarking,
/// IETF, reserved 240/4); for IPv6 the same, plus unique-local,
/// link-local, site-local, documentation and Teredo, and every form that
/// embeds an IPv4 address (mapped, compatible, NAT64, 6to4) as that
/// address.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, c, _] = v4.octets();
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || a == 0
                || a >= 240
                || (a == 100 && (64..128).contains(&b))
                || (a == 192 && b == 0 && (c == 0 || c == 2))
                || (a == 192 && b == 88 && c == 99)
                || (a == 198 && (b == 18 || b == 19))
                || (a == 198 && b == 51 && c == 100)
                || (a == 203 && b == 0 && c == 113)
        }
        IpAddr::V6(v6) => {
            let s = v6.segments();
            let embedded =
                |hi: u16, lo: u16| IpAddr::V4(std::net::Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo)));
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_internal(IpAddr::V4(v4));
            }
            // IPv4-compatible (::a.b.c.d) and NAT64 (64:ff9b::/96).
            if s[..6] == [0; 6] || s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                return is_internal(embedded(s[6], s[7]));
            }
            // 6to4 (2002:aabb:ccdd::/48) carries an IPv4 address.
            if s[0] == 0x2002 {
                return is_internal(embedded(s[1], s[2]));
            }
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || (s[0] & 0xfe00) == 0xfc00
                || (s[0] & 0xffc0) == 0xfe80
                || (s[0] & 0xffc0) == 0xfec0
                || (s[0] == 0x2001 && s[1] == 0x0db8)
                || (s[0] == 0x2001 && s[1] == 0)
        }
    }
}

fn failed(error: String) -> AttemptResult {
    AttemptResult::Failed { code: None, error }
}

#[async_trait]
impl WebhookSender for Webhooks {
    async fn send(&self, url: &str, headers: &[(String, String)], body: &str) -> AttemptResult {
        let Ok(parsed) = reqwest::Url::parse(url) else {
            return AttemptResult::Refused("the URL does not parse".into());
        };
        let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
            return AttemptResult::Refused("the URL has no host".into());
        };
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(a) => a.collect(),
                Err(e) => return failed(format!("the host does not resolve: {e}")),
            },
        };
        let allowed: Vec<SocketAddr> =
            addrs.into_iter().filter(|a| self.allow_private || !is_internal(a.ip())).collect();
        if allowed.is_empty() {
            return AttemptResult::Refused(
                "the URL resolves to a loopback, private or link-local address (SLUICE_WEBHOOK_ALLOW_PRIVATE)".into(),
            );
        }
        // Connect only to the addresses checked above, whatever DNS says next.
        let client = match reqwest::Client::builder()
            .timeout(TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .resolve_to_addrs(&host, &allowed)
            .user_agent("sluice-webhooks/1")
            .build()
        {
            Ok(c) => c,
            Err(e) => return failed(format!("no HTTP client: {e}")),
        };
        let mut req = client.post(parsed).body(body.to_string());
        for (k, v) in headers {
            req = req.header(k.as_str(), v.as_str());
        }
        match req.send().await {
            Ok(res) if res.status().is_success() => AttemptResult::Delivered(res.status().as_u16()),
            Ok(res) => {
                AttemptResult::Failed { code: Some(res.status().as_u16()), error: format!("HTTP {}", res.status()) }
            }
            Err(e) if e.is_timeout() => failed(format!("no answer within {} s", TIMEOUT.as_secs())),
            Err(e) => failed(format!("the receiver is unreachable: {}", e.without_url())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internal_addresses_are_told_apart() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
        ] {
            assert!(is_internal(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["93.184.216.34", "8.8.8.8", "2606:4700::1111", "100.128.0.1", "64:ff9b::808:808", "2002:808:808::"] {
            assert!(!is_internal(ip.parse().unwrap()), "{ip}");
        }
    }

    #[tokio::test]
    async fn private_receivers_are_refused_unless_allowed() {
        let refused = Webhooks::new(false).send("http://127.0.0.1:9/hook", &[], "{}").await;
        assert!(matches!(refused, AttemptResult::Refused(_)), "{refused:?}");
        let named = Webhooks::new(false).send("http://localhost:9/hook", &[], "{}").await;
        assert!(matches!(named, AttemptResult::Refused(_)), "a name is checked by its address: {named:?}");
        let allowed = Webhooks::new(true).send("http://127.0.0.1:9/hook", &[], "{}").await;
        assert!(
            matches!(allowed, AttemptResult::Failed { code: None, .. }),
            "allowed, and nothing listens: {allowed:?}"
        );
    }
}
