//! Moving data: flows and their mappings, the sync modes and cursor rules,
//! transforms; a run's life (claimed, leased and fenced in `queue`,
//! executed in `run`, one entity at a time in `entity`, a change stream in
//! `capture`), scheduling and orchestration, and the read models.

pub mod capture;
pub mod chunks;
pub mod cursor;
pub mod digest;
pub mod drops;
pub mod entity;
pub mod flow;
pub mod mode;
pub mod orchestrate;
pub mod ports;
pub mod queue;
pub mod repair;
pub mod run;
pub mod service;
pub mod transform;
pub mod validate;
pub mod verification;
pub mod verify;
pub mod views;

pub use cursor::*;
pub use mode::*;
