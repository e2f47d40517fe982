//! An in-memory connector (type `memory`): datasets of tables in memory.

use super::changes::{Held, Log, MEMORY_LOG, MemoryChanges, Tables, memory_log_spec};
use super::*;
use sluice_domain::connect::connector::*;

/// A connector type `memory` whose datasets live in this process: each
/// connection names a `dataset`; a `password` credential, when the dataset
/// requires one, must match. Used by HTTP and sync tests.
#[derive(Default, Clone)]
pub struct MemoryConnectors {
    pub(crate) datasets: Arc<Mutex<HashMap<String, Tables>>>,
    pub(crate) passwords: Arc<Mutex<HashMap<String, String>>>,
    /// dataset → (error, how many more opens fail with it)
    pub(crate) faults: Arc<Mutex<HashMap<String, (ConnectorError, u32)>>>,
    /// Datasets that take one writer at a time.
    pub(crate) single_writer: Arc<Mutex<std::collections::HashSet<String>>>,
    /// Writers open now, and the most that were open at once.
    pub(crate) writers: Arc<Gauge>,
    /// The entities whose writers finished, in the order they did.
    pub(crate) finished: Arc<Mutex<Vec<String>>>,
    /// Run once, the next time a source is asked for an entity's fields
    /// (to put something between a use case's start and its write).
    pub(crate) before_fields: Hook,
    /// Each dataset's change log (type `memory_log`).
    pub(crate) logs: Arc<Mutex<HashMap<String, Log>>>,
    /// The change stream positions destination datasets hold.
    pub(crate) held: Arc<Mutex<Held>>,
    /// dataset → the writer calls (write, delete, update, clear, commit)
    /// that succeed before the next fails, once.
    pub(crate) write_faults: Arc<Mutex<HashMap<String, u64>>>,
    /// Run one each, in order, as a change log's chunks are read.
    pub(crate) before_chunks: Arc<Mutex<std::collections::VecDeque<Once>>>,
    /// dataset → the writer calls that succeeded (see `fail_writes_after`).
    pub(crate) write_calls: Arc<Mutex<HashMap<String, u64>>>,
    /// dataset → what to run once its writer calls reach a count (see
    /// `after_writer_calls`).
    pub(crate) after_calls: Arc<Mutex<HashMap<String, (u64, CallHook)>>>,
    /// dataset → (commits still to go, what to run after the last of them).
    pub(crate) after_commits: Arc<Mutex<HashMap<String, (u64, Once)>>>,
}

/// Something to run once.
pub(crate) type Once = Box<dyn FnOnce() + Send>;

