//! Amazon S3 and every service that speaks its API (MinIO, Cloudflare R2,
//! Ceph, moto), over HTTP, signed with Signature Version 4 (`aws::sign`):
//! the calls a dataset needs, no more. Objects put whole or in parts,
//! conditional puts (`If-None-Match`, `If-Match`), listing by prefix,
//! server-side copies, and the multipart uploads left in a bucket, to
//! abort them. Answers with a connector error that says in one line what
//! failed: no such bucket, access refused, the wrong region, an endpoint
//! that does not answer.

use crate::aws::{ToSign, amz_date, hex, sign};
use sha2::{Digest, Sha256};
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult};
use std::fmt;
use std::time::Duration;

/// Where a bucket is and how to sign for it.
#[derive(Clone)]
pub struct S3Config {
    pub bucket: String,
    pub region: String,
    /// `https://s3.<region>.amazonaws.com` unless set (another service).
    pub endpoint: Option<String>,
    /// The bucket in the path (`host/bucket/key`) rather than in the host
    /// name (`bucket.host/key`).
    pub path_style: bool,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for S3Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .field("path_style", &self.path_style)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .finish()
    }
}

/// An object as a listing shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Listed {
    pub key: String,
    pub size: u64,
    pub modified: Option<time::OffsetDateTime>,
}

/// A multipart upload not completed nor aborted.
#[derive(Debug, Clone, PartialEq)]
pub struct Upload {
    pub key: String,
    pub id: String,
    pub initiated: Option<time::OffsetDateTime>,
}

/// How a conditional put may write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Put<'a> {
    Always,
    /// Only if no object has the key.
    IfAbsent,
    /// Only if the object has this entity tag.
    IfMatch(&'a str),
}

pub struct S3 {
    config: S3Config,
    http: reqwest::Client,
    /// `scheme://host[:port]` of the service.
    endpoint: String,
}

/// What a call answered.
struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: Vec<u8>,
}

/// Percent-encodes `s` as SigV4 wants: every byte but the unreserved ones
/// (and `/` where `slash` says).
pub fn uri_encode(s: &str, slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) || (slash && b == b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The text of each `<tag>…</tag>` in `xml`, unescaped.
fn tags<'a>(xml: &'a str, tag: &str) -> Vec<&'a str> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut out = Vec::new();
    let mut rest = xml;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let Some(j) = after.find(&close) else { break };
        out.push(&after[..j]);
        rest = &after[j + close.len()..];
    }
    out
}

