//! The kernel every context stands on: the one error type and its codes,
//! ids, pages, the clock, secrets, read caches, the audit entry and
//! idempotency records.

pub mod audit;
pub mod cache;
pub mod clock;
pub mod error;
pub mod idempotency;
pub mod ids;
pub mod mask;
pub mod offload;
pub mod page;
pub mod record;
pub mod secret;
