//! Moving data: flows and their mappings, the sync modes and cursor rules,
//! transforms, the engine that executes a run, and scheduling, recovery
//! and orchestration of runs.

pub mod capture;
pub mod cursor;
pub mod engine;
pub mod flow;
pub mod mode;
pub mod ports;
pub mod schedule;
pub mod service;
pub mod transform;

pub use cursor::*;
pub use mode::*;
