//! Verification: proof that a destination holds what its source holds,
//! entity by entity, by primary key (`docs/sync.md`, "Verified syncs").
//!
//! Both sides are read in key order (text by its bytes, as [`KeyRange`]
//! orders it) and merged: a key only the source has is `missing`, one only
//! the destination has is `extra`, one whose values differ after the
//! mapping's transform is `different`. Values compare by meaning
//! ([`same_meaning`]): a column the destination types differently is equal
//! when its value is. Each key found is read again at the end from both
//! sides; one equal by then (a change the flow had not carried yet) is not
//! reported, nor one the source changed meanwhile.

use super::values::*;
use crate::connect::connector::{Field, HeldRows, KeyRange, KeyedRead, ReadRequest, RecordReader, Source};
use crate::shared::ids::{FlowId, OrgId, VerificationId};
use crate::shared::record::{RecordBatch, Value};
use crate::sync::flow::Mapping;
use crate::sync::mode::{DELETED_AT, SyncMode};
use crate::sync::transform::{self, Step};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use time::OffsetDateTime;

/// Keys listed of each kind of difference (all are counted).
pub const LISTED_KEYS: usize = 100;
/// Differences read again at the end; past these, the rest are counted as
/// the scan found them.
pub const RECHECKED_KEYS: usize = 10_000;
/// Rows of an entity a source that cannot read by key may hold: it is read
/// whole and ordered in memory.
pub const UNKEYED_ROWS: usize = 1_000_000;
/// Rows per batch of a verification's reads.
pub const BATCH_ROWS: usize = 5_000;
/// Keys per read of the recheck.
const RECHECK_BATCH: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VerificationStatus {
    Queued,
    Running,
    Matched,
    Mismatched,
    Failed,
}

impl VerificationStatus {
    pub const ALL: [VerificationStatus; 5] = [
        VerificationStatus::Queued,
        VerificationStatus::Running,
        VerificationStatus::Matched,
        VerificationStatus::Mismatched,
        VerificationStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            VerificationStatus::Queued => "queued",
            VerificationStatus::Running => "running",
            VerificationStatus::Matched => "matched",
            VerificationStatus::Mismatched => "mismatched",
            VerificationStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.as_str() == s)
    }

    pub fn finished(self) -> bool {
        !matches!(self, VerificationStatus::Queued | VerificationStatus::Running)
    }
}

/// Keys of one kind of difference: all counted, the first
/// [`LISTED_KEYS`] listed (a number or string, an array for a composite
/// key).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct KeyList {
    pub count: u64,
    pub keys: Vec<serde_json::Value>,
}

impl KeyList {
    fn add(&mut self, key: &[Value]) {
        self.count += 1;
        if self.keys.len() < LISTED_KEYS {
            self.keys.push(key_json(key));
        }
    }
}

/// The key as the verification shows it.
pub fn key_json(key: &[Value]) -> serde_json::Value {
    match key {
        [one] => one.to_json(),
        many => serde_json::Value::Array(many.iter().map(Value::to_json).collect()),
    }
}

/// What the verification of one entity found.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EntityCheck {
    pub entity: String,
    /// The destination entity compared (a source entity may be mapped to
    /// several).
    #[serde(default)]
    pub destination: String,
    pub source_rows: u64,
    pub destination_rows: u64,
    pub missing: KeyList,
    pub extra: KeyList,
    pub different: KeyList,
    /// How long it took, in milliseconds.
    #[serde(default)]
    pub duration_ms: u64,
    /// Keys the scan found differing, read again at the end (those no
    /// longer differing, or changing at the source, are not reported).
    #[serde(default)]
    pub rechecked: u64,
    /// Rows of key ranges whose checksums, computed inside both databases,
    /// agreed: compared without being read.
    #[serde(default)]
    pub summed_rows: u64,
    /// Every key found differing (as the destination holds keys), for a
    /// repair; kept with the verification, never shown.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repair_keys: Vec<serde_json::Value>,
    /// Differences past the [`RECHECKED_KEYS`] read again: counted, not
    /// among `repair_keys`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub unlisted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl EntityCheck {
    pub fn matched(&self) -> bool {
        self.missing.count == 0 && self.extra.count == 0 && self.different.count == 0
    }
}

