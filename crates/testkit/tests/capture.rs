//! The engine's change capture without a server: a source whose tables are
//! written in transactions logged at integer positions, a destination that
//! holds each entity's position with its rows (`memory_log`), and the
//! rules that make every change arrive exactly once: a mirror folds a
//! transaction's changes by key and ends equal to its source; a change log
//! holds each change once, in commit order; what a destination committed
//! is never applied again, whatever failed where; a column change is
//! followed or stops the table; a table copied in chunks while the stream
//! goes on ends equal to its source.

use serde_json::json;
use sluice_domain::app::Sluice;
use sluice_domain::connect::connector::{Capability, EntitySchema, Field, FieldType, Value};
use sluice_domain::connect::service::NewConnection;
use sluice_domain::identity::Principal;
use sluice_domain::identity::service::NewOrganization;
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::ids::{ConnectionId, OrgId};
use sluice_domain::sync::flow::*;
use sluice_domain::sync::service::{FlowUpdate, NewFlow};
use sluice_testkit::*;
use std::sync::Arc;

struct World {
    sluice: Sluice,
    mem: MemoryConnectors,
    /// What a second process over the same store is built from.
    store: InMemoryStore,
    catalog: InMemoryCatalog,
    flows: InMemoryFlows,
    p: Principal,
    org: OrgId,
    src: ConnectionId,
    dst: ConnectionId,
}

fn table(name: &str, extra: bool) -> EntitySchema {
    let mut id = Field::new("id", FieldType::Integer);
    id.primary_key = true;
    id.nullable = false;
    let mut fields = vec![id, Field::new("note", FieldType::String), Field::new("n", FieldType::Integer)];
    if extra {
        fields.push(Field::new("extra", FieldType::Integer));
    }
    EntitySchema { name: name.into(), fields }
}

fn row(id: i64, note: &str, n: i64) -> Vec<Value> {
    vec![Value::Int(id), Value::String(note.into()), Value::Int(n)]
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) => *i,
        other => panic!("not an integer: {other:?}"),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Int(i) => i.to_string(),
        Value::Null => "null".into(),
        other => format!("{other:?}"),
    }
}

/// A source `shop` with `orders` (1, 2, 3), a destination `wh`, both of
/// type `memory_log`.
async fn world() -> World {
    let store = InMemoryStore::new();
    let clock: Arc<dyn Clock> = Arc::new(sluice_domain::shared::clock::SystemClock);
    let mem = MemoryConnectors::new();
    mem.put("shop", table("orders", false), vec![row(1, "one", 1), row(2, "two", 2), row(3, "three", 3)]);
    let (catalog, flows) = (InMemoryCatalog::new(&store), InMemoryFlows::new(&store));
    let sluice = Sluice::new(in_memory_ports_sharing(&store, clock, &mem, FakeSecrets::default(), &catalog, &flows));
    let (p, _) = sluice.identity.authenticate_session(&FakeTokens::token("ann", "ann@example.com")).await.unwrap();
    let org =
        sluice.identity.create_organization(&p, NewOrganization { name: "Acme".into(), slug: None }).await.unwrap().id;
    let conn = |name: &str, cap| NewConnection {
        name: name.into(),
        integration_id: None,
        connector_type: MEMORY_LOG.into(),
        capability: cap,
        config: [("dataset".to_string(), json!(name))].into(),
    };
    let src = sluice.connect.create_connection(&p, org, conn("shop", Capability::Source)).await.unwrap().id;
    let dst = sluice.connect.create_connection(&p, org, conn("wh", Capability::Destination)).await.unwrap().id;
    World { sluice, mem, store, catalog, flows, p, org, src, dst }
}

/// A mirror of `orders` and its change log `orders_log`.
fn mirror_and_log() -> serde_json::Value {
    json!([
        {"source_entity": "orders", "sync_mode": "cdc_deduped"},
        {"source_entity": "orders", "dest_entity": "orders_log", "sync_mode": "cdc_append"}
    ])
}

/// The same, the log first: it commits before the mirror, so that a
/// failure between leaves the log ahead, to skip what it holds.
fn log_and_mirror() -> serde_json::Value {
    json!([
        {"source_entity": "orders", "dest_entity": "orders_log", "sync_mode": "cdc_append"},
        {"source_entity": "orders", "sync_mode": "cdc_deduped"}
    ])
}

