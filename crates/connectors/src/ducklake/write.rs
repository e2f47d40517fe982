//! A DuckLake table's writer: rows into Parquet files (each column
//! carrying its catalog id), each file put whole into the table's folder
//! once cut, then named by one catalog transaction per commit: the
//! snapshot, the new columns, the files (and, for an overwrite, the old
//! files ended), the table's statistics and the marks held.

use super::catalog::{self, int, opt, text};
use super::stats::{Stat, Tracker, merge};
use super::{Column, DuckLake, Table, field_of, lake_type, widens};
use crate::common::align;
use crate::parquet::{Codec, ParquetFile};
use sluice_domain::connect::connector::*;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::PathBuf;

mod keyed;
mod upkeep;

/// A file written and put, waiting for its commit.
struct DataFile {
    name: String,
    rows: u64,
    bytes: u64,
    footer: u64,
    /// Per written column: values, nulls.
    counts: Vec<(u64, u64)>,
    /// Per written column: least, greatest, NaN.
    stats: Vec<Stat>,
}

struct Open {
    file: ParquetFile<BufWriter<File>>,
    spooled: PathBuf,
    name: String,
    stats: Tracker,
}

/// A written column: its field, and the catalog column it is (its id
/// planned at open; `existing`: the catalog's column then).
struct Planned {
    field: Field,
    id: i64,
    ty: String,
    existing: Option<Column>,
}

pub struct LakeWriter {
    db: catalog::Db,
    data_path: String,
    objects: std::sync::Arc<dyn crate::dataset::objects::Objects>,
    schema: String,
    file_bytes: u64,
    entity: String,
    /// `schema.table`, as the writer versions name it.
    fenced_as: String,
    /// The table's folder, a key under the data path.
    folder: String,
    /// The table's id when it existed at open.
    table: Option<i64>,
    columns: Vec<Planned>,
    names: Vec<String>,
    written: EntitySchema,
    ids: Vec<i32>,
    mode: WriteMode,
    run: String,
    version: i64,
    open: Option<Open>,
    staged: Vec<DataFile>,
    held: BTreeMap<String, String>,
    committed: u64,
    pending: u64,
    bytes: u64,
    /// Writing by key (upserts, deletes, updates).
    keyed: Option<keyed::Keyed>,
    /// How long snapshots are kept (`None` or 0: every one).
    retention_hours: Option<i64>,
    /// When this writer last expired snapshots.
    expired_at: Option<std::time::Instant>,
}

fn spooling(name: &str, e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::Other(format!("spooling {name}: {e}"))
}

impl LakeWriter {
    pub async fn open(
        lake: &DuckLake,
        schema: &EntitySchema,
        mode: WriteMode,
        run: uuid::Uuid,
    ) -> ConnectorResult<Self> {
        let fenced_as = format!("{}.{}", lake.schema, schema.name);
        let run_text = run.to_string();
        // Take the table over (earlier writers are fenced), and read it.
        let mut tx = lake.db.begin().await?;
        tx.exec(&format!(
            "INSERT INTO sluice_ducklake_writers VALUES ({}, 1, {}) ON CONFLICT (entity) \
             DO UPDATE SET version = sluice_ducklake_writers.version + 1, run = excluded.run",
            text(&fenced_as),
            text(&run_text)
        ))
        .await?;
        let version = tx
            .int(&format!("SELECT version FROM sluice_ducklake_writers WHERE entity = {}", text(&fenced_as)))
            .await?
            .unwrap_or(1);
        let table = super::read_table(&mut tx, &lake.data_path, &lake.schema, &schema.name).await?;
        let folder = match &table {
            Some(t) => t.folder.clone(),
            None => lake.new_folder(&mut tx, &schema.name).await?,
        };
        let named = match &table {
            Some(t) => named_files(&mut tx, t.id).await?,
            None => Vec::new(),
        };
        tx.commit().await?;
        let columns = plan(table.as_ref(), schema)?;
        // What earlier versions put and no snapshot names is a killed
        // writer's: removed (a later version's files are a live writer's).
        for o in lake.objects.list(folder.trim_end_matches('/')).await? {
            let Some(name) = o.key.rsplit('/').next() else { continue };
            let older = name
                .strip_prefix("sluice-")
                .and_then(|r| r.split('-').next())
                .and_then(|v| v.parse::<i64>().ok())
                .is_some_and(|v| v < version);
            if older && !named.iter().any(|n| n == name) {
                lake.objects.delete(&o.key).await?;
            }
        }
        let fields: Vec<Field> = columns.iter().map(|c| c.field.clone()).collect();
        let written = EntitySchema { name: schema.name.clone(), fields };
        crate::parquet::parquet_schema(&written)?;
        let keyed = match mode {
            WriteMode::Upsert => Some(keyed::Keyed::new(
                &written,
                &schema.primary_key().iter().map(|k| k.to_string()).collect::<Vec<_>>(),
            )?),
            _ => None,
        };
        Ok(LakeWriter {
            db: lake.db.clone(),
            data_path: lake.data_path.clone(),
            objects: lake.objects.clone(),
            schema: lake.schema.clone(),
            file_bytes: lake.file_bytes,
            entity: schema.name.clone(),
            fenced_as,
            folder,
            table: table.map(|t| t.id),
            names: columns.iter().map(|c| c.field.name.clone()).collect(),
            ids: columns.iter().map(|c| c.id as i32).collect(),
            columns,
            written,
            mode,
            run: run_text,
            version,
            open: None,
            staged: Vec::new(),
            held: BTreeMap::new(),
            committed: 0,
            pending: 0,
            bytes: 0,
            keyed,
            retention_hours: lake.retention_hours,
            expired_at: None,
        })
    }