/// A verification of a flow's entities.
#[derive(Debug, Clone, PartialEq)]
pub struct Verification {
    pub id: VerificationId,
    pub org_id: OrgId,
    pub flow_id: FlowId,
    pub status: VerificationStatus,
    /// The entities asked for (source names); all the flow's mirrored
    /// entities when empty.
    pub requested: Vec<String>,
    pub repair: bool,
    pub entities: Vec<EntityCheck>,
    pub error: Option<String>,
    pub queued_at: OffsetDateTime,
    pub started_at: Option<OffsetDateTime>,
    pub finished_at: Option<OffsetDateTime>,
    /// The worker holding it while it runs, and until when.
    pub claimed_by: Option<String>,
    pub claimed_until: Option<OffsetDateTime>,
    /// The run that re-syncs the keys it found differing (`repair`).
    pub repair_run_id: Option<crate::shared::ids::RunId>,
}

/// Whether a mapping's destination mirrors its source by key, so that a
/// verification can compare them (appended copies and change logs hold
/// several rows a key).
pub fn verifiable(m: &Mapping) -> bool {
    matches!(m.sync_mode, SyncMode::FullRefreshOverwrite | SyncMode::IncrementalDeduped | SyncMode::CdcDeduped)
}

/// The source field each output field of `steps` holds unchanged (renamed
/// at most), or `None` for one a step computed (cast, masked, set).
pub fn origins(steps: &[Step], input: &[Field]) -> Vec<(String, Option<String>)> {
    let mut out: Vec<(String, Option<String>)> = input.iter().map(|f| (f.name.clone(), Some(f.name.clone()))).collect();
    for step in steps {
        let at = |out: &[(String, Option<String>)], name: &str| out.iter().position(|(n, _)| n == name);
        match step {
            Step::Rename { from, to } => {
                if let Some(i) = at(&out, from) {
                    out[i].0 = to.clone();
                }
            }
            Step::Drop { field } => {
                if let Some(i) = at(&out, field) {
                    out.remove(i);
                }
            }
            Step::Cast { field, .. } | Step::Mask { field } => {
                if let Some(i) = at(&out, field) {
                    out[i].1 = None;
                }
            }
            Step::Set { field, .. } => match at(&out, field) {
                Some(i) => out[i].1 = None,
                None => out.push((field.clone(), None)),
            },
            Step::Filter { .. } => {}
        }
    }
    out
}

/// How the rows of one entity are compared: the fields the destination
/// should hold (the mapping's output), where the key is on each side, and
/// where each field is in a destination row.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The source's key fields (as the source names and types them).
    pub source_key: Vec<Field>,
    /// The destination's key fields.
    pub dest_key: Vec<Field>,
    /// The mapping's output fields, in order.
    pub fields: Vec<String>,
    /// For each output field, its position in a destination row (`None`:
    /// the destination lacks it).
    pub dest_index: Vec<Option<usize>>,
    /// The key's positions in an output row and in a destination row.
    pub out_key: Vec<usize>,
    pub dest_key_idx: Vec<usize>,
    /// The soft-delete column of the destination: rows it marks are gone.
    pub deleted_at: Option<usize>,
}

