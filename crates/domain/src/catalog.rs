//! The data catalog: versioned schema contracts (data assets), their
//! version history and the flows that depend on them.

pub mod asset;
pub mod contract;
pub mod drift;
pub mod ports;
pub mod service;
