//! Plumbing shared by the connectors, one concern a file, all of it
//! re-exported here (`crate::common::*`): `records` (the channel-backed
//! reader, batches, rows aligned to a writer's columns), `changes` (the
//! channel-backed change reader), `ranges` (pool
//! sizes and split reads), `sql` (identifier quoting, the statements every
//! SQL connector builds alike), `types` (native-type tags, widenings,
//! stored text as values), `connect` (timeouts, TLS settings, errors of
//! reaching a server), `paths` (path confinement for file-based
//! connectors), `lock` (a writer's lock file), and `bulk` (the CSV bulk
//! format).

mod bulk;
mod changes;
mod connect;
mod lock;
mod paths;
mod ranges;
mod records;
mod sql;
mod types;

pub use bulk::*;
pub use changes::*;
pub use connect::*;
pub use lock::*;
pub use paths::*;
pub use ranges::*;
pub use records::*;
pub use sql::*;
pub use types::*;