impl World {
    async fn flow(&self, mappings: serde_json::Value) -> Flow {
        let config: FlowConfig = serde_json::from_value(json!({ "mappings": mappings })).unwrap();
        let new = NewFlow::active("orders", self.src, self.dst, config);
        self.sluice.sync.create_flow(&self.p, self.org, new).await.unwrap()
    }

    /// Queues a run and executes it as a worker would.
    async fn run(&self, f: &Flow) -> Run {
        self.sluice.sync.trigger_run(&self.p, self.org, f.id, Trigger::Manual).await.unwrap();
        let claimed = self.sluice.engine.claim_run("w1").await.unwrap().expect("a queued run");
        self.sluice.engine.execute_run(claimed).await
    }

    /// Another process over the same store and connectors: its worker
    /// claims the run queued next and executes it.
    async fn run_elsewhere(&self) -> Run {
        let clock: Arc<dyn Clock> = Arc::new(sluice_domain::shared::clock::SystemClock);
        let ports =
            in_memory_ports_sharing(&self.store, clock, &self.mem, FakeSecrets::default(), &self.catalog, &self.flows);
        let other = Sluice::new(ports);
        let claimed = other.engine.claim_run("w2").await.unwrap().expect("a queued run");
        other.engine.execute_run(claimed).await
    }

    async fn succeeds(&self, f: &Flow) -> Run {
        let r = self.run(f).await;
        assert_eq!(r.status, RunStatus::Succeeded, "{:?} {:?}", r.error, r.entities);
        r
    }

    /// A table's rows by key, its first three columns as `id:note:n`.
    fn rows(&self, dataset: &str, entity: &str) -> Vec<String> {
        let mut rows = self.mem.rows(dataset, entity).unwrap_or_default();
        rows.sort_by_key(|r| int(&r[0]));
        rows.iter().map(|r| format!("{}:{}:{}", int(&r[0]), text(&r[1]), text(&r[2]))).collect()
    }

    /// The change log's rows as `id op position`, in the order it holds them.
    fn logged(&self) -> Vec<String> {
        let rows = self.mem.rows("wh", "orders_log").unwrap_or_default();
        rows.iter().map(|r| format!("{} {} {}", int(&r[0]), text(&r[3]), text(&r[4]))).collect()
    }
}

/// What the log must hold after its copy at `start`: each change of
/// `history` once, in commit order (`(id, op, position)`).
fn expected_log(copied: &[i64], start: u64, history: &[(i64, &str, u64)]) -> Vec<String> {
    let mut out: Vec<String> = copied.iter().map(|id| format!("{id} insert {start}")).collect();
    out.extend(history.iter().map(|(id, op, at)| format!("{id} {op} {at}")));
    out
}

#[tokio::test]
async fn a_mirror_folds_by_key_and_a_log_keeps_each_change_once_in_commit_order() {
    let w = world().await;
    let f = w.flow(mirror_and_log()).await;
    w.succeeds(&f).await;
    assert_eq!(w.rows("wh", "orders"), ["1:one:1", "2:two:2", "3:three:3"]);
    assert_eq!(w.logged(), expected_log(&[1, 2, 3], 0, &[]));

    // Two updates of one key in one transaction, an insert and a delete;
    // then an insert and a delete of one key in one transaction, and an
    // update of the row inserted before.
    let a = w.mem.commit(
        "shop",
        vec![
            Op::update("orders", row(1, "uno", 1)),
            Op::update("orders", row(1, "UNO", 11)),
            Op::insert("orders", row(4, "four", 4)),
            Op::delete("orders", row(2, "", 0)),
        ],
    );
    let b = w.mem.commit(
        "shop",
        vec![
            Op::insert("orders", row(5, "five", 5)),
            Op::delete("orders", row(5, "", 0)),
            Op::update("orders", row(4, "FOUR", 44)),
        ],
    );
    let r = w.succeeds(&f).await;
    assert_eq!(w.rows("wh", "orders"), w.rows("shop", "orders"));
    assert_eq!(w.rows("wh", "orders"), ["1:UNO:11", "3:three:3", "4:FOUR:44"]);
    let history = [
        (1, "update", a),
        (1, "update", a),
        (4, "insert", a),
        (2, "delete", a),
        (5, "insert", b),
        (5, "delete", b),
        (4, "update", b),
    ];
    assert_eq!(w.logged(), expected_log(&[1, 2, 3], 0, &history));
    assert!(r.entities.iter().all(|e| e.cursor_after.as_deref() == Some("2")), "{:?}", r.entities);

    // Nothing new: nothing applied again, and the source may forget all.
    w.succeeds(&f).await;
    assert_eq!(w.logged(), expected_log(&[1, 2, 3], 0, &history));
    let held = w.mem.held_positions("wh", &f.stream_name());
    assert_eq!((held.get("orders"), held.get("orders_log")), (Some(&"2".into()), Some(&"2".into())));
    assert_eq!(w.mem.streams("shop"), [(f.stream_name(), 2)]);
}

