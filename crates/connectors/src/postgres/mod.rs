//! The PostgreSQL connector.
//!
//! Reading casts each column to a decodable type (numerics and unknown
//! types as text, JSON and arrays as JSON text, timestamps without a zone
//! as UTC), copies them out in binary and decodes them here ([`binary`]),
//! streaming batches through a channel. Writing uses `COPY … FROM STDIN`,
//! in binary encoded here for the landing table's types (CSV when one of
//! them is a type we do not encode): straight into the table for append;
//! into a session-local staging table merged with one
//! `INSERT … ON CONFLICT` per checkpoint for upsert (the last staged row of
//! a key wins); into a fresh table that replaces the old one in the same
//! transaction for overwrite, with the primary key built after the load.
//! Between two PostgreSQL connections with nothing to transform, records
//! are not decoded at all: an overwrite pipes the source's binary COPY into
//! the fresh table, and an upsert by cursor pipes the source's binary COPY
//! of the records past the cursor (ordered by it, cut into whole records,
//! following the cursor column) into the stage, checkpoint by checkpoint.
//!
//! Here: the connector and what every part uses. `connect`: settings, TLS
//! and pool options, the metadata store guard, error mapping. `types`:
//! PostgreSQL's types and the vocabulary's, values in and out. `read`: the
//! `Source` impl and the decoding of a binary COPY. `range`: key-range
//! split reads. `bulk`: bulk streams out. `binary`: the binary COPY format.
//! `write`: the `Destination` impl and its writer. `cdc` and `pgoutput`:
//! change data capture.

use crate::common::quote_dq;
use sluice_domain::connect::connector::ConnectorError;
use sqlx::postgres::{PgConnectOptions, PgPool};
use std::sync::Arc;

pub mod binary;
mod bulk;
mod cdc;
mod connect;
mod digest;
pub mod pgoutput;
mod range;
mod read;
mod types;
mod write;

pub use connect::PgSettings;
pub use types::{csv_row, map_native};
// What `cdc` reaches through its parent.
use bulk::copy_on;
use connect::err;
use read::Decoding;
use write::PgWriter;

pub const ENGINE: &str = "postgres";
/// PostgreSQL's binary COPY format, passed between PostgreSQL connectors.
pub const BULK_FORMAT: sluice_domain::connect::connector::BulkFormat =
    sluice_domain::connect::connector::BulkFormat::PostgresBinary;
/// The records of a binary COPY without its header and trailer, in chunks
/// that end on a record's end: what a cursor read streams into a stage.
pub const BULK_ROWS_FORMAT: sluice_domain::connect::connector::BulkFormat =
    sluice_domain::connect::connector::BulkFormat::PostgresBinaryRows;

pub struct PgConnector {
    /// Set once this database was found not to be the service's own
    /// metadata store (see [`PgConnector::instance_marks`]).
    pub(crate) cleared: std::sync::atomic::AtomicBool,
    pool: PgPool,
    opts: PgConnectOptions,
    schema: String,
    host: String,
    database: String,
    /// The connections split reads may take beyond their first.
    extras: Arc<tokio::sync::Semaphore>,
    /// The publication changes are read through, when the connection names
    /// one (see [`PgSettings::publication`]).
    publication: Option<String>,
}

impl PgConnector {
    /// The pool, for a catalog kept in this database (a DuckLake's).
    pub(crate) fn pool(&self) -> PgPool {
        self.pool.clone()
    }

    fn e(&self, e: &sqlx::Error) -> ConnectorError {
        err(e, &self.host, &self.database)
    }

    fn qualified(&self, table: &str) -> String {
        format!("{}.{}", quote_dq(&self.schema), quote_dq(table))
    }
}
