//! Row flows into a destination that commits their marks with its rows (a
//! folder of Parquet files, a lake table): a worker lost between the
//! destination's commit and what the metadata store records after it (the
//! cursor, the run's outcome), at any commit of a run, leaves every row
//! exactly once, since the next attempt resumes from what the destination
//! holds; an append reads on strictly after the value it holds, so no row
//! at the boundary comes twice; a cursor set by hand moves the one the
//! destination holds.

use serde_json::json;
use sluice_domain::app::Sluice;
use sluice_domain::connect::connector::{Capability, EntitySchema, Field, FieldType, Value};
use sluice_domain::connect::service::NewConnection;
use sluice_domain::identity::Principal;
use sluice_domain::identity::service::NewOrganization;
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::ids::{ConnectionId, OrgId};
use sluice_domain::sync::flow::*;
use sluice_domain::sync::service::NewFlow;
use sluice_testkit::*;
use std::collections::BTreeMap;
use std::sync::Arc;

struct World {
    sluice: Sluice,
    mem: MemoryConnectors,
    store: InMemoryStore,
    catalog: InMemoryCatalog,
    flows: InMemoryFlows,
    p: Principal,
    org: OrgId,
    src: ConnectionId,
    dst: ConnectionId,
}

fn schema() -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.primary_key = true;
    id.nullable = false;
    EntitySchema { name: "events".into(), fields: vec![id, Field::new("updated", FieldType::Integer)] }
}

/// Events `from..=to`, three to each cursor value: a batch of 10,000
/// rows ends where a value does every third batch only, so that values
/// span batches.
fn events(from: i64, to: i64) -> Vec<Vec<Value>> {
    (from..=to).map(|i| vec![Value::Int(i), Value::Int((i - 1) / 3)]).collect()
}

async fn world(rows: i64) -> World {
    let store = InMemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(sluice_domain::shared::clock::SystemClock);
    let mem = MemoryConnectors::new();
    mem.put("src", schema(), events(1, rows));
    let (catalog, flows) = (InMemoryCatalog::new(&store), InMemoryFlows::new(&store));
    let sluice = Sluice::new(in_memory_ports_sharing(&store, clock, &mem, FakeSecrets::default(), &catalog, &flows));
    let (p, _) = sluice.identity.authenticate_session(&FakeTokens::token("ann", "ann@example.com")).await.unwrap();
    let org =
        sluice.identity.create_organization(&p, NewOrganization { name: "Acme".into(), slug: None }).await.unwrap().id;
    let conn = |name: &str, cap, extra: &[(&str, &str)]| NewConnection {
        name: name.into(),
        integration_id: None,
        connector_type: "memory".into(),
        capability: cap,
        config: std::iter::once(("dataset".to_string(), json!(name)))
            .chain(extra.iter().map(|(k, v)| (k.to_string(), json!(v))))
            .collect(),
    };
    let src = sluice.connect.create_connection(&p, org, conn("src", Capability::Source, &[])).await.unwrap().id;
    // A destination that holds row flows' marks with its rows, as files do.
    let held = [("marks", "held")];
    let dst = sluice.connect.create_connection(&p, org, conn("wh", Capability::Destination, &held)).await.unwrap().id;
    World { sluice, mem, store, catalog, flows, p, org, src, dst }
}

impl World {
    async fn flow(&self, mode: &str) -> Flow {
        let mut m = json!({"source_entity": "events", "sync_mode": mode});
        if mode.starts_with("incremental") {
            m["cursor_field"] = json!("updated");
        }
        let config: FlowConfig = serde_json::from_value(json!({ "mappings": [m] })).unwrap();
        self.sluice.sync.create_flow(&self.p, self.org, NewFlow::active("f", self.src, self.dst, config)).await.unwrap()
    }

    async fn run(&self, f: &Flow) -> Run {
        self.sluice.sync.trigger_run(&self.p, self.org, f.id, Trigger::Manual).await.unwrap();
        let claimed = self.sluice.engine.claim_run("w1").await.unwrap().expect("a queued run");
        self.sluice.engine.execute_run(claimed).await
    }

    /// The queued run, executed by another process over the same store.
    async fn run_elsewhere(&self) -> Run {
        let clock: Arc<dyn Clock> = Arc::new(sluice_domain::shared::clock::SystemClock);
        let ports =
            in_memory_ports_sharing(&self.store, clock, &self.mem, FakeSecrets::default(), &self.catalog, &self.flows);
        let claimed = Sluice::new(ports).engine.claim_run("w2").await.unwrap().expect("a queued run");
        Sluice::new(in_memory_ports_sharing(
            &self.store,
            Arc::new(sluice_domain::shared::clock::SystemClock),
            &self.mem,
            FakeSecrets::default(),
            &self.catalog,
            &self.flows,
        ))
        .engine
        .execute_run(claimed)
        .await
    }

