//! Virtual data assets and their versions in both metadata stores: a
//! SQLite file and a fresh PostgreSQL database (skipped loudly when
//! PostgreSQL is unreachable outside CI).

mod common;

use serde_json::json;
use sluice_domain::Error;
use sluice_domain::ErrorKind;
use sluice_domain::billing::plan::Metered;
use sluice_domain::billing::ports::BillingRepository;
use sluice_domain::catalog::asset::{AssetKind, DataAsset};
use sluice_domain::catalog::contract::parse_fields;
use sluice_domain::catalog::drift::Change;
use sluice_domain::catalog::ports::CatalogRepository;
use sluice_domain::shared::audit::{Actor, AuditEntry};
use sluice_domain::shared::ids::{AssetId, OrgId};
use sluice_domain::shared::page::PageRequest;
use sluice_store::Store;
use time::OffsetDateTime;

async fn scenario(store: &Store) {
    // PostgreSQL keeps microseconds.
    let now = OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(now.nanosecond() / 1000 * 1000).unwrap();
    let org = common::new_org(store, now).await;
    let audit = |action: &str| AuditEntry::new(Some(org.id), Actor::system(), action, "data_asset", "x", now);

    let v1 = parse_fields(&json!([
        {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
        {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}
    ]))
    .unwrap();
    let mut asset = DataAsset {
        id: AssetId::new(),
        org_id: org.id,
        name: "customer_profile".into(),
        kind: AssetKind::Virtual,
        version: 1,
        fields: v1.clone(),
        description: Some("what the model returns".into()),
        connection_id: None,
        entity: None,
        created_at: now,
        updated_at: now,
    };
    store.create_asset(&asset, Some("you@example.com".into()), &audit("data_asset.created")).await.unwrap();
    assert_eq!(store.get_asset(org.id, asset.id).await.unwrap().as_ref(), Some(&asset), "read back as written");

    // A second asset with the same name is a conflict, and nothing of it stays.
    let twin = DataAsset { id: AssetId::new(), ..asset.clone() };
    let err = store.create_asset(&twin, None, &audit("data_asset.created")).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Conflict, "{err:?}");
    assert!(store.get_asset(org.id, twin.id).await.unwrap().is_none());

    // A schema change is version 2 with its classification; a description edit is not a version.
    let v2 = parse_fields(&json!([
        {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]}
    ]))
    .unwrap();
    asset.fields = v2.clone();
    asset.version = 2;
    store
        .update_asset(&asset, Some((Change::Breaking, Some("ann".into()))), &audit("data_asset.updated"))
        .await
        .unwrap();
    asset.description = None;
    store.update_asset(&asset, None, &audit("data_asset.updated")).await.unwrap();
    let got = store.get_asset(org.id, asset.id).await.unwrap().unwrap();
    assert_eq!((got.version, got.fields.clone(), got.description.clone()), (2, v2.clone(), None));
    let versions = store.asset_versions(org.id, asset.id).await.unwrap();
    let summary: Vec<_> = versions.iter().map(|v| (v.version, v.change, v.created_by.clone())).collect();
    assert_eq!(
        summary,
        [(1, Change::Compatible, Some("you@example.com".into())), (2, Change::Breaking, Some("ann".into()))]
    );
    assert_eq!((versions[0].fields.clone(), versions[1].fields.clone()), (v1, v2));

    // Listing is per organization; another organization sees nothing.
    let page = store.list_assets(org.id, PageRequest { limit: 10, after: None }).await.unwrap();
    assert_eq!(page.items.iter().map(|a| a.id).collect::<Vec<_>>(), [asset.id]);
    let other = OrgId::new();
    assert!(store.get_asset(other, asset.id).await.unwrap().is_none());
    assert!(matches!(store.asset_versions(other, asset.id).await, Err(Error::NotFound { .. })));
    assert!(matches!(
        store.delete_asset(other, asset.id, &audit("data_asset.deleted")).await,
        Err(Error::NotFound { .. })
    ));

    // The validation quota: counted per month, never past the limit.
    let counted = |n: i64| Metered::Counted { used: Some(n) };
    for expected in [counted(1), counted(2), Metered::Refused, Metered::Refused] {
        assert_eq!(store.consume_validation(org.id, "2026-11", Some(2)).await.unwrap(), expected);
    }
    assert_eq!(store.validations_used(org.id, "2026-11").await.unwrap(), 2);
    assert_eq!(
        store.consume_validation(org.id, "2026-12", Some(2)).await.unwrap(),
        counted(1),
        "a new month starts at zero"
    );
    assert_eq!(
        store.consume_validation(org.id, "2026-11", None).await.unwrap(),
        Metered::Counted { used: None },
        "no limit"
    );
    assert_eq!(store.validations_used(org.id, "2026-11").await.unwrap(), 3);
    assert_eq!(store.validations_used(other, "2026-11").await.unwrap(), 0);

    // Asks that arrive together are counted in one transaction (meter.rs):
    // still exact, per organization, and never past the limit.
    let (x, y) = (OrgId::new(), OrgId::new());
    let asks = (0..300).map(|i| {
        let (org, limit) = if i % 3 == 0 { (y, None) } else { (x, Some(120)) };
        async move { (org, store.consume_validation(org, "2026-11", limit).await.unwrap()) }
    });
    let answers = futures_util::future::join_all(asks).await;
    let granted = |o: OrgId| answers.iter().filter(|(org, m)| *org == o && *m != Metered::Refused).count();
    assert_eq!((granted(x), granted(y)), (120, 100));
    // Each count of the month went to exactly one validation (so each
    // quota threshold is reached once).
    let mut counts: Vec<i64> = answers
        .iter()
        .filter_map(|(org, m)| match m {
            Metered::Counted { used: Some(n) } if *org == x => Some(*n),
            _ => None,
        })
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, (1..=120).collect::<Vec<_>>());
    assert_eq!(store.validations_used(x, "2026-11").await.unwrap(), 120);
    assert_eq!(store.validations_used(y, "2026-11").await.unwrap(), 100);
    // Unlimited asks of several organizations arriving together are counted
    // by one statement per batch (meter.rs): each organization exactly.
    let orgs: Vec<OrgId> = (0..5).map(|_| OrgId::new()).collect();
    let asks = (0..250).map(|i| {
        let org = orgs[i % 5];
        async move { store.consume_validation(org, "2026-11", None).await.unwrap() }
    });
    assert!(futures_util::future::join_all(asks).await.into_iter().all(|g| g == Metered::Counted { used: None }));
    for o in &orgs {
        assert_eq!(store.validations_used(*o, "2026-11").await.unwrap(), 50);
    }
    // A month counted without a limit, then with one (a plan change): the
    // limit holds for the sum of every row the unlimited asks used.
    let asks = (0..80).map(|_| async move { store.consume_validation(y, "2026-11", Some(150)).await.unwrap() });
    let granted = futures_util::future::join_all(asks).await.into_iter().filter(|g| *g != Metered::Refused).count();
    assert_eq!(granted, 50);
    assert_eq!(store.validations_used(y, "2026-11").await.unwrap(), 150);

    // Deleting removes the asset and its history.
    store.delete_asset(org.id, asset.id, &audit("data_asset.deleted")).await.unwrap();
    assert!(store.get_asset(org.id, asset.id).await.unwrap().is_none());
    assert!(matches!(store.asset_versions(org.id, asset.id).await, Err(Error::NotFound { .. })));
    assert!(matches!(
        store.update_asset(&asset, None, &audit("data_asset.updated")).await,
        Err(Error::NotFound { .. })
    ));
}

