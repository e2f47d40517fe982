//! sea-orm models of the metadata tables. They never leave this crate.

pub mod api_keys;
pub mod audit_logs;
pub mod idempotency_keys;
pub mod invitations;
pub mod memberships;
pub mod organizations;
pub mod users;
