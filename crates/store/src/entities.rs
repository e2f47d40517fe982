//! sea-orm models of the metadata tables. They never leave this crate.

pub mod activity_events;
pub mod api_keys;
pub mod audit_logs;
pub mod billing_events;
pub mod connections;
pub mod cursors;
pub mod data_asset_versions;
pub mod data_assets;
pub mod flows;
pub mod idempotency_keys;
pub mod integrations;
pub mod invitations;
pub mod memberships;
pub mod notification_rules;
pub mod oauth_states;
pub mod organizations;
pub mod run_logs;
pub mod run_markers;
pub mod runs;
pub mod users;
pub mod validation_counts;
pub mod webhook_deliveries;
