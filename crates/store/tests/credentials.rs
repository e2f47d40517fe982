//! Credentials at rest in a real SQLite metadata store: sealed, readable
//! with the key, and re-encrypted by a key rotation.

use sluice_domain::connect::integration::{Credentials, Integration};
use sluice_domain::connect::ports::IntegrationRepository;
use sluice_domain::shared::audit::{Actor, AuditEntry};
use sluice_domain::shared::ids::IntegrationId;
use sluice_store::Store;

mod common;

#[tokio::test]
async fn credentials_are_sealed_and_survive_a_key_rotation() {
    let file =
        std::env::temp_dir().join(format!("sluice-store-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let (old, new) = ([1u8; 32], [2u8; 32]);
    let store = Store::connect(&url, &old).await.unwrap();
    let now = time::OffsetDateTime::now_utc();
    let org = common::new_org(&store, now).await;
    let audit = |a: &str| AuditEntry::new(Some(org.id), Actor::system(), a, "x", "x", now);
    let integration = Integration {
        id: IntegrationId::new(),
        org_id: org.id,
        name: "pg".into(),
        integration_type: "postgres".into(),
        credentials: Credentials([("password".to_string(), "very-secret-value".to_string())].into()),
        created_at: now,
        updated_at: now,
    };
    IntegrationRepository::create(&store, &integration, &audit("integration.created")).await.unwrap();

    let raw = std::fs::read(&file).unwrap_or_default();
    let wal = std::fs::read(format!("{}-wal", file.display())).unwrap_or_default();
    for bytes in [raw, wal] {
        assert!(!bytes.windows(17).any(|w| w == b"very-secret-value"), "plain text at rest");
    }

    assert_eq!(store.rotate_master_key(&new).await.unwrap(), 1);
    drop(store);
    let with_old = Store::connect(&url, &old).await.unwrap();
    let err = IntegrationRepository::get(&with_old, org.id, integration.id).await.unwrap_err();
    assert!(err.to_string().contains("cannot decrypt"), "{err:#}");
    let with_new = Store::connect(&url, &new).await.unwrap();
    let back = IntegrationRepository::get(&with_new, org.id, integration.id).await.unwrap().unwrap();
    assert_eq!(back.credentials.0["password"], "very-secret-value");
    // A rotation with the wrong current key changes nothing.
    assert!(with_old.rotate_master_key(&[3u8; 32]).await.is_err());
    let still = IntegrationRepository::get(&with_new, org.id, integration.id).await.unwrap().unwrap();
    assert_eq!(still.credentials.0["password"], "very-secret-value");
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", file.display()));
    }
}