/// Transactions of `count` changes in all, over keys 10.. (inserts, then
/// updates and deletes of what was inserted): the history they make.
fn write_history(w: &World, txns: u64, per_txn: i64) -> Vec<(i64, &'static str, u64)> {
    let mut history = Vec::new();
    let mut live: Vec<i64> = Vec::new();
    let mut next = 10;
    for t in 0..txns {
        let mut ops = Vec::new();
        let mut made = Vec::new();
        for i in 0..per_txn {
            match (t + i as u64) % 4 {
                0 | 1 if !live.is_empty() && i % 3 == 1 => {
                    let id = live[(i as usize * 7 + t as usize) % live.len()];
                    ops.push(Op::update("orders", row(id, &format!("v{t}.{i}"), t as i64)));
                    made.push((id, "update"));
                }
                2 if live.len() > 2 => {
                    let id = live.swap_remove((t as usize + i as usize) % live.len());
                    ops.push(Op::delete("orders", row(id, "", 0)));
                    made.push((id, "delete"));
                }
                _ => {
                    ops.push(Op::insert("orders", row(next, &format!("new{next}"), next)));
                    made.push((next, "insert"));
                    live.push(next);
                    next += 1;
                }
            }
        }
        let at = w.mem.commit("shop", ops);
        history.extend(made.into_iter().map(|(id, op)| (id, op, at)));
    }
    history
}

/// How many writer calls a run that applies `txns` transactions of
/// `per_txn` changes makes to the destination, counted on a world of its
/// own where nothing fails.
async fn calls_of_a_run(mappings: &serde_json::Value, txns: u64, per_txn: i64) -> u64 {
    let w = world().await;
    let f = w.flow(mappings.clone()).await;
    w.succeeds(&f).await;
    write_history(&w, txns, per_txn);
    let before = w.mem.writer_calls("wh");
    w.succeeds(&f).await;
    w.mem.writer_calls("wh") - before
}

/// The mirror equals its source, and the log holds `history` once, in
/// commit order, after the first copy's rows.
fn assert_exact(w: &World, history: &[(i64, &str, u64)], why: &str) {
    assert_eq!(w.rows("wh", "orders"), w.rows("shop", "orders"), "{why}");
    assert_eq!(w.logged(), expected_log(&[1, 2, 3], 0, history), "{why}");
}

#[tokio::test]
async fn a_failure_at_any_write_of_the_destination_loses_and_repeats_nothing() {
    // Every call a run makes to the destination's writers fails once, in
    // turn (the flushes of the mirror's and the log's changes and their
    // commits: the mirror committed and the log not, and so on), counted
    // first on a run that fails nowhere.
    for mappings in [mirror_and_log(), log_and_mirror()] {
        fails_anywhere_once(mappings).await;
    }
}

async fn fails_anywhere_once(mappings: serde_json::Value) {
    let calls = calls_of_a_run(&mappings, 12, 5).await;
    assert!(calls >= 4, "{calls} calls");
    for fail_after in 0..calls {
        let w = world().await;
        let f = w.flow(mappings.clone()).await;
        w.succeeds(&f).await;
        let history = write_history(&w, 12, 5);
        w.mem.fail_writes_after("wh", fail_after);
        let failed = w.run(&f).await;
        assert_eq!(failed.status, RunStatus::Failed, "failing after {fail_after} of {calls} calls");
        w.succeeds(&f).await;
        assert_exact(&w, &history, &format!("failing after {fail_after} calls"));
    }
}

