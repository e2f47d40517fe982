//! An in-memory change log (connector type `memory_log`): a memory dataset
//! whose writes are transactions at integer positions (`1`, `2`, …), read
//! back as a [`ChangeSource`] (begin, each row's change, commit; a table's
//! fields before its first change of a read and again after they change),
//! with streams, snapshots and chunked reads; and, as a destination, the
//! positions each entity holds, committed with its rows. With it the
//! engine's exactly-once rules are tested without a server.

use super::*;
use sluice_domain::connect::changes::*;
use sluice_domain::connect::connector::*;
use sluice_domain::shared::record::compare_values;

/// The connector type of a memory dataset that captures changes.
pub const MEMORY_LOG: &str = "memory_log";

/// A dataset's tables (name → schema and rows).
pub(crate) type Tables = HashMap<String, (EntitySchema, Vec<Vec<Value>>)>;

/// One row's change, as a transaction wrote it.
#[derive(Debug, Clone)]
pub enum Op {
    Insert(String, Vec<Value>),
    /// The whole row after the update, found by its key.
    Update(String, Vec<Value>),
    /// A row with its key's values (the rest ignored).
    Delete(String, Vec<Value>),
}

impl Op {
    pub fn insert(entity: &str, row: Vec<Value>) -> Op {
        Op::Insert(entity.into(), row)
    }
    pub fn update(entity: &str, row: Vec<Value>) -> Op {
        Op::Update(entity.into(), row)
    }
    pub fn delete(entity: &str, row: Vec<Value>) -> Op {
        Op::Delete(entity.into(), row)
    }
}

/// A change as the log keeps it: the table's fields when it was written.
#[derive(Debug, Clone)]
struct Logged {
    entity: String,
    fields: Arc<Vec<Field>>,
    op: ChangeOp,
    values: Vec<Value>,
}

#[derive(Debug, Clone)]
struct Txn {
    position: u64,
    at: OffsetDateTime,
    changes: Vec<Logged>,
}

/// One dataset's log: its transactions, streams and snapshots.
#[derive(Default)]
pub(crate) struct Log {
    txns: Vec<Txn>,
    /// Stream name → the position the source may forget up to.
    streams: HashMap<String, u64>,
    snapshots: HashMap<String, Tables>,
}

impl Log {
    fn end(&self) -> u64 {
        self.txns.last().map_or(0, |t| t.position)
    }
}

/// Positions held by destination datasets: (dataset, stream) → entity → position.
pub(crate) type Held = HashMap<(String, String), HashMap<String, String>>;

fn key_of(schema: &EntitySchema) -> Vec<usize> {
    schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect()
}

impl MemoryConnectors {
    /// Writes `ops` to `dataset`'s tables as one transaction, logged at the
    /// next position; answers that position.
    ///
    /// # Panics
    /// When an op names a table the dataset lacks, or updates or deletes a
    /// key it does not hold.
    pub fn commit(&self, dataset: &str, ops: Vec<Op>) -> u64 {
        let mut all = self.datasets.lock().unwrap_or_else(|p| p.into_inner());
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        let tables = all.entry(dataset.to_string()).or_default();
        let log = logs.entry(dataset.to_string()).or_default();
        let position = log.end() + 1;
        let mut changes = Vec::new();
        // Each table's rows by key, built when first needed.
        let mut indexes: HashMap<String, HashMap<String, usize>> = HashMap::new();
        for op in ops {
            let (entity, row, kind) = match op {
                Op::Insert(e, r) => (e, r, ChangeOp::Insert),
                Op::Update(e, r) => (e, r, ChangeOp::Update),
                Op::Delete(e, r) => (e, r, ChangeOp::Delete),
            };
            let (schema, rows) = tables.get_mut(&entity).unwrap_or_else(|| panic!("no table {entity}"));
            let key = key_of(schema);
            let text = |r: &[Value]| format!("{:?}", key.iter().map(|k| &r[*k]).collect::<Vec<_>>());
            let index = indexes
                .entry(entity.clone())
                .or_insert_with(|| rows.iter().enumerate().map(|(i, r)| (text(r), i)).collect());
            let k = text(&row);
            let at = index.get(&k).copied();
            let values = match kind {
                ChangeOp::Insert => {
                    assert!(at.is_none(), "{entity}: the key of {row:?} is taken");
                    index.insert(k, rows.len());
                    rows.push(row.clone());
                    row
                }
                ChangeOp::Update => {
                    let at = at.unwrap_or_else(|| panic!("{entity}: no row {row:?} to update"));
                    rows[at] = row.clone();
                    row
                }
                ChangeOp::Delete => {
                    let at = at.unwrap_or_else(|| panic!("{entity}: no row {row:?} to delete"));
                    index.remove(&k);
                    rows.swap_remove(at);
                    if at < rows.len() {
                        index.insert(text(&rows[at]), at);
                    }
                    // The key alone, as a table that logs no old rows gives it.
                    (0..row.len()).map(|i| if key.contains(&i) { row[i].clone() } else { Value::Null }).collect()
                }
            };
            changes.push(Logged { entity, fields: Arc::new(schema.fields.clone()), op: kind, values });
        }
        log.txns.push(Txn { position, at: OffsetDateTime::now_utc(), changes });
        position
    }

