//! Reaching a database server: the deadline of connecting and metadata
//! queries, the CA certificate setting, and the failures of reaching a
//! server told in our words.

use sluice_domain::connect::connector::{ConnectorError, ConnectorResult};
use std::future::Future;
use std::time::Duration;

/// How long connecting and metadata queries may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs `fut` with a deadline, reporting `what` on timeout.
pub async fn with_timeout<T>(
    what: &str,
    d: Duration,
    fut: impl Future<Output = ConnectorResult<T>>,
) -> ConnectorResult<T> {
    match tokio::time::timeout(d, fut).await {
        Ok(r) => r,
        Err(_) => Err(ConnectorError::Timeout(format!("{what} took longer than {}s", d.as_secs()))),
    }
}

/// What the patched drivers (`vendor/sqlx-postgres`, `vendor/sqlx-mysql`)
/// say when they refuse to send a password in clear text.
const CLEARTEXT_REFUSED: &str = "asked for the password in clear text over a connection that is not encrypted";

/// The failures of reaching a database server, as codes with fixed
/// messages: what a failed test reports must not echo what a foreign
/// server sent (a port scanner's oracle). `None` for errors of the
/// database itself.
pub fn transport_error(e: &sqlx::Error, host: &str, engine: &str) -> Option<ConnectorError> {
    use std::io::ErrorKind;
    tracing::debug!(error = ?e, host, "reaching a database server failed");
    Some(match e {
        sqlx::Error::Io(io) => match io.kind() {
            ErrorKind::ConnectionRefused => ConnectorError::Refused(host.to_string()),
            ErrorKind::TimedOut => ConnectorError::Timeout(format!("connecting to {host}")),
            // rustls reports a certificate it refuses as invalid data.
            ErrorKind::InvalidData if is_tls_failure(&io.to_string()) => {
                ConnectorError::Tls(format!("{host}: {}", tls_reason(&io.to_string())))
            }
            ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted => {
                ConnectorError::WrongProtocol(format!(
                    "{host} closed the connection: the server ended the session (a restart, a dropped database, \
                     an administrator), or it is not a {engine} server"
                ))
            }
            kind => ConnectorError::Unreachable(format!("{host} ({kind})")),
        },
        sqlx::Error::PoolTimedOut => ConnectorError::Timeout(format!("connecting to {host}")),
        sqlx::Error::Tls(t) => ConnectorError::Tls(format!("{host}: {}", tls_reason(&t.to_string()))),
        sqlx::Error::Protocol(m) if m.contains(CLEARTEXT_REFUSED) => ConnectorError::Tls(format!(
            "{host} asked for the password in clear text over a connection that is not encrypted; \
             it was not sent (require TLS, or set allow_cleartext_password on the connection)"
        )),
        sqlx::Error::Protocol(_) => {
            ConnectorError::WrongProtocol(format!("{host} did not answer as a {engine} server"))
        }
        _ => return None,
    })
}

/// A CA certificate setting as PEM bytes: it must hold a certificate (the
/// text itself, never a path on the server).
pub fn check_pem(pem: &str) -> ConnectorResult<Vec<u8>> {
    if pem.contains("-----BEGIN CERTIFICATE-----") && pem.contains("-----END CERTIFICATE-----") {
        Ok(pem.as_bytes().to_vec())
    } else {
        Err(ConnectorError::InvalidConfig(
            "ssl_ca must hold the PEM text of the CA certificate (-----BEGIN CERTIFICATE-----…)".into(),
        ))
    }
}

fn is_tls_failure(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["certificate", "handshake", "tls", "alert"].iter().any(|w| m.contains(w))
}

/// A TLS failure told in our words: a certificate problem, or the
/// server's lack of TLS, never the peer's bytes.
fn tls_reason(message: &str) -> &'static str {
    let m = message.to_ascii_lowercase();
    if m.contains("notvalidforname") {
        "the server's certificate does not name this host"
    } else if m.contains("certificate") || m.contains("unknownissuer") {
        "the server's certificate did not verify"
    } else if m.contains("not support") || m.contains("does not support") || m.contains("refused") {
        "the server does not offer TLS"
    } else {
        "the TLS handshake failed"
    }
}

/// A user-facing message of a database error, never holding a credential.
pub fn db_message(e: &sqlx::Error) -> String {
    match e {
        sqlx::Error::Database(d) => d.message().to_string(),
        sqlx::Error::Io(io) => io.to_string(),
        sqlx::Error::PoolTimedOut => "timed out waiting for a connection".into(),
        sqlx::Error::Tls(t) => format!("TLS: {t}"),
        sqlx::Error::RowNotFound => "no rows".into(),
        sqlx::Error::ColumnDecode { index, source } => format!("cannot decode column {index}: {source}"),
        other => {
            // sqlx's own messages can quote the connection options; keep
            // only the first line and never the URL.
            other.to_string().lines().next().unwrap_or("database error").to_string()
        }
    }
}