fn unescape(s: &str) -> String {
    s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&apos;", "'").replace("&amp;", "&")
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let Some(v) = std::str::from_utf8(&b[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(v);
            i += 3;
        } else {
            out.push(if b[i] == b'+' { b' ' } else { b[i] });
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn first(xml: &str, tag: &str) -> Option<String> {
    tags(xml, tag).first().map(|t| unescape(t))
}

fn rfc3339(s: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339).ok()
}

impl S3 {
    pub fn new(config: S3Config) -> Self {
        // reqwest needs rustls' process-wide provider; installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        // No redirects: an endpoint answers for itself, or the call fails.
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(300))
            .build()
            .unwrap_or_default();
        let endpoint = config
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("https://s3.{}.amazonaws.com", config.region))
            .trim_end_matches('/')
            .to_string();
        S3 { config, http, endpoint }
    }

    /// `s3://bucket`, for messages.
    pub fn bucket_label(&self) -> String {
        format!("s3://{}", self.config.bucket)
    }

    /// The URL, host and canonical path of `key` (the bucket, for none).
    fn place(&self, key: Option<&str>) -> (String, String, String) {
        let (scheme, host) = self.endpoint.split_once("://").unwrap_or(("https", &self.endpoint));
        let object = key.map(|k| format!("/{}", uri_encode(k, true))).unwrap_or_default();
        if self.config.path_style {
            let path = format!("/{}{}", uri_encode(&self.config.bucket, false), object);
            (format!("{scheme}://{host}{path}"), host.to_string(), path)
        } else {
            let host = format!("{}.{host}", self.config.bucket);
            let path = if object.is_empty() { "/".to_string() } else { object };
            (format!("{scheme}://{host}{path}"), host, path)
        }
    }

    /// One signed call, tried again (up to three times, backing off) when
    /// the service is busy or cannot be reached.
    async fn call(
        &self,
        method: &str,
        key: Option<&str>,
        query: &[(&str, String)],
        headers: &[(&str, String)],
        body: Vec<u8>,
    ) -> ConnectorResult<Answer> {
        let mut delay = Duration::from_millis(200);
        for attempt in 1.. {
            match self.call_once(method, key, query, headers, &body).await {
                Ok(a) if (a.status == 500 || a.status == 503) && attempt < 3 => {}
                Err(ConnectorError::Unreachable(_)) if attempt < 3 => {}
                other => return other,
            }
            tokio::time::sleep(delay).await;
            delay *= 4;
        }
        unreachable!("the loop returns")
    }

    async fn call_once(
        &self,
        method: &str,
        key: Option<&str>,
        query: &[(&str, String)],
        headers: &[(&str, String)],
        body: &[u8],
    ) -> ConnectorResult<Answer> {
        let (url, host, path) = self.place(key);
        let query: Vec<(String, String)> =
            query.iter().map(|(k, v)| (uri_encode(k, false), uri_encode(v, false))).collect();
        let query_refs: Vec<(&str, &str)> = query.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let date = amz_date(time::OffsetDateTime::now_utc());
        let digest = hex(&Sha256::digest(body));
        let mut all: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        all.push(("x-amz-content-sha256", &digest));
        if let Some(t) = &self.config.session_token {
            all.push(("x-amz-security-token", t));
        }
        let auth = sign(
            &ToSign {
                method,
                host: &host,
                path: &path,
                query: &query_refs,
                headers: &all,
                body,
                region: &self.config.region,
                service: "s3",
                amz_date: &date,
            },
            &self.config.access_key_id,
            &self.config.secret_access_key,
        );
        let mut q =
            query.iter().map(|(k, v)| if v.is_empty() { k.clone() } else { format!("{k}={v}") }).collect::<Vec<_>>();
        q.sort();
        let url = if q.is_empty() { url } else { format!("{url}?{}", q.join("&")) };
        let method =
            reqwest::Method::from_bytes(method.as_bytes()).map_err(|e| ConnectorError::Other(e.to_string()))?;
        let mut req = self.http.request(method, url).header("authorization", auth).header("x-amz-date", &date);
        for (k, v) in &all {
            req = req.header(*k, *v);
        }
        let res = req.body(body.to_vec()).send().await.map_err(|e| {
            let why = if e.is_timeout() { " (no answer in time)" } else { "" };
            ConnectorError::Unreachable(format!("the S3 endpoint {}{why}", self.endpoint))
        })?;
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let body = res
            .bytes()
            .await
            .map_err(|_| {
                ConnectorError::Unreachable(format!("the S3 endpoint {} (it stopped answering)", self.endpoint))
            })?
            .to_vec();
        Ok(Answer { status, headers, body })
    }

    /// The error an answer that is not a success says, in one line.
    fn refusal(&self, what: &str, a: &Answer) -> ConnectorError {
        let text = String::from_utf8_lossy(&a.body);
        let code = first(&text, "Code").unwrap_or_default();
        let bucket = self.bucket_label();
        let region = a
            .headers
            .get("x-amz-bucket-region")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
            .or_else(|| first(&text, "Region"));
        match (code.as_str(), a.status) {
            ("NoSuchBucket", _) => ConnectorError::InvalidConfig(format!("bucket {bucket} does not exist")),
            ("PermanentRedirect" | "AuthorizationHeaderMalformed" | "IllegalLocationConstraintException", _)
            | (_, 301) => ConnectorError::InvalidConfig(match region {
                Some(r) => format!("bucket {bucket} is in region {r}, not {}", self.config.region),
                None => format!("bucket {bucket} is not in region {}", self.config.region),
            }),
            ("InvalidAccessKeyId" | "SignatureDoesNotMatch" | "InvalidToken" | "ExpiredToken", _) => {
                ConnectorError::AuthFailed(format!("S3 refused the credentials for {bucket} ({code})"))
            }
            ("AccessDenied" | "AllAccessDisabled", _) | (_, 403) => {
                ConnectorError::AuthFailed(format!("access to {bucket} denied ({what})"))
            }
            _ => ConnectorError::Other(format!(
                "S3 answered {} to {what} in {bucket}{}",
                a.status,
                if code.is_empty() { String::new() } else { format!(": {code}") }
            )),
        }
    }

    /// Makes the bucket (a test's own, on an emulator).
    pub async fn create_bucket(&self) -> ConnectorResult<()> {
        let a = self.call("PUT", None, &[], &[], Vec::new()).await?;
        if (200..300).contains(&a.status) { Ok(()) } else { Err(self.refusal("making the bucket", &a)) }
    }

    /// Puts `body` as `key`, as `mode` allows: `Ok(Some(etag))`, or
    /// `Ok(None)` when the condition did not hold.
    pub async fn put(&self, key: &str, body: Vec<u8>, mode: Put<'_>) -> ConnectorResult<Option<String>> {
        let headers: Vec<(&str, String)> = match mode {
            Put::Always => vec![],
            Put::IfAbsent => vec![("if-none-match", "*".into())],
            Put::IfMatch(etag) => vec![("if-match", etag.to_string())],
        };
        let a = self.call("PUT", Some(key), &[], &headers, body).await?;
        match a.status {
            200..=299 => Ok(Some(etag_of(&a))),
            // 409: a conditional write racing another.
            412 | 409 => Ok(None),
            _ => Err(self.refusal("a write", &a)),
        }
    }

    /// `key`'s bytes and entity tag, if it exists.
    pub async fn get(&self, key: &str) -> ConnectorResult<Option<(Vec<u8>, String)>> {
        let a = self.call("GET", Some(key), &[], &[], Vec::new()).await?;
        match a.status {
            200..=299 => {
                let etag = etag_of(&a);
                Ok(Some((a.body, etag)))
            }
            404 if first(&String::from_utf8_lossy(&a.body), "Code").as_deref() != Some("NoSuchBucket") => Ok(None),
            _ => Err(self.refusal("a read", &a)),
        }
    }

    /// Writes `key`'s bytes into `out` chunk by chunk (memory holds one);
    /// answers whether it exists.
    pub async fn download(&self, key: &str, out: &mut (dyn std::io::Write + Send)) -> ConnectorResult<bool> {
        let (url, host, path) = self.place(Some(key));
        let date = amz_date(time::OffsetDateTime::now_utc());
        let digest = hex(&Sha256::digest(b""));
        let mut headers: Vec<(&str, &str)> = vec![("x-amz-content-sha256", &digest)];
        if let Some(t) = &self.config.session_token {
            headers.push(("x-amz-security-token", t));
        }
        let auth = sign(
            &ToSign {
                method: "GET",
                host: &host,
                path: &path,
                query: &[],
                headers: &headers,
                body: b"",
                region: &self.config.region,
                service: "s3",
                amz_date: &date,
            },
            &self.config.access_key_id,
            &self.config.secret_access_key,
        );
        let mut req = self.http.get(url).header("authorization", auth).header("x-amz-date", &date);
        for (k, v) in &headers {
            req = req.header(*k, *v);
        }
        let unreachable = || ConnectorError::Unreachable(format!("the S3 endpoint {}", self.endpoint));
        let mut res = req.send().await.map_err(|_| unreachable())?;
        let status = res.status().as_u16();
        if status == 404 {
            return Ok(false);
        }
        if !(200..300).contains(&status) {
            let headers = res.headers().clone();
            let body = res.bytes().await.map(|b| b.to_vec()).unwrap_or_default();
            return Err(self.refusal("a read", &Answer { status, headers, body }));
        }
        while let Some(chunk) = res.chunk().await.map_err(|_| unreachable())? {
            out.write_all(&chunk).map_err(|e| ConnectorError::Other(format!("spooling {key}: {e}")))?;
        }
        Ok(true)
    }

    /// Whether `key` exists.
    pub async fn exists(&self, key: &str) -> ConnectorResult<bool> {
        let a = self.call("HEAD", Some(key), &[], &[], Vec::new()).await?;
        match a.status {
            200..=299 => Ok(true),
            404 => Ok(false),
            _ => Err(self.refusal("a read", &a)),
        }
    }

    pub async fn delete(&self, key: &str) -> ConnectorResult<()> {
        let a = self.call("DELETE", Some(key), &[], &[], Vec::new()).await?;
        match a.status {
            200..=299 | 404 => Ok(()),
            _ => Err(self.refusal("a delete", &a)),
        }
    }

    /// Copies `from` to `to` in the bucket; `false` when `from` is not there.
    pub async fn copy(&self, from: &str, to: &str) -> ConnectorResult<bool> {
        let source = format!("/{}/{}", self.config.bucket, uri_encode(from, true));
        let a = self.call("PUT", Some(to), &[], &[("x-amz-copy-source", source)], Vec::new()).await?;
        let text = String::from_utf8_lossy(&a.body);
        match (a.status, first(&text, "Code").as_deref()) {
            (_, Some("NoSuchKey")) | (404, _) => Ok(false),
            // A copy may fail after its 200: the error is in the body.
            (200..=299, Some(_)) if text.contains("<Error>") => Err(self.refusal("a copy", &a)),
            (200..=299, _) => Ok(true),
            _ => Err(self.refusal("a copy", &a)),
        }
    }

    /// Every object whose key begins with `prefix`, page by page.
    pub async fn list(&self, prefix: &str) -> ConnectorResult<Vec<Listed>> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut q =
                vec![("list-type", "2".to_string()), ("prefix", prefix.to_string()), ("encoding-type", "url".into())];
            if let Some(t) = &token {
                q.push(("continuation-token", t.clone()));
            }
            let a = self.call("GET", None, &q, &[], Vec::new()).await?;
            if !(200..300).contains(&a.status) {
                return Err(self.refusal("a listing", &a));
            }
            let text = String::from_utf8_lossy(&a.body).into_owned();
            for c in tags(&text, "Contents") {
                let Some(key) = first(c, "Key") else { continue };
                out.push(Listed {
                    key: percent_decode(&key),
                    size: first(c, "Size").and_then(|s| s.parse().ok()).unwrap_or(0),
                    modified: first(c, "LastModified").and_then(|s| rfc3339(&s)),
                });
            }
            token = first(&text, "NextContinuationToken");
            if first(&text, "IsTruncated").as_deref() != Some("true") || token.is_none() {
                return Ok(out);
            }
        }
    }

    /// Whether the bucket can be listed (at most one key asked for).
    pub async fn probe(&self) -> ConnectorResult<()> {
        let q = [("list-type", "2".to_string()), ("max-keys", "1".to_string())];
        let a = self.call("GET", None, &q, &[], Vec::new()).await?;
        if (200..300).contains(&a.status) { Ok(()) } else { Err(self.refusal("a listing", &a)) }
    }

    pub async fn start_upload(&self, key: &str) -> ConnectorResult<String> {
        let a = self.call("POST", Some(key), &[("uploads", String::new())], &[], Vec::new()).await?;
        if !(200..300).contains(&a.status) {
            return Err(self.refusal("an upload", &a));
        }
        first(&String::from_utf8_lossy(&a.body), "UploadId")
            .ok_or_else(|| ConnectorError::Other("S3 started an upload without an UploadId".into()))
    }

    /// Uploads part `n` (from 1); answers its entity tag.
    pub async fn upload_part(&self, key: &str, id: &str, n: u32, body: Vec<u8>) -> ConnectorResult<String> {
        let q = [("partNumber", n.to_string()), ("uploadId", id.to_string())];
        let a = self.call("PUT", Some(key), &q, &[], body).await?;
        if (200..300).contains(&a.status) { Ok(etag_of(&a)) } else { Err(self.refusal("an upload", &a)) }
    }

    pub async fn complete_upload(&self, key: &str, id: &str, etags: &[String]) -> ConnectorResult<()> {
        let parts: String = etags
            .iter()
            .enumerate()
            .map(|(i, e)| format!("<Part><PartNumber>{}</PartNumber><ETag>{e}</ETag></Part>", i + 1))
            .collect();
        let body = format!("<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>").into_bytes();
        let a = self.call("POST", Some(key), &[("uploadId", id.to_string())], &[], body).await?;
        let text = String::from_utf8_lossy(&a.body);
        if (200..300).contains(&a.status) && !text.contains("<Error>") {
            Ok(())
        } else {
            Err(self.refusal("completing an upload", &a))
        }
    }

    pub async fn abort_upload(&self, key: &str, id: &str) -> ConnectorResult<()> {
        let a = self.call("DELETE", Some(key), &[("uploadId", id.to_string())], &[], Vec::new()).await?;
        match a.status {
            200..=299 | 404 => Ok(()),
            _ => Err(self.refusal("aborting an upload", &a)),
        }
    }

    /// The multipart uploads under `prefix` not completed nor aborted.
    pub async fn uploads(&self, prefix: &str) -> ConnectorResult<Vec<Upload>> {
        let q = [("uploads", String::new()), ("prefix", prefix.to_string())];
        let a = self.call("GET", None, &q, &[], Vec::new()).await?;
        if !(200..300).contains(&a.status) {
            return Err(self.refusal("a listing of uploads", &a));
        }
        let text = String::from_utf8_lossy(&a.body).into_owned();
        Ok(tags(&text, "Upload")
            .into_iter()
            .filter_map(|u| {
                Some(Upload {
                    key: first(u, "Key")?,
                    id: first(u, "UploadId")?,
                    initiated: first(u, "Initiated").and_then(|s| rfc3339(&s)),
                })
            })
            .collect())
    }
}