    fn start_file(&mut self) -> ConnectorResult<&mut Open> {
        if self.open.is_none() {
            let name = format!("sluice-{}-{}.parquet", self.version, uuid::Uuid::now_v7());
            let (spooled, f) = self.objects.spool(&self.fenced_as, &name)?;
            let group = (self.file_bytes / 2).min(crate::parquet::ROW_GROUP_BYTES as u64) as usize;
            let out = BufWriter::with_capacity(1 << 20, f);
            let file = ParquetFile::with_ids(out, &self.written, Codec::Zstd, Some(&self.ids))?.with_group_bytes(group);
            self.open = Some(Open { file, spooled, name, stats: Tracker::new(&self.written.fields) });
        }
        Ok(self.open.as_mut().expect("opened above"))
    }

    /// Closes the open file (if it holds rows) and puts it in the folder.
    async fn seal(&mut self) -> ConnectorResult<()> {
        let Some(open) = self.open.take() else { return Ok(()) };
        if open.file.rows() == 0 {
            let _ = std::fs::remove_file(&open.spooled);
            return Ok(());
        }
        let counts = open.file.counts();
        let stats = open.stats.stats();
        let (out, rows) = open.file.finish()?;
        let f = out.into_inner().map_err(|e| spooling(&open.name, e))?;
        drop(f);
        let bytes = std::fs::metadata(&open.spooled).map(|m| m.len()).unwrap_or(0);
        let footer = super::keys::footer_size(&open.spooled).map_err(|e| spooling(&open.name, e))?;
        self.objects.upload(&open.spooled, &format!("{}{}", self.folder, open.name)).await?;
        self.bytes += bytes;
        self.staged.push(DataFile { name: open.name, rows, bytes, footer, counts, stats });
        Ok(())
    }

    /// One catalog transaction: the files staged, the marks held (and for
    /// an overwrite, `replace`, the old files ended). Met by another
    /// writer's commit, it is tried again on what that one left.
    async fn commit(&mut self, replace: bool) -> ConnectorResult<WriteStats> {
        self.seal().await?;
        let replace = replace || self.keyed.as_ref().is_some_and(|k| k.cleared);
        let mut plan = self.plan_deletes().await?;
        let mut tries = 0;
        loop {
            tries += 1;
            match self.try_commit(replace, tries > 1, &plan).await {
                Ok(()) => break,
                Err(e) if tries < 20 && e.to_string().contains(keyed::STALE_INDEX) => {
                    if let Some(k) = self.keyed.as_mut() {
                        k.indexed = false;
                    }
                    self.drop_plan(&plan).await;
                    plan = self.plan_deletes().await?;
                }
                Err(e) if tries < 20 && e.to_string().contains(keyed::STALE) => {
                    // A user's compaction since the plan: made again on
                    // the files it left.
                    self.drop_plan(&plan).await;
                    plan = self.plan_deletes().await?;
                }
                Err(e) if tries < 20 && (catalog::conflict(&e) || matches!(e, ConnectorError::Unreachable(_))) => {
                    tokio::time::sleep(std::time::Duration::from_millis(20 * tries)).await;
                }
                Err(e) => return Err(e),
            }
        }
        self.staged.clear();
        self.held.clear();
        if let Some(k) = self.keyed.as_mut() {
            k.reset();
        }
        self.committed += self.pending;
        self.pending = 0;
        self.upkeep().await;
        Ok(WriteStats { rows_written: self.committed, bytes: self.bytes })
    }