impl Plan {
    /// The comparison of `m` between the source's fields and the
    /// destination's; an error names what makes it impossible.
    pub fn new(m: &Mapping, source: &[Field], dest: &[Field]) -> Result<Plan, String> {
        let out = transform::plan("transform", &m.transform, source)
            .map_err(|e| e.iter().map(|f| format!("{}: {}", f.field, f.message)).collect::<Vec<_>>().join("; "))?;
        let names: Vec<String> = out.iter().map(|f| f.name.clone()).collect();
        let keys: Vec<String> = match m.key_fields() {
            k if !k.is_empty() => k.into_iter().map(str::to_string).collect(),
            _ => out.iter().filter(|f| f.primary_key).map(|f| f.name.clone()).collect(),
        };
        if keys.is_empty() {
            return Err(format!(
                "'{}' has no primary key to verify by (set the mapping's primary_key)",
                m.source_entity
            ));
        }
        let origins = origins(&m.transform, source);
        let mut source_key = Vec::new();
        let mut dest_key = Vec::new();
        let mut out_key = Vec::new();
        let mut dest_key_idx = Vec::new();
        for k in &keys {
            let from = origins.iter().find(|(n, _)| n == k).and_then(|(_, o)| o.as_ref()).ok_or_else(|| {
                format!(
                    "the key field '{k}' of '{}' is computed by the transform; rows cannot be matched by it",
                    m.source_entity
                )
            })?;
            source_key.push(
                source.iter().find(|f| &f.name == from).cloned().ok_or_else(|| format!("no source field '{from}'"))?,
            );
            let di = dest
                .iter()
                .position(|f| &f.name == k)
                .ok_or_else(|| format!("the destination of '{}' has no key field '{k}'", m.source_entity))?;
            dest_key.push(dest[di].clone());
            dest_key_idx.push(di);
            out_key
                .push(names.iter().position(|n| n == k).ok_or_else(|| format!("no field '{k}' after the transform"))?);
        }
        let dest_index: Vec<Option<usize>> = names.iter().map(|n| dest.iter().position(|f| &f.name == n)).collect();
        let absent: Vec<&str> =
            names.iter().zip(&dest_index).filter(|(_, d)| d.is_none()).map(|(n, _)| n.as_str()).collect();
        if !absent.is_empty() {
            return Err(format!(
                "the destination of '{}' has no column {} yet: run the flow first",
                m.source_entity,
                absent.iter().map(|n| format!("'{n}'")).collect::<Vec<_>>().join(", ")
            ));
        }
        let deleted_at = dest.iter().position(|f| f.name == DELETED_AT);
        Ok(Plan { source_key, dest_key, fields: names, dest_index, out_key, dest_key_idx, deleted_at })
    }

    pub(crate) fn out_key(&self, row: &[Value]) -> Vec<Value> {
        self.out_key.iter().map(|i| row.get(*i).cloned().unwrap_or(Value::Null)).collect()
    }

    fn dest_key(&self, row: &[Value]) -> Vec<Value> {
        self.dest_key_idx.iter().map(|i| row.get(*i).cloned().unwrap_or(Value::Null)).collect()
    }

    fn live(&self, row: &[Value]) -> bool {
        self.deleted_at.is_none_or(|i| row.get(i).is_none_or(Value::is_null))
    }

    /// Whether a destination row holds what an output row says.
    pub fn same_row(&self, out: &[Value], dest: &[Value]) -> bool {
        self.dest_index.iter().enumerate().all(|(i, d)| match (out.get(i), d.and_then(|d| dest.get(d))) {
            (Some(a), Some(b)) => same_meaning(a, b),
            _ => false,
        })
    }
}

/// A key the scan found differing, with the source's row as the scan read
/// it (after the transform), to be read again at the end.
#[derive(Debug, Clone)]
struct Suspect {
    key: Vec<Value>,
    source: Option<Vec<Value>>,
    /// Whether `source` is what a read found (a key the scan found only in
    /// the destination was not looked up in the source then: a key the
    /// destination holds twice is paired once, then found extra).
    read: bool,
}

/// What a merge of both sides found.
#[derive(Debug, Default)]
pub struct Tally {
    pub check: EntityCheck,
    suspects: Vec<Suspect>,
    /// Differences past [`RECHECKED_KEYS`], counted as the scan found them:
    /// missing, extra, different.
    overflow: [u64; 3],
    overflow_keys: [Vec<serde_json::Value>; 3],
}

impl Tally {
    fn found(&mut self, kind: usize, key: Vec<Value>, source: Option<Vec<Value>>) {
        if self.suspects.len() < RECHECKED_KEYS {
            let read = source.is_some();
            self.suspects.push(Suspect { key, source, read });
        } else {
            self.overflow[kind] += 1;
            if self.overflow_keys[kind].len() < LISTED_KEYS {
                self.overflow_keys[kind].push(key_json(&key));
            }
        }
    }
}

/// One side's rows in key order, a batch at a time.
pub struct Ordered {
    reader: Box<dyn RecordReader>,
    rows: VecDeque<Vec<Value>>,
    done: bool,
}

impl Ordered {
    pub fn new(reader: Box<dyn RecordReader>) -> Self {
        Ordered { reader, rows: VecDeque::new(), done: false }
    }

    async fn peek(&mut self) -> Result<Option<&Vec<Value>>, String> {
        while self.rows.is_empty() && !self.done {
            match self.reader.next_batch().await.map_err(|e| e.to_string())? {
                Some(b) => self.rows.extend(b.rows),
                None => self.done = true,
            }
        }
        Ok(self.rows.front())
    }

    fn pop(&mut self) -> Option<Vec<Value>> {
        self.rows.pop_front()
    }
}

