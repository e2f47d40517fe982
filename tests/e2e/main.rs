//! End-to-end tests: one binary, every test against the real application on
//! a random port, on SQLite and on PostgreSQL.

mod billing;
mod binlog;
mod cancel;
mod capture_edges;
mod cdc;
mod connections;
mod console;
mod flows;
mod input;
mod isolation;
mod limits;
mod monitoring;
mod oauth;
mod objects;
mod organizations;
mod progress;
mod resync;
mod rules;
mod sso;
mod verify;
