//! `sluice apply` and `sluice export`: a client of a running server's IaC
//! endpoints, configured by `SLUICE_URL` and `SLUICE_API_KEY`.

use anyhow::{Context, bail};
use serde_json::Value;
use sluice_domain::shared::error::Code;
use std::fmt::Write as _;
use std::time::Duration;

/// Attempts of one apply before a transient failure is reported.
const ATTEMPTS: u32 = 5;

/// Where the server is and the key to use.
pub struct Target {
    pub url: String,
    pub api_key: String,
}

impl Target {
    /// From `SLUICE_URL` (default `http://127.0.0.1:8080`) and `SLUICE_API_KEY`.
    ///
    /// # Errors
    /// When `SLUICE_API_KEY` is not set.
    #[allow(clippy::disallowed_methods)] // the client's own two settings
    pub fn from_env() -> anyhow::Result<Self> {
        let url = std::env::var("SLUICE_URL").unwrap_or_else(|_| "http://127.0.0.1:8080".into());
        let api_key = std::env::var("SLUICE_API_KEY")
            .ok()
            .filter(|k| !k.trim().is_empty())
            .context("SLUICE_API_KEY is not set: create an API key for the organization (POST …/api-keys)")?;
        Ok(Self { url: url.trim_end_matches('/').to_string(), api_key })
    }
}

fn http() -> anyhow::Result<reqwest::Client> {
    crate::install_crypto_provider();
    // Idle connections go before a server's keep-alive (75 s) can end them.
    Ok(reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(120))
        .pool_idle_timeout(Duration::from_secs(30))
        .build()?)
}

/// Whether a failed attempt may succeed when sent again with the same
/// idempotency key.
fn transient(status: u16, body: &Value) -> bool {
    matches!(status, 429 | 500 | 502 | 503 | 504)
        || (status == 409
            && [Code::IdempotencyInProgress, Code::ConcurrentApply]
                .iter()
                .any(|c| body["code"].as_str() == Some(c.as_str())))
}

/// Sends `document` to the apply endpoint with one idempotency key for
/// every attempt; answers the server's JSON answer.
///
/// # Errors
/// A refusal (4xx), with the server's error and each problem's path, or a
/// transient failure that outlasted the retries.
pub async fn apply(target: &Target, org: &str, document: String, dry_run: bool) -> anyhow::Result<Value> {
    let client = http()?;
    let key = uuid::Uuid::new_v4().to_string();
    let url = format!("{}/v1/organizations/{org}/iac/apply{}", target.url, if dry_run { "?dry_run=true" } else { "" });
    let mut last = String::new();
    for attempt in 0..ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(250 << attempt)).await;
        }
        let sent = client
            .post(&url)
            .header("Content-Type", "application/x-yaml")
            .header("X-Api-Key", &target.api_key)
            .header("X-Idempotency-Key", &key)
            .body(document.clone())
            .send()
            .await;
        let res = match sent {
            Ok(r) => r,
            Err(e) => {
                last = format!("cannot reach {}: {e}", target.url);
                continue;
            }
        };
        let status = res.status().as_u16();
        let text = res.text().await.unwrap_or_default();
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status == 200 {
            return Ok(body);
        }
        if transient(status, &body) {
            last = describe_error(status, &body, &text);
            continue;
        }
        bail!("{}", describe_error(status, &body, &text));
    }
    bail!("{last} (gave up after {ATTEMPTS} attempts)")
}

/// Fetches the organization's configuration as an IaC document.
///
/// # Errors
/// When the server refuses or cannot be reached.
pub async fn export(target: &Target, org: &str) -> anyhow::Result<String> {
    let res = http()?
        .get(format!("{}/v1/organizations/{org}/iac/export", target.url))
        .header("X-Api-Key", &target.api_key)
        .send()
        .await
        .with_context(|| format!("cannot reach {}", target.url))?;
    let status = res.status().as_u16();
    let text = res.text().await?;
    if status != 200 {
        bail!("{}", describe_error(status, &serde_json::from_str(&text).unwrap_or(Value::Null), &text));
    }
    Ok(text)
}

