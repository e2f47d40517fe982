//! Scheduling, recovery of lost runs, orchestration of downstream flows
//! and the activity feed, over the in-memory adapters with a manual clock.

use serde_json::json;
use sluice_domain::app::Sluice;
use sluice_domain::connect::connector::{Capability, EntitySchema, Field, FieldType, Value};
use sluice_domain::connect::service::NewConnection;
use sluice_domain::identity::Principal;
use sluice_domain::identity::service::NewOrganization;
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::ids::{ConnectionId, OrgId};
use sluice_domain::sync::engine::queue::{LEASE, MAX_ATTEMPTS};
use sluice_domain::sync::flow::Fence;
use sluice_domain::sync::flow::*;
use sluice_domain::sync::service::NewFlow;
use sluice_testkit::*;
use std::sync::Arc;

struct W {
    sluice: Sluice,
    mem: MemoryConnectors,
    clock: ManualClock,
    p: Principal,
    org: OrgId,
    conn: ConnectionId,
}

async fn world() -> W {
    let store = InMemoryStore::new();
    let clock = ManualClock::new(time::macros::datetime!(2026-05-01 10:00:30 UTC));
    let mem = MemoryConnectors::new();
    let mut id = Field::new("id", FieldType::Integer);
    id.primary_key = true;
    mem.put("d", EntitySchema { name: "t".into(), fields: vec![id] }, vec![vec![Value::Int(1)]]);
    let c: Arc<dyn Clock> = Arc::new(clock.clone());
    let sluice = Sluice::new(in_memory_ports_with(&store, c, &mem, FakeSecrets::default()));
    let (p, _) = sluice.identity.authenticate_session(&FakeTokens::token("ann", "ann@example.com")).await.unwrap();
    let org =
        sluice.identity.create_organization(&p, NewOrganization { name: "Acme".into(), slug: None }).await.unwrap().id;
    let conn = sluice
        .connect
        .create_connection(
            &p,
            org,
            NewConnection {
                name: "m".into(),
                integration_id: None,
                connector_type: "memory".into(),
                capability: Capability::Both,
                config: [("dataset".to_string(), json!("d"))].into(),
            },
        )
        .await
        .unwrap()
        .id;
    W { sluice, mem, clock, p, org, conn }
}

impl W {
    async fn flow(&self, name: &str, schedule: Option<&str>, depends_on: Vec<(&str, DependsOn)>) -> Flow {
        let mut config: FlowConfig =
            serde_json::from_value(json!({"mappings": [{"source_entity": "t", "dest_entity": format!("out_{name}"), "sync_mode": "full_refresh_overwrite"}]})).unwrap();
        config.depends_on = depends_on.into_iter().map(|(f, on)| Dependency { flow: f.into(), on }).collect();
        self.sluice
            .sync
            .create_flow(&self.p, self.org, NewFlow::active(name, self.conn, self.conn, config).scheduled(schedule))
            .await
            .unwrap()
    }

    /// Claims and executes the next queued run.
    async fn work(&self) -> Option<Run> {
        let r = self.sluice.engine.claim_run("w").await.unwrap()?;
        Some(self.sluice.engine.execute_run(r).await)
    }

    async fn queued(&self, f: &Flow) -> Vec<Run> {
        self.sluice
            .sync
            .list_runs(&self.p, self.org, f.id, Some(RunStatus::Queued), Default::default())
            .await
            .unwrap()
            .items
    }
}

#[tokio::test]
async fn downstream_flows_run_in_the_same_trace_on_their_condition() {
    let w = world().await;
    let a = w.flow("a", None, vec![]).await;
    let b = w.flow("b", None, vec![("a", DependsOn::Success)]).await;
    let c = w.flow("c", None, vec![("a", DependsOn::Failure)]).await;
    let d = w.flow("d", None, vec![("b", DependsOn::Completion)]).await;

    let root = w.sluice.sync.trigger_run(&w.p, w.org, a.id, Trigger::Manual).await.unwrap();
    let done = w.work().await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    let qb = w.queued(&b).await;
    assert_eq!(qb.len(), 1);
    assert_eq!(qb[0].trigger, Trigger::Upstream);
    assert_eq!(qb[0].trace_id, root.trace_id);
    assert!(w.queued(&c).await.is_empty(), "c runs on failure only");
    w.work().await.unwrap();
    assert_eq!(w.queued(&d).await.len(), 1);
    w.work().await.unwrap();
    assert!(w.work().await.is_none());

    let trace = w.sluice.sync.trace(&w.p, w.org, root.trace_id).await.unwrap();
    let flows: Vec<_> = trace.iter().map(|r| r.flow_id).collect();
    assert_eq!(flows, [a.id, b.id, d.id], "in start order");
    let events = w.sluice.monitoring.activity(&w.p, w.org, None, 50).await.unwrap();
    assert_eq!(events.iter().filter(|e| e.event_type.as_str() == "run.succeeded").count(), 3);
}

