//! Data-asset rules of the service over the in-memory adapters: validation
//! with paths, names unique per organization, versions on schema changes
//! only, breaking/compatible history, and the audit trail.

use serde_json::json;
use sluice_domain::Error;
use sluice_domain::ErrorKind;
use sluice_domain::app::Sluice;
use sluice_domain::catalog::asset::{AssetUpdate, NewAsset};
use sluice_domain::catalog::drift::Change;
use sluice_domain::identity::service::NewOrganization;
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::page::PageRequest;
use sluice_testkit::*;
use std::sync::Arc;

#[tokio::test]
async fn assets_version_on_schema_changes_and_are_audited() {
    let store = InMemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(time::macros::datetime!(2026-05-01 10:00 UTC)));
    let sluice = Sluice::new(in_memory_ports(&store, clock));
    let (p, _) = sluice.identity.authenticate_session(&FakeTokens::token("ann", "ann@example.com")).await.unwrap();
    let org =
        sluice.identity.create_organization(&p, NewOrganization { name: "Acme".into(), slug: None }).await.unwrap().id;

    // Invalid input: every problem, with its path; nothing is stored.
    let err = sluice
        .catalog
        .create_asset(
            &p,
            org,
            NewAsset { name: " ".into(), fields: json!([{"name": "a", "type": "text"}]), description: None },
        )
        .await
        .unwrap_err();
    let Error::Validation(problems) = &err else { panic!("{err:?}") };
    let paths: Vec<&str> = problems.iter().map(|f| f.field.as_str()).collect();
    assert_eq!(paths, ["name", "fields[0].type"]);
    assert!(
        sluice.catalog.list_assets(&p, org, PageRequest { limit: 10, after: None }).await.unwrap().items.is_empty()
    );

    let fields = json!([
        {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
        {"name": "age", "type": "integer"}
    ]);
    let a = sluice
        .catalog
        .create_asset(
            &p,
            org,
            NewAsset { name: "profile".into(), fields: fields.clone(), description: Some("  ".into()) },
        )
        .await
        .unwrap();
    assert_eq!((a.version, a.description.clone(), a.fields.len()), (1, None, 2));
    let dup = sluice
        .catalog
        .create_asset(&p, org, NewAsset { name: "profile".into(), fields: fields.clone(), description: None })
        .await
        .unwrap_err();
    assert_eq!(dup.kind(), ErrorKind::Conflict);
    assert!(dup.to_string().contains("profile"), "{dup}");

    // A description edit keeps the version; widening age and adding an optional field is compatible;
    // dropping age is breaking.
    let edit = |f: Option<serde_json::Value>, d: Option<&str>| AssetUpdate {
        name: None,
        fields: f,
        description: d.map(|d| Some(d.to_string())),
    };
    let b = sluice.catalog.update_asset(&p, org, a.id, edit(None, Some("model output"))).await.unwrap();
    assert_eq!((b.version, b.description.as_deref()), (1, Some("model output")));
    let c = sluice
        .catalog
        .update_asset(
            &p,
            org,
            a.id,
            edit(
                Some(json!([
                    {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
                    {"name": "age", "type": "number"},
                    {"name": "city", "type": "string"}
                ])),
                None,
            ),
        )
        .await
        .unwrap();
    assert_eq!(c.version, 2);
    let tagged =
        || edit(Some(json!([{"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]}])), None);
    let d = sluice.catalog.update_asset(&p, org, a.id, tagged()).await.unwrap();
    assert_eq!(d.version, 3);
    // The same fields again change nothing.
    let same = sluice.catalog.update_asset(&p, org, a.id, tagged()).await.unwrap();
    assert_eq!(same.version, 3);
    let history: Vec<_> = sluice
        .catalog
        .asset_versions(&p, org, a.id)
        .await
        .unwrap()
        .into_iter()
        .map(|v| (v.version, v.change))
        .collect();
    assert_eq!(history, [(1, Change::Compatible), (2, Change::Compatible), (3, Change::Breaking)]);

    // A bad update leaves the asset as it was.
    let bad = sluice.catalog.update_asset(&p, org, a.id, edit(Some(json!("nope")), None)).await.unwrap_err();
    assert_eq!(bad.kind(), ErrorKind::Validation);
    assert_eq!(sluice.catalog.get_asset(&p, org, a.id).await.unwrap(), d);

    sluice.catalog.delete_asset(&p, org, a.id, false).await.unwrap();
    assert_eq!(sluice.catalog.get_asset(&p, org, a.id).await.unwrap_err().kind(), ErrorKind::NotFound);

    let actions: Vec<String> =
        store.audit_entries().into_iter().map(|e| e.action).filter(|a| a.starts_with("data_asset.")).collect();
    assert_eq!(
        actions,
        ["data_asset.created", "data_asset.updated", "data_asset.updated", "data_asset.updated", "data_asset.deleted"]
    );
}

/// The gateway's reads (key, contract, plan) are cached for a second: a
/// change made through one service is seen by it at once, and by another
/// service on the same store (another `sluice` process) within the second.
#[tokio::test]
async fn gateway_reads_are_fresh_here_and_within_a_second_elsewhere() {
    use sluice_domain::gateway::Outcome;
    use sluice_domain::gateway::service::GatewayResult;
    use sluice_domain::identity::Role;
    let store = InMemoryStore::new();
    let clock = ManualClock::new(time::macros::datetime!(2026-05-01 10:00 UTC));
    // Two services on the same ports: two processes on one store.
    let ports = in_memory_ports(&store, Arc::new(clock.clone()));
    let (here, there) = (Sluice::new(ports.clone()), Sluice::new(ports));
    let (p, _) = here.identity.authenticate_session(&FakeTokens::token("ann", "ann@example.com")).await.unwrap();
    let org =
        here.identity.create_organization(&p, NewOrganization { name: "Acme".into(), slug: None }).await.unwrap().id;
    let asset = here
        .catalog
        .create_asset(
            &p,
            org,
            NewAsset { name: "c".into(), fields: json!([{"name": "a", "type": "integer"}]), description: None },
        )
        .await
        .unwrap()
        .id;
    let key = here.identity.create_api_key(&p, org, "gw", &[Role::Viewer]).await.unwrap().plain;
    let valid = |s: &Sluice| {
        let s = s.clone();
        let key = key.expose().to_string();
        async move {
            let caller = s.identity.authenticate_api_key(&key).await?;
            Ok::<_, Error>(matches!(
                s.gateway.validate(&caller, asset, r#"{"a": 1}"#).await?,
                GatewayResult::Checked(Outcome::Valid { .. })
            ))
        }
    };
    assert!(valid(&here).await.unwrap());
    assert!(valid(&there).await.unwrap(), "both have the key and the contract cached now");

    // A new required field: here at once, there after the second.
    let fields = json!([{"name": "a", "type": "integer"}, {"name": "b", "type": "string", "required": true}]);
    let update = AssetUpdate { name: None, fields: Some(fields), description: None };
    here.catalog.update_asset(&p, org, asset, update).await.unwrap();
    assert!(!valid(&here).await.unwrap(), "the edit is seen where it was made");
    assert!(valid(&there).await.unwrap(), "the other process still has the old contract");
    clock.advance(time::Duration::seconds(1));
    assert!(!valid(&there).await.unwrap(), "a second later it has the new one");

    // A revoked key: refused here at once, there after the second.
    let id = here.identity.list_api_keys(&p, org, PageRequest { limit: 10, after: None }).await.unwrap().items[0].id;
    here.identity.revoke_api_key(&p, org, id).await.unwrap();
    assert_eq!(valid(&here).await.unwrap_err().kind(), ErrorKind::Unauthenticated);
    assert!(!valid(&there).await.unwrap(), "the other process still takes the key");
    clock.advance(time::Duration::seconds(1));
    assert_eq!(valid(&there).await.unwrap_err().kind(), ErrorKind::Unauthenticated);
}

/// Runs each job on a thread of its own and counts the jobs.
#[derive(Default)]
struct Threads(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl sluice_domain::shared::offload::Offload for Threads {
    async fn run(&self, job: Box<dyn FnOnce() + Send>) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // A panicking job ends its thread; `run` still returns.
        let _ = std::thread::spawn(job).join();
    }
}

/// A payload over `INLINE_PAYLOAD` is extracted on the offload pool, a
/// smaller one on the calling task; work that panics there is an internal
/// error, not a hang or a lost answer.
#[tokio::test]
async fn large_gateway_payloads_and_other_heavy_work_run_on_the_offload_pool() {
    use sluice_domain::gateway::Outcome;
    use sluice_domain::gateway::service::{GatewayResult, INLINE_PAYLOAD};
    use sluice_domain::identity::Role;
    use std::sync::atomic::Ordering::SeqCst;
    let store = InMemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(time::macros::datetime!(2026-05-01 10:00 UTC)));
    let pool = Arc::new(Threads::default());
    let options = sluice_domain::app::Options { offload: pool.clone(), ..Default::default() };
    let sluice = Sluice::with_options(in_memory_ports(&store, clock), options);
    let (p, _) = sluice.identity.authenticate_session(&FakeTokens::token("ann", "ann@example.com")).await.unwrap();
    let org =
        sluice.identity.create_organization(&p, NewOrganization { name: "Acme".into(), slug: None }).await.unwrap().id;
    let fields = json!([{"name": "a", "type": "integer", "required": true}]);
    let asset = sluice
        .catalog
        .create_asset(&p, org, NewAsset { name: "c".into(), fields, description: None })
        .await
        .unwrap()
        .id;
    let key = sluice.identity.create_api_key(&p, org, "gw", &[Role::Viewer]).await.unwrap().plain;
    let caller = sluice.identity.authenticate_api_key(key.expose()).await.unwrap();

    let small = sluice.gateway.validate(&caller, asset, r#"Here: {"a": 1}"#).await.unwrap();
    assert!(matches!(small, GatewayResult::Checked(Outcome::Valid { .. })), "{small:?}");
    assert_eq!(pool.0.load(SeqCst), 0, "a small payload stays on the calling task");

    let large = format!("{} {{\"a\": 2}}", "Thinking it over. ".repeat(INLINE_PAYLOAD / 18 + 1));
    assert!(large.len() > INLINE_PAYLOAD);
    let GatewayResult::Checked(Outcome::Valid { data, .. }) =
        sluice.gateway.validate(&caller, asset, &large).await.unwrap()
    else {
        panic!("the large payload holds a valid object")
    };
    assert_eq!(data["a"], 2);
    assert_eq!(pool.0.load(SeqCst), 1, "a large payload is extracted on the pool");

    assert_eq!(sluice.gateway.off_thread(|| 6 * 7).await.unwrap(), 42);
    let err = sluice.gateway.off_thread(|| -> u8 { panic!("the work fails") }).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Internal, "{err:?}");
    assert_eq!(pool.0.load(SeqCst), 3);
}