    async fn try_commit(&mut self, replace: bool, again: bool, plan: &keyed::DeletePlan) -> ConnectorResult<()> {
        let mut tx = self.db.begin().await?;
        self.fence(&mut tx).await?;
        // A try whose commit's answer was lost may have committed.
        if again {
            let first = match (self.staged.first(), plan.files.first()) {
                (Some(f), _) => Some(format!("SELECT count(*) FROM ducklake_data_file WHERE path = {}", text(&f.name))),
                (None, Some((_, d))) => {
                    Some(format!("SELECT count(*) FROM ducklake_delete_file WHERE path = {}", text(&d.name)))
                }
                (None, None) => None,
            };
            if let Some(sql) = first
                && tx.int(&sql).await?.unwrap_or(0) > 0
            {
                return Ok(());
            }
        }
        let last = tx.last_snapshot().await?;
        let snapshot = last.id + 1;
        let mut schema_version = last.schema_version;
        let mut next_catalog = last.next_catalog;
        let mut next_file = last.next_file;
        let mut changes: Vec<String> = Vec::new();
        let mut altered = false;

        let schema_id = match tx
            .int(&format!(
                "SELECT schema_id FROM ducklake_schema WHERE schema_name = {} AND end_snapshot IS NULL",
                text(&self.schema)
            ))
            .await?
        {
            Some(id) => id,
            None => {
                let id = next_catalog;
                next_catalog += 1;
                tx.exec(&format!(
                    "INSERT INTO ducklake_schema VALUES ({id}, {}, {snapshot}, NULL, {}, {}, true)",
                    text(&uuid::Uuid::new_v4().to_string()),
                    text(&self.schema),
                    text(&format!("{}/", self.schema))
                ))
                .await?;
                changes.push(format!("created_schema:\"{}\"", self.schema.replace('"', "\"\"")));
                altered = true;
                id
            }
        };

        let now = super::read_table(&mut tx, &self.data_path, &self.schema, &self.entity).await?;
        let created = now.is_none();
        let table_id = match (&now, self.table) {
            (Some(t), _) => {
                if !t.folder.is_empty() && t.folder != self.folder {
                    return Err(conflicted(&self.fenced_as, "its folder changed"));
                }
                if self.alter(&mut tx, t, snapshot).await? {
                    changes.push(format!("altered_table:{}", t.id));
                    altered = true;
                }
                t.id
            }
            (None, Some(_)) => return Err(conflicted(&self.fenced_as, "it was dropped")),
            (None, None) => {
                let id = next_catalog;
                next_catalog += 1;
                let folder = self.folder.trim_end_matches('/').rsplit('/').next().unwrap_or(&self.entity).to_string();
                tx.exec(&format!(
                    "INSERT INTO ducklake_table VALUES ({id}, {}, {snapshot}, NULL, {schema_id}, {}, {}, true)",
                    text(&uuid::Uuid::now_v7().to_string()),
                    text(&self.entity),
                    text(&format!("{folder}/"))
                ))
                .await?;
                for (i, c) in self.columns.iter().enumerate() {
                    insert_column(&mut tx, id, c, snapshot, i as i64 + 1).await?;
                }
                tx.exec(&format!("INSERT INTO ducklake_table_stats VALUES ({id}, 0, 0, 0)")).await?;
                changes.push(format!(
                    "created_table:\"{}\".\"{}\"",
                    self.schema.replace('"', "\"\""),
                    self.entity.replace('"', "\"\"")
                ));
                altered = true;
                id
            }
        };
        if altered {
            schema_version += 1;
            tx.exec(&format!("INSERT INTO ducklake_schema_versions VALUES ({snapshot}, {schema_version}, {table_id})"))
                .await?;
        }

        if replace {
            let ended = tx
                .exec(&format!(
                    "UPDATE ducklake_data_file SET end_snapshot = {snapshot} WHERE table_id = {table_id} \
                     AND end_snapshot IS NULL"
                ))
                .await?;
            tx.exec(&format!(
                "UPDATE ducklake_delete_file SET end_snapshot = {snapshot} WHERE table_id = {table_id} \
                 AND end_snapshot IS NULL"
            ))
            .await?;
            let mut inlined = 0;
            for r in tx
                .rows(&format!("SELECT table_name FROM ducklake_inlined_data_tables WHERE table_id = {table_id}"))
                .await?
            {
                let Some(name) = &r[0] else { continue };
                inlined += tx
                    .exec(&format!(
                        "UPDATE \"{}\" SET end_snapshot = {snapshot} WHERE end_snapshot IS NULL",
                        name.replace('"', "\"\"")
                    ))
                    .await?;
            }
            if ended + inlined > 0 {
                changes.push(format!("deleted_from_table:{table_id}"));
            }
        }

        let stats = tx
            .rows(&format!(
                "SELECT record_count, next_row_id, file_size_bytes FROM ducklake_table_stats WHERE table_id = {table_id}"
            ))
            .await?;
        let (mut records, mut next_row, mut size) =
            stats.first().map(|r| (int(&r[0]), int(&r[1]), int(&r[2]))).unwrap_or((0, 0, 0));
        // Rows written before (not replaced): a column new to them reads
        // null there.
        let earlier_rows = records > 0 && !replace;
        let mut starts: Vec<(i64, i64)> = Vec::with_capacity(self.staged.len());
        for f in &self.staged {
            let id = next_file;
            next_file += 1;
            starts.push((id, next_row));
            let file = NamedFile { id, table: table_id, snapshot, name: &f.name, rows: f.rows, bytes: f.bytes };
            let columns: Vec<i64> = self.columns.iter().map(|c| c.id).collect();
            name_data_file(&mut tx, &file, (f.footer, next_row), &columns, &f.counts, &f.stats).await?;
            next_row += f.rows as i64;
            records += f.rows as i64;
            size += f.bytes as i64;
        }
        if !self.staged.is_empty() {
            changes.push(format!("inserted_into_table:{table_id}"));
        }
        let deleted =
            self.commit_keys(&mut tx, plan, (table_id, snapshot), &mut next_file, &starts, (replace, created)).await?;
        let said = format!("deleted_from_table:{table_id}");
        if deleted && !changes.contains(&said) {
            changes.push(said);
        }
        if stats.is_empty() {
            tx.exec(&format!("INSERT INTO ducklake_table_stats VALUES ({table_id}, {records}, {next_row}, {size})"))
                .await?;
        } else {
            tx.exec(&format!(
                "UPDATE ducklake_table_stats SET record_count = {records}, next_row_id = {next_row}, \
                 file_size_bytes = {size} WHERE table_id = {table_id}"
            ))
            .await?;
        }
        // Each column's table statistics take in this commit's files (an
        // overwrite's alone): DuckDB prunes by them, and merges its own
        // writes into them.
        if replace {
            tx.exec(&format!("DELETE FROM ducklake_table_column_stats WHERE table_id = {table_id}")).await?;
        }
        for (i, c) in self.columns.iter().enumerate() {
            let nulls = self.staged.iter().any(|f| f.counts.get(i).is_some_and(|n| n.1 > 0));
            let nan = self.staged.iter().any(|f| f.stats.get(i).is_some_and(|s| s.nan == Some(true)));
            let (mut min, mut max) = (None, None);
            for f in &self.staged {
                let Some(st) = f.stats.get(i) else { continue };
                min = merge(&c.field, min.as_deref(), st.min.as_deref(), true);
                max = merge(&c.field, max.as_deref(), st.max.as_deref(), false);
            }
            let had = tx
                .rows(&format!(
                    "SELECT contains_null, contains_nan, min_value, max_value FROM ducklake_table_column_stats \
                     WHERE table_id = {table_id} AND column_id = {}",
                    c.id
                ))
                .await?;
            let float = c.field.field_type == FieldType::Number;
            match had.first() {
                None => {
                    tx.exec(&format!(
                        "INSERT INTO ducklake_table_column_stats VALUES ({table_id}, {}, {}, {}, {}, {}, NULL)",
                        c.id,
                        nulls || earlier_rows,
                        if float { nan.to_string() } else { "NULL".into() },
                        opt(min.as_deref()),
                        opt(max.as_deref())
                    ))
                    .await?;
                }
                Some(r) if !self.staged.is_empty() => {
                    let min = merge(&c.field, r[2].as_deref(), min.as_deref(), true);
                    let max = merge(&c.field, r[3].as_deref(), max.as_deref(), false);
                    let nan = if float { (nan || int(&r[1]) == 1).to_string() } else { "NULL".into() };
                    tx.exec(&format!(
                        "UPDATE ducklake_table_column_stats SET contains_null = {}, contains_nan = {nan}, \
                         min_value = {}, max_value = {} WHERE table_id = {table_id} AND column_id = {}",
                        nulls || int(&r[0]) == 1,
                        opt(min.as_deref()),
                        opt(max.as_deref()),
                        c.id
                    ))
                    .await?;
                }
                Some(_) => {}
            }
        }

        // The table's columns this writer leaves out read null in its
        // files: DuckDB must not think them free of nulls.
        if !self.staged.is_empty() {
            let columns = tx
                .rows(&format!(
                    "SELECT column_id FROM ducklake_column WHERE table_id = {table_id} AND end_snapshot IS NULL \
                     AND parent_column IS NULL"
                ))
                .await?;
            for r in columns {
                let id = int(&r[0]);
                if self.columns.iter().any(|c| c.id == id) {
                    continue;
                }
                let set = tx
                    .exec(&format!(
                        "UPDATE ducklake_table_column_stats SET contains_null = true WHERE table_id = {table_id} \
                         AND column_id = {id}"
                    ))
                    .await?;
                if set == 0 {
                    tx.exec(&format!(
                        "INSERT INTO ducklake_table_column_stats VALUES ({table_id}, {id}, true, NULL, NULL, NULL, \
                         NULL)"
                    ))
                    .await?;
                }
            }
        }

        for (stream, position) in &self.held {
            tx.exec(&format!(
                "INSERT INTO sluice_ducklake_marks VALUES ({table_id}, {}, {}) ON CONFLICT (table_id, stream) \
                 DO UPDATE SET position = excluded.position",
                text(stream),
                text(position)
            ))
            .await?;
        }
        // Marks alone (a run that read nothing new) need no snapshot.
        if !changes.is_empty() {
            let extra = serde_json::json!({"run": self.run, "marks": self.held}).to_string();
            let now = tx.now();
            tx.exec(&format!(
                "INSERT INTO ducklake_snapshot VALUES ({snapshot}, {now}, {schema_version}, {next_catalog}, {next_file})"
            ))
            .await?;
            tx.exec(&format!(
                "INSERT INTO ducklake_snapshot_changes VALUES ({snapshot}, {}, 'sluice', {}, {})",
                text(&changes.join(",")),
                text(&format!("sluice run {}", self.run)),
                opt(Some(&extra))
            ))
            .await?;
        } else if self.keyed.is_some() {
            // No snapshot made: the index is true as of the last one there.
            tx.exec(&format!(
                "UPDATE sluice_ducklake_indexed SET snapshot = {} WHERE table_id = {table_id} AND snapshot = {snapshot}",
                snapshot - 1
            ))
            .await?;
        }
        tx.commit().await?;
        self.table = Some(table_id);
        Ok(())
    }