    /// Changes `dataset.entity`'s columns to `schema`'s (by name; a new
    /// column null in the rows there), as a DDL statement would, unlogged:
    /// the changes after it carry the new fields.
    pub fn alter(&self, dataset: &str, schema: EntitySchema) {
        let mut all = self.datasets.lock().unwrap_or_else(|p| p.into_inner());
        let tables = all.entry(dataset.to_string()).or_default();
        let (old, rows) = tables.remove(&schema.name).unwrap_or_else(|| (schema.clone(), Vec::new()));
        let at: Vec<Option<usize>> = schema.fields.iter().map(|f| old.index_of(&f.name)).collect();
        let rows = rows.into_iter().map(|r| at.iter().map(|i| i.map_or(Value::Null, |i| r[i].clone())).collect());
        tables.insert(schema.name.clone(), (schema, rows.collect()));
    }

    /// The position `dataset`'s log ends at.
    pub fn log_end(&self, dataset: &str) -> u64 {
        self.logs.lock().unwrap_or_else(|p| p.into_inner()).get(dataset).map_or(0, Log::end)
    }

    /// The streams open on `dataset`'s log, with the position each may
    /// forget up to.
    pub fn streams(&self, dataset: &str) -> Vec<(String, u64)> {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        let mut v: Vec<(String, u64)> =
            logs.get(dataset).map(|l| l.streams.iter().map(|(k, v)| (k.clone(), *v)).collect()).unwrap_or_default();
        v.sort();
        v
    }

    /// Moves stream `name` of `dataset` on to `position`, as a slot advanced
    /// by hand would be: what is before it can no longer be read.
    pub fn advance_stream(&self, dataset: &str, name: &str, position: u64) {
        let mut logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = logs.get_mut(dataset).and_then(|l| l.streams.get_mut(name)) {
            *p = position;
        }
    }

    /// The positions destination `dataset` holds of `stream`, by entity.
    pub fn held_positions(&self, dataset: &str, stream: &str) -> HashMap<String, String> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(&(dataset.to_string(), stream.to_string())).cloned().unwrap_or_default()
    }

    /// Makes destination `dataset` hold `text` as `entity`'s position of
    /// `stream`, as an edit by hand would.
    pub fn set_held_position(&self, dataset: &str, stream: &str, entity: &str, text: &str) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.entry((dataset.to_string(), stream.to_string())).or_default().insert(entity.into(), text.into());
    }

    /// The tables of `dataset` as snapshot `name` saw them.
    pub(crate) fn snapshot_tables(&self, dataset: &str, name: &str) -> Option<Tables> {
        let logs = self.logs.lock().unwrap_or_else(|p| p.into_inner());
        logs.get(dataset).and_then(|l| l.snapshots.get(name)).cloned()
    }
}

