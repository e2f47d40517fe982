//! Sluice's domain: entities, the rules that govern them, and the ports
//! (traits) that adapters implement. Nothing here knows about HTTP, SQL or an
//! async runtime, so the crate can be embedded and tested with in-memory
//! adapters.

pub mod apikey;
pub mod audit;
pub mod cache;
pub mod catalog;
pub mod clock;
pub mod connections;
pub mod connector;
pub mod engine;
pub mod error;
pub mod flow;
pub mod flows;
pub mod gateway;
pub mod iac;
pub mod iacs;
pub mod idempotency;
pub mod identity;
pub mod ids;
pub mod integration;
pub mod invitation;
pub mod oauth;
pub mod orchestrate;
pub mod org;
pub mod page;
pub mod ports;
pub mod secret;
pub mod service;
pub mod sync;
pub mod transform;
pub mod user;

pub use error::{Error, ErrorKind, FieldError, Result};