#[tokio::test]
async fn a_fan_in_flow_waits_for_every_upstream_and_runs_once() {
    let w = world().await;
    let root = w.flow("root", None, vec![]).await;
    let left = w.flow("left", None, vec![("root", DependsOn::Success)]).await;
    w.flow("right", None, vec![("root", DependsOn::Success)]).await;
    let join = w.flow("join", None, vec![("left", DependsOn::Success), ("right", DependsOn::Success)]).await;
    w.sluice.sync.trigger_run(&w.p, w.org, root.id, Trigger::Manual).await.unwrap();
    w.work().await.unwrap(); // root → left, right
    w.work().await.unwrap(); // left
    assert!(w.queued(&join).await.is_empty(), "right has not finished");
    w.work().await.unwrap(); // right → join
    assert_eq!(w.queued(&join).await.len(), 1);
    // Orchestrating an upstream's outcome again queues nothing more.
    let left_run =
        w.sluice.sync.list_runs(&w.p, w.org, left.id, None, Default::default()).await.unwrap().items[0].clone();
    assert_eq!(left_run.status, RunStatus::Succeeded);
    let again = w.sluice.engine.orchestrate(&left_run).await.unwrap();
    assert!(again.is_empty(), "join was already queued in this trace");
    assert_eq!(w.queued(&join).await.len(), 1);
}

#[tokio::test]
async fn scheduled_flows_are_queued_once_per_scheduled_time() {
    let w = world().await;
    let f = w.flow("every-minute", Some("* * * * *"), vec![]).await;
    assert_eq!(f.next_run_at, Some(time::macros::datetime!(2026-05-01 10:01 UTC)));
    assert_eq!(w.sluice.engine.schedule_due().await.unwrap(), 0, "not due yet");
    w.clock.advance(time::Duration::seconds(45));
    assert_eq!(w.sluice.engine.schedule_due().await.unwrap(), 1);
    assert_eq!(w.sluice.engine.schedule_due().await.unwrap(), 0, "once per scheduled time");
    let queued = w.queued(&f).await;
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].trigger, Trigger::Schedule);
    let f = w.sluice.sync.get_flow(&w.p, w.org, f.id).await.unwrap();
    assert_eq!(f.next_run_at, Some(time::macros::datetime!(2026-05-01 10:02 UTC)));
    // A paused flow is not scheduled.
    w.sluice
        .sync
        .update_flow(
            &w.p,
            w.org,
            f.id,
            sluice_domain::sync::service::FlowUpdate { status: Some(FlowStatus::Paused), ..Default::default() },
        )
        .await
        .unwrap();
    w.clock.advance(time::Duration::minutes(5));
    assert_eq!(w.sluice.engine.schedule_due().await.unwrap(), 0);
}

#[tokio::test]
async fn a_run_whose_worker_died_is_retried_then_failed_never_left_running() {
    let w = world().await;
    let f = w.flow("f", None, vec![]).await;
    let r = w.sluice.sync.trigger_run(&w.p, w.org, f.id, Trigger::Manual).await.unwrap();
    for attempt in 1..=MAX_ATTEMPTS {
        let claimed = w.sluice.engine.claim_run("doomed").await.unwrap().unwrap();
        assert_eq!(claimed.attempt, attempt);
        assert_eq!(w.sluice.engine.recover_lost_runs().await.unwrap(), 0, "the lease still holds");
        w.clock.advance(LEASE + time::Duration::seconds(1));
        assert_eq!(w.sluice.engine.recover_lost_runs().await.unwrap(), 1);
    }
    let run = w.sluice.sync.get_run(&w.p, w.org, r.id).await.unwrap();
    assert_eq!(run.status, RunStatus::Failed);
    assert!(run.error.unwrap().contains("lost"));
    let logs = w.sluice.sync.run_logs(&w.p, w.org, r.id).await.unwrap();
    assert!(logs.iter().any(|l| l.message.contains("queued again")));
    let last = logs.last().unwrap();
    assert!(last.message.starts_with("run failed") && last.message.contains("giving up"), "{last:?}");
}