    /// Rows into the open file (cut where full); by key, each replaces
    /// the row of its key.
    async fn put_rows(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let rows = align(batch, &self.names);
        let limit = self.file_bytes;
        for chunk in rows.chunks(100_000) {
            let number = self.staged.len();
            let open = self.start_file()?;
            let base = open.file.rows();
            open.file.write(chunk)?;
            open.stats.add(chunk);
            let full = open.file.bytes_written() >= limit;
            self.pending += chunk.len() as u64;
            if let Some(k) = self.keyed.as_mut() {
                k.put(chunk, number, base);
            }
            if full {
                self.seal().await?;
            }
        }
        Ok(())
    }

    /// Fails unless this writer still owns the table (no writer opened
    /// since, another attempt's): checked first in each of its commits.
    async fn fence(&self, tx: &mut catalog::Tx) -> ConnectorResult<()> {
        let mine = tx
            .exec(&format!(
                "UPDATE sluice_ducklake_writers SET version = version WHERE entity = {} AND version = {}",
                text(&self.fenced_as),
                self.version
            ))
            .await?;
        if mine != 1 {
            return Err(ConnectorError::Other(format!(
                "another writer of {} took over (an attempt that replaced this one): this one commits nothing",
                self.fenced_as
            )));
        }
        Ok(())
    }

