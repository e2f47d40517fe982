//! Sluice's domain: entities, the rules that govern them, and the ports
//! (traits) that adapters implement. Nothing here knows about HTTP, SQL or an
//! async runtime, so the crate can be embedded and tested with in-memory
//! adapters.

// The contexts, each using only those above it (see docs/architecture.md).
pub mod catalog;
pub mod connect;
pub mod gateway;
pub mod iac;
pub mod identity;
pub mod monitoring;
pub mod ports;
pub mod service;
pub mod shared;
pub mod sync;

pub use shared::error::{Error, ErrorKind, FieldError, Result};