#[tokio::test]
async fn an_attempt_whose_run_was_taken_over_writes_nothing() {
    let w = world().await;
    let f = w.flow("f", None, vec![]).await;
    let r = w.sluice.sync.trigger_run(&w.p, w.org, f.id, Trigger::Manual).await.unwrap();
    let stale = w.sluice.engine.claim_run("frozen").await.unwrap().unwrap();
    assert_eq!(stale.fence(), Fence { run: r.id, attempt: 1 });
    // The lease runs out; another worker takes the run over and finishes it.
    w.clock.advance(LEASE + time::Duration::seconds(1));
    assert_eq!(w.sluice.engine.recover_lost_runs().await.unwrap(), 1);
    let taken = w.sluice.engine.claim_run("second").await.unwrap().unwrap();
    assert_eq!(taken.attempt, 2);
    assert!(!w.sluice.engine.renew_lease(stale.fence(), "frozen").await.unwrap(), "the old lease is gone");
    assert!(w.sluice.engine.renew_lease(taken.fence(), "second").await.unwrap());
    let done = w.sluice.engine.execute_run(taken).await;
    assert_eq!(done.status, RunStatus::Succeeded);
    let logs_before = w.sluice.sync.run_logs(&w.p, w.org, r.id).await.unwrap().len();
    // The frozen attempt wakes and executes: it stops before committing,
    // and leaves the record, the log and the destination as they were.
    let written = w.mem.rows("d", "out_f");
    let woke = w.sluice.engine.execute_run(stale).await;
    assert_eq!(woke.status, RunStatus::Running, "it records no outcome of its own");
    let after = w.sluice.sync.get_run(&w.p, w.org, r.id).await.unwrap();
    assert_eq!((after.status, after.attempt), (RunStatus::Succeeded, 2));
    assert_eq!(w.sluice.sync.run_logs(&w.p, w.org, r.id).await.unwrap().len(), logs_before);
    assert_eq!(w.mem.rows("d", "out_f"), written);
    assert!(!w.sluice.engine.renew_lease(Fence { run: r.id, attempt: 1 }, "frozen").await.unwrap());
}

#[tokio::test]
async fn transient_failures_retry_with_backoff_and_permanent_ones_fail_at_once() {
    use sluice_domain::connect::connector::ConnectorError;
    let w = world().await;
    let f = w.flow("f", None, vec![]).await;

    // Unreachable once: queued again for 30 s later, then succeeds.
    w.mem.fail_next("d", ConnectorError::Unreachable("db:5432: connection refused".into()), 1);
    let r = w.sluice.sync.trigger_run(&w.p, w.org, f.id, Trigger::Manual).await.unwrap();
    let first = w.work().await.unwrap();
    assert_eq!(first.status, RunStatus::Queued, "{:?}", first.error);
    assert_eq!(first.attempt, 2);
    assert!(first.error.as_deref().unwrap().contains("connection refused"));
    assert!(w.sluice.engine.claim_run("w").await.unwrap().is_none(), "not before its backoff");
    w.clock.advance(time::Duration::seconds(29));
    assert!(w.sluice.engine.claim_run("w").await.unwrap().is_none());
    w.clock.advance(time::Duration::seconds(2));
    let done = w.work().await.unwrap();
    assert_eq!(done.status, RunStatus::Succeeded);
    assert_eq!(done.id, r.id, "the same run, retried");

    // Transient every time: retried until the attempts run out, then failed.
    w.mem.fail_next("d", ConnectorError::Timeout("connecting".into()), 10);
    w.sluice.sync.trigger_run(&w.p, w.org, f.id, Trigger::Manual).await.unwrap();
    let mut last = w.work().await.unwrap();
    let mut waits = Vec::new();
    while last.status == RunStatus::Queued {
        let wait = last.not_before.unwrap() - w.clock.now();
        waits.push(wait.whole_seconds());
        w.clock.advance(wait + time::Duration::seconds(1));
        last = w.work().await.unwrap();
    }
    assert_eq!(last.status, RunStatus::Failed);
    assert_eq!(waits, [30, 60], "the backoff doubles");
    assert_eq!(last.attempt, MAX_ATTEMPTS);

    // Refused credentials do not get better by waiting.
    w.mem.fail_next("d", ConnectorError::AuthFailed("password authentication failed".into()), 1);
    w.sluice.sync.trigger_run(&w.p, w.org, f.id, Trigger::Manual).await.unwrap();
    let r = w.work().await.unwrap();
    assert_eq!(r.status, RunStatus::Failed);
    assert_eq!(r.attempt, 1);
}
