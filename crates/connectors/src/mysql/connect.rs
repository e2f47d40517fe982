//! Reaching a MySQL or MariaDB server: the connection settings, TLS and
//! pool options, and database errors told as connector errors.

use super::MySqlConnector;
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use std::time::Duration;

#[derive(Clone)]
pub struct MySqlSettings {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: Option<String>,
    /// `disabled`, `preferred` (the default), `required`, `verify_ca` or
    /// `verify_identity`.
    pub ssl_mode: String,
    /// PEM of the CA certificate(s) the server's certificate must chain to.
    pub ssl_ca: Option<String>,
    /// Whether a server that asks for the password in clear text
    /// (`mysql_clear_password`) over a connection that is not encrypted
    /// gets it (by default it does not).
    pub allow_cleartext_password: bool,
}

pub(super) fn err(e: &sqlx::Error, host: &str, database: &str) -> ConnectorError {
    match e {
        sqlx::Error::Database(d) => match d.code().as_deref() {
            Some("28000") => ConnectorError::AuthFailed(d.message().to_string()),
            Some("42000") if d.message().contains("Unknown database") => {
                ConnectorError::DatabaseNotFound(format!("database '{database}' does not exist on {host}"))
            }
            Some("42S02") => ConnectorError::EntityNotFound(d.message().to_string()),
            _ if d.message().contains("Access denied") => ConnectorError::AuthFailed(d.message().to_string()),
            _ if d.message().contains("Unknown database") => {
                ConnectorError::DatabaseNotFound(format!("database '{database}' does not exist on {host}"))
            }
            _ => ConnectorError::Other(d.message().to_string()),
        },
        other => {
            transport_error(other, host, "MySQL or MariaDB").unwrap_or_else(|| ConnectorError::Other(db_message(other)))
        }
    }
}

impl MySqlConnector {
    pub fn new(s: MySqlSettings) -> ConnectorResult<Self> {
        let mut opts = MySqlConnectOptions::new()
            .host(&s.host)
            .port(s.port)
            .database(&s.database)
            .username(&s.user)
            .charset("utf8mb4")
            .timezone(Some("+00:00".to_string()))
            .enable_cleartext_plugin(s.allow_cleartext_password);
        if let Some(p) = &s.password {
            opts = opts.password(p);
        }
        use sqlx::mysql::MySqlSslMode;
        opts = opts.ssl_mode(match s.ssl_mode.as_str() {
            "disabled" => MySqlSslMode::Disabled,
            "preferred" => MySqlSslMode::Preferred,
            "required" => MySqlSslMode::Required,
            "verify_ca" => MySqlSslMode::VerifyCa,
            "verify_identity" => MySqlSslMode::VerifyIdentity,
            other => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "ssl_mode must be disabled, preferred, required, verify_ca or verify_identity, not '{other}'"
                )));
            }
        });
        if let Some(ca) = &s.ssl_ca {
            opts = opts.ssl_ca_from_pem(check_pem(ca)?);
        }
        let pool = MySqlPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(CONNECT_TIMEOUT)
            .idle_timeout(Some(Duration::from_secs(60)))
            .connect_lazy_with(opts.clone());
        Ok(Self { pool, opts, host: format!("{}:{}", s.host, s.port), database: s.database, extras: range_extras() })
    }
}
