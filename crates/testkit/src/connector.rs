//! An in-memory connector (type `memory`): datasets of tables in memory.

use super::*;
use sluice_domain::connect::connector::*;

type Tables = HashMap<String, (EntitySchema, Vec<Vec<Value>>)>;

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
}

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
        ],
        sync_modes: vec!["full_refresh_overwrite", "full_refresh_append", "incremental_append", "incremental_deduped"],
        features: vec!["discover", "preview", "incremental"],
    }
}

#[async_trait]
impl sluice_domain::connect::registry::ConnectorRegistry for MemoryConnectors {
    fn specs(&self) -> Vec<ConnectorSpec> {
        vec![memory_spec()]
    }

    async fn source(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Source>> {
        Ok(self.open(c)?)
    }

    async fn destination(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Destination>> {
        Ok(self.open(c)?)
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
        let (schema, mut rows) = self
            .tables()
            .get(&self.name)
            .and_then(|t| t.get(&req.entity))
            .cloned()
            .ok_or_else(|| ConnectorError::EntityNotFound(req.entity.clone()))?;
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
        }))
    }
}

struct MemoryWriter {
    pub(crate) dataset: String,
    pub(crate) all: Arc<Mutex<HashMap<String, Tables>>>,
    pub(crate) schema: EntitySchema,
    pub(crate) mode: WriteMode,
    pub(crate) pending: Vec<Vec<Value>>,
    pub(crate) stats: WriteStats,
    _open: Counted,
    finished: Arc<Mutex<Vec<String>>>,
}

impl MemoryWriter {
    fn commit(&mut self, replace: bool) {
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
        let key: Vec<usize> =
            self.schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect();
        for row in self.pending.drain(..) {
            if self.mode == WriteMode::Upsert
                && let Some(pos) = entry.1.iter().position(|r| key.iter().all(|k| r[*k] == row[*k]))
            {
                entry.1[pos] = row;
                continue;
            }
            entry.1.push(row);
        }
    }
}

#[async_trait]
impl EntityWriter for MemoryWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        YieldOnce(false).await;
        let order: Vec<Option<usize>> =
            self.schema.fields.iter().map(|f| batch.fields.iter().position(|b| b.name == f.name)).collect();
        for r in &batch.rows {
            self.pending.push(order.iter().map(|i| i.map(|i| r[i].clone()).unwrap_or(Value::Null)).collect());
        }
        self.stats.rows_written += batch.len() as u64;
        self.stats.bytes += batch.approx_bytes();
        Ok(())
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        if self.mode != WriteMode::Overwrite {
            self.commit(false);
        }
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        let replace = self.mode == WriteMode::Overwrite;
        self.commit(replace);
        self.finished.lock().unwrap_or_else(|p| p.into_inner()).push(self.schema.name.clone());
        Ok(self.stats)
    }

    async fn abort(self: Box<Self>) {}
}