    /// The columns the table lacks added, and those written wider widened,
    /// as of `snapshot`; answers whether the table changed.
    async fn alter(&self, tx: &mut catalog::Tx, t: &Table, snapshot: i64) -> ConnectorResult<bool> {
        let mut changed = false;
        let mut order = t.columns.iter().map(|c| c.order).max().unwrap_or(0);
        for c in &self.columns {
            match t.columns.iter().find(|x| x.name == c.field.name) {
                Some(x) if x.id != c.id => return Err(conflicted(&self.fenced_as, "its columns changed")),
                Some(x) if x.ty == c.ty => {}
                Some(x) => {
                    tx.exec(&format!(
                        "UPDATE ducklake_column SET end_snapshot = {snapshot} WHERE table_id = {} AND column_id = {} \
                         AND end_snapshot IS NULL",
                        t.id, x.id
                    ))
                    .await?;
                    let widened = Planned { field: c.field.clone(), id: x.id, ty: c.ty.clone(), existing: None };
                    insert_column(tx, t.id, &widened, snapshot, x.order).await?;
                    changed = true;
                }
                None => {
                    if t.columns.iter().any(|x| x.id == c.id) {
                        return Err(conflicted(&self.fenced_as, "its columns changed"));
                    }
                    order += 1;
                    insert_column(tx, t.id, c, snapshot, order).await?;
                    changed = true;
                }
            }
        }
        Ok(changed)
    }

