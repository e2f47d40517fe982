//! Infrastructure as code: the YAML document, the plan of an apply with
//! its diffs, drift checks, and the use cases that apply and export.

pub mod plan;
pub mod ports;
pub mod service;

pub use plan::*;
