//! The data catalog: versioned schema contracts (data assets), their
//! dependencies, and the gateway's use case over them.

pub mod service;

pub use service::*;