/// A key sorted by [`key_order`].
struct SortKey(Vec<Value>);

impl PartialEq for SortKey {
    fn eq(&self, other: &Self) -> bool {
        key_order(&self.0, &other.0) == Ordering::Equal
    }
}

impl Eq for SortKey {}

impl PartialOrd for SortKey {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for SortKey {
    fn cmp(&self, other: &Self) -> Ordering {
        key_order(&self.0, &other.0)
    }
}

/// The rows of `entity` in `range`, in key order: read by key where the
/// source can, else read whole (up to [`UNKEYED_ROWS`]) and ordered here.
/// (Rows of given keys: [`rows_of`].)
pub async fn read_ordered(
    source: &dyn Source,
    entity: &str,
    range: &KeyRange,
) -> Result<Box<dyn RecordReader>, String> {
    let read = KeyedRead { entity: entity.to_string(), range: range.clone(), only: None, batch_size: BATCH_ROWS };
    if let Some(r) = source.read_keyed(&read).await.map_err(|e| e.to_string())? {
        return Ok(r);
    }
    let mut reader = source
        .read(ReadRequest { entity: entity.to_string(), batch_size: BATCH_ROWS, ..Default::default() })
        .await
        .map_err(|e| e.to_string())?;
    let fields = reader.fields();
    let idx: Vec<usize> = range
        .fields
        .iter()
        .map(|k| {
            fields.iter().position(|f| f.name == k.name).ok_or_else(|| format!("'{entity}' has no field '{}'", k.name))
        })
        .collect::<Result<_, _>>()?;
    let key = |row: &[Value]| idx.iter().map(|i| row[*i].clone()).collect::<Vec<_>>();
    let mut rows = Vec::new();
    while let Some(b) = reader.next_batch().await.map_err(|e| e.to_string())? {
        rows.extend(b.rows);
        if rows.len() > UNKEYED_ROWS {
            return Err(format!(
                "'{entity}' holds more than {UNKEYED_ROWS} rows and its connector cannot read it by key"
            ));
        }
    }
    let inside = |k: &[Value]| {
        range.after.as_ref().is_none_or(|a| key_cmp(k, a) == Ordering::Greater)
            && range.upto.as_ref().is_none_or(|u| key_cmp(k, u) != Ordering::Greater)
    };
    rows.retain(|r| inside(&key(r)));
    rows.sort_by_cached_key(|r| SortKey(key(r)));
    Ok(Box::new(HeldRows { fields, rows: Some(rows) }))
}

/// Merges the source's rows (transformed by `steps`) with the
/// destination's, both in key order, counting rows and differences.
pub async fn merge(plan: &Plan, steps: &[Step], source: &mut Ordered, dest: &mut Ordered) -> Result<Tally, String> {
    let mut tally = Tally::default();
    merge_into(plan, steps, source, dest, &mut tally).await?;
    Ok(tally)
}

/// [`merge`], adding what it finds to `tally` (one range of several).
pub async fn merge_into(
    plan: &Plan,
    steps: &[Step],
    source: &mut Ordered,
    dest: &mut Ordered,
    tally: &mut Tally,
) -> Result<(), String> {
    /// What the next pair of rows calls for (decided on borrowed rows, so
    /// that no row is copied to compare it).
    enum Next {
        Done,
        Source,
        Dest,
        Both { same: bool },
    }
    let mut out: VecDeque<Vec<Value>> = VecDeque::new();
    loop {
        // The next source rows the destination should hold, a batch at a
        // time through the transform.
        if out.is_empty() && source.peek().await?.is_some() {
            let rows: Vec<Vec<Value>> = source.rows.drain(..).collect();
            let fields = source.reader.fields();
            out.extend(transform::apply(steps, RecordBatch { fields, rows }).rows);
            continue;
        }
        // The next live destination row.
        while let Some(r) = dest.peek().await? {
            if plan.live(r) {
                break;
            }
            dest.pop();
        }
        let next = match (out.front(), dest.peek().await?) {
            (None, None) => Next::Done,
            (Some(_), None) => Next::Source,
            (None, Some(_)) => Next::Dest,
            (Some(s), Some(d)) => match key_cmp_at(s, &plan.out_key, d, &plan.dest_key_idx) {
                Ordering::Less => Next::Source,
                Ordering::Greater => Next::Dest,
                Ordering::Equal => Next::Both { same: plan.same_row(s, d) },
            },
        };
        match next {
            Next::Done => break,
            Next::Source => {
                let s = out.pop_front().unwrap_or_default();
                tally.check.source_rows += 1;
                tally.found(0, plan.out_key(&s), Some(s));
            }
            Next::Dest => {
                let d = dest.pop().unwrap_or_default();
                tally.check.destination_rows += 1;
                tally.found(1, plan.dest_key(&d), None);
            }
            Next::Both { same } => {
                let s = out.pop_front().unwrap_or_default();
                dest.pop();
                tally.check.source_rows += 1;
                tally.check.destination_rows += 1;
                if !same {
                    tally.found(2, plan.out_key(&s), Some(s));
                }
            }
        }
    }
    Ok(())
}

/// [`key_cmp`] of the keys at `ai` in `a` and at `bi` in `b`, without
/// copying them.
fn key_cmp_at(a: &[Value], ai: &[usize], b: &[Value], bi: &[usize]) -> Ordering {
    ai.iter()
        .zip(bi)
        .map(|(i, j)| part_cmp(a.get(*i).unwrap_or(&Value::Null), b.get(*j).unwrap_or(&Value::Null)))
        .find(|o| o.is_ne())
        .unwrap_or_else(|| ai.len().cmp(&bi.len()))
}

/// The rows of `keys` on one side, by the text of their key (several when
/// the side holds a key more than once). Keys are first cast to the side's
/// key types; one that does not convert cannot be there. Read by key in
/// parts where the side can, else in one read of the whole entity.
pub(crate) async fn rows_of(
    side: &dyn Source,
    entity: &str,
    key: &[Field],
    keys: &[Vec<Value>],
) -> Result<(Arc<Vec<Field>>, HashMap<String, Vec<Vec<Value>>>), String> {
    let keys: Vec<Vec<Value>> = keys
        .iter()
        .filter_map(|k| {
            let cast: Vec<Value> = k.iter().zip(key).map(|(v, f)| transform::cast(v.clone(), f.field_type)).collect();
            cast.iter().zip(k).all(|(c, v)| !c.is_null() || v.is_null()).then_some(cast)
        })
        .collect();
    let wanted: std::collections::HashSet<String> = keys.iter().map(|k| key_text(k)).collect();
    let mut out: HashMap<String, Vec<Vec<Value>>> = HashMap::new();
    let mut fields = Arc::new(Vec::new());
    let mut whole = false;
    for part in keys.chunks(RECHECK_BATCH) {
        let read = KeyedRead {
            entity: entity.to_string(),
            range: KeyRange { fields: key.to_vec(), after: None, upto: None },
            only: Some(part.to_vec()),
            batch_size: BATCH_ROWS,
        };
        let Some(reader) = side.read_keyed(&read).await.map_err(|e| e.to_string())? else {
            whole = true;
            break;
        };
        fields = collect(reader, key, &wanted, &mut out).await?;
    }
    if whole && !wanted.is_empty() {
        let reader = side
            .read(ReadRequest { entity: entity.to_string(), batch_size: BATCH_ROWS, ..Default::default() })
            .await
            .map_err(|e| e.to_string())?;
        out.clear();
        fields = collect(reader, key, &wanted, &mut out).await?;
    }
    Ok((fields, out))
}

/// Keeps the rows of `reader` whose key is `wanted`, by key.
async fn collect(
    mut reader: Box<dyn RecordReader>,
    key: &[Field],
    wanted: &std::collections::HashSet<String>,
    out: &mut HashMap<String, Vec<Vec<Value>>>,
) -> Result<Arc<Vec<Field>>, String> {
    let fields = reader.fields();
    let idx: Vec<usize> = key.iter().filter_map(|k| fields.iter().position(|f| f.name == k.name)).collect();
    if idx.len() != key.len() {
        return Err("a key field is gone".into());
    }
    while let Some(b) = reader.next_batch().await.map_err(|e| e.to_string())? {
        for r in b.rows {
            let k = key_text(&idx.iter().map(|i| r.get(*i).cloned().unwrap_or(Value::Null)).collect::<Vec<_>>());
            if wanted.contains(&k) {
                out.entry(k).or_default().push(r);
            }
        }
    }
    Ok(fields)
}

/// A key as one string, the same on both sides whatever their types.
pub(crate) fn key_text(key: &[Value]) -> String {
    key.iter().map(|v| if v.is_null() { "\u{0}null".to_string() } else { text(v) }).collect::<Vec<_>>().join("\u{1f}")
}

/// Reads the suspects of `tally` again from both sides, keeps those that
/// still differ while the source held still, and fills the check's counts
/// and lists. `rounds` reads, `pause` apart, give a flow that is catching
/// up the time to; a key whose source row changed between any two of its
/// reads (the scan's included) is a change in flight, never a difference.
/// A key the destination holds more than once differs (`extra`).
pub async fn recheck(
    plan: &Plan,
    m: &Mapping,
    source: &dyn Source,
    dest: &dyn Source,
    mut tally: Tally,
    rounds: u32,
    pause: impl Fn(u32) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>,
) -> Result<EntityCheck, String> {
    // One suspect a key (an order disagreement makes a key both missing
    // and extra).
    let mut seen = std::collections::HashSet::new();
    let mut suspects: Vec<(Suspect, bool)> = std::mem::take(&mut tally.suspects)
        .into_iter()
        .filter(|s| seen.insert(key_text(&s.key)))
        .map(|s| (s, false))
        .collect();
    tally.check.rechecked = suspects.len() as u64;
    let mut open: Vec<(Suspect, usize)> = Vec::new();
    for round in 0..rounds.max(1) {
        if suspects.is_empty() {
            break;
        }
        pause(round).await;
        let last = round + 1 >= rounds.max(1);
        let keys: Vec<Vec<Value>> = suspects.iter().map(|(s, _)| s.key.clone()).collect();
        let (sfields, srows) = rows_of(source, &m.source_entity, &plan.source_key, &keys).await?;
        let (_, drows) = rows_of(dest, m.destination(), &plan.dest_key, &keys).await?;
        // The source's rows, transformed as the flow writes them (a filter
        // may drop some: those the destination should not hold).
        let rows: Vec<Vec<Value>> = srows.into_values().flatten().collect();
        let mut sout: HashMap<String, Vec<Value>> = HashMap::new();
        for r in transform::apply(&m.transform, RecordBatch { fields: sfields, rows }).rows {
            sout.insert(key_text(&plan.out_key(&r)), r);
        }
        let mut next = Vec::new();
        for (s, moved_before) in suspects {
            let k = key_text(&s.key);
            let now = sout.get(&k).cloned();
            let live: Vec<&Vec<Value>> =
                drows.get(&k).map(|rows| rows.iter().filter(|d| plan.live(d)).collect()).unwrap_or_default();
            let kind = match (&now, live.as_slice()) {
                (None, []) => None,
                (_, [_, _, ..]) => Some(1),
                (Some(_), []) => Some(0),
                (None, [_]) => Some(1),
                (Some(a), [b]) => (!plan.same_row(a, b)).then_some(2),
            };
            let moved = moved_before
                || s.read
                    && match (&s.source, &now) {
                        (Some(a), Some(b)) => !a.iter().zip(b).all(|(x, y)| same_meaning(x, y)),
                        (None, None) => false,
                        _ => true,
                    };
            let Some(kind) = kind else { continue };
            let s = Suspect { key: s.key, source: now, read: true };
            if !last {
                next.push((s, moved));
            } else if !moved {
                open.push((s, kind));
            }
        }
        suspects = next;
    }
    let mut check = tally.check;
    open.sort_by(|a, b| key_order(&a.0.key, &b.0.key));
    for (s, kind) in &open {
        check.repair_keys.push(serde_json::Value::Array(s.key.iter().map(Value::to_json).collect()));
        let list = match kind {
            0 => &mut check.missing,
            1 => &mut check.extra,
            _ => &mut check.different,
        };
        list.add(&s.key);
    }
    check.unlisted = tally.overflow.iter().sum();
    for (kind, n) in tally.overflow.iter().enumerate() {
        let list = match kind {
            0 => &mut check.missing,
            1 => &mut check.extra,
            _ => &mut check.different,
        };
        list.count += n;
        for k in &tally.overflow_keys[kind] {
            if list.keys.len() < LISTED_KEYS {
                list.keys.push(k.clone());
            }
        }
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::record::{FieldType, parse_timestamp};

    #[test]
    fn values_typed_differently_compare_by_meaning() {
        use Value::*;
        assert!(same_meaning(&Int(12), &Decimal("12.000".into())));
        assert!(same_meaning(&Decimal("-0012.50".into()), &Decimal("-12.5".into())));
        assert!(!same_meaning(&Decimal("12.51".into()), &Decimal("12.5".into())));
        assert!(same_meaning(&Bool(true), &Int(1)));
        assert!(!same_meaning(&Bool(true), &Int(2)));
        assert!(same_meaning(&Json(serde_json::json!({"a": [1, 2]})), &String("{\"a\":[1,2]}".into())));
        assert!(same_meaning(&RawJson("{\"a\": [1, 2]}".into()), &String("{\"a\":[1,2]}".into())));
        assert!(same_meaning(&String("{\"a\":[1,2]}".into()), &RawJson("{ \"a\" : [1,2] }".into())));
        assert!(!same_meaning(&RawJson("{\"a\": [1, 3]}".into()), &String("{\"a\":[1,2]}".into())));
        let t = parse_timestamp("2026-01-02T03:04:05.123456Z").unwrap();
        assert!(same_meaning(&Timestamp(t), &Timestamp(t.to_offset(time::macros::offset!(+2)))));
        assert!(same_meaning(&Timestamp(t), &String("2026-01-02T03:04:05.123456Z".into())));
        assert!(same_meaning(&Float(0.1), &Decimal("0.1".into())));
        assert!(!same_meaning(&Null, &String(std::string::String::new())));
        assert!(!same_meaning(&String("a".into()), &String("b".into())));
        assert_eq!(canonical_decimal("-0.000"), Some("0".into()));
        assert_eq!(canonical_decimal("1e5"), None);
    }

    #[test]
    fn keys_order_as_the_databases_do() {
        use Value::*;
        assert_eq!(key_cmp(&[Int(2)], &[Int(10)]), Ordering::Less);
        assert_eq!(key_cmp(&[String("B".into())], &[String("a".into())]), Ordering::Less);
        assert_eq!(key_cmp(&[Int(1), String("b".into())], &[Int(1), String("a".into())]), Ordering::Greater);
        // Sides that type a key differently still meet.
        assert_eq!(key_cmp(&[Int(7)], &[String("7".into())]), Ordering::Equal);
    }

    #[test]
    fn a_key_computed_by_the_transform_cannot_be_matched() {
        let source = vec![
            Field { primary_key: true, ..Field::new("id", FieldType::Integer) },
            Field::new("email", FieldType::String),
        ];
        let mapping = |transform: serde_json::Value| -> Mapping {
            serde_json::from_value(serde_json::json!({
                "source_entity": "users", "sync_mode": "full_refresh_overwrite", "transform": transform
            }))
            .unwrap()
        };
        let dest = vec![Field::new("user_id", FieldType::Integer), Field::new("email", FieldType::String)];
        let renamed = mapping(
            serde_json::json!([{"op": "rename", "from": "id", "to": "user_id"}, {"op": "mask", "field": "email"}]),
        );
        let plan = Plan::new(&renamed, &source, &dest).unwrap();
        assert_eq!(plan.source_key[0].name, "id");
        assert_eq!(plan.dest_key[0].name, "user_id");
        assert_eq!(plan.dest_index, vec![Some(0), Some(1)]);
        let masked = mapping(serde_json::json!([{"op": "mask", "field": "id"}]));
        let e = Plan::new(&masked, &source, &[Field::new("id", FieldType::String)]).unwrap_err();
        assert!(e.contains("computed by the transform"), "{e}");
    }

    fn reader(fields: &[&str], rows: Vec<Vec<Value>>) -> Ordered {
        let fields = Arc::new(fields.iter().map(|n| Field::new(*n, FieldType::Integer)).collect::<Vec<_>>());
        Ordered::new(Box::new(HeldRows { fields, rows: Some(rows) }))
    }

    #[test]
    fn a_merge_finds_each_kind_of_difference_by_key() {
        use Value::*;
        let m: Mapping = serde_json::from_value(serde_json::json!({
            "source_entity": "t", "sync_mode": "cdc_deduped", "primary_key": "id", "delete_mode": "soft"
        }))
        .unwrap();
        let src_fields = [Field::new("id", FieldType::Integer), Field::new("v", FieldType::Integer)];
        let dest_fields = [
            Field::new("id", FieldType::Integer),
            Field::new("v", FieldType::Integer),
            Field::new(DELETED_AT, FieldType::Timestamp),
        ];
        let plan = Plan::new(&m, &src_fields, &dest_fields).unwrap();
        let gone = Timestamp(OffsetDateTime::UNIX_EPOCH);
        let mut source = reader(
            &["id", "v"],
            vec![vec![Int(1), Int(1)], vec![Int(2), Int(2)], vec![Int(4), Int(4)], vec![Int(5), Int(5)]],
        );
        let mut dest = reader(
            &["id", "v", DELETED_AT],
            vec![
                vec![Int(1), Int(1), Null],
                vec![Int(2), Int(20), Null],
                vec![Int(3), Int(3), Null],
                vec![Int(4), Int(4), gone.clone()],
                vec![Int(5), Decimal("5.0".into()), Null],
                vec![Int(6), Int(6), Null],
            ],
        );
        let tally = futures_lite(merge(&plan, &m.transform, &mut source, &mut dest)).unwrap();
        assert_eq!((tally.check.source_rows, tally.check.destination_rows), (4, 5));
        let kinds: Vec<(Vec<Value>, bool)> =
            tally.suspects.iter().map(|s| (s.key.clone(), s.source.is_some())).collect();
        // 2 differs, 3 and 6 are extra, 4 is missing (soft-deleted there).
        assert_eq!(
            kinds,
            vec![(vec![Int(2)], true), (vec![Int(3)], false), (vec![Int(4)], true), (vec![Int(6)], false)]
        );
    }

    /// A table in memory, read whole (no reading by key: the fallback).
    struct Table(Vec<Vec<Value>>);

    #[async_trait::async_trait]
    impl Source for Table {
        async fn check(&self) -> crate::connect::connector::ConnectorResult<()> {
            Ok(())
        }
        async fn discover(
            &self,
        ) -> crate::connect::connector::ConnectorResult<Vec<crate::connect::connector::EntitySchema>> {
            Ok(vec![])
        }
        async fn read(&self, _: ReadRequest) -> crate::connect::connector::ConnectorResult<Box<dyn RecordReader>> {
            let fields = Arc::new(vec![
                Field { primary_key: true, ..Field::new("id", FieldType::Integer) },
                Field::new("v", FieldType::String),
            ]);
            Ok(Box::new(HeldRows { fields, rows: Some(self.0.clone()) }))
        }
    }

    #[test]
    fn the_recheck_drops_changes_in_flight_and_reports_keys_held_twice() {
        use Value::*;
        let m: Mapping = serde_json::from_value(
            serde_json::json!({"source_entity": "t", "sync_mode": "cdc_deduped", "primary_key": "id"}),
        )
        .unwrap();
        let fields =
            [Field { primary_key: true, ..Field::new("id", FieldType::Integer) }, Field::new("v", FieldType::String)];
        let plan = Plan::new(&m, &fields, &fields).unwrap();
        let row = |id: i64, v: &str| vec![Int(id), String(v.into())];
        // The scan read 1 as "old": it has changed since (a change in
        // flight), though its three reads since agree. 2 differs and held
        // still. 3 the destination holds twice. 4 was caught up.
        let source = Table(vec![row(1, "new"), row(2, "b"), row(3, "c"), row(4, "d")]);
        let dest = Table(vec![row(1, "stale"), row(2, "x"), row(3, "c"), row(3, "c"), row(4, "d")]);
        let mut tally = Tally::default();
        tally.found(2, vec![Int(1)], Some(row(1, "old")));
        tally.found(2, vec![Int(2)], Some(row(2, "b")));
        tally.found(1, vec![Int(3)], None);
        tally.found(2, vec![Int(4)], Some(row(4, "c")));
        // The same key found twice is read again once.
        tally.found(1, vec![Int(2)], None);
        let check = futures_lite(recheck(&plan, &m, &source, &dest, tally, 3, |_| Box::pin(async {}))).unwrap();
        assert_eq!(check.rechecked, 4);
        assert_eq!(check.different, KeyList { count: 1, keys: vec![serde_json::json!(2)] });
        assert_eq!(check.extra, KeyList { count: 1, keys: vec![serde_json::json!(3)] });
        assert_eq!(check.missing.count, 0);
        assert_eq!(check.repair_keys, vec![serde_json::json!([2]), serde_json::json!([3])]);
    }

    /// Runs a future that never waits on anything outside it.
    fn futures_lite<F: std::future::Future>(f: F) -> F::Output {
        use std::task::{Context, Poll, Waker};
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }
}
