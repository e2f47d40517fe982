//! The sync engine over in-memory connectors: sync modes, cursors (set,
//! reset, boundaries), de-duplication, cancellation and schema drift.

use serde_json::json;
use sluice_domain::app::Sluice;
use sluice_domain::connect::connector::{Capability, EntitySchema, Field, FieldType, Value, parse_timestamp};
use sluice_domain::connect::service::NewConnection;
use sluice_domain::identity::Principal;
use sluice_domain::identity::service::NewOrganization;
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::ids::{ConnectionId, OrgId};
use sluice_domain::sync::flow::*;
use sluice_domain::sync::service::NewFlow;
use sluice_testkit::*;
use std::sync::Arc;

struct World {
    sluice: Sluice,
    mem: MemoryConnectors,
    p: Principal,
    org: OrgId,
    src: ConnectionId,
    dst: ConnectionId,
}

fn ts(s: &str) -> Value {
    Value::Timestamp(parse_timestamp(s).unwrap())
}

fn people_schema(extra: bool) -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.primary_key = true;
    id.nullable = false;
    let mut fields = vec![id, Field::new("name", FieldType::String), Field::new("updated", FieldType::Timestamp)];
    if extra {
        fields.push(Field::new("email", FieldType::String));
    }
    EntitySchema { name: "people".into(), fields }
}

fn person(id: i64, name: &str, updated: &str) -> Vec<Value> {
    vec![Value::Int(id), Value::String(name.into()), ts(updated)]
}

async fn world() -> World {
    world_with(sluice_domain::app::Options::default()).await
}

async fn world_with(options: sluice_domain::app::Options) -> World {
    let store = InMemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(sluice_domain::shared::clock::SystemClock);
    let mem = MemoryConnectors::new();
    mem.put(
        "crm",
        people_schema(false),
        vec![
            person(1, "ann", "2026-01-01T00:00:00Z"),
            person(2, "bob", "2026-01-02T00:00:00Z"),
            person(3, "cy", "2026-01-03T00:00:00Z"),
        ],
    );
    let sluice = Sluice::with_options(in_memory_ports_with(&store, clock, &mem, FakeSecrets::default()), options);
    let (p, _) = sluice.identity.authenticate_session(&FakeTokens::token("ann", "ann@example.com")).await.unwrap();
    let org =
        sluice.identity.create_organization(&p, NewOrganization { name: "Acme".into(), slug: None }).await.unwrap().id;
    let conn = |name: &str, dataset: &str, cap| NewConnection {
        name: name.into(),
        integration_id: None,
        connector_type: "memory".into(),
        capability: cap,
        config: [("dataset".to_string(), json!(dataset))].into(),
    };
    let src = sluice.connect.create_connection(&p, org, conn("crm", "crm", Capability::Source)).await.unwrap().id;
    let dst = sluice.connect.create_connection(&p, org, conn("wh", "wh", Capability::Destination)).await.unwrap().id;
    World { sluice, mem, p, org, src, dst }
}

impl World {
    async fn flow(&self, name: &str, mapping: serde_json::Value) -> Flow {
        let config: FlowConfig = serde_json::from_value(json!({"mappings": [mapping]})).unwrap();
        self.sluice
            .sync
            .create_flow(&self.p, self.org, NewFlow::active(name, self.src, self.dst, config))
            .await
            .unwrap()
    }

    /// Queues a run and executes it as a worker would.
    async fn run(&self, f: &Flow) -> Run {
        self.sluice.sync.trigger_run(&self.p, self.org, f.id, Trigger::Manual).await.unwrap();
        let claimed = self.sluice.engine.claim_run("w1").await.unwrap().expect("a queued run");
        self.sluice.engine.execute_run(claimed).await
    }

    fn dest(&self, entity: &str) -> Vec<Vec<Value>> {
        let mut rows = self.mem.rows("wh", entity).unwrap_or_default();
        rows.sort_by_key(|r| if let Value::Int(i) = r[0] { i } else { 0 });
        rows
    }
}

fn ids(rows: &[Vec<Value>]) -> Vec<i64> {
    rows.iter().map(|r| if let Value::Int(i) = r[0] { i } else { panic!() }).collect()
}

