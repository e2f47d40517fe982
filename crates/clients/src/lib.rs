//! Clients of services outside Sluice: resolving secret references in
//! credentials, from the process environment (`env:NAME`) and from AWS
//! Secrets Manager (`aws:secretsmanager:ARN`).

pub mod aws;
pub mod oauth;
pub mod oidc;
pub mod s3;
pub mod stripe;
pub mod webhooks;

use async_trait::async_trait;
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult};
use sluice_domain::connect::integration::SecretValue;
use sluice_domain::connect::ports::SecretResolver;

/// Resolves `env:` references from the process environment, by design at
/// the moment of use (agents set them at run time), and
/// `aws:secretsmanager:` references when AWS is configured.
#[derive(Default)]
pub struct Secrets {
    aws: Option<aws::SecretsManager>,
}

impl Secrets {
    pub fn new(aws: Option<aws::AwsConfig>) -> Self {
        Self { aws: aws.map(aws::SecretsManager::new) }
    }
}

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
            SecretValue::AwsSecretsManager(arn) => match &self.aws {
                Some(sm) => sm.get(arn).await,
                None => Err(ConnectorError::InvalidConfig(format!(
                    "aws:secretsmanager:{arn} cannot be resolved: set AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_REGION"
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn env_references_resolve_and_missing_ones_are_named_without_a_value() {
        let s = Secrets::default();
        assert_eq!(s.resolve("plain").await.unwrap(), "plain");
        let path = s.resolve("env:PATH").await.unwrap();
        assert!(!path.is_empty());
        let e = s.resolve("env:SLUICE_SURELY_UNSET_VARIABLE").await.unwrap_err().to_string();
        assert!(e.contains("env:SLUICE_SURELY_UNSET_VARIABLE"), "{e}");
    }
}