#[tokio::test]
async fn a_run_that_commits_along_the_way_resumes_from_what_each_table_committed() {
    // More changes than one commit holds (CHECKPOINT_ROWS), so that the
    // run commits along the way. Counted on a twin without a fault: the
    // writer calls of the run; then the twin's last call (the log's final
    // commit) fails, after the mirror committed everything.
    let twin = world().await;
    let f = twin.flow(mirror_and_log()).await;
    twin.succeeds(&f).await;
    write_history(&twin, 60, 1_000);
    let before = twin.mem.writer_calls("wh");
    twin.succeeds(&f).await;
    let calls = twin.mem.writer_calls("wh") - before;

    let w = world().await;
    let f = w.flow(mirror_and_log()).await;
    w.succeeds(&f).await;
    let history = write_history(&w, 60, 1_000);
    w.mem.fail_writes_after("wh", calls - 1);
    let failed = w.run(&f).await;
    assert_eq!(failed.status, RunStatus::Failed, "the fault was met: {:?}", failed.entities);
    let held = w.mem.held_positions("wh", &f.stream_name());
    let at = |e: &str| held[e].parse::<u64>().unwrap();
    assert_eq!(at("orders"), 60, "the mirror committed all");
    assert!(at("orders_log") > 0 && at("orders_log") < 60, "the log committed along the way: {held:?}");
    w.succeeds(&f).await;
    assert_exact(&w, &history, "the next run");
}

#[tokio::test]
async fn a_column_added_at_the_source_is_followed_or_stops_the_table_by_policy() {
    let w = world().await;
    let f = w.flow(mirror_and_log()).await;
    w.succeeds(&f).await;
    w.mem.alter("shop", table("orders", true));
    let mut wide = row(6, "six", 6);
    wide.push(Value::Int(66));
    let at = w.mem.commit("shop", vec![Op::insert("orders", wide)]);
    w.succeeds(&f).await;
    let six = w.mem.rows("wh", "orders").unwrap().into_iter().find(|r| int(&r[0]) == 6).unwrap();
    assert!(six.contains(&Value::Int(66)), "the new column reached the mirror: {six:?}");
    assert_eq!(w.logged().last().cloned(), Some(format!("6 insert {at}")));

    // Blocked by the schema policy: the table stops where it is, as drift.
    let w = world().await;
    let blocked =
        json!([{"source_entity": "orders", "sync_mode": "cdc_deduped", "schema_policy": "block_on_new_column"}]);
    let f = w.flow(blocked).await;
    w.succeeds(&f).await;
    w.mem.alter("shop", table("orders", true));
    let mut wide = row(7, "seven", 7);
    wide.push(Value::Int(77));
    w.mem.commit("shop", vec![Op::insert("orders", wide)]);
    let r = w.run(&f).await;
    assert_eq!(r.status, RunStatus::DriftDetected, "{:?}", r.entities);
    assert_eq!(w.rows("wh", "orders"), ["1:one:1", "2:two:2", "3:three:3"]);
    assert_eq!(w.mem.held_positions("wh", &f.stream_name()).get("orders"), Some(&"0".into()));
}