/// `dataset`'s log read as a change source.
pub(crate) struct MemoryChanges {
    pub(crate) dataset: String,
    pub(crate) mem: MemoryConnectors,
}

fn position(text: &str) -> ConnectorResult<u64> {
    text.parse().map_err(|_| ConnectorError::InvalidConfig(format!("'{text}' is not a position of this log")))
}

/// The log's position `n`: one origin of transactions, numbered from 1, so
/// that a position holds the transaction it names (as a GTID does).
fn typed(n: u64) -> Position {
    Position::new(n.to_string(), Order::Sequences(vec![(0, n)].into()))
}

/// The number of a position this log gave.
fn number(p: &Position) -> ConnectorResult<u64> {
    position(p.as_str())
}

impl MemoryChanges {
    fn with_log<T>(&self, f: impl FnOnce(&mut Log) -> T) -> T {
        let mut logs = self.mem.logs.lock().unwrap_or_else(|p| p.into_inner());
        f(logs.entry(self.dataset.clone()).or_default())
    }

    /// A snapshot of the tables now, at the log's end.
    fn snapshot(&self) -> StreamStart {
        let tables = self.mem.datasets.lock().unwrap_or_else(|p| p.into_inner()).get(&self.dataset).cloned();
        self.with_log(|log| {
            let name = format!("snapshot-{}", log.snapshots.len() + 1);
            log.snapshots.insert(name.clone(), tables.unwrap_or_default());
            StreamStart { position: typed(log.end()), snapshot: Some(name), hold: None }
        })
    }
}

struct Reader(std::collections::VecDeque<ChangeEvent>);

#[async_trait]
impl ChangeReader for Reader {
    async fn next(&mut self, max: usize) -> ConnectorResult<Vec<ChangeEvent>> {
        let n = max.max(1).min(self.0.len());
        Ok(self.0.drain(..n).collect())
    }
}

#[async_trait]
impl ChangeSource for MemoryChanges {
    async fn readiness(&self, _entities: &[String]) -> ConnectorResult<Vec<String>> {
        Ok(Vec::new())
    }

    async fn open_stream(&self, name: &str, _entities: &[String]) -> ConnectorResult<StreamStart> {
        if let Some(p) = self.with_log(|log| log.streams.get(name).copied()) {
            return Ok(StreamStart { position: typed(p), snapshot: None, hold: None });
        }
        let start = self.snapshot();
        let at = number(&start.position)?;
        self.with_log(|log| log.streams.insert(name.to_string(), at));
        Ok(start)
    }

    async fn fresh_snapshot(&self, _name: &str) -> ConnectorResult<StreamStart> {
        Ok(self.snapshot())
    }

    async fn read_chunk(
        &self,
        entity: &str,
        key: &[Field],
        after: Option<&[Value]>,
        limit: usize,
    ) -> ConnectorResult<Chunk> {
        let hook = self.mem.before_chunks.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
        if let Some(hook) = hook {
            hook();
        }
        let all = self.mem.datasets.lock().unwrap_or_else(|p| p.into_inner()).get(&self.dataset).cloned();
        let (schema, rows) = all
            .and_then(|t| t.get(entity).cloned())
            .ok_or_else(|| ConnectorError::EntityNotFound(entity.to_string()))?;
        let at: Vec<usize> = key.iter().filter_map(|k| schema.index_of(&k.name)).collect();
        let key_of = |r: &Vec<Value>| at.iter().map(|i| r[*i].clone()).collect::<Vec<Value>>();
        let cmp = |a: &[Value], b: &[Value]| {
            a.iter()
                .zip(b)
                .map(|(x, y)| compare_values(x, y).unwrap_or(std::cmp::Ordering::Equal))
                .find(|o| o.is_ne())
                .unwrap_or(std::cmp::Ordering::Equal)
        };
        let table_rows = rows.len() as u64;
        let mut rows: Vec<Vec<Value>> =
            rows.into_iter().filter(|r| after.is_none_or(|a| cmp(&key_of(r), a).is_gt())).collect();
        rows.sort_by(|a, b| cmp(&key_of(a), &key_of(b)));
        rows.truncate(limit);
        let end = self.with_log(|log| log.end());
        Ok(Chunk { fields: Arc::new(schema.fields), rows, position: typed(end), table_rows: Some(table_rows) })
    }