    /// How many times each id is in the destination, the ids not once.
    fn not_once(&self, want: i64) -> BTreeMap<i64, usize> {
        let mut seen: BTreeMap<i64, usize> = (1..=want).map(|i| (i, 0)).collect();
        for r in self.mem.rows("wh", "events").unwrap_or_default() {
            let Value::Int(i) = r[0] else { panic!("{r:?}") };
            *seen.entry(i).or_default() += 1;
        }
        seen.retain(|_, n| *n != 1);
        seen
    }

    /// Loses the running run's worker right after the destination's
    /// `n`th commit from now: another worker takes it over.
    fn lose_after_commit(&self, n: u64) {
        let flows = self.flows.clone();
        self.mem.after_commit("wh", n, move || assert_eq!(flows.take_over_running(), 1));
    }
}

#[tokio::test]
async fn an_append_whose_worker_is_lost_after_any_commit_resumes_from_what_the_destination_holds() {
    const ROWS: i64 = 120_000;
    // A checkpoint is due after 50,000 rows, but taken only where a cursor
    // value ends: after 60,000 (the end of batch 6). Then the end: two
    // commits.
    for k in 1..=2 {
        let w = world(ROWS).await;
        let f = w.flow("incremental_append").await;
        w.lose_after_commit(k);
        let lost = w.run(&f).await;
        assert_ne!(lost.status, RunStatus::Succeeded, "lost after commit {k}");
        let again = w.run_elsewhere().await;
        assert_eq!(again.status, RunStatus::Succeeded, "after commit {k}: {:?} {:?}", again.error, again.entities);
        assert_eq!(w.not_once(ROWS), BTreeMap::new(), "lost after commit {k}: every row once");
        let e = &again.entities[0];
        assert_eq!(e.cursor_after.as_deref(), Some(((ROWS - 1) / 3).to_string().as_str()), "the cursor is stored");
        if k == 2 {
            assert_eq!(e.rows_read, 0, "the end was committed: nothing is read again");
        } else {
            // From the value the checkpoint holds (its three rows read,
            // and skipped).
            assert_eq!(e.rows_read, (ROWS - 60_000 + 3) as u64, "resumed after the checkpoint at 60,000");
        }
        // New rows, some sharing the last value: each arrives once, and
        // none of those already there comes again.
        w.mem.put("src", schema(), events(1, ROWS + 100));
        let next = w.run(&f).await;
        assert_eq!(next.status, RunStatus::Succeeded);
        assert_eq!(w.not_once(ROWS + 100), BTreeMap::new(), "the next run after loss {k}");
    }
}

#[tokio::test]
async fn a_full_refresh_append_lost_after_its_commit_is_not_appended_again() {
    let w = world(3_000).await;
    let f = w.flow("full_refresh_append").await;
    w.lose_after_commit(1);
    assert_ne!(w.run(&f).await.status, RunStatus::Succeeded);
    let again = w.run_elsewhere().await;
    assert_eq!(again.status, RunStatus::Succeeded, "{:?}", again.error);
    assert_eq!(w.not_once(3_000), BTreeMap::new(), "one copy, though the run was executed twice");
    // The next run appends its own copy, as the mode says.
    assert_eq!(w.run(&f).await.status, RunStatus::Succeeded);
    assert_eq!(w.mem.rows("wh", "events").unwrap().len(), 6_000);
}

#[tokio::test]
async fn a_cursor_set_by_hand_moves_the_one_the_destination_holds() {
    let w = world(700).await;
    let f = w.flow("incremental_append").await;
    assert_eq!(w.run(&f).await.status, RunStatus::Succeeded);
    assert_eq!(w.not_once(700), BTreeMap::new());
    // Back to value 209 (ids 628..=630 have it; 631.. come after): the
    // rows after it are appended again, as asked.
    w.sluice.sync.set_cursor(&w.p, w.org, f.id, "events", "209").await.unwrap();
    let held = w.mem.held_positions("wh", &f.stream_name());
    assert!(held["events"].contains("\"cursor\":\"209\""), "{held:?}");
    let r = w.run(&f).await;
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.entities[0].cursor_before.as_deref(), Some("209"));
    let twice: Vec<i64> = w.not_once(700).into_keys().collect();
    assert_eq!(twice, (631..=700).collect::<Vec<_>>());
    // Reset: everything again.
    w.sluice.sync.reset_cursor(&w.p, w.org, f.id, "events").await.unwrap();
    assert_eq!(w.run(&f).await.status, RunStatus::Succeeded);
    assert_eq!(w.mem.rows("wh", "events").unwrap().len(), 700 + 70 + 700);
}