fn etag_of(a: &Answer) -> String {
    a.headers.get("etag").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_encoded_as_sigv4_wants_and_listings_parse() {
        assert_eq!(uri_encode("a b/c+d~e.f", true), "a%20b/c%2Bd~e.f");
        assert_eq!(uri_encode("a/b", false), "a%2Fb");
        assert_eq!(percent_decode("events/x%20y%2Bz.parquet"), "events/x y+z.parquet");
        let xml = "<R><Contents><Key>a%2Fb</Key><Size>12</Size><LastModified>2026-12-03T08:00:00.000Z</LastModified>\
                   </Contents><Contents><Key>c&amp;d</Key><Size>3</Size></Contents><IsTruncated>false</IsTruncated></R>";
        let c = tags(xml, "Contents");
        assert_eq!(c.len(), 2);
        assert_eq!(first(c[0], "Size").as_deref(), Some("12"));
        assert_eq!(first(c[1], "Key").as_deref(), Some("c&d"));
        assert!(first(c[0], "LastModified").and_then(|s| rfc3339(&s)).is_some());
    }

    #[test]
    fn refusals_say_in_one_line_what_failed() {
        let s3 = S3::new(S3Config {
            bucket: "lake".into(),
            region: "us-east-1".into(),
            endpoint: None,
            path_style: false,
            access_key_id: "k".into(),
            secret_access_key: "s".into(),
            session_token: None,
        });
        let said = |status: u16, code: &str, region: Option<&str>| {
            let mut headers = reqwest::header::HeaderMap::new();
            if let Some(r) = region {
                headers.insert("x-amz-bucket-region", r.parse().unwrap());
            }
            let body = format!("<Error><Code>{code}</Code><Message>m</Message></Error>").into_bytes();
            s3.refusal("a listing", &Answer { status, headers, body })
        };
        let cases = [
            (said(404, "NoSuchBucket", None), "bucket s3://lake does not exist"),
            (
                said(301, "PermanentRedirect", Some("eu-west-1")),
                "bucket s3://lake is in region eu-west-1, not us-east-1",
            ),
            (said(400, "AuthorizationHeaderMalformed", None), "bucket s3://lake is not in region us-east-1"),
            (said(403, "AccessDenied", None), "access to s3://lake denied (a listing)"),
            (said(403, "InvalidAccessKeyId", None), "S3 refused the credentials for s3://lake (InvalidAccessKeyId)"),
            (said(500, "InternalError", None), "S3 answered 500 to a listing in s3://lake: InternalError"),
        ];
        for (e, want) in cases {
            assert!(e.to_string().ends_with(want), "{e} / {want}");
            assert_eq!(e.to_string().lines().count(), 1);
        }
        assert!(matches!(said(404, "NoSuchBucket", None), ConnectorError::InvalidConfig(_)));
        assert!(matches!(said(403, "AccessDenied", None), ConnectorError::AuthFailed(_)));
        assert!(matches!(said(301, "PermanentRedirect", None), ConnectorError::InvalidConfig(_)));
    }

    #[test]
    fn the_path_holds_the_bucket_or_the_host_does() {
        let config = |path_style| S3Config {
            bucket: "lake".into(),
            region: "eu-west-1".into(),
            endpoint: None,
            path_style,
            access_key_id: "k".into(),
            secret_access_key: "s".into(),
            session_token: None,
        };
        let (url, host, path) = S3::new(config(false)).place(Some("a b/c"));
        assert_eq!(
            (url.as_str(), host.as_str(), path.as_str()),
            ("https://lake.s3.eu-west-1.amazonaws.com/a%20b/c", "lake.s3.eu-west-1.amazonaws.com", "/a%20b/c")
        );
        let (url, _, path) = S3::new(config(true)).place(None);
        assert_eq!((url.as_str(), path.as_str()), ("https://s3.eu-west-1.amazonaws.com/lake", "/lake"));
        let shown = format!("{:?}", config(true));
        assert!(!shown.contains("\"s\"") && shown.contains("[redacted]"), "{shown}");
    }
}