#[tokio::test]
async fn a_table_joining_a_running_stream_is_copied_in_chunks_while_its_changes_go_on() {
    let w = world().await;
    let rows: Vec<Vec<Value>> = (1..=45_000).map(|i| row(i, "item", i)).collect();
    w.mem.put("shop", table("items", false), rows);
    let f = w.flow(json!([{"source_entity": "orders", "sync_mode": "cdc_deduped"}])).await;
    w.succeeds(&f).await;
    let config: FlowConfig = serde_json::from_value(json!({"mappings": [
        {"source_entity": "orders", "sync_mode": "cdc_deduped"},
        {"source_entity": "items", "sync_mode": "cdc_deduped"}
    ]}))
    .unwrap();
    let update = FlowUpdate { config: Some(config), ..Default::default() };
    let f = w.sluice.sync.update_flow(&w.p, w.org, f.id, update).await.unwrap();
    // Between the first chunk and the second: rows of the first chunk, the
    // second and the third change, one of the second goes, one is added
    // past the end; between the second and the third, more.
    let mem = w.mem.clone();
    w.mem.before_a_chunk(|| {});
    w.mem.before_a_chunk(move || {
        mem.commit(
            "shop",
            vec![
                Op::update("items", row(7, "changed in chunk one", 7)),
                Op::update("items", row(30_000, "changed in chunk two", 0)),
                Op::delete("items", row(25_000, "", 0)),
                Op::update("items", row(44_000, "changed in chunk three", 0)),
                Op::insert("items", row(50_000, "added", 0)),
            ],
        );
    });
    let mem = w.mem.clone();
    w.mem.before_a_chunk(move || {
        mem.commit(
            "shop",
            vec![Op::update("items", row(8, "changed again", 8)), Op::delete("items", row(44_999, "", 0))],
        );
    });
    // The run copies every chunk (each committed with the position the
    // table holds), then ends at the end it began with; the next replays
    // the changes made meanwhile over the chunks.
    w.succeeds(&f).await;
    let state = w.sluice.sync.state(&w.p, w.org, f.id).await.unwrap();
    let items = state.iter().find(|s| s.cursor.entity == "items").unwrap();
    assert_eq!(items.snapshot.map(|s| s.state), Some("done"), "{items:?}");
    let r = w.succeeds(&f).await;
    assert_eq!(w.rows("wh", "items"), w.rows("shop", "items"));
    assert_eq!(w.rows("wh", "items").len(), 44_999);
    let items = r.entities.iter().find(|e| e.entity == "items").unwrap();
    assert_eq!(items.cursor_after.as_deref(), Some("2"), "{items:?}");
    // The next change streams alone.
    w.mem.commit("shop", vec![Op::update("items", row(1, "streamed", 1))]);
    w.succeeds(&f).await;
    assert_eq!(w.rows("wh", "items"), w.rows("shop", "items"));
}

#[tokio::test]
async fn a_stream_moved_past_what_a_table_holds_fails_it_position_lost() {
    let w = world().await;
    let f = w.flow(mirror_and_log()).await;
    w.succeeds(&f).await;
    w.mem.commit("shop", vec![Op::insert("orders", row(9, "nine", 9))]);
    w.mem.commit("shop", vec![Op::insert("orders", row(10, "ten", 10))]);
    w.mem.advance_stream("shop", &f.stream_name(), 2);
    let r = w.run(&f).await;
    assert_eq!(r.status, RunStatus::Failed);
    assert!(r.entities.iter().all(|e| e.error_code.as_deref() == Some("position_lost")), "{:?}", r.entities);
    // Nothing was applied past the loss.
    assert_eq!(w.rows("wh", "orders"), ["1:one:1", "2:two:2", "3:three:3"]);
}

/// The destination's state: each table's rows and the positions it holds.
fn destination(w: &World, f: &Flow) -> (Vec<String>, Vec<String>, Vec<(String, String)>) {
    let mut held: Vec<(String, String)> = w.mem.held_positions("wh", &f.stream_name()).into_iter().collect();
    held.sort();
    (w.rows("wh", "orders"), w.logged(), held)
}

#[tokio::test]
async fn a_run_taken_over_between_any_two_writes_stops_committing_and_its_next_attempt_applies_all_once() {
    // Another worker takes the run over (its lease ran out) before each
    // writer call in turn: the attempt that lost it commits nothing after
    // the commit in flight (each commit is fenced), and the next attempt,
    // in another process, applies every change once.
    for mappings in [mirror_and_log(), log_and_mirror()] {
        let calls = calls_of_a_run(&mappings, 12, 5).await;
        for k in 0..calls {
            let w = world().await;
            let f = w.flow(mappings.clone()).await;
            w.succeeds(&f).await;
            let history = write_history(&w, 12, 5);
            let at_loss = Arc::new(std::sync::Mutex::new(None));
            let (flows, mem, seen, stream) = (w.flows.clone(), w.mem.clone(), at_loss.clone(), f.stream_name());
            w.mem.after_writer_calls("wh", w.mem.writer_calls("wh") + k, move |what| {
                assert_eq!(flows.take_over_running(), 1);
                let mut held: Vec<(String, String)> = mem.held_positions("wh", &stream).into_iter().collect();
                held.sort();
                *seen.lock().unwrap() = Some((what, held));
            });
            let lost = w.run(&f).await;
            assert_ne!(lost.status, RunStatus::Succeeded, "taken over before call {k} of {calls}");
            // The fence is checked before each destination commit: a commit
            // whose check passed before the take-over may still land (a
            // destination's own fence, `end_earlier_attempts`, ends it when
            // the next attempt begins first); no later commit does.
            let (_, _, held) = destination(&w, &f);
            let (what, at_loss) = at_loss.lock().unwrap().clone().expect("the take-over happened");
            let moved = held.iter().zip(&at_loss).filter(|(a, b)| a != b).count();
            let in_flight = usize::from(what == "commit");
            assert!(moved <= in_flight, "taken over before call {k} ({what}): {at_loss:?} → {held:?}");
            let again = w.run_elsewhere().await;
            assert_eq!((again.status, again.attempt), (RunStatus::Succeeded, 2), "{:?}", again.entities);
            assert_exact(&w, &history, &format!("taken over before call {k}"));
        }
    }
}

