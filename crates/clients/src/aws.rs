//! AWS Secrets Manager over its HTTP API, signed with Signature Version 4.
//! A reference `aws:secretsmanager:<ARN or name>` resolves to the secret's
//! string; `…#key` picks one key of a JSON secret.

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult};
use std::fmt;
use std::time::Duration;

/// Credentials and where to reach the service.
#[derive(Clone)]
pub struct AwsConfig {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
    /// Used when an ARN does not name its region.
    pub region: String,
    /// Overrides `https://secretsmanager.<region>.amazonaws.com` (a local
    /// emulator, a VPC endpoint).
    pub endpoint: Option<String>,
}

impl fmt::Debug for AwsConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsConfig")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"[redacted]")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

pub struct SecretsManager {
    config: AwsConfig,
    http: reqwest::Client,
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// A request to sign.
pub struct ToSign<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    /// Query parameters, unencoded values (the test suite's are plain).
    pub query: &'a [(&'a str, &'a str)],
    /// Headers besides `host` and `x-amz-date`, lowercase names.
    pub headers: &'a [(&'a str, &'a str)],
    pub body: &'a [u8],
    pub region: &'a str,
    pub service: &'a str,
    /// `YYYYMMDD'T'HHMMSS'Z'`.
    pub amz_date: &'a str,
}

/// `now` as a signature's `x-amz-date` (`YYYYMMDD'T'HHMMSS'Z'`).
pub fn amz_date(now: time::OffsetDateTime) -> String {
    format!(
        "{:04}{:02}{:02}T{:02}{:02}{:02}Z",
        now.year(),
        now.month() as u8,
        now.day(),
        now.hour(),
        now.minute(),
        now.second()
    )
}

/// Signature Version 4: answers the `Authorization` header.
pub fn sign(r: &ToSign<'_>, access_key_id: &str, secret_access_key: &str) -> String {
    let mut headers: Vec<(String, String)> =
        vec![("host".into(), r.host.into()), ("x-amz-date".into(), r.amz_date.into())];
    headers.extend(r.headers.iter().map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string())));
    headers.sort();
    let signed: Vec<&str> = headers.iter().map(|(k, _)| k.as_str()).collect();
    let signed = signed.join(";");
    let mut query: Vec<(&str, &str)> = r.query.to_vec();
    query.sort();
    let query = query.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("&");
    let canonical_headers: String = headers.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let canonical =
        format!("{}\n{}\n{query}\n{canonical_headers}\n{signed}\n{}", r.method, r.path, hex(&Sha256::digest(r.body)));
    let date = &r.amz_date[..8];
    let scope = format!("{date}/{}/{}/aws4_request", r.region, r.service);
    let to_sign = format!("AWS4-HMAC-SHA256\n{}\n{scope}\n{}", r.amz_date, hex(&Sha256::digest(canonical.as_bytes())));
    let k = hmac(format!("AWS4{secret_access_key}").as_bytes(), date.as_bytes());
    let k = hmac(&k, r.region.as_bytes());
    let k = hmac(&k, r.service.as_bytes());
    let k = hmac(&k, b"aws4_request");
    let signature = hex(&hmac(&k, to_sign.as_bytes()));
    format!("AWS4-HMAC-SHA256 Credential={access_key_id}/{scope}, SignedHeaders={signed}, Signature={signature}")
}

impl SecretsManager {
    pub fn new(config: AwsConfig) -> Self {
        // reqwest needs rustls' process-wide provider; installing it twice is harmless.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap_or_default();
        Self { config, http }
    }

    fn region_of<'a>(&'a self, id: &'a str) -> &'a str {
        // arn:aws:secretsmanager:<region>:<account>:secret:<name>
        let parts: Vec<&str> = id.split(':').collect();
        if parts.len() >= 7 && parts[0] == "arn" && !parts[3].is_empty() { parts[3] } else { &self.config.region }
    }

