//! Where CPU-bound pure work runs.

use async_trait::async_trait;

/// Runs CPU-bound pure work (the gateway's parse and extraction of a large payload)
/// where it cannot hold up other requests: a bounded pool of threads in
/// the service, the calling task in tests and embedders that need none.
#[async_trait]
pub trait Offload: Send + Sync {
    /// Runs `job` to its end.
    async fn run(&self, job: Box<dyn FnOnce() + Send>);
}

/// Runs the work on the calling task.
#[derive(Debug, Default, Clone, Copy)]
pub struct Inline;

#[async_trait]
impl Offload for Inline {
    async fn run(&self, job: Box<dyn FnOnce() + Send>) {
        job();
    }
}