#[tokio::test]
async fn a_run_stopped_at_a_checkpoint_resumes_there_in_another_process_with_every_change_once() {
    let w = world().await;
    let f = w.flow(mirror_and_log()).await;
    w.succeeds(&f).await;
    let history = write_history(&w, 60, 1_000);
    // The process begins stopping as the run writes its first changes: the
    // run pauses at its next checkpoint (every table commits there) and
    // goes back to the queue.
    let engine = w.sluice.engine.clone();
    w.mem.after_writer_calls("wh", w.mem.writer_calls("wh") + 1, move |_| engine.stop_at_checkpoint());
    let paused = w.run(&f).await;
    assert_eq!((paused.status, paused.attempt), (RunStatus::Queued, 2), "{:?}", paused.entities);
    let (_, _, held) = destination(&w, &f);
    let at: Vec<u64> = held.iter().map(|(_, p)| p.parse().unwrap()).collect();
    assert!(at.iter().all(|p| *p > 0 && *p < 60) && at[0] == at[1], "paused along the way: {held:?}");
    let resumed = w.run_elsewhere().await;
    assert_eq!(resumed.status, RunStatus::Succeeded, "{:?}", resumed.entities);
    assert_exact(&w, &history, "resumed");
    let held = w.mem.held_positions("wh", &f.stream_name());
    assert_eq!((held["orders"].as_str(), held["orders_log"].as_str()), ("60", "60"));
}

#[tokio::test]
async fn a_run_canceled_mid_batch_commits_nothing_more_and_the_next_run_applies_every_change_once() {
    let w = world().await;
    let f = w.flow(mirror_and_log()).await;
    w.succeeds(&f).await;
    let before = destination(&w, &f);
    let history = write_history(&w, 12, 5);
    let flows = w.flows.clone();
    w.mem.after_writer_calls("wh", w.mem.writer_calls("wh") + 1, move |_| {
        assert_eq!(flows.cancel_running(), 1);
    });
    let canceled = w.run(&f).await;
    assert_ne!(canceled.status, RunStatus::Succeeded);
    assert_eq!(destination(&w, &f), before, "a cancel stops the run before its next commit");
    w.succeeds(&f).await;
    assert_exact(&w, &history, "the next run");
}

#[tokio::test]
async fn a_table_stopped_without_a_position_of_its_own_does_not_hold_the_source_back() {
    // The log's position is edited by hand into something that is no
    // position of the source: the log stops, and the mirror goes on, the
    // source forgetting what the mirror holds (the log keeps nothing).
    let w = world().await;
    let f = w.flow(mirror_and_log()).await;
    w.succeeds(&f).await;
    w.mem.set_held_position("wh", &f.stream_name(), "orders_log", "not a position");
    let at = w.mem.commit("shop", vec![Op::insert("orders", row(9, "nine", 9))]);
    let r = w.run(&f).await;
    // Both mappings read `orders`: the mirror succeeds, the log fails.
    let codes: Vec<Option<&str>> = r.entities.iter().map(|e| e.error_code.as_deref()).collect();
    assert_eq!(codes, [None, Some("position_not_retained")], "{:?}", r.entities);
    assert_eq!(w.rows("wh", "orders"), w.rows("shop", "orders"));
    assert_eq!(w.mem.held_positions("wh", &f.stream_name())["orders"], at.to_string());
    assert_eq!(w.mem.streams("shop"), [(f.stream_name(), at)], "the source forgets what the mirror holds");
}
