//! Reaching a PostgreSQL server: the connection settings, TLS and pool
//! options, the guard that keeps every connection off the service's own
//! metadata store, and database errors told as connector errors.

use super::PgConnector;
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::AssertSqlSafe;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgSslMode};
use std::sync::Arc;
use std::time::Duration;

#[derive(Clone)]
pub struct PgSettings {
    pub host: String,
    pub port: u16,
    pub database: String,
    pub user: String,
    pub password: Option<String>,
    pub schema: String,
    pub sslmode: String,
    /// PEM of the CA certificate(s) the server's certificate must chain
    /// to (`verify-ca`, `verify-full`).
    pub ssl_ca: Option<String>,
    /// Whether a server that asks for the password in clear text over a
    /// connection that is not encrypted gets it (by default it does not).
    pub allow_cleartext_password: bool,
    /// The service's instance id: every connection the pool opens is
    /// checked not to lead to the metadata store (a name that resolves
    /// elsewhere later is caught too).
    pub guard: Option<String>,
    /// A publication the source's administrator made for change data
    /// capture, for a role that cannot make one (it must publish the
    /// flows' tables); by default each flow's stream makes its own.
    pub publication: Option<String>,
}

/// The Sluice instance ids the database of `conn` carries, as any role
/// connected to it can see them: the database's comment, and the rows of
/// every `sluice_instance` table the role may read.
async fn instance_marks(conn: &mut sqlx::PgConnection, mark: &str) -> Result<Vec<String>, sqlx::Error> {
    let mut marks: Vec<String> = Vec::new();
    let comment: Option<String> = sqlx::query_scalar(
        "SELECT shobj_description(d.oid, 'pg_database') FROM pg_database d WHERE d.datname = current_database()",
    )
    .fetch_optional(&mut *conn)
    .await?
    .flatten();
    if let Some(id) = comment.as_deref().and_then(|c| c.strip_prefix(mark)) {
        marks.push(id.trim().to_string());
    }
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT format('%I.%I', n.nspname, c.relname) FROM pg_class c \
         JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE c.relname = 'sluice_instance' AND c.relkind = 'r' AND has_table_privilege(c.oid, 'SELECT')",
    )
    .fetch_all(&mut *conn)
    .await?;
    for t in tables {
        let ids: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!("SELECT id::text FROM {t}")))
            .fetch_all(&mut *conn)
            .await
            .unwrap_or_default();
        marks.extend(ids);
    }
    Ok(marks)
}

/// What the pool logs when a new connection leads to the metadata store
/// (see [`PgSettings::guard`]). sqlx drops that connection and retries, so
/// the caller sees a timeout; `Registry::guard_pg` refuses such a
/// connection up front with a clear error, and this check stays for a
/// server that changes under the pool.
const METADATA_STORE: &str = "sluice: the connection leads to the metadata store";

pub(super) fn err(e: &sqlx::Error, host: &str, database: &str) -> ConnectorError {
    match e {
        sqlx::Error::Database(d) => match d.code().as_deref() {
            Some("28P01") | Some("28000") => ConnectorError::AuthFailed(d.message().to_string()),
            Some("3D000") => {
                ConnectorError::DatabaseNotFound(format!("database \"{database}\" does not exist on {host}"))
            }
            Some("42P01") => ConnectorError::EntityNotFound(d.message().to_string()),
            Some("57014") => ConnectorError::Timeout(d.message().to_string()),
            // The server ended the session: an administrator, a dropped
            // database, a shutdown.
            Some("57P01" | "57P02" | "57P03") => ConnectorError::Unreachable(format!(
                "{host}: the server ended the session ({}); the database \"{database}\" was dropped, the server is \
                 shutting down, or an administrator ended it",
                d.message()
            )),
            _ => ConnectorError::Other(with_place(d.as_ref())),
        },
        other => transport_error(other, host, "PostgreSQL").unwrap_or_else(|| ConnectorError::Other(db_message(other))),
    }
}

/// A database error's message with the table and column it is about, when
/// the server says: a value out of its column's range or too long for it
/// (a COPY's context, without the value), a null in a NOT NULL column.
fn with_place(d: &dyn sqlx::error::DatabaseError) -> String {
    let message = d.message().to_string();
    let Some(pg) = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() else { return message };
    if let (Some(table), Some(column)) = (pg.table(), pg.column()) {
        return format!("{message} (table {table}, column {column})");
    }
    // "COPY events, line 3, column amount: \"…\"": the place, not the value.
    match pg.r#where().and_then(|w| w.lines().find(|l| l.starts_with("COPY "))) {
        Some(context) => format!("{message} ({})", context.split_once(": ").map_or(context, |(place, _)| place)),
        None => message,
    }
}

impl PgConnector {
    pub fn new(s: PgSettings) -> ConnectorResult<Self> {
        let ssl = match s.sslmode.as_str() {
            "disable" => PgSslMode::Disable,
            "prefer" => PgSslMode::Prefer,
            "require" => PgSslMode::Require,
            "verify-ca" => PgSslMode::VerifyCa,
            "verify-full" => PgSslMode::VerifyFull,
            other => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "sslmode must be disable, prefer, require, verify-ca or verify-full, not '{other}'"
                )));
            }
        };
        // A host that is a path is a Unix socket of this server, where peer
        // authentication would log in as the service's own user.
        if s.host.starts_with('/') || s.host.starts_with('@') {
            return Err(ConnectorError::InvalidConfig(
                "host must be a network host name or address, not a socket path".into(),
            ));
        }
        // Nothing of the service's own environment (PGPASSWORD…) may reach a
        // tenant's server: the password is always the connection's own.
        let mut opts = PgConnectOptions::new_without_pgpass()
            .password("")
            .host(&s.host)
            .port(s.port)
            .database(&s.database)
            .username(&s.user)
            .ssl_mode(ssl)
            .allow_cleartext_password(s.allow_cleartext_password)
            .application_name("sluice");
        if let Some(p) = &s.password {
            opts = opts.password(p);
        }
        if let Some(ca) = &s.ssl_ca {
            opts = opts.ssl_root_cert_from_pem(check_pem(ca)?);
        }
        let mut pool = PgPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .min_connections(0)
            .acquire_timeout(CONNECT_TIMEOUT)
            .idle_timeout(Some(Duration::from_secs(60)));
        if let Some(id) = s.guard.clone() {
            let id: Arc<str> = id.into();
            pool = pool.after_connect(move |conn, _| {
                let id = id.clone();
                Box::pin(async move {
                    let marks = instance_marks(conn, INSTANCE_MARK).await?;
                    if marks.iter().any(|m| **m == *id) {
                        return Err(sqlx::Error::Protocol(METADATA_STORE.into()));
                    }
                    Ok(())
                })
            });
        }
        let pool = pool.connect_lazy_with(opts.clone());
        Ok(Self {
            cleared: Default::default(),
            pool,
            opts,
            schema: s.schema,
            host: format!("{}:{}", s.host, s.port),
            database: s.database,
            extras: range_extras(),
            publication: s.publication,
        })
    }

    /// The Sluice instance ids this database carries, as any role connected
    /// to it can see them (see [`instance_marks`]). A direct connection, so
    /// that the cause of a failure comes through.
    pub async fn instance_marks(&self, mark: &str) -> ConnectorResult<Vec<String>> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))?;
            let marks = instance_marks(&mut conn, mark).await.map_err(|e| self.e(&e));
            let _ = conn.close().await;
            marks
        })
        .await
    }
}
