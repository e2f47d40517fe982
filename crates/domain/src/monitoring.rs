//! Monitoring: the activity feed of system events (run outcomes, schema
//! drift, …), notification rules and their deliveries, the dashboard and
//! the operator's metrics.

pub mod activity;
pub mod dashboard;
pub mod delivery;
pub mod ports;
pub mod rule;
pub mod service;