/// Something to run once before a writer call, told what call it is.
pub(crate) type CallHook = Box<dyn FnOnce(&'static str) + Send>;

/// A hook run once (see [`MemoryConnectors::before_next_entity_fields`]).
pub(crate) type Hook = Arc<Mutex<Option<Box<dyn FnOnce() + Send>>>>;

/// A count and its high-water mark.
#[derive(Default)]
pub struct Gauge {
    now: std::sync::atomic::AtomicUsize,
    peak: std::sync::atomic::AtomicUsize,
}

/// One open writer, counted until dropped.
struct Counted(Arc<Gauge>);

impl Counted {
    fn new(g: &Arc<Gauge>) -> Self {
        use std::sync::atomic::Ordering::SeqCst;
        let now = g.now.fetch_add(1, SeqCst) + 1;
        g.peak.fetch_max(now, SeqCst);
        Counted(g.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.now.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Gives way to other tasks once (as a write to a real server would), so
/// that concurrent syncs interleave.
struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

impl MemoryConnectors {
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `rows` in `dataset.entity`.
    pub fn put(&self, dataset: &str, schema: EntitySchema, rows: Vec<Vec<Value>>) {
        let mut d = self.datasets.lock().unwrap_or_else(|p| p.into_inner());
        d.entry(dataset.to_string()).or_default().insert(schema.name.clone(), (schema, rows));
    }

    /// Runs `hook` once, the next time a source is asked for an entity's
    /// fields (`Source::entity_fields`).
    pub fn before_next_entity_fields(&self, hook: impl FnOnce() + Send + 'static) {
        *self.before_fields.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(hook));
    }

    /// Removes `dataset.entity`.
    pub fn remove(&self, dataset: &str, entity: &str) {
        let mut d = self.datasets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = d.get_mut(dataset) {
            t.remove(entity);
        }
    }

    pub fn rows(&self, dataset: &str, entity: &str) -> Option<Vec<Vec<Value>>> {
        let d = self.datasets.lock().unwrap_or_else(|p| p.into_inner());
        d.get(dataset).and_then(|t| t.get(entity)).map(|(_, r)| r.clone())
    }

    /// Makes `dataset` require `password`.
    pub fn require_password(&self, dataset: &str, password: &str) {
        self.passwords.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into(), password.into());
    }

    /// Makes `dataset` take one writer at a time
    /// ([`Destination::concurrent_writers`] 1).
    pub fn one_writer_at_a_time(&self, dataset: &str) {
        self.single_writer.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into());
    }

    /// The entities whose writers finished, in the order they did.
    pub fn finished(&self) -> Vec<String> {
        self.finished.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The most writers that were open at once, over every dataset.
    pub fn peak_writers(&self) -> usize {
        self.writers.peak.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Makes the next `times` opens of `dataset` fail with `error`.
    pub fn fail_next(&self, dataset: &str, error: ConnectorError, times: u32) {
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into(), (error, times));
    }

    /// Runs `hook` before the next chunk read from a change log that no
    /// earlier hook waits for (see `ChangeSource::read_chunk`): to write
    /// between the chunks of a copy.
    pub fn before_a_chunk(&self, hook: impl FnOnce() + Send + 'static) {
        self.before_chunks.lock().unwrap_or_else(|p| p.into_inner()).push_back(Box::new(hook));
    }

    /// Makes the writers of `dataset` fail once, after `calls` of their
    /// calls (writes, deletes, updates, clears and commits, counted over
    /// every writer) succeed: what was written since the last commit is
    /// lost, as in a crash.
    pub fn fail_writes_after(&self, dataset: &str, calls: u64) {
        self.write_faults.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into(), calls);
    }

    /// Runs `hook` once, before the writer call to `dataset` that follows
    /// its first `calls` (see [`Self::writer_calls`]): to do something
    /// between two of a run's writes, as another process would. The hook
    /// is told what that call is: `write`, `delete`, `update`, `clear` or
    /// `commit`.
    pub fn after_writer_calls(&self, dataset: &str, calls: u64, hook: impl FnOnce(&'static str) + Send + 'static) {
        self.after_calls.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into(), (calls, Box::new(hook)));
    }

    /// Runs `hook` once, right after the `n`th commit to `dataset` from
    /// now (1: the next) is applied: to lose a worker between its
    /// destination's commit and what it stores after.
    pub fn after_commit(&self, dataset: &str, n: u64, hook: impl FnOnce() + Send + 'static) {
        self.after_commits.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into(), (n, Box::new(hook)));
    }

    /// How many writer calls to `dataset` succeeded (those
    /// [`Self::fail_writes_after`] counts).
    pub fn writer_calls(&self, dataset: &str) -> u64 {
        self.write_calls.lock().unwrap_or_else(|p| p.into_inner()).get(dataset).copied().unwrap_or(0)
    }

    fn open(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<MemoryDataset>> {
        let name = c.str("dataset").ok_or_else(|| ConnectorError::InvalidConfig("'dataset' is required".into()))?;
        if let Some((e, n)) = self.faults.lock().unwrap_or_else(|p| p.into_inner()).get_mut(name)
            && *n > 0
        {
            *n -= 1;
            return Err(e.clone());
        }
        if let Some(p) = self.passwords.lock().unwrap_or_else(|p| p.into_inner()).get(name)
            && c.str("password") != Some(p.as_str())
        {
            return Err(ConnectorError::AuthFailed(format!("wrong password for dataset {name}")));
        }
        let single = self.single_writer.lock().unwrap_or_else(|p| p.into_inner()).contains(name);
        Ok(Arc::new(MemoryDataset {
            name: name.to_string(),
            all: self.datasets.clone(),
            writers: self.writers.clone(),
            finished: self.finished.clone(),
            single_writer: single,
            before_fields: self.before_fields.clone(),
            mem: self.clone(),
            holds_marks: c.str("marks") == Some("held"),
        }))
    }
}

pub fn memory_spec() -> ConnectorSpec {
    ConnectorSpec {
        connector_type: "memory",
        title: "In-memory (tests)",
        capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
        config_fields: vec![
            ConfigField {
                name: "dataset",
                field_type: ConfigFieldType::String,
                required: true,
                credential: false,
                default: None,
                description: "dataset name",
            },
            ConfigField {
                name: "password",
                field_type: ConfigFieldType::String,
                required: false,
                credential: true,
                default: None,
                description: "password",
            },
            ConfigField {
                name: "marks",
                field_type: ConfigFieldType::String,
                required: false,
                credential: false,
                default: None,
                description: "`held`: the destination holds row flows' marks with its rows, as files do",
            },
        ],
        sync_modes: vec!["full_refresh_overwrite", "full_refresh_append", "incremental_append", "incremental_deduped"],
        features: vec!["discover", "preview", "incremental"],
        variants: vec![sluice_domain::connect::connector::Variant {
            key: "marks",
            value: "held",
            sync_modes: vec!["full_refresh_overwrite", "full_refresh_append", "incremental_append"],
            features: vec!["discover", "preview", "incremental", sluice_domain::sync::mode::HOLDS_MARKS],
        }],
    }
}

#[async_trait]
impl sluice_domain::connect::registry::ConnectorRegistry for MemoryConnectors {
    fn specs(&self) -> Vec<ConnectorSpec> {
        vec![memory_spec(), memory_log_spec()]
    }

    async fn source(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Source>> {
        Ok(self.open(c)?)
    }

    async fn destination(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Destination>> {
        Ok(self.open(c)?)
    }

    async fn change_source(
        &self,
        c: &ResolvedConfig,
    ) -> ConnectorResult<Arc<dyn sluice_domain::connect::changes::ChangeSource>> {
        if c.connector_type != MEMORY_LOG {
            return Err(ConnectorError::Unsupported(format!("{} sources do not capture changes", c.connector_type)));
        }
        let dataset = self.open(c)?.name.clone();
        Ok(Arc::new(MemoryChanges { dataset, mem: self.clone() }))
    }

    async fn check_config(&self, _: &ResolvedConfig) -> Vec<sluice_domain::FieldError> {
        Vec::new()
    }
}

struct MemoryDataset {
    pub(crate) name: String,
    pub(crate) all: Arc<Mutex<HashMap<String, Tables>>>,
    pub(crate) writers: Arc<Gauge>,
    pub(crate) finished: Arc<Mutex<Vec<String>>>,
    pub(crate) single_writer: bool,
    pub(crate) before_fields: Hook,
    pub(crate) mem: MemoryConnectors,
    /// Holds row flows' marks with its rows (config `marks: held`).
    pub(crate) holds_marks: bool,
}

impl MemoryDataset {
    fn tables(&self) -> MutexGuard<'_, HashMap<String, Tables>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct VecReader {
    pub(crate) fields: Arc<Vec<Field>>,
    pub(crate) batches: std::vec::IntoIter<Vec<Vec<Value>>>,
}

#[async_trait]
impl RecordReader for VecReader {
    fn fields(&self) -> Arc<Vec<Field>> {
        self.fields.clone()
    }

    async fn next_batch(&mut self) -> ConnectorResult<Option<RecordBatch>> {
        Ok(self.batches.next().map(|rows| RecordBatch { fields: self.fields.clone(), rows }))
    }
}

#[async_trait]
impl Source for MemoryDataset {
    async fn check(&self) -> ConnectorResult<()> {
        Ok(())
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        let mut v: Vec<EntitySchema> =
            self.tables().get(&self.name).map(|t| t.values().map(|(s, _)| s.clone()).collect()).unwrap_or_default();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        let hook = self.before_fields.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = hook {
            h();
        }
        let probe = self
            .read(ReadRequest { entity: entity.into(), limit: Some(0), batch_size: 1, ..Default::default() })
            .await?;
        Ok(probe.fields())
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        // In a snapshot of a change log: the tables as it saw them.
        let tables = match &req.snapshot {
            Some(s) => self
                .mem
                .snapshot_tables(&self.name, s)
                .ok_or_else(|| ConnectorError::Other(format!("no snapshot {s} of dataset {}", self.name)))?,
            None => self.tables().get(&self.name).cloned().unwrap_or_default(),
        };
        let (schema, mut rows) =
            tables.get(&req.entity).cloned().ok_or_else(|| ConnectorError::EntityNotFound(req.entity.clone()))?;
        if let Some(c) = &req.cursor {
            let i = schema
                .index_of(&c.field)
                .ok_or_else(|| ConnectorError::InvalidConfig(format!("no field {}", c.field)))?;
            if let Some(from) = &c.from {
                rows.retain(|r| compare_values(&r[i], from).is_some_and(|o| o != std::cmp::Ordering::Less));
            }
            rows.sort_by(|a, b| compare_values(&a[i], &b[i]).unwrap_or(std::cmp::Ordering::Equal));
        }
        if let Some(l) = req.limit {
            rows.truncate(l as usize);
        }
        let size = req.batch_size.max(1);
        let batches: Vec<Vec<Vec<Value>>> = rows.chunks(size).map(|c| c.to_vec()).collect();
        Ok(Box::new(VecReader { fields: Arc::new(schema.fields), batches: batches.into_iter() }))
    }
}

#[async_trait]
impl Destination for MemoryDataset {
    async fn check(&self) -> ConnectorResult<()> {
        Ok(())
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        Ok(self.tables().get(&self.name).and_then(|t| t.get(entity)).map(|(s, _)| s.clone()))
    }

    fn concurrent_writers(&self) -> usize {
        if self.single_writer { 1 } else { usize::MAX }
    }

    fn holds_marks(&self) -> bool {
        self.holds_marks
    }

    async fn open_for(&self, schema: &EntitySchema, mode: WriteMode, _attempt: Option<&Attempt>) -> WriterResult {
        let existing = self.describe(&schema.name).await?;
        let mut fields = match (&existing, mode) {
            (Some(e), WriteMode::Append | WriteMode::Upsert) => e.fields.clone(),
            _ => Vec::new(),
        };
        for f in &schema.fields {
            if !fields.iter().any(|x| x.name == f.name) {
                fields.push(f.clone());
            }
        }
        Ok(Box::new(MemoryWriter {
            dataset: self.name.clone(),
            all: self.all.clone(),
            schema: EntitySchema { name: schema.name.clone(), fields },
            mode,
            pending: Vec::new(),
            stats: WriteStats::default(),
            _open: Counted::new(&self.writers),
            finished: self.finished.clone(),
            position: None,
            mem: self.mem.clone(),
        }))
    }

    async fn positions(&self, stream: &str) -> ConnectorResult<Vec<(String, String)>> {
        let mut v: Vec<(String, String)> = self.mem.held_positions(&self.name, stream).into_iter().collect();
        v.sort();
        Ok(v)
    }

    async fn move_position(&self, stream: &str, entity: &str, position: Option<&str>) -> ConnectorResult<()> {
        let mut held = self.mem.held.lock().unwrap_or_else(|p| p.into_inner());
        let at = held.entry((self.name.clone(), stream.to_string())).or_default();
        match position {
            Some(p) => at.insert(entity.to_string(), p.to_string()),
            None => at.remove(entity),
        };
        Ok(())
    }
}

struct MemoryWriter {
    pub(crate) dataset: String,
    pub(crate) all: Arc<Mutex<HashMap<String, Tables>>>,
    pub(crate) schema: EntitySchema,
    pub(crate) mode: WriteMode,
    pub(crate) pending: Vec<Pending>,
    pub(crate) stats: WriteStats,
    _open: Counted,
    finished: Arc<Mutex<Vec<String>>>,
    /// The change stream position to hold at the next commit.
    position: Option<(String, String)>,
    mem: MemoryConnectors,
}

/// What a writer applies at its next commit, in order.
pub(crate) enum Pending {
    Row(Vec<Value>),
    /// Rows with these key values (by the writer's field order) go.
    Delete(Vec<(usize, Value)>),
    /// The row of these key values takes these values.
    Update(Vec<(usize, Value)>, Vec<(usize, Value)>),
    /// Rows whose key is in the range go, or (a column named) are marked
    /// deleted.
    Clear(KeyRange, Option<usize>),
}

impl MemoryWriter {
    /// Fails once, as a crash would, when the dataset's fault says so.
    /// Runs the dataset's hook first when the calls before this one reach
    /// its count.
    fn call(&mut self, what: &'static str) -> ConnectorResult<()> {
        let done = {
            let mut calls = self.mem.write_calls.lock().unwrap_or_else(|p| p.into_inner());
            let n = calls.entry(self.dataset.clone()).or_default();
            *n += 1;
            *n - 1
        };
        let hook = {
            let mut hooks = self.mem.after_calls.lock().unwrap_or_else(|p| p.into_inner());
            match hooks.get(&self.dataset) {
                Some((at, _)) if *at == done => hooks.remove(&self.dataset).map(|(_, h)| h),
                _ => None,
            }
        };
        if let Some(hook) = hook {
            hook(what);
        }
        let mut faults = self.mem.write_faults.lock().unwrap_or_else(|p| p.into_inner());
        match faults.get_mut(&self.dataset) {
            Some(0) => {
                faults.remove(&self.dataset);
                self.pending.clear();
                self.position = None;
                Err(ConnectorError::Other(format!("dataset {} failed a write (as asked)", self.dataset)))
            }
            Some(n) => {
                *n -= 1;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn key(&self) -> Vec<usize> {
        self.schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect()
    }

    /// `values` (of `fields`) by the writer's field order.
    fn placed(&self, fields: &[Field], values: &[Value]) -> Vec<(usize, Value)> {
        fields.iter().zip(values).filter_map(|(f, v)| Some((self.schema.index_of(&f.name)?, v.clone()))).collect()
    }

    fn commit(&mut self, replace: bool) {
        self.apply(replace);
        let hook = {
            let mut hooks = self.mem.after_commits.lock().unwrap_or_else(|p| p.into_inner());
            match hooks.get_mut(&self.dataset) {
                Some((1, _)) => hooks.remove(&self.dataset).map(|(_, h)| h),
                Some((n, _)) => {
                    *n -= 1;
                    None
                }
                None => None,
            }
        };
        if let Some(hook) = hook {
            hook();
        }
    }

    fn apply(&mut self, replace: bool) {
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        let tables = all.entry(self.dataset.clone()).or_default();
        let entry = tables.entry(self.schema.name.clone()).or_insert_with(|| (self.schema.clone(), Vec::new()));
        // Widen existing rows to new columns.
        let width = self.schema.fields.len();
        for r in &mut entry.1 {
            r.resize(width, Value::Null);
        }
        entry.0 = self.schema.clone();
        if replace {
            entry.1.clear();
        }
        let key = self.key();
        let key_text = |r: &[Value]| format!("{:?}", key.iter().map(|k| &r[*k]).collect::<Vec<_>>());
        // The text of the key `at` names (by the writer's field order), when
        // it names exactly the key.
        let at_text = |at: &[(usize, Value)]| {
            let mut at: Vec<&(usize, Value)> = at.iter().collect();
            at.sort_by_key(|(i, _)| *i);
            let same = !key.is_empty() && at.iter().map(|(i, _)| *i).eq(key.iter().copied());
            same.then(|| format!("{:?}", at.iter().map(|(_, v)| v).collect::<Vec<_>>()))
        };
        // Where each key's row is (built when first needed, kept up to date).
        let mut index: Option<HashMap<String, usize>> = None;
        let matches = |r: &[Value], at: &[(usize, Value)]| at.iter().all(|(i, v)| r[*i] == *v);
        for op in self.pending.drain(..) {
            if key.is_empty() || matches!(op, Pending::Clear(..)) {
                index = None;
            }
            let rows = &mut entry.1;
            let lookup = |index: &'_ mut Option<HashMap<String, usize>>, rows: &Vec<Vec<Value>>| {
                if index.is_none() {
                    *index = Some(rows.iter().enumerate().map(|(i, r)| (key_text(r), i)).collect());
                }
            };
            match op {
                Pending::Row(row) => {
                    if self.mode == WriteMode::Upsert && !key.is_empty() {
                        let k = key_text(&row);
                        lookup(&mut index, rows);
                        let Some(index) = index.as_mut() else { continue };
                        if let Some(pos) = index.get(&k) {
                            rows[*pos] = row;
                        } else {
                            index.insert(k, rows.len());
                            rows.push(row);
                        }
                        continue;
                    }
                    rows.push(row);
                }
                Pending::Delete(at) => match at_text(&at) {
                    Some(k) => {
                        lookup(&mut index, rows);
                        let Some(index) = index.as_mut() else { continue };
                        if let Some(pos) = index.remove(&k) {
                            rows.swap_remove(pos);
                            if pos < rows.len() {
                                index.insert(key_text(&rows[pos]), pos);
                            }
                        }
                    }
                    None => rows.retain(|r| !matches(r, &at)),
                },
                Pending::Update(at, set) => {
                    let found = at_text(&at).map(|k| {
                        lookup(&mut index, rows);
                        index.as_ref().and_then(|i| i.get(&k).copied())
                    });
                    match found {
                        Some(Some(pos)) => {
                            for (i, v) in &set {
                                rows[pos][*i] = v.clone();
                            }
                        }
                        Some(None) => {}
                        None => {
                            for r in rows.iter_mut().filter(|r| matches(r, &at)) {
                                for (i, v) in &set {
                                    r[*i] = v.clone();
                                }
                            }
                        }
                    }
                }
                Pending::Clear(range, soft) => {
                    let at: Vec<usize> = range.fields.iter().filter_map(|f| self.schema.index_of(&f.name)).collect();
                    let cmp = |r: &[Value], bound: &[Value]| {
                        at.iter()
                            .zip(bound)
                            .map(|(i, b)| compare_values(&r[*i], b).unwrap_or(std::cmp::Ordering::Equal))
                            .find(|o| o.is_ne())
                            .unwrap_or(std::cmp::Ordering::Equal)
                    };
                    let inside = |r: &[Value]| {
                        range.after.as_ref().is_none_or(|a| cmp(r, a).is_gt())
                            && range.upto.as_ref().is_none_or(|u| cmp(r, u).is_le())
                    };
                    match soft {
                        Some(c) => {
                            for r in entry.1.iter_mut().filter(|r| inside(r) && r[c] == Value::Null) {
                                r[c] = Value::Timestamp(OffsetDateTime::now_utc());
                            }
                        }
                        None => entry.1.retain(|r| !inside(r)),
                    }
                }
            }
        }
        drop(all);
        if let Some((stream, position)) = self.position.take() {
            let mut held = self.mem.held.lock().unwrap_or_else(|p| p.into_inner());
            held.entry((self.dataset.clone(), stream)).or_default().insert(self.schema.name.clone(), position);
        }
    }
}

#[async_trait]
impl EntityWriter for MemoryWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        YieldOnce(false).await;
        self.call("write")?;
        let order: Vec<Option<usize>> =
            self.schema.fields.iter().map(|f| batch.fields.iter().position(|b| b.name == f.name)).collect();
        for r in &batch.rows {
            self.pending
                .push(Pending::Row(order.iter().map(|i| i.map(|i| r[i].clone()).unwrap_or(Value::Null)).collect()));
        }
        self.stats.rows_written += batch.len() as u64;
        self.stats.bytes += batch.approx_bytes();
        Ok(())
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        self.call("commit")?;
        if self.mode != WriteMode::Overwrite {
            self.commit(false);
        }
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        self.call("commit")?;
        let replace = self.mode == WriteMode::Overwrite;
        self.commit(replace);
        self.finished.lock().unwrap_or_else(|p| p.into_inner()).push(self.schema.name.clone());
        Ok(self.stats)
    }

    async fn abort(self: Box<Self>) {}

    async fn delete(&mut self, keys: &RecordBatch) -> ConnectorResult<()> {
        self.call("delete")?;
        for r in &keys.rows {
            let at = self.placed(&keys.fields, r);
            self.pending.push(Pending::Delete(at));
        }
        self.stats.rows_written += keys.len() as u64;
        Ok(())
    }

    async fn update(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        self.call("update")?;
        let key = self.key();
        for r in &rows.rows {
            let (at, set): (Vec<(usize, Value)>, Vec<(usize, Value)>) =
                self.placed(&rows.fields, r).into_iter().partition(|(i, _)| key.contains(i));
            self.pending.push(Pending::Update(at, set));
        }
        self.stats.rows_written += rows.len() as u64;
        Ok(())
    }

    async fn clear(&mut self, range: &KeyRange, soft_column: Option<&str>) -> ConnectorResult<()> {
        self.call("clear")?;
        let soft = soft_column.and_then(|c| self.schema.index_of(c));
        self.pending.push(Pending::Clear(range.clone(), soft));
        Ok(())
    }

    async fn hold_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        self.position = Some((stream.to_string(), position.to_string()));
        Ok(())
    }
}
