//! Clients of services outside Sluice. For now: resolving secret references
//! in credentials (`env:NAME` from the process environment).

use async_trait::async_trait;
use sluice_domain::connector::{ConnectorError, ConnectorResult};
use sluice_domain::integration::SecretValue;
use sluice_domain::ports::SecretResolver;

/// Resolves `env:` references from the process environment, by design at
/// the moment of use (agents set them at run time).
#[derive(Debug, Default, Clone)]
pub struct Secrets;

#[async_trait]
impl SecretResolver for Secrets {
    async fn resolve(&self, reference: &str) -> ConnectorResult<String> {
        match SecretValue::parse(reference) {
            SecretValue::Plain(v) => Ok(v.to_string()),
            SecretValue::Env(name) => {
                #[allow(clippy::disallowed_methods)]
                // a secret reference is read from the environment when used, by design
                let value = std::env::var(name);
                value.map_err(|_| {
                    ConnectorError::InvalidConfig(format!(
                        "the secret reference env:{name} is not set in the environment"
                    ))
                })
            }
            SecretValue::AwsSecretsManager(arn) => Err(ConnectorError::Unsupported(format!(
                "aws:secretsmanager:{arn} cannot be resolved: AWS Secrets Manager is not configured"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn env_references_resolve_and_missing_ones_are_named_without_a_value() {
        let s = Secrets;
        assert_eq!(s.resolve("plain").await.unwrap(), "plain");
        let path = s.resolve("env:PATH").await.unwrap();
        assert!(!path.is_empty());
        let e = s.resolve("env:SLUICE_SURELY_UNSET_VARIABLE").await.unwrap_err().to_string();
        assert!(e.contains("env:SLUICE_SURELY_UNSET_VARIABLE"), "{e}");
    }
}
