//! Rate limits through the real application: a brute force of API keys
//! meets 429s within a second, and its address is refused unchecked until
//! its budget refills; each client has its own budget; every 429 has
//! `Retry-After`.

use reqwest::Method;
use serde_json::json;
use sluice_http::ratelimit::{Limit, RateLimitConfig};
use sluice_tests::{Auth, Backend, Options, check, spawn_app, spawn_app_with};
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_brute_force_of_api_keys_meets_429s_within_a_second() {
    let app = spawn_app(Backend::Sqlite).await.expect("SQLite always starts");
    let ann = app.token("ann@example.com");
    let org = check!(app.post("/v1/organizations", &ann, json!({"name": "Acme"})).await, 201).id();
    let key = check!(
        app.post(&format!("/v1/organizations/{org}/api-keys"), &ann, json!({"name": "ci", "roles": ["Viewer"]})).await,
        201
    )
    .body["key"]
        .as_str()
        .unwrap()
        .to_string();
    let started = Instant::now();
    let mut first_429 = None;
    // Guesses as fast as the client sends them (hundreds a second here).
    for i in 0..400 {
        let guess = Auth::Key(format!("slk_{:0>32}", i));
        let r = app.get(&format!("/v1/organizations/{org}/flows"), &guess).await;
        match r.status.as_u16() {
            401 => {}
            429 => {
                first_429.get_or_insert((i, started.elapsed()));
                assert_eq!(r.body["code"], "rate_limited", "{}", r.body);
                let wait: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
                assert!(wait >= 1, "{wait}");
            }
            other => panic!("guess {i}: {other} {}", r.body),
        }
    }
    let (n, after) = first_429.expect("the brute force never met a 429");
    assert!(after < Duration::from_secs(1) && n <= 60, "first 429 after {n} guesses and {after:?}");
    // While the address is over its budget, even the right key is refused
    // unchecked (a right guess in the flood gains nothing); once the wait
    // is over, it works. The budget refills as the flood goes on (each
    // second lets ten more failures through, then blocks again for a
    // second), so the right key is sent at the start of a block: just after
    // a failure that ran over the budget (a 401 then a 429; a 429 while
    // blocked does not extend the block).
    let mut last = 0;
    for i in 0..4000 {
        let guess = Auth::Key(format!("slk_{:0>32}", 1000 + i));
        let status = app.get(&format!("/v1/organizations/{org}/flows"), &guess).await.status.as_u16();
        if last == 401 && status == 429 {
            break;
        }
        last = status;
    }
    assert_eq!(last, 401, "the flood never met a fresh block");
    let key = Auth::Key(key);
    let held = app.get(&format!("/v1/organizations/{org}/flows"), &key).await;
    assert_eq!(held.status.as_u16(), 429, "{}", held.body);
    let wait: u64 = held.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(wait <= 2, "{wait}");
    tokio::time::sleep(Duration::from_secs(wait)).await;
    check!(app.get(&format!("/v1/organizations/{org}/flows"), &key).await, 200);
    check!(app.get("/v1/users/me", &ann).await, 200);
}

/// An app whose budgets refill at 1/s and hold bursts of `client`,
/// `anonymous` and `failed_auth` requests.
async fn app_with_limits(client: u32, anonymous: u32, failed_auth: u32) -> Option<sluice_tests::TestApp> {
    let limit = |burst| Limit { per_second: 1, burst };
    let tight = RateLimitConfig { client: limit(client), anonymous: limit(anonymous), failed_auth: limit(failed_auth) };
    spawn_app_with(Backend::Sqlite, Options { rate_limits: Some(tight), ..Default::default() }).await
}

#[tokio::test]
async fn each_client_has_its_own_budget_and_anonymous_callers_theirs() {
    let Some(app) = app_with_limits(5, 3, 3).await else { return };
    let ann = app.token("ann@example.com");
    let bob = app.token("bob@example.com");
    let mut statuses = Vec::new();
    for _ in 0..8 {
        statuses.push(app.get("/v1/users/me", &ann).await.status.as_u16());
    }
    assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 5, "{statuses:?}");
    let limited = app.get("/v1/users/me", &ann).await;
    assert_eq!(limited.status.as_u16(), 429, "{}", limited.body);
    assert!(limited.headers.contains_key("retry-after"));
    assert!(limited.body["request_id"].is_string(), "the contract's body: {}", limited.body);
    check!(app.get("/v1/users/me", &bob).await, 200);
    let anonymous: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(app.get("/v1/health", &Auth::None).await.status.as_u16());
        }
        v
    };
    assert_eq!(anonymous, [200, 200, 200, 429, 429]);
}

#[tokio::test]
async fn wrong_internal_keys_are_limited_like_other_failed_credentials() {
    let Some(app) = app_with_limits(100, 100, 3).await else { return };
    let trigger = |key: String| {
        let app = &app;
        async move {
            let path = "/v1/internal/orchestrate/trigger";
            app.send(Method::POST, path, &Auth::None, Some(json!({})), &[("X-Internal-Api-Key", &key)]).await
        }
    };
    let mut statuses = Vec::new();
    for i in 0..6 {
        statuses.push(trigger(format!("guess-{i}")).await.status.as_u16());
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429, 429], "{statuses:?}");
    // The right key from the same address waits its turn too (the address is blocked).
    let r = trigger(sluice_tests::INTERNAL_KEY.to_string()).await;
    assert_eq!(r.status.as_u16(), 429, "{}", r.body);
}

/// Reads one HTTP/1.1 answer (headers and a `Content-Length` body) from
/// `stream`, and returns its status line.
async fn answer_on(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .expect("read");
        assert!(n > 0, "the server closed the connection: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&got).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end]
                .lines()
                .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().to_string()))
                .map_or(0, |v| v.parse::<usize>().expect("a length"));
            if got.len() >= end + 4 + length {
                return text.lines().next().unwrap_or_default().to_string();
            }
        }
    }
}

/// A connection left idle for longer than actix's default keep-alive (5 s)
/// still carries the next request: a client whose pool keeps connections
/// longer than the server would otherwise send on one being closed.
#[tokio::test]
async fn an_idle_connection_outlives_a_short_pause() {
    use tokio::io::AsyncWriteExt;
    let app = spawn_app(Backend::Sqlite).await.expect("SQLite always starts");
    let address = app.base.trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&address).await.expect("connect");
    let request = format!("GET /v1/health HTTP/1.1\r\nHost: {address}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(answer_on(&mut stream).await, "HTTP/1.1 200 OK");
    tokio::time::sleep(Duration::from_secs(7)).await;
    stream.write_all(request.as_bytes()).await.unwrap();
    assert_eq!(answer_on(&mut stream).await, "HTTP/1.1 200 OK");
}
