//! Monitoring: the activity feed of system events (run outcomes, schema
//! drift, …), the dashboard, the operator's metrics; notification rules
//! and their deliveries arrive here next.

pub mod activity;
pub mod dashboard;
pub mod ports;
pub mod service;
