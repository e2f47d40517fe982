//! Monitoring: the activity feed of system events (run outcomes, schema
//! drift, …); notification rules and their deliveries arrive here next.

pub mod activity;
pub mod ports;
pub mod service;