#[tokio::test]
async fn incremental_deduped_syncs_changes_once_and_follows_the_cursor() {
    let w = world().await;
    let f = w.flow("people", json!({"source_entity": "people", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"})).await;

    let r = w.run(&f).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    assert_eq!(r.entities[0].rows_read, 3);
    assert_eq!(r.entities[0].cursor_before, None);
    assert_eq!(r.entities[0].cursor_after.as_deref(), Some("2026-01-03T00:00:00.000000Z"));
    assert_eq!(ids(&w.dest("people")), [1, 2, 3]);

    // A change, an insert, and an insert that shares the boundary value.
    w.mem.put(
        "crm",
        people_schema(false),
        vec![
            person(1, "ann", "2026-01-01T00:00:00Z"),
            person(2, "bobby", "2026-01-05T00:00:00Z"),
            person(3, "cy", "2026-01-03T00:00:00Z"),
            person(4, "dee", "2026-01-03T00:00:00Z"),
            person(5, "eve", "2026-01-06T00:00:00Z"),
        ],
    );
    let r = w.run(&f).await;
    assert_eq!(r.status, RunStatus::Succeeded);
    assert_eq!(r.entities[0].rows_read, 4, "records at the boundary are re-read, none lost");
    let rows = w.dest("people");
    assert_eq!(ids(&rows), [1, 2, 3, 4, 5], "exactly one row per key");
    assert_eq!(rows[1][1], Value::String("bobby".into()));

    // Nothing new: the boundary record only.
    let r = w.run(&f).await;
    assert_eq!(r.entities[0].rows_read, 1);
    assert_eq!(ids(&w.dest("people")), [1, 2, 3, 4, 5]);

    // Set back: re-reads from there; de-duplication absorbs it.
    let c = w.sluice.sync.set_cursor(&w.p, w.org, f.id, "people", "2026-01-02T00:00:00+00:00").await.unwrap();
    assert_eq!(c.mark.value(), Some("2026-01-02T00:00:00.000000Z"));
    let r = w.run(&f).await;
    assert_eq!(r.entities[0].cursor_before.as_deref(), Some("2026-01-02T00:00:00.000000Z"));
    assert_eq!(r.entities[0].rows_read, 4);
    assert_eq!(ids(&w.dest("people")), [1, 2, 3, 4, 5]);

    // Reset: everything is read again; the destination is not truncated.
    w.sluice.sync.reset_cursor(&w.p, w.org, f.id, "people").await.unwrap();
    let state = w.sluice.sync.cursors(&w.p, w.org, f.id).await.unwrap();
    assert_eq!(state[0].mark.value(), None);
    let r = w.run(&f).await;
    assert_eq!(r.entities[0].rows_read, 5);
    assert_eq!(ids(&w.dest("people")), [1, 2, 3, 4, 5]);

    // Cursor values are checked against the column's type; unknown entities are 404.
    let e = w.sluice.sync.set_cursor(&w.p, w.org, f.id, "people", "last tuesday").await.unwrap_err();
    assert_eq!(e.kind(), sluice_domain::ErrorKind::Validation);
    let e = w.sluice.sync.set_cursor(&w.p, w.org, f.id, "nope", "2026-01-01T00:00:00Z").await.unwrap_err();
    assert_eq!(e.kind(), sluice_domain::ErrorKind::NotFound);
    let logs = w.sluice.sync.run_logs(&w.p, w.org, r.id).await.unwrap();
    assert!(logs.iter().any(|l| l.message.contains("no cursor")), "{logs:?}");
}

#[tokio::test]
async fn append_modes_add_and_overwrite_replaces() {
    let w = world().await;
    let append = w
        .flow(
            "append",
            json!({"source_entity": "people", "dest_entity": "people_log", "sync_mode": "full_refresh_append"}),
        )
        .await;
    w.run(&append).await;
    w.run(&append).await;
    assert_eq!(w.dest("people_log").len(), 6, "full_refresh_append adds a copy each run");

    let over = w
        .flow(
            "over",
            json!({"source_entity": "people", "dest_entity": "people_copy", "sync_mode": "full_refresh_overwrite"}),
        )
        .await;
    w.run(&over).await;
    w.mem.put("crm", people_schema(false), vec![person(9, "zed", "2026-02-01T00:00:00Z")]);
    w.run(&over).await;
    assert_eq!(ids(&w.dest("people_copy")), [9], "overwrite replaces");

    let inc = w.flow("inc", json!({"source_entity": "people", "dest_entity": "people_inc", "sync_mode": "incremental_append", "cursor_field": "updated"})).await;
    w.run(&inc).await;
    w.mem.put(
        "crm",
        people_schema(false),
        vec![person(9, "zed", "2026-02-01T00:00:00Z"), person(10, "ann", "2026-02-02T00:00:00Z")],
    );
    let r = w.run(&inc).await;
    assert_eq!(r.entities[0].rows_read, 2);
    assert_eq!(ids(&w.dest("people_inc")), [9, 9, 10], "incremental_append re-delivers the boundary record");
}

/// A flow of `n` overwrite mappings, `e0` … into `c0` …, over entities
/// of `rows` people each.
async fn wide_flow(w: &World, n: usize, rows: i64) -> Flow {
    let mut mappings = Vec::new();
    for i in 0..n {
        let mut schema = people_schema(false);
        schema.name = format!("e{i}");
        let people = (0..rows).map(|id| person(id, &format!("p{i}"), "2026-01-01T00:00:00Z")).collect();
        w.mem.put("crm", schema, people);
        mappings.push(json!({"source_entity": format!("e{i}"), "dest_entity": format!("c{i}"),
                             "sync_mode": "full_refresh_overwrite"}));
    }
    let config: FlowConfig = serde_json::from_value(json!({"mappings": mappings})).unwrap();
    w.sluice.sync.create_flow(&w.p, w.org, NewFlow::active("wide", w.src, w.dst, config)).await.unwrap()
}

#[tokio::test]
async fn a_runs_entities_sync_concurrently_up_to_the_setting_and_the_destination() {
    let w = world_with(sluice_domain::app::Options { entity_concurrency: 3, ..Default::default() }).await;
    let flow = wide_flow(&w, 7, 25).await;
    let run = w.run(&flow).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(w.mem.peak_writers(), 3, "three entities at once, never more");
    // Every entity whole, each reported once and in the flow's order.
    let reported: Vec<&str> = run.entities.iter().map(|e| e.entity.as_str()).collect();
    assert_eq!(reported, ["e0", "e1", "e2", "e3", "e4", "e5", "e6"]);
    for (i, e) in run.entities.iter().enumerate() {
        assert_eq!((e.rows_read, e.rows_written, e.status.as_str()), (25, 25, "succeeded"));
        assert_eq!(ids(&w.dest(&format!("c{i}"))), (0..25).collect::<Vec<_>>());
    }

    // A destination that takes one writer at a time gets one.
    let w = world_with(sluice_domain::app::Options { entity_concurrency: 3, ..Default::default() }).await;
    w.mem.one_writer_at_a_time("wh");
    let run = w.run(&wide_flow(&w, 4, 5).await).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(w.mem.peak_writers(), 1);
    assert_eq!(w.dest("c3").len(), 5);

    // The setting at 1: one after another.
    let w = world_with(sluice_domain::app::Options { entity_concurrency: 1, ..Default::default() }).await;
    let run = w.run(&wide_flow(&w, 3, 5).await).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(w.mem.peak_writers(), 1);
}

#[tokio::test]
async fn a_long_entity_does_not_hold_back_the_ones_after_it() {
    let w = world_with(sluice_domain::app::Options { entity_concurrency: 2, ..Default::default() }).await;
    let flow = wide_flow(&w, 4, 10).await;
    // e0 takes 20 batches; the others one each.
    let mut schema = people_schema(false);
    schema.name = "e0".into();
    w.mem.put("crm", schema, (0..200_000).map(|id| person(id, "long", "2026-01-01T00:00:00Z")).collect());
    let run = w.run(&flow).await;
    assert_eq!(run.status, RunStatus::Succeeded, "{:?}", run.error);
    assert_eq!(w.mem.finished(), ["c1", "c2", "c3", "c0"], "e2 and e3 began while e0 went on");
    assert_eq!(w.dest("c0").len(), 200_000);
    let reported: Vec<&str> = run.entities.iter().map(|e| e.entity.as_str()).collect();
    assert_eq!(reported, ["e0", "e1", "e2", "e3"], "reported in the flow's order");
}

#[tokio::test]
async fn a_failing_entity_fails_alone_while_the_others_sync_beside_it() {
    let w = world_with(sluice_domain::app::Options { entity_concurrency: 4, ..Default::default() }).await;
    let flow = wide_flow(&w, 4, 10).await;
    // The second mapping's entity is gone from the source.
    w.mem.remove("crm", "e1");
    let run = w.run(&flow).await;
    assert_eq!(run.status, RunStatus::Failed);
    assert_eq!(run.error.as_deref().unwrap_or(""), "1 of 4 entities failed: e1");
    let status: Vec<(&str, &str)> = run.entities.iter().map(|e| (e.entity.as_str(), e.status.as_str())).collect();
    assert_eq!(status, [("e0", "succeeded"), ("e1", "failed"), ("e2", "succeeded"), ("e3", "succeeded")]);
    for i in [0, 2, 3] {
        assert_eq!(w.dest(&format!("c{i}")).len(), 10);
    }
}

#[tokio::test]
async fn transforms_apply_and_new_columns_reach_the_destination_unless_blocked() {
    let w = world().await;
    let f = w
        .flow(
            "t",
            json!({"source_entity": "people", "dest_entity": "masked", "sync_mode": "full_refresh_overwrite",
            "transform": [{"op": "mask", "field": "name"}, {"op": "set", "field": "source", "value": "crm"}]}),
        )
        .await;
    w.run(&f).await;
    let rows = w.dest("masked");
    assert_eq!(rows[0][1], Value::String("a****".into()));
    assert_eq!(rows[0][3], Value::String("crm".into()));

    let evolving = w.flow("evolving", json!({"source_entity": "people", "dest_entity": "evolving", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"})).await;
    let blocked = w
        .flow("blocked", json!({"source_entity": "people", "dest_entity": "blocked", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id", "schema_policy": "block_on_new_column"}))
        .await;
    w.run(&evolving).await;
    w.run(&blocked).await;
    w.mem.put(
        "crm",
        people_schema(true),
        vec![vec![
            Value::Int(7),
            Value::String("gus".into()),
            ts("2026-03-01T00:00:00Z"),
            Value::String("gus@example.com".into()),
        ]],
    );
    let r = w.run(&evolving).await;
    assert_eq!(r.status, RunStatus::Succeeded);
    let rows = w.dest("evolving");
    assert_eq!(rows.last().unwrap()[3], Value::String("gus@example.com".into()), "the new column is carried");
    let r = w.run(&blocked).await;
    assert_eq!(r.status, RunStatus::DriftDetected);
    assert_eq!(r.entities[0].status.as_str(), "drift_detected");
    assert_eq!(ids(&w.dest("blocked")), [1, 2, 3], "nothing written past the drift");
}

#[tokio::test]
async fn runs_queue_cancel_and_validate() {
    let w = world().await;
    let f = w.flow("p", json!({"source_entity": "people", "sync_mode": "full_refresh_overwrite"})).await;
    let queued = w.sluice.sync.trigger_run(&w.p, w.org, f.id, Trigger::Manual).await.unwrap();
    assert_eq!(queued.status, RunStatus::Queued);
    let canceled = w.sluice.sync.cancel_run(&w.p, w.org, queued.id).await.unwrap();
    assert_eq!(canceled.status, RunStatus::Canceled);
    assert!(w.sluice.engine.claim_run("w1").await.unwrap().is_none(), "a canceled run is not claimed");
    assert!(w.sluice.sync.cancel_run(&w.p, w.org, queued.id).await.is_err());

    let bad: FlowConfig = serde_json::from_value(json!({"mappings": [{"source_entity": "nope", "sync_mode": "incremental_deduped", "cursor_field": "x", "primary_key": "id"}]})).unwrap();
    let e = w
        .sluice
        .sync
        .create_flow(&w.p, w.org, NewFlow::active("bad", w.src, w.src, bad).scheduled(Some("every minute")))
        .await
        .unwrap_err();
    let sluice_domain::Error::Validation(errors) = e else { panic!("{e:?}") };
    let fields: Vec<&str> = errors.iter().map(|x| x.field.as_str()).collect();
    assert!(
        fields.contains(&"schedule")
            && fields.contains(&"destination_connection_id")
            && fields.contains(&"config.mappings[0].source_entity"),
        "{fields:?}"
    );

    // A dependency cycle is refused, naming it.
    let a = w
        .flow("a", json!({"source_entity": "people", "dest_entity": "a", "sync_mode": "full_refresh_overwrite"}))
        .await;
    let mut b_config: FlowConfig = serde_json::from_value(
        json!({"mappings": [{"source_entity": "people", "dest_entity": "b", "sync_mode": "full_refresh_overwrite"}]}),
    )
    .unwrap();
    b_config.depends_on.push(Dependency { flow: "a".into(), on: DependsOn::Success });
    let b = w
        .sluice
        .sync
        .create_flow(&w.p, w.org, NewFlow::active("b", w.src, w.dst, b_config).scheduled(Some("*/5 * * * *")))
        .await
        .unwrap();
    assert!(b.next_run_at.is_some());
    assert_eq!(b.config.depends_on[0].flow, a.id.to_string(), "names are stored as ids");
    // Flow a's config with one more dependency, saved.
    let depend = |on: String, when: DependsOn| {
        let mut config = a.config.clone();
        config.depends_on.push(Dependency { flow: on, on: when });
        w.sluice.sync.update_flow(
            &w.p,
            w.org,
            a.id,
            sluice_domain::sync::service::FlowUpdate { config: Some(config), ..Default::default() },
        )
    };
    let e = depend("b".into(), DependsOn::Completion).await.unwrap_err();
    assert!(format!("{e:?}").contains("cycle"), "{e:?}");

    // Depending on itself (by id or by name) is one error, not also a cycle.
    for me in [a.id.to_string(), "a".to_string()] {
        let e = depend(me, DependsOn::Success).await.unwrap_err();
        let sluice_domain::Error::Validation(f) = e else { panic!("{e:?}") };
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].field, "config.depends_on[0].flow");
        assert_eq!(f[0].message, "a flow cannot depend on itself");
    }
}

#[tokio::test]
async fn each_run_records_the_source_schema_that_drift_validation_compares_with() {
    use sluice_domain::catalog::drift::{DriftType, ProposedField};
    let w = world().await;
    let f = w.flow("people", json!({"source_entity": "people", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"})).await;
    let proposed = |names: &[(&str, FieldType)]| -> Vec<ProposedField> {
        names.iter().map(|(n, t)| ProposedField { name: n.to_string(), field_type: *t, required: *n == "id" }).collect()
    };
    let three = proposed(&[("id", FieldType::Integer), ("name", FieldType::String), ("updated", FieldType::Timestamp)]);
    assert_eq!(w.run(&f).await.status, RunStatus::Succeeded);

    // The source gains a column; until a run sees it, the flow syncs three fields.
    w.mem.put("crm", people_schema(true), vec![]);
    let r = w.sluice.iac.validate_drift(&w.p, w.org, "people", "people", &three).await.unwrap();
    assert_eq!(r.drift_type, DriftType::None, "{r:?}");

    // After a run the recorded schema has four, and dropping one is breaking.
    assert_eq!(w.run(&f).await.status, RunStatus::Succeeded);
    let r = w.sluice.iac.validate_drift(&w.p, w.org, "people", "people", &three).await.unwrap();
    assert_eq!(r.drift_type, DriftType::Breaking);
    assert_eq!(r.impacts[0].affected_fields, ["email"]);
}

/// A run's per-entity stats show its checkpoints as it goes: when the last
/// one committed and the rows per second so far.
#[tokio::test]
async fn checkpoints_record_their_time_and_the_rate() {
    let w = world().await;
    let rows: Vec<Vec<Value>> =
        (1..=120_000).map(|i| person(i, "p", &format!("2026-01-01T00:00:{:02}Z", i % 60))).collect();
    w.mem.put("crm", people_schema(false), rows);
    let f = w.flow("many", json!({"source_entity": "people", "dest_entity": "many", "sync_mode": "incremental_append", "cursor_field": "id"})).await;
    let before = time::OffsetDateTime::now_utc();
    let r = w.run(&f).await;
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    let e = &r.entities[0];
    assert_eq!(e.rows_written, 120_000);
    let at = e.checkpoint_at.expect("a checkpoint every 50,000 rows");
    assert!(at >= before && at <= time::OffsetDateTime::now_utc(), "{at}");
    assert!(e.rows_per_second.is_some_and(|r| r > 0.0), "{:?}", e.rows_per_second);
}

/// Polls an in-memory call to its end at once (it never waits on I/O).
fn at_once<T>(f: impl std::future::Future<Output = T>) -> T {
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(v) => v,
        std::task::Poll::Pending => panic!("an in-memory call waited"),
    }
}

#[tokio::test]
async fn a_cursor_write_is_atomic_with_its_guard_and_its_audit_entry() {
    use sluice_domain::shared::audit::AuditFilter;
    let w = world().await;
    let f = w
        .flow(
            "people",
            json!({"source_entity": "people", "sync_mode": "incremental_deduped", "cursor_field": "updated", "primary_key": "id"}),
        )
        .await;
    w.run(&f).await;
    let stored =
        || async { w.sluice.sync.cursors(&w.p, w.org, f.id).await.unwrap()[0].mark.value().map(str::to_string) };
    assert_eq!(stored().await.as_deref(), Some("2026-01-03T00:00:00.000000Z"));

    // A run claimed between the request's start (its check passed) and its
    // write: the write is refused, and nothing is written.
    w.sluice.sync.trigger_run(&w.p, w.org, f.id, Trigger::Manual).await.unwrap();
    let claimed = Arc::new(std::sync::Mutex::new(None));
    let (sluice, slot) = (w.sluice.clone(), claimed.clone());
    w.mem.before_next_entity_fields(move || {
        *slot.lock().unwrap() = at_once(sluice.engine.claim_run("w2")).unwrap();
    });
    let e = w.sluice.sync.set_cursor(&w.p, w.org, f.id, "people", "2026-01-01T00:00:00Z").await.unwrap_err();
    assert!(
        matches!(&e, sluice_domain::Error::Conflict { code, .. } if *code == sluice_domain::shared::error::Code::RunInProgress),
        "{e:?}"
    );
    assert_eq!(stored().await.as_deref(), Some("2026-01-03T00:00:00.000000Z"), "nothing written");
    let run = claimed.lock().unwrap().take().expect("the hook claimed the run");
    w.sluice.engine.execute_run(run).await;

    // The cursor changed between the request's start and its write: the
    // audit entry's old_value is the value this write replaced.
    let (sluice, p, org, id) = (w.sluice.clone(), w.p.clone(), w.org, f.id);
    w.mem.before_next_entity_fields(move || {
        at_once(sluice.sync.set_cursor(&p, org, id, "people", "2026-01-02T00:00:00Z")).unwrap();
    });
    w.sluice.sync.set_cursor(&w.p, w.org, f.id, "people", "2026-01-01T00:00:00Z").await.unwrap();
    let filter = AuditFilter { action: Some("flow.cursor.updated".into()), ..Default::default() };
    let page = sluice_domain::shared::page::PageRequest { limit: 10, after: None };
    let entries = w.sluice.identity.list_audit_logs(&w.p, w.org, &filter, page).await.unwrap().items;
    let last = entries.iter().max_by_key(|e| e.created_at).unwrap();
    assert_eq!(last.details["new_value"], "2026-01-01T00:00:00.000000Z", "{:?}", last.details);
    assert_eq!(last.details["old_value"], "2026-01-02T00:00:00.000000Z", "{:?}", last.details);
}

/// A flow written through the API and one applied in a document meet one
/// rule book: the same problems, at the same paths under the document's
/// `flows[i]`, with the same messages, each once; the document's flows are
/// checked against the source's schema as the API's are.
#[tokio::test]
async fn a_flow_is_checked_alike_through_the_api_and_a_document() {
    let w = world().await;
    let errors = |e: sluice_domain::Error| match e {
        sluice_domain::Error::Validation(errors) => {
            errors.into_iter().map(|x| (x.field, x.message)).collect::<Vec<(String, String)>>()
        }
        other => panic!("{other:?}"),
    };
    // A missing cursor field is one problem, told once.
    let config: FlowConfig = serde_json::from_value(
        json!({"mappings": [{"source_entity": "people", "sync_mode": "incremental_deduped", "primary_key": "id"}]}),
    )
    .unwrap();
    let api =
        errors(w.sluice.sync.create_flow(&w.p, w.org, NewFlow::active("a", w.src, w.dst, config)).await.unwrap_err());
    assert_eq!(
        api,
        [("config.mappings[0].cursor_field".to_string(), "is required by incremental_deduped".to_string())]
    );
    let doc = |mapping: &str| {
        format!(
            "version: 1\nflows:\n  - name: d\n    source_connection: crm\n    destination_connection: wh\n    config:\n      mappings:\n        - {mapping}\n"
        )
    };
    // The document's problems: the API's, under `flows[0]`.
    let w = &w;
    let applied = |mapping: &str, dry_run: bool| {
        let text = doc(mapping);
        async move { errors(w.sluice.iac.apply_iac(&w.p, w.org, &text, dry_run).await.unwrap_err()) }
    };
    let placed = |api: &[(String, String)]| -> Vec<(String, String)> {
        api.iter().map(|(f, m)| (format!("flows[0].{f}"), m.clone())).collect()
    };
    let iac = applied("{source_entity: people, sync_mode: incremental_deduped, primary_key: id}", true).await;
    assert_eq!(iac, placed(&api));

    // An entity the source does not have, and a cursor that is no field
    // of it: the document is checked against the source as the API is.
    let mapping = json!({"source_entity": "people", "sync_mode": "incremental_deduped", "primary_key": "id", "cursor_field": "nope"});
    let config: FlowConfig = serde_json::from_value(json!({"mappings": [mapping]})).unwrap();
    let api =
        errors(w.sluice.sync.create_flow(&w.p, w.org, NewFlow::active("a", w.src, w.dst, config)).await.unwrap_err());
    assert_eq!(api, [("config.mappings[0].cursor_field".to_string(), "'nope' is not a field of people".to_string())]);
    let mapping = "{source_entity: people, sync_mode: incremental_deduped, primary_key: id, cursor_field: nope}";
    assert_eq!(applied(mapping, false).await, placed(&api));
    let iac = applied("{source_entity: nobody, sync_mode: full_refresh_overwrite}", true).await;
    assert_eq!(
        iac,
        [("flows[0].config.mappings[0].source_entity".to_string(), "'nobody' does not exist in 'crm'".to_string())]
    );
    assert!(w.sluice.sync.list_flows(&w.p, w.org, None, Default::default()).await.unwrap().items.is_empty());

    // A connection on the wrong end: one message for both writers.
    let config: FlowConfig = serde_json::from_value(
        json!({"mappings": [{"source_entity": "people", "sync_mode": "full_refresh_overwrite"}]}),
    )
    .unwrap();
    let api =
        errors(w.sluice.sync.create_flow(&w.p, w.org, NewFlow::active("a", w.dst, w.src, config)).await.unwrap_err());
    let text = "version: 1\nflows:\n  - name: d\n    source_connection: wh\n    destination_connection: crm\n    config:\n      mappings:\n        - {source_entity: people, sync_mode: full_refresh_overwrite}\n";
    let iac = errors(w.sluice.iac.apply_iac(&w.p, w.org, text, true).await.unwrap_err());
    let messages = |e: &[(String, String)]| e.iter().map(|(_, m)| m.clone()).collect::<Vec<_>>();
    assert_eq!(messages(&api), messages(&iac));
    assert_eq!(
        messages(&api),
        ["'wh' is a destination only; it cannot be read", "'crm' is a source only; it cannot be written"]
    );
}