/// Discovery's versions carry their real change kind: a renamed column (a
/// field removed, one added) is breaking, an added nullable one
/// compatible; versions stored as "discovered" before read classified.
async fn discovered_versions(store: &Store, url: &str) {
    use sluice_domain::connect::connector::{EntitySchema, Field, FieldType};
    use sluice_domain::connect::ports::DiscoveredSchemas;
    use sluice_domain::shared::ids::ConnectionId;
    let now = OffsetDateTime::now_utc();
    use sluice_domain::connect::connection::{Connection, ConnectionStatus};
    use sluice_domain::connect::connector::Capability;
    use sluice_domain::connect::ports::ConnectionRepository;
    let org = common::new_org(store, now).await;
    let conn = Connection {
        id: ConnectionId::new(),
        org_id: org.id,
        name: "crm".into(),
        integration_id: None,
        connector_type: "memory".into(),
        capability: Capability::Both,
        config: Default::default(),
        secrets: Default::default(),
        status: ConnectionStatus::Untested,
        last_tested_at: None,
        last_error: None,
        created_at: now,
        updated_at: now,
    };
    let audit = AuditEntry::new(Some(org.id), Actor::system(), "connection.created", "connection", conn.id, now);
    ConnectionRepository::create(store, &conn, &audit).await.unwrap();
    let conn = conn.id;
    let schema = |fields: &[(&str, bool)]| EntitySchema {
        name: "people".into(),
        fields: fields
            .iter()
            .map(|(n, nullable)| Field { nullable: *nullable, ..Field::new(*n, FieldType::String) })
            .collect(),
    };
    for fields in [
        &[("id", false), ("name", false)][..],
        &[("id", false), ("full_name", false)],
        &[("id", false), ("full_name", false), ("age", true)],
    ] {
        store.upsert_discovered(org.id, "crm.people", conn, &schema(fields), now).await.unwrap();
    }
    let asset = store.find_discovered(org.id, conn, "people").await.unwrap().expect("catalogued");
    let changes =
        |vs: Vec<sluice_domain::catalog::asset::AssetVersion>| vs.iter().map(|v| v.change).collect::<Vec<_>>();
    assert_eq!(
        changes(store.asset_versions(org.id, asset.id).await.unwrap()),
        [Change::Compatible, Change::Breaking, Change::Compatible]
    );
    // As an older version stored them.
    use sea_orm::ConnectionTrait;
    let db = sea_orm::Database::connect(url).await.unwrap();
    db.execute_unprepared("UPDATE data_asset_versions SET change = 'discovered' WHERE version > 1").await.unwrap();
    assert_eq!(
        changes(store.asset_versions(org.id, asset.id).await.unwrap()),
        [Change::Compatible, Change::Breaking, Change::Compatible]
    );
    db.close().await.ok();
}

