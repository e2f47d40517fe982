//! Billing: plans, their limits and the monthly validation quota.

pub mod plan;
pub mod ports;
pub mod service;
