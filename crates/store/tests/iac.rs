//! IaC applies in both metadata stores (a SQLite file and a fresh
//! PostgreSQL database, skipped loudly when PostgreSQL is unreachable
//! outside CI): a plan's writes round-trip, a re-plan is all unchanged, a
//! plan made before another writer's change is refused as stale with
//! nothing written, and two processes applying one document at once create
//! each resource once.

mod common;

use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::connect::connector::{Capability, ConfigField, ConnectorSpec};
use sluice_domain::iac::ports::IacRepository;
use sluice_domain::iac::{Action, Catalogue, IacPlan, Snapshot, Write, parse, plan};
use sluice_domain::shared::audit::{Actor, AuditEntry};
use sluice_domain::shared::ids::OrgId;
use sluice_store::Store;
use std::sync::Arc;
use time::OffsetDateTime;

const DOC: &str = r#"
version: "1"
integrations:
  - {name: creds, type: postgres, credentials: {password: s3cret}}
connections:
  - {name: app, integration: creds, type: postgres, capability: source, config: {host: db, database: app}}
  - {name: dw, type: postgres, capability: destination, config: {host: dw, database: dw, password: "env:DW_PW"}}
flows:
  - name: orders
    source_connection: app
    destination_connection: dw
    schedule: "*/5 * * * *"
    config:
      mappings: [{source_entity: orders, sync_mode: incremental_deduped, cursor_field: updated_at, primary_key: id}]
  - name: rollup
    source_connection: app
    destination_connection: dw
    config:
      mappings: [{source_entity: orders, dest_entity: rollup, sync_mode: full_refresh_overwrite}]
      depends_on: [{flow: orders, on: success}]
"#;

fn registry() -> Catalogue {
    let f = ConfigField::string;
    Catalogue {
        specs: vec![ConnectorSpec {
            connector_type: "postgres",
            title: "PostgreSQL",
            capabilities: vec![Capability::Both],
            config_fields: vec![f("host", false, true), f("database", false, true), f("password", true, false)],
            sync_modes: vec![],
            features: vec![],
            variants: vec![],
        }],
        oauth_types: vec![],
    }
}

/// Now, truncated to what PostgreSQL keeps.
fn now() -> OffsetDateTime {
    let n = OffsetDateTime::now_utc();
    n.replace_nanosecond(n.nanosecond() / 1000 * 1000).unwrap()
}

fn plan_of(text: &str, s: &Snapshot, org: OrgId) -> Result<IacPlan> {
    plan(&parse(text).unwrap(), s, &registry(), org, now())
}

fn audit(org: OrgId) -> Vec<AuditEntry> {
    vec![AuditEntry::new(Some(org), Actor::system(), "iac.applied", "organization", org, now())]
}

/// Plans and applies like the service does: again on a stale plan.
async fn apply(store: &Store, org: OrgId, text: &str) -> Result<IacPlan> {
    for _ in 0..10 {
        let p = plan_of(text, &store.snapshot(org).await?, org)?;
        if p.writes.is_empty() {
            return Ok(p);
        }
        match store.apply(org, &p.writes, &audit(org)).await {
            Ok(()) => return Ok(p),
            Err(Error::Conflict { code: sluice_domain::shared::error::Code::StalePlan, .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    panic!("never applied")
}

async fn scenario(store: &Store) {
    let org = common::new_org(store, now()).await.id;
    let first = apply(store, org, DOC).await.unwrap();
    assert_eq!(first.count(Action::Created), 5);

    // What was written reads back as planned, secrets decrypted.
    let s = store.snapshot(org).await.unwrap();
    assert_eq!((s.integrations.len(), s.connections.len(), s.flows.len()), (1, 2, 2));
    assert_eq!(s.integrations[0].credentials.0["password"], "s3cret");
    let dw = s.connections.iter().find(|c| c.name == "dw").unwrap();
    assert_eq!(dw.secrets.0["password"], "env:DW_PW");
    for w in &first.writes.flows {
        assert!(s.flows.contains(w.item()), "{:?}", w.item());
    }

    // Re-planning against the store changes nothing.
    let again = plan_of(DOC, &s, org).unwrap();
    assert!(again.writes.is_empty(), "{:?}", again.changes);

    // Two plans made from one snapshot: the second to write is stale, and
    // nothing of it is written (not even its creates).
    let a = plan_of(&DOC.replace("*/5 * * * *", "0 * * * *"), &s, org).unwrap();
    let with_new = format!(
        "{}  - {{name: extra, source_connection: app, destination_connection: dw, config: {{mappings: [{{source_entity: x, sync_mode: full_refresh_append}}]}}}}\n",
        DOC.replace("*/5 * * * *", "30 * * * *")
    );
    let b = plan_of(&with_new, &s, org).unwrap();
    assert!(matches!(b.writes.flows[0], Write::Update { .. }) || matches!(b.writes.flows[1], Write::Update { .. }));
    store.apply(org, &a.writes, &audit(org)).await.unwrap();
    let err = store.apply(org, &b.writes, &audit(org)).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { code: sluice_domain::shared::error::Code::StalePlan, .. }), "{err:?}");
    let s = store.snapshot(org).await.unwrap();
    assert!(!s.flows.iter().any(|f| f.name == "extra"), "a refused apply leaves nothing");
    assert_eq!(s.flows.iter().find(|f| f.name == "orders").unwrap().schedule.as_deref(), Some("0 * * * *"));

    // A create whose name was taken meanwhile is stale too.
    let c1 = plan_of(&with_new, &s, org).unwrap();
    let c2 = plan_of(&with_new, &s, org).unwrap();
    store.apply(org, &c1.writes, &audit(org)).await.unwrap();
    let err = store.apply(org, &c2.writes, &audit(org)).await.unwrap_err();
    assert!(matches!(err, Error::Conflict { code: sluice_domain::shared::error::Code::StalePlan, .. }), "{err:?}");
    assert!(plan_of(&with_new, &store.snapshot(org).await.unwrap(), org).unwrap().writes.is_empty());
}

async fn concurrently(a: Arc<Store>, b: Arc<Store>) {
    let org = common::new_org(&a, now()).await.id;
    let run = |s: Arc<Store>| tokio::spawn(async move { apply(&s, org, DOC).await.unwrap().count(Action::Created) });
    let (x, y) = tokio::join!(run(a.clone()), run(b));
    assert_eq!(x.unwrap() + y.unwrap(), 5, "each resource is created by exactly one apply");
    let s = a.snapshot(org).await.unwrap();
    assert_eq!((s.integrations.len(), s.connections.len(), s.flows.len()), (1, 2, 2));
}

#[tokio::test]
async fn applies_on_sqlite() {
    let file = std::env::temp_dir().join(format!("sluice-iac-{}.db", sluice_domain::shared::secret::random_base62(8)));
    let url = format!("sqlite://{}?mode=rwc", file.display());
    let store = Arc::new(Store::connect(&url, &[4u8; 32]).await.unwrap());
    scenario(&store).await;
    concurrently(store.clone(), store.clone()).await;
    drop(store);
    let _ = std::fs::remove_file(&file);
}

#[tokio::test]
async fn applies_on_postgres() {
    let Some((_db, url)) = common::fresh("sluice_iac").await else { return };
    let store = Arc::new(Store::connect(&url, &[4u8; 32]).await.unwrap());
    scenario(&store).await;
    // Two processes (two pools) on one database.
    let other = Arc::new(Store::connect(&url, &[4u8; 32]).await.unwrap());
    concurrently(store, other).await;
}