#[tokio::test]
async fn assets_and_versions_on_sqlite() {
    let file =
        std::env::temp_dir().join(format!("sluice-catalog-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let store = Store::connect(&url, &[3u8; 32]).await.unwrap();
    scenario(&store).await;
    discovered_versions(&store, &url).await;
    drop(store);
    let _ = std::fs::remove_file(&file);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn assets_and_versions_on_postgres() {
    let Some((_db, url)) = common::fresh("sluice_catalog").await else { return };
    let store = Store::connect(&url, &[3u8; 32]).await.unwrap();
    scenario(&store).await;
    discovered_versions(&store, &url).await;

    // Two processes consuming one quota at once never pass it.
    let a = std::sync::Arc::new(store);
    let b = std::sync::Arc::new(Store::connect(&url, &[3u8; 32]).await.unwrap());
    let org = OrgId::new();
    let spend = |s: std::sync::Arc<Store>| {
        tokio::spawn(async move {
            let mut granted = 0;
            for _ in 0..40 {
                if s.consume_validation(org, "2026-11", Some(50)).await.unwrap() != Metered::Refused {
                    granted += 1;
                }
            }
            granted
        })
    };
    let (x, y) = tokio::join!(spend(a.clone()), spend(b.clone()));
    assert_eq!(x.unwrap() + y.unwrap(), 50);
    assert_eq!(a.validations_used(org, "2026-11").await.unwrap(), 50);

    // And in bursts: 2 × 150 asks at once, batched by each store's meter.
    let org = OrgId::new();
    let burst = |s: std::sync::Arc<Store>| {
        futures_util::future::join_all((0..150).map(move |_| {
            let s = s.clone();
            tokio::spawn(async move { s.consume_validation(org, "2026-11", Some(200)).await.unwrap() })
        }))
    };
    let (x, y) = tokio::join!(burst(a.clone()), burst(b.clone()));
    let mut counts: Vec<i64> = x
        .into_iter()
        .chain(y)
        .filter_map(|r| match r.unwrap() {
            Metered::Counted { used } => used,
            Metered::Refused => None,
        })
        .collect();
    counts.sort_unstable();
    assert_eq!(counts, (1..=200).collect::<Vec<_>>(), "two processes never hand out one count twice");
    assert_eq!(a.validations_used(org, "2026-11").await.unwrap(), 200);
}

/// The migration that spread a month's count over rows keeps the counts
/// already made: the table is built up to the one before, a count written
/// the old way, then the rest migrated.
async fn counts_survive_the_migration(url: &str) {
    use sea_orm::ConnectionTrait;
    use sluice_migrations::{Migrator, MigratorTrait};
    let db = sea_orm::Database::connect(url).await.unwrap();
    Migrator::up(&db, Some(7)).await.unwrap();
    let org = OrgId::new();
    let uuid = match db.get_database_backend() {
        sea_orm::DbBackend::Postgres => format!("'{org}'"),
        // sea-orm stores a uuid on SQLite as its 16 bytes.
        _ => format!("X'{}'", org.as_uuid().simple()),
    };
    db.execute_unprepared(&format!(
        "INSERT INTO validation_usage (org_id, month, count) VALUES ({uuid}, '2026-11', 41)"
    ))
    .await
    .unwrap();
    drop(db);
    let store = Store::connect(url, &[3u8; 32]).await.unwrap();
    assert_eq!(store.validations_used(org, "2026-11").await.unwrap(), 41);
    assert_eq!(store.consume_validation(org, "2026-11", Some(42)).await.unwrap(), Metered::Counted { used: Some(42) });
    assert_eq!(store.consume_validation(org, "2026-11", Some(42)).await.unwrap(), Metered::Refused);
}

#[tokio::test]
async fn validation_counts_survive_the_migration_on_sqlite() {
    let file =
        std::env::temp_dir().join(format!("sluice-migrate-{}.db", sluice_domain::shared::secret::random_base62(8)));
    counts_survive_the_migration(&format!("sqlite://{}?mode=rwc", file.display())).await;
    let _ = std::fs::remove_file(&file);
}

#[tokio::test]
async fn validation_counts_survive_the_migration_on_postgres() {
    let Some((_db, url)) = common::fresh("sluice_migrate").await else { return };
    counts_survive_the_migration(&url).await;
}