/// A server error as lines a person reads: the message and code, then each
/// problem with its path and position.
pub fn describe_error(status: u16, body: &Value, raw: &str) -> String {
    let Some(message) = body["error"].as_str() else {
        return format!("HTTP {status}: {}", raw.trim());
    };
    let mut out = format!("{message} (HTTP {status}, {})", body["code"].as_str().unwrap_or("error"));
    if let (Some(l), Some(c)) = (body["details"]["line"].as_u64(), body["details"]["column"].as_u64())
        && !message.contains("line")
    {
        let _ = write!(out, " at line {l}, column {c}");
    }
    let errors = body["details"]["errors"].as_array().cloned().unwrap_or_default();
    // One problem without a position is the message itself.
    let said = matches!(&errors[..], [one] if one["line"].is_null()
        && message == format!("{}: {}", one["field"].as_str().unwrap_or(""), one["message"].as_str().unwrap_or("")));
    for e in errors.iter().filter(|_| !said) {
        let at = match (e["line"].as_u64(), e["column"].as_u64()) {
            (Some(l), Some(c)) => format!(" (line {l}, column {c})"),
            _ => String::new(),
        };
        let _ = write!(out, "\n  {}{at}: {}", e["field"].as_str().unwrap_or("?"), e["message"].as_str().unwrap_or(""));
    }
    out
}

