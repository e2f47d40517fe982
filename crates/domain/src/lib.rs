//! Sluice's domain: entities, the rules that govern them, and the ports
//! (traits) that adapters implement. Nothing here knows about HTTP, SQL or an
//! async runtime, so the crate can be embedded and tested with in-memory
//! adapters.
//!
//! One module per bounded context; each uses only the contexts listed
//! above it, gateway and iac not each other (see docs/architecture.md and
//! `tests/layers.rs`, which checks it).

pub mod app;
pub mod billing; // plans, the monthly validation quota
pub mod catalog; // data assets: contracts, versions, drift, dependents
pub mod connect; // connectors, integrations, connections, OAuth; test, discover, preview
pub mod gateway; // LLM output extracted, validated and masked against a contract
pub mod iac; // the YAML document: plan, apply, export, drift checks
pub mod identity; // users, organizations, members, invitations, API keys, access
pub mod monitoring; // the activity feed, health
pub mod shared; // errors and codes, ids, pages, clock, secrets, caches, audit, idempotency, records
pub mod sync; // flows, modes and cursors, transforms, the engine, scheduling // `Sluice`: the facade that wires one service per context

pub use app::{Ports, Sluice};
pub use shared::error::{Error, ErrorKind, FieldError, Result};
