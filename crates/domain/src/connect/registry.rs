//! The port that builds connectors: a connection's resolved settings in,
//! a source, a destination or a change source out.

use super::changes::ChangeSource;
use super::connector::{ConnectorError, ConnectorResult, ConnectorSpec, Destination, ResolvedConfig, Source};
use std::sync::Arc;

/// Builds connectors from resolved configurations.
#[cfg_attr(any(test, feature = "mocks"), mockall::automock)]
#[async_trait::async_trait]
pub trait ConnectorRegistry: Send + Sync {
    fn specs(&self) -> Vec<ConnectorSpec>;
    fn spec(&self, connector_type: &str) -> Option<ConnectorSpec> {
        self.specs().into_iter().find(|s| s.connector_type == connector_type)
    }
    async fn source(&self, config: &ResolvedConfig) -> ConnectorResult<Arc<dyn Source>>;
    async fn destination(&self, config: &ResolvedConfig) -> ConnectorResult<Arc<dyn Destination>>;
    /// The source's change log, for connector types that capture changes.
    async fn change_source(&self, config: &ResolvedConfig) -> ConnectorResult<Arc<dyn ChangeSource>> {
        Err(ConnectorError::Unsupported(format!("{} sources do not capture changes", config.connector_type)))
    }
    /// Checks settings when a connection is created or changed: that a
    /// file path stays inside the organization's own directory, and that a
    /// reachable database is not the service's own metadata store (an
    /// unreachable one is checked again whenever it is used).
    ///
    /// Answers one entry per bad setting (`config.<key>`), whose message
    /// never shows a server path; none when the settings are fine.
    async fn check_config(&self, config: &ResolvedConfig) -> Vec<crate::FieldError>;
}