    fn position(&self, text: &str) -> ConnectorResult<Position> {
        Ok(typed(position(text)?))
    }

    async fn end_position(&self) -> ConnectorResult<Position> {
        Ok(typed(self.with_log(|log| log.end())))
    }

    async fn wait_past(&self, at: &Position, _at_most: std::time::Duration) -> ConnectorResult<bool> {
        let at = number(at)?;
        Ok(self.with_log(|log| log.end()) > at)
    }

    async fn changes(
        &self,
        name: &str,
        from: &[(String, Position)],
        until: &Position,
    ) -> ConnectorResult<Box<dyn ChangeReader>> {
        let until = number(until)?;
        let mut lowest = u64::MAX;
        for (_, p) in from {
            lowest = lowest.min(number(p)?);
        }
        let (confirmed, txns) = self.with_log(|log| (log.streams.get(name).copied(), log.txns.clone()));
        let confirmed = confirmed.ok_or_else(|| ConnectorError::Other(format!("no stream {name}")))?;
        if lowest < confirmed {
            return Err(ConnectorError::Other(format!("stream {name} no longer holds {lowest} (from {confirmed})")));
        }
        let wanted: Vec<&str> = from.iter().map(|(e, _)| e.as_str()).collect();
        let mut events = std::collections::VecDeque::new();
        let mut described: HashMap<String, Arc<Vec<Field>>> = HashMap::new();
        for t in txns.iter().filter(|t| t.position > lowest && t.position <= until) {
            let at = typed(t.position);
            events.push_back(ChangeEvent::Begin { position: at.clone(), committed_at: t.at });
            for c in t.changes.iter().filter(|c| wanted.contains(&c.entity.as_str())) {
                if described.get(&c.entity).is_none_or(|f| f != &c.fields) {
                    described.insert(c.entity.clone(), c.fields.clone());
                    let schema = EntitySchema { name: c.entity.clone(), fields: c.fields.as_ref().clone() };
                    events.push_back(ChangeEvent::Schema(schema));
                }
                events.push_back(ChangeEvent::Change(Change {
                    entity: c.entity.clone(),
                    op: c.op,
                    values: c.values.clone(),
                    unchanged: Vec::new(),
                }));
            }
            events.push_back(ChangeEvent::Commit { position: at, committed_at: t.at });
        }
        Ok(Box::new(Reader(events)))
    }

    async fn confirm(&self, name: &str, at: &Position) -> ConnectorResult<()> {
        let at = number(at)?;
        self.with_log(|log| {
            if let Some(p) = log.streams.get_mut(name) {
                *p = (*p).max(at);
            }
        });
        Ok(())
    }

    async fn retained_from(&self, name: &str) -> ConnectorResult<Option<Position>> {
        Ok(self.with_log(|log| log.streams.get(name).copied().map(typed)))
    }

    async fn retained_bytes(&self, _name: &str) -> ConnectorResult<Option<u64>> {
        Ok(None)
    }

    async fn drop_stream(&self, name: &str) -> ConnectorResult<()> {
        self.with_log(|log| log.streams.remove(name));
        Ok(())
    }
}

/// The `memory_log` connector type: a memory dataset that captures its
/// changes and, as a destination, applies them.
pub fn memory_log_spec() -> ConnectorSpec {
    let mut spec = memory_spec();
    spec.connector_type = MEMORY_LOG;
    spec.title = "In-memory with a change log (tests)";
    spec.sync_modes.extend(["cdc_deduped", "cdc_append"]);
    spec.features.push(sluice_domain::sync::mode::APPLIES_CHANGES);
    spec
}
