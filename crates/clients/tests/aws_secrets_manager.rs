//! `aws:secretsmanager:` references against a local AWS emulator (moto in
//! server mode on loopback, installed by .ci/run). A failure naming it when
//! `moto_server` is missing, unless `SLUICE_TEST_SKIP_SERVICES=1` skips it loudly.

use sluice_clients::Secrets;
use sluice_clients::aws::{AwsConfig, SecretsManager};
use sluice_domain::connect::connector::ConnectorError;
use sluice_domain::connect::ports::SecretResolver;

use sluice_testkit::services::moto as start_moto;

fn config(endpoint: &str) -> AwsConfig {
    AwsConfig {
        access_key_id: "AKIDEXAMPLE".into(),
        secret_access_key: "test-secret".into(),
        session_token: None,
        region: "us-east-1".into(),
        endpoint: Some(endpoint.into()),
    }
}

#[tokio::test]
async fn aws_secret_references_resolve_against_the_emulator() {
    let Some((_moto, url)) = start_moto() else { return };
    let sm = SecretsManager::new(config(&url));
    let created = sm
        .call(
            "CreateSecret",
            "us-east-1",
            &serde_json::json!({"Name": "prod/db", "SecretString": "{\"password\": \"db-pass-7\", \"port\": 5432}"}),
        )
        .await
        .unwrap();
    let arn = created["ARN"].as_str().unwrap().to_string();
    sm.call("CreateSecret", "us-east-1", &serde_json::json!({"Name": "plain", "SecretString": "just-a-string"}))
        .await
        .unwrap();

    let secrets = Secrets::new(Some(config(&url)));
    assert_eq!(secrets.resolve("aws:secretsmanager:plain").await.unwrap(), "just-a-string");
    assert_eq!(secrets.resolve(&format!("aws:secretsmanager:{arn}#password")).await.unwrap(), "db-pass-7");
    assert_eq!(secrets.resolve("aws:secretsmanager:prod/db#port").await.unwrap(), "5432");

    let e = secrets.resolve("aws:secretsmanager:no/such/secret").await.unwrap_err();
    assert!(matches!(e, ConnectorError::InvalidConfig(_)), "{e:?}");
    let e = secrets.resolve("aws:secretsmanager:prod/db#user").await.unwrap_err();
    assert!(e.to_string().contains("no key 'user'"), "{e}");
    assert!(!e.to_string().contains("db-pass-7"), "a message never carries the secret");
    let e = Secrets::default().resolve("aws:secretsmanager:plain").await.unwrap_err();
    assert!(e.to_string().contains("AWS_ACCESS_KEY_ID"), "{e}");
}