    /// Calls one action of the Secrets Manager JSON API.
    ///
    /// # Errors
    /// Unreachable service, refused credentials, or an error the service names.
    pub async fn call(
        &self,
        target: &str,
        region: &str,
        body: &serde_json::Value,
    ) -> ConnectorResult<serde_json::Value> {
        let endpoint =
            self.config.endpoint.clone().unwrap_or_else(|| format!("https://secretsmanager.{region}.amazonaws.com"));
        let host = endpoint.split("://").nth(1).unwrap_or(&endpoint).trim_end_matches('/').to_string();
        let body = serde_json::to_vec(body).unwrap_or_default();
        let amz_date = amz_date(time::OffsetDateTime::now_utc());
        let target_header = format!("secretsmanager.{target}");
        let mut headers =
            vec![("content-type", "application/x-amz-json-1.1"), ("x-amz-target", target_header.as_str())];
        if let Some(t) = &self.config.session_token {
            headers.push(("x-amz-security-token", t.as_str()));
        }
        let auth = sign(
            &ToSign {
                method: "POST",
                host: &host,
                path: "/",
                query: &[],
                headers: &headers,
                body: &body,
                region,
                service: "secretsmanager",
                amz_date: &amz_date,
            },
            &self.config.access_key_id,
            &self.config.secret_access_key,
        );
        let mut req = self
            .http
            .post(format!("{}/", endpoint.trim_end_matches('/')))
            .header("authorization", auth)
            .header("x-amz-date", &amz_date);
        for (k, v) in &headers {
            req = req.header(*k, *v);
        }
        let res = req
            .body(body)
            .send()
            .await
            .map_err(|e| ConnectorError::Unreachable(format!("AWS Secrets Manager at {host}: {e}")))?;
        let status = res.status();
        let json: serde_json::Value = res.json().await.unwrap_or_default();
        if status.is_success() {
            return Ok(json);
        }
        let kind = json["__type"].as_str().unwrap_or("").rsplit('#').next().unwrap_or("").to_string();
        let message = json["message"].as_str().or(json["Message"].as_str()).unwrap_or("").to_string();
        Err(match kind.as_str() {
            "ResourceNotFoundException" => ConnectorError::InvalidConfig(format!("AWS secret not found: {message}")),
            "UnrecognizedClientException" | "InvalidSignatureException" | "AccessDeniedException" => {
                ConnectorError::AuthFailed(format!("AWS Secrets Manager refused the credentials: {kind}"))
            }
            _ => ConnectorError::Other(format!("AWS Secrets Manager answered {status}: {kind} {message}")),
        })
    }

    /// The secret named by `reference` (after `aws:secretsmanager:`).
    ///
    /// # Errors
    /// As [`SecretsManager::call`]; a binary secret or a missing JSON key.
    pub async fn get(&self, reference: &str) -> ConnectorResult<String> {
        let (id, key) = match reference.rsplit_once('#') {
            Some((id, key)) => (id, Some(key)),
            None => (reference, None),
        };
        let json = self.call("GetSecretValue", self.region_of(id), &serde_json::json!({"SecretId": id})).await?;
        let s = json["SecretString"]
            .as_str()
            .ok_or_else(|| ConnectorError::InvalidConfig(format!("AWS secret {id} has no string value")))?;
        match key {
            None => Ok(s.to_string()),
            Some(k) => {
                let obj: serde_json::Value = serde_json::from_str(s).map_err(|_| {
                    ConnectorError::InvalidConfig(format!("AWS secret {id} is not JSON, so '#{k}' names nothing"))
                })?;
                match &obj[k] {
                    serde_json::Value::String(v) => Ok(v.clone()),
                    serde_json::Value::Null => {
                        Err(ConnectorError::InvalidConfig(format!("AWS secret {id} has no key '{k}'")))
                    }
                    other => Ok(other.to_string()),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `get-vanilla-query-order-key-case` of AWS's Signature Version 4 test suite.
    #[test]
    fn signing_matches_the_aws_test_suite() {
        let auth = sign(
            &ToSign {
                method: "GET",
                host: "example.amazonaws.com",
                path: "/",
                query: &[("Param2", "value2"), ("Param1", "value1")],
                headers: &[],
                body: b"",
                region: "us-east-1",
                service: "service",
                amz_date: "20150830T123600Z",
            },
            "AKIDEXAMPLE",
            "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, SignedHeaders=host;x-amz-date, \
             Signature=b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"
        );
    }

    #[test]
    fn the_region_comes_from_the_arn_when_it_names_one() {
        let sm = SecretsManager::new(AwsConfig {
            access_key_id: "a".into(),
            secret_access_key: "s".into(),
            session_token: None,
            region: "us-east-1".into(),
            endpoint: None,
        });
        assert_eq!(sm.region_of("arn:aws:secretsmanager:eu-west-3:123456789012:secret:db-AbCdEf"), "eu-west-3");
        assert_eq!(sm.region_of("plain-name"), "us-east-1");
        assert!(!format!("{:?}", sm.config).contains("\"s\""));
    }
}
