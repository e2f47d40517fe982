//! The MySQL / MariaDB connector.
//!
//! Sessions run in UTC (`time_zone = '+00:00'`), so `TIMESTAMP` columns read
//! and write as UTC; `DATETIME` values are taken as UTC. Reading takes
//! temporal, decimal, text and JSON columns as the server sends them
//! (temporal ones decoded from the binary protocol's parts) and casts the
//! others to a decodable form.
//! Writing uses multi-row `INSERT`s inside a transaction, executed by a
//! task of their own so that the next statement is encoded while the
//! server runs the last, `ON DUPLICATE KEY UPDATE` for upsert, and for
//! overwrite a fresh table swapped in with one
//! atomic `RENAME TABLE`. MariaDB's `JSON` is `LONGTEXT` with a
//! `json_valid` check; discovery recognises it.
//!
//! Here: the connector and what every part uses. `connect`: settings, TLS
//! and pool options, error mapping. `types`: MySQL's types and the
//! vocabulary's, values in and out. `read`: the `Source` impl. `range`:
//! key-range split reads. `write`: the `Destination` impl, the writer and
//! its session, and the take-over of an earlier attempt's writers.

use sluice_domain::connect::connector::ConnectorError;
use sqlx::mysql::{MySqlConnectOptions, MySqlPool};
use std::sync::Arc;

mod binlog;
mod cdc;
mod connect;
mod digest;
mod range;
mod read;
mod snapshot;
mod types;
mod write;

pub use connect::MySqlSettings;
use connect::err;
pub use types::map_native;

pub const ENGINE: &str = "mysql";

#[derive(Clone)]
pub struct MySqlConnector {
    pool: MySqlPool,
    opts: MySqlConnectOptions,
    host: String,
    database: String,
    /// The connections split reads may take beyond their first.
    extras: Arc<tokio::sync::Semaphore>,
}

impl MySqlConnector {
    fn e(&self, e: &sqlx::Error) -> ConnectorError {
        err(e, &self.host, &self.database)
    }
}