fn short(v: &Value) -> String {
    match v {
        Value::Null => "(none)".into(),
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

/// The apply answer as a table: one row per resource, one line per
/// changed field, then the totals.
pub fn render_plan(body: &Value) -> String {
    let changes = body["changes"].as_array().cloned().unwrap_or_default();
    let width = changes.iter().map(|c| c["name"].as_str().unwrap_or("").len()).max().unwrap_or(4).max(4);
    let mut out = format!("{:<12} {:<width$} {}\n", "KIND", "NAME", "ACTION");
    for c in &changes {
        let action = c["action"].as_str().unwrap_or("");
        let _ = writeln!(
            out,
            "{:<12} {:<width$} {}",
            c["kind"].as_str().unwrap_or(""),
            c["name"].as_str().unwrap_or(""),
            action
        );
        for d in c["diff"].as_array().into_iter().flatten() {
            let _ = writeln!(
                out,
                "{:<12} {:<width$}   ~ {}: {} -> {}",
                "",
                "",
                d["path"].as_str().unwrap_or(""),
                short(&d["before"]),
                short(&d["after"])
            );
        }
    }
    let s = &body["summary"];
    let n = |k: &str| s[k].as_u64().unwrap_or(0);
    let _ = write!(out, "\n{} to create, {} to update, {} unchanged.", n("created"), n("updated"), n("unchanged"));
    if body["dry_run"] == Value::Bool(true) {
        out.push_str(" Dry run: nothing was written.");
    } else if n("created") + n("updated") == 0 {
        out.push_str(" Nothing to do.");
    } else {
        out.push_str(" Applied.");
    }
    out
}

/// GETs or POSTs `path` with the API key; answers the JSON body.
///
/// # Errors
/// The server's error (its message and code) or an unreachable server.
async fn call(target: &Target, method: reqwest::Method, path: &str, body: Option<Value>) -> anyhow::Result<Value> {
    let client = http()?;
    let mut req = client.request(method, format!("{}{path}", target.url)).header("X-Api-Key", &target.api_key);
    if let Some(b) = body {
        req = req.json(&b);
    }
    let res = req.send().await.with_context(|| format!("cannot reach {}", target.url))?;
    let status = res.status().as_u16();
    let body: Value = serde_json::from_str(&res.text().await.unwrap_or_default()).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        bail!(
            "{} ({status} {})",
            body["error"].as_str().unwrap_or("the server refused"),
            body["code"].as_str().unwrap_or("")
        );
    }
    Ok(body)
}

/// The organizations the key can see, one per line: id, slug, plan, name.
///
/// # Errors
/// As [`call`].
pub async fn orgs(target: &Target) -> anyhow::Result<String> {
    let page = call(target, reqwest::Method::GET, "/v1/organizations?limit=200", None).await?;
    let mut out = String::new();
    for o in page["data"].as_array().into_iter().flatten() {
        let _ = writeln!(
            out,
            "{}  {}  {}  {}",
            o["id"].as_str().unwrap_or(""),
            o["slug"].as_str().unwrap_or(""),
            o["plan"].as_str().unwrap_or(""),
            o["name"].as_str().unwrap_or("")
        );
    }
    Ok(out)
}

/// The id of `flow` (an id, or a flow's name) in `org`.
async fn flow_id(target: &Target, org: &str, flow: &str) -> anyhow::Result<String> {
    if uuid::Uuid::parse_str(flow).is_ok() {
        return Ok(flow.to_string());
    }
    let mut cursor = String::new();
    loop {
        let page =
            call(target, reqwest::Method::GET, &format!("/v1/organizations/{org}/flows?limit=200{cursor}"), None)
                .await?;
        if let Some(f) = page["data"].as_array().into_iter().flatten().find(|f| f["name"] == flow) {
            return Ok(f["id"].as_str().unwrap_or_default().to_string());
        }
        match page["next_cursor"].as_str() {
            Some(c) => cursor = format!("&cursor={c}"),
            None => bail!("no flow named '{flow}' in the organization"),
        }
    }
}

/// Queues a run of `flow` (an id or a name); answers the run.
///
/// # Errors
/// As [`call`], or when no flow has that name.
pub async fn run(target: &Target, org: &str, flow: &str) -> anyhow::Result<Value> {
    let id = flow_id(target, org, flow).await?;
    call(target, reqwest::Method::POST, &format!("/v1/organizations/{org}/flows/{id}/run"), Some(serde_json::json!({})))
        .await
}

fn log_line(l: &Value) -> String {
    let entity = l["entity"].as_str().map(|e| format!(" [{e}]")).unwrap_or_default();
    format!(
        "{} {:5}{entity} {}",
        l["ts"].as_str().unwrap_or(""),
        l["level"].as_str().unwrap_or("").to_uppercase(),
        l["message"].as_str().unwrap_or("")
    )
}

/// Prints the run's log lines, and with `follow` the new ones until the
/// run ends; answers the run as it ended (or as it is, without `follow`).
///
/// # Errors
/// As [`call`].
pub async fn logs(target: &Target, org: &str, run: &str, follow: bool) -> anyhow::Result<Value> {
    let mut printed = 0;
    loop {
        let r = call(target, reqwest::Method::GET, &format!("/v1/organizations/{org}/runs/{run}"), None).await?;
        let lines = call(target, reqwest::Method::GET, &format!("/v1/organizations/{org}/logs/{run}"), None).await?;
        for l in lines["data"].as_array().into_iter().flatten().skip(printed) {
            println!("{}", log_line(l));
            printed += 1;
        }
        let ended = !matches!(r["status"].as_str(), Some("queued" | "running"));
        if !follow || ended {
            return Ok(r);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One line on how a run ended: status, rows written, seconds.
pub fn run_summary(r: &Value) -> String {
    let rows: i64 = r["entities"].as_array().into_iter().flatten().filter_map(|e| e["rows_written"].as_i64()).sum();
    let error = r["error"].as_str().map(|e| format!(": {e}")).unwrap_or_default();
    format!(
        "run {} {} ({rows} rows written){error}",
        r["id"].as_str().unwrap_or(""),
        r["status"].as_str().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_plan_reads_as_a_table() {
        let body = json!({"dry_run": true, "summary": {"created": 1, "updated": 1, "unchanged": 0},
            "changes": [
                {"kind": "connection", "name": "warehouse", "action": "created", "id": null, "diff": []},
                {"kind": "flow", "name": "orders", "action": "updated", "id": "x",
                 "diff": [{"path": "schedule", "before": "*/15 * * * *", "after": "0 * * * *"}]}]});
        let t = render_plan(&body);
        assert_eq!(t.lines().next().unwrap().split_whitespace().collect::<Vec<_>>(), ["KIND", "NAME", "ACTION"]);
        assert!(t.contains("connection   warehouse created"), "{t}");
        assert!(t.contains("~ schedule: \"*/15 * * * *\" -> \"0 * * * *\""), "{t}");
        assert!(t.ends_with("1 to create, 1 to update, 0 unchanged. Dry run: nothing was written."), "{t}");
    }

    #[test]
    fn errors_list_each_problem_with_its_position() {
        let body = json!({"error": "2 fields are invalid", "code": "validation_failed", "details": {"errors": [
            {"field": "flows[0].schedule", "message": "bad cron"},
            {"field": "flows[1].shedule", "message": "unknown field", "line": 12, "column": 5}]}});
        let t = describe_error(422, &body, "");
        assert_eq!(
            t,
            "2 fields are invalid (HTTP 422, validation_failed)\n  flows[0].schedule: bad cron\n  flows[1].shedule (line 12, column 5): unknown field"
        );
        assert!(transient(503, &Value::Null) && !transient(422, &body));
        // The codes the server answers while the same key is in flight, and
        // when other applies kept winning: both are worth a retry.
        assert!(transient(409, &json!({"code": "idempotency_in_progress"})));
        assert!(transient(409, &json!({"code": "concurrent_apply"})));
        assert!(!transient(409, &json!({"code": "conflict"})));
        assert_eq!(describe_error(502, &Value::Null, "bad gateway\n"), "HTTP 502: bad gateway");
    }

    /// A server that answers each connection with the next canned response
    /// and reports the idempotency key of each request it read.
    async fn scripted(responses: Vec<(u16, &'static str)>) -> (String, tokio::sync::mpsc::UnboundedReceiver<String>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            for (status, body) in responses {
                let (mut sock, _) = listener.accept().await.unwrap();
                let mut buf = vec![0u8; 64 * 1024];
                let n = sock.read(&mut buf).await.unwrap();
                let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
                let key =
                    head.lines().find_map(|l| l.strip_prefix("x-idempotency-key: ")).unwrap_or("").trim().to_string();
                tx.send(key).unwrap();
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                sock.write_all(reply.as_bytes()).await.unwrap();
            }
        });
        (url, rx)
    }

    #[tokio::test]
    async fn a_transient_refusal_is_retried_with_the_same_key_and_a_real_one_is_not() {
        let in_flight = r#"{"error": "a request with this idempotency key is still in progress", "code": "idempotency_in_progress"}"#;
        let ok = r#"{"dry_run": true, "summary": {"created": 0, "updated": 0, "unchanged": 0}, "changes": []}"#;
        let (url, mut keys) = scripted(vec![(409, in_flight), (503, "busy"), (200, ok)]).await;
        let target = Target { url, api_key: "slk_test".into() };
        let answer = apply(&target, "org", "version: '1'".into(), true).await.unwrap();
        assert_eq!(answer["dry_run"], true);
        let sent: Vec<String> = (0..3).map(|_| keys.try_recv().unwrap()).collect();
        assert!(!sent[0].is_empty() && sent.iter().all(|k| *k == sent[0]), "{sent:?}");

        let invalid = r#"{"error": "version: not supported", "code": "validation_failed", "details": {"errors": []}}"#;
        let (url, mut keys) = scripted(vec![(422, invalid)]).await;
        let err = apply(&Target { url, api_key: "slk_test".into() }, "org", String::new(), false).await.unwrap_err();
        assert!(err.to_string().contains("validation_failed"), "{err}");
        assert!(keys.try_recv().is_ok() && keys.try_recv().is_err(), "a refusal is not retried");
    }
}
