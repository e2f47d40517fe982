//! Billing: plans, their limits and the monthly validation quota, and
//! subscriptions with the payment provider.

pub mod plan;
pub mod ports;
pub mod provider;
pub mod service;