    /// Drops what is not committed. Files already put stay: a commit
    /// whose answer was lost may name them; the next writer removes them
    /// if none does.
    fn discard(&mut self) {
        if let Some(open) = self.open.take() {
            let _ = std::fs::remove_file(&open.spooled);
        }
        self.staged.clear();
    }
}

/// A data file a snapshot names.
pub(super) struct NamedFile<'a> {
    pub id: i64,
    pub table: i64,
    pub snapshot: i64,
    pub name: &'a str,
    pub rows: u64,
    pub bytes: u64,
}

/// Names `f` (its footer size and first row id `at`) in the catalog, with
/// each of its `columns`' counts and statistics.
pub(super) async fn name_data_file(
    tx: &mut catalog::Tx,
    f: &NamedFile<'_>,
    (footer, at): (u64, i64),
    columns: &[i64],
    counts: &[(u64, u64)],
    stats: &[Stat],
) -> ConnectorResult<()> {
    let NamedFile { id, table, snapshot, .. } = *f;
    tx.exec(&format!(
        "INSERT INTO ducklake_data_file VALUES ({id}, {table}, {snapshot}, NULL, NULL, {}, true, 'parquet', {}, {}, \
         {footer}, {at}, NULL, NULL, NULL, NULL)",
        text(f.name),
        f.rows,
        f.bytes
    ))
    .await?;
    for ((c, (values, nulls)), st) in columns.iter().zip(counts).zip(stats) {
        tx.exec(&format!(
            "INSERT INTO ducklake_file_column_stats VALUES ({id}, {table}, {c}, NULL, {values}, {nulls}, {}, {}, {}, \
             NULL)",
            opt(st.min.as_deref()),
            opt(st.max.as_deref()),
            st.nan.map_or("NULL".into(), |n| n.to_string())
        ))
        .await?;
    }
    Ok(())
}

fn conflicted(entity: &str, what: &str) -> ConnectorError {
    ConnectorError::Other(format!("the DuckLake table {entity} changed while it was written ({what}): try again"))
}

