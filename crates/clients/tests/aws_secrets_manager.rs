//! `aws:secretsmanager:` references against a local AWS emulator (moto in
//! server mode on loopback, installed by .ci/run). A failure naming it when
//! `moto_server` is missing, unless `SLUICE_TEST_SKIP_SERVICES=1` skips it loudly.

use sluice_clients::Secrets;
use sluice_clients::aws::{AwsConfig, SecretsManager};
use sluice_domain::connect::connector::ConnectorError;
use sluice_domain::connect::ports::SecretResolver;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Moto(Child);

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn start_moto() -> Option<(Moto, String)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
    let child = match Command::new("moto_server")
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            sluice_testkit::services::unavailable("moto_server", e, "install it with `pip install 'moto[server]'`");
            return None;
        }
    };
    let moto = Moto(child);
    let url = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Some((moto, url));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("moto_server did not start within 30 s");
}

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
    let Some((_moto, url)) = start_moto().await else { return };
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
