//! Infrastructure as code: the YAML document, the plan of an apply with
//! its diffs, and the use cases that apply and export (drift checks use
//! the catalog's rule, [`crate::catalog::drift`]).

pub mod diff;
pub mod document;
pub mod plan;
pub mod ports;
pub mod service;

pub use diff::*;
pub use document::*;
pub use plan::*;