async fn insert_column(
    tx: &mut catalog::Tx,
    table: i64,
    c: &Planned,
    snapshot: i64,
    order: i64,
) -> ConnectorResult<()> {
    let nullable = c.existing.as_ref().map(|x| x.nullable).unwrap_or(c.field.nullable && !c.field.primary_key);
    tx.exec(&format!(
        "INSERT INTO ducklake_column VALUES ({}, {snapshot}, NULL, {table}, {order}, {}, {}, NULL, 'NULL', {}, NULL, \
         'literal', 'duckdb')",
        c.id,
        text(&c.field.name),
        text(&c.ty),
        nullable
    ))
    .await
    .map(|_| ())
}

/// The names of the files any snapshot of table `id` names.
async fn named_files(tx: &mut catalog::Tx, id: i64) -> ConnectorResult<Vec<String>> {
    let mut out = Vec::new();
    for sql in [
        format!("SELECT path FROM ducklake_data_file WHERE table_id = {id}"),
        format!("SELECT path FROM ducklake_delete_file WHERE table_id = {id}"),
    ] {
        for r in tx.rows(&sql).await? {
            if let Some(p) = &r[0] {
                out.push(p.rsplit('/').next().unwrap_or(p).to_string());
            }
        }
    }
    Ok(out)
}

/// The columns written: each of the source's fields, as the column of its
/// name (its id, checked to take the field's type, or one it widens to),
/// or a new column after the table's last id. Columns the source does not
/// send are left out of the files (readers see them null).
fn plan(table: Option<&Table>, schema: &EntitySchema) -> ConnectorResult<Vec<Planned>> {
    let mut next = table.and_then(|t| t.columns.iter().map(|c| c.id).max()).unwrap_or(0) + 1;
    let mut out = Vec::new();
    for f in &schema.fields {
        let ty = lake_type(f);
        let existing = table.and_then(|t| t.columns.iter().find(|c| c.name == f.name)).cloned();
        let (id, field) = match &existing {
            Some(c) if c.ty == ty || widens(&c.ty, &ty) => {
                let mut field = f.clone();
                field.nullable = c.nullable;
                (c.id, field)
            }
            Some(c) => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "column {} of the DuckLake table is {}, and the source sends {} ({}): change one of them",
                    f.name,
                    c.ty,
                    ty,
                    field_of(c).field_type.as_str()
                )));
            }
            None => {
                let id = next;
                next += 1;
                let mut field = f.clone();
                // Rows written before have no value for it.
                if table.is_some() {
                    field.nullable = true;
                    field.primary_key = false;
                }
                (id, field)
            }
        };
        out.push(Planned { field, id, ty, existing });
    }
    Ok(out)
}

#[async_trait::async_trait]
impl EntityWriter for LakeWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        self.put_rows(batch).await
    }

    async fn delete(&mut self, keys: &RecordBatch) -> ConnectorResult<()> {
        let k = self.keyed()?;
        let at = k.places_in(&keys.fields)?;
        for r in &keys.rows {
            k.gone(super::keys::key_text(at.iter().map(|i| &r[*i])));
        }
        Ok(())
    }

    async fn update(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        self.update_rows(rows).await
    }

    async fn clear(&mut self, range: &KeyRange, soft_column: Option<&str>) -> ConnectorResult<()> {
        self.clear_range(range, soft_column).await
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        if self.mode == WriteMode::Overwrite {
            self.seal().await?;
            return Ok(WriteStats { rows_written: self.committed, bytes: self.bytes });
        }
        self.commit(false).await
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        let replace = self.mode == WriteMode::Overwrite;
        let done = self.commit(replace).await;
        if done.is_err() {
            self.discard();
        }
        done
    }

    async fn abort(mut self: Box<Self>) {
        self.discard();
    }

    fn wants_checkpoint(&self) -> Option<bool> {
        let many = self.keyed.as_ref().is_some_and(|k| k.touched.len() >= keyed::MAX_TOUCHED);
        Some(!self.staged.is_empty() || many)
    }

    async fn hold_position(&mut self, stream: &str, position: &str) -> ConnectorResult<()> {
        self.held.insert(stream.to_string(), position.to_string());
        Ok(())
    }
}

impl Drop for LakeWriter {
    fn drop(&mut self) {
        if let Some(open) = self.open.take() {
            let _ = std::fs::remove_file(&open.spooled);
        }
    }
}
