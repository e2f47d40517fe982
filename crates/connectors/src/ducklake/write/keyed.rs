//! A DuckLake writer by key (`WriteMode::Upsert`): each row written
//! replaces the table's row of its key, a delete removes it, an update sets
//! some of its fields. Rows go into the commit's files as ever; the rows
//! they replace are found through the key index (`keys`) and hidden by
//! delete files written before the commit, which names them with the new
//! files, the index's changes and the marks.

use super::LakeWriter;
use crate::ducklake::catalog;
use crate::ducklake::keys::{self, LiveFile, Written, key_text, key_values};
use sluice_domain::connect::connector::*;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Keys a commit changes at most: a checkpoint is due past this many, so
/// that memory stays bounded however many rows a run writes.
pub(super) const MAX_TOUCHED: usize = 500_000;

/// Where a key's row is, in this commit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Slot {
    /// In this commit's file number `0` (an index of the staged files;
    /// the open one's is the count staged), at place `1`.
    Row(usize, u64),
    /// Deleted.
    Gone,
}

/// What a writer by key keeps between commits.
pub(super) struct Keyed {
    /// The key's fields, and their places among the written columns.
    pub fields: Vec<Field>,
    pub idx: Vec<usize>,
    /// This commit's keys, where each one's row is.
    pub touched: HashMap<String, Slot>,
    /// Places in this commit's files whose rows a later one replaced.
    pub superseded: Vec<(usize, u64)>,
    /// Every earlier row goes at the commit (a clear of every key).
    pub cleared: bool,
    /// Whether the key index is known true for this writer.
    pub indexed: bool,
}

impl Keyed {
    pub fn new(written: &EntitySchema, key: &[String]) -> ConnectorResult<Self> {
        let idx: Vec<usize> = key.iter().filter_map(|k| written.fields.iter().position(|f| f.name == *k)).collect();
        if idx.is_empty() || idx.len() != key.len() {
            return Err(ConnectorError::InvalidConfig(format!(
                "the entity {} has no primary key among its columns: ducklake writes rows by key only for a keyed \
                 entity",
                written.name
            )));
        }
        Ok(Keyed {
            fields: idx.iter().map(|i| written.fields[*i].clone()).collect(),
            idx,
            touched: HashMap::new(),
            superseded: Vec::new(),
            cleared: false,
            indexed: false,
        })
    }

    /// Rows `rows` (written columns) put at places `base..` of file `file`.
    pub fn put(&mut self, rows: &[Vec<Value>], file: usize, base: u64) {
        for (i, r) in rows.iter().enumerate() {
            let key = key_text(self.idx.iter().map(|k| &r[*k]));
            if let Some(Slot::Row(f, p)) = self.touched.insert(key, Slot::Row(file, base + i as u64)) {
                self.superseded.push((f, p));
            }
        }
    }

    pub fn gone(&mut self, key: String) {
        if let Some(Slot::Row(f, p)) = self.touched.insert(key, Slot::Gone) {
            self.superseded.push((f, p));
        }
    }

    pub fn clear_all(&mut self) {
        for (_, s) in self.touched.drain() {
            if let Slot::Row(f, p) = s {
                self.superseded.push((f, p));
            }
        }
        self.cleared = true;
    }

    pub fn reset(&mut self) {
        self.touched.clear();
        self.superseded.clear();
        self.cleared = false;
    }

    pub fn is_empty(&self) -> bool {
        self.touched.is_empty() && self.superseded.is_empty() && !self.cleared
    }

    /// The places of the key fields in `fields` (by name).
    pub fn places_in(&self, fields: &[Field]) -> ConnectorResult<Vec<usize>> {
        self.fields
            .iter()
            .map(|k| {
                fields
                    .iter()
                    .position(|f| f.name == k.name)
                    .ok_or_else(|| ConnectorError::Other(format!("a change by key without the key's field {}", k.name)))
            })
            .collect()
    }
}

/// A data file a delete file is for.
#[derive(Debug, Clone, Copy)]
pub(super) enum Target {
    /// A file the catalog names, with the live delete file this one
    /// replaces.
    Old { id: i64, had: Option<i64> },
    /// This commit's file number.
    New(usize),
}

/// The delete files one commit adds.
#[derive(Debug, Default)]
pub(super) struct DeletePlan {
    pub files: Vec<(Target, Written)>,
}

/// The text of an error that means the files the plan was made on
/// changed (a user's compaction): it is made again.
pub(super) const STALE: &str = "the DuckLake files changed under the commit";

/// The text of an error that means another writer changed the table's rows
/// since the key index was checked: it is built again, and the plan made
/// again.
pub(super) const STALE_INDEX: &str = "the DuckLake table's rows changed under its key index";

impl LakeWriter {
    pub(super) fn keyed(&mut self) -> ConnectorResult<&mut Keyed> {
        self.keyed.as_mut().ok_or_else(|| {
            ConnectorError::Unsupported("this DuckLake writer appends: it takes no changes by key".into())
        })
    }

    /// Makes sure the key index is true (built from the table's files
    /// when another writer changed its rows since).
    pub(super) async fn ensure_index(&mut self) -> ConnectorResult<()> {
        let Some(k) = self.keyed.as_ref() else { return Ok(()) };
        if k.indexed {
            return Ok(());
        }
        if let Some(table) = self.table
            && !keys::index_holds(&self.db, table).await?
        {
            let fields = k.fields.clone();
            keys::rebuild(&self.db, &*self.objects, &self.data_path, &self.folder, table, &fields).await?;
        }
        self.keyed.as_mut().expect("keyed above").indexed = true;
        Ok(())
    }

    /// The table's rows of `keys` now (this commit's included), whole,
    /// in the written columns, by key.
    pub(super) async fn current_rows(&mut self, wanted: &[String]) -> ConnectorResult<HashMap<String, Vec<Value>>> {
        let mut out = HashMap::new();
        let mut new: BTreeMap<usize, Vec<(u64, String)>> = BTreeMap::new();
        let mut committed: Vec<&str> = Vec::new();
        {
            let k = self.keyed()?;
            for key in wanted {
                match k.touched.get(key) {
                    Some(Slot::Row(f, p)) => new.entry(*f).or_default().push((*p, key.clone())),
                    Some(Slot::Gone) => {}
                    None => committed.push(key),
                }
            }
        }
        if new.contains_key(&self.staged.len()) {
            // A row of the open file: it is cut, to be read.
            self.seal().await?;
        }
        let fields = self.written.fields.clone();
        for (f, mut places) in new {
            let Some(file) = self.staged.get(f) else { continue };
            let key = format!("{}{}", self.folder, file.name);
            places.sort();
            let local = self.objects.fetch(&key).await?;
            let at: Vec<u64> = places.iter().map(|p| p.0).collect();
            let rows = crate::parquet_read::rows_at(&local.path, &key, &fields, &at)?;
            for ((_, row), (_, k)) in rows.into_iter().zip(places) {
                out.insert(k, row);
            }
        }
        let Some(table) = self.table else { return Ok(out) };
        // After a clear of every key, the committed rows are gone already.
        if committed.is_empty() || self.keyed.as_ref().is_some_and(|k| k.cleared) {
            return Ok(out);
        }
        let committed: Vec<String> = committed.into_iter().map(str::to_string).collect();
        self.ensure_index().await?;
        let refs: Vec<&str> = committed.iter().map(String::as_str).collect();
        let found = keys::lookup(&self.db, table, &refs).await?;
        let files = keys::live_files(&self.db, &self.data_path, &self.folder, table).await?;
        let placer = keys::Placer::new(&*self.objects, files).await?;
        // The key's latest row where it has more than one.
        let mut newest: HashMap<String, i64> = HashMap::new();
        for (k, rid) in found {
            let e = newest.entry(k).or_insert(rid);
            *e = (*e).max(rid);
        }
        let mut by_file: BTreeMap<usize, Vec<(u64, String)>> = BTreeMap::new();
        for (k, rid) in newest {
            if let Some((i, p)) = placer.place(rid) {
                by_file.entry(i).or_default().push((p, k));
            }
        }
        for (i, mut places) in by_file {
            let file: &LiveFile = &placer.files()[i];
            places.sort();
            let local = self.objects.fetch(&file.key).await?;
            let at: Vec<u64> = places.iter().map(|p| p.0).collect();
            let rows = crate::parquet_read::rows_at(&local.path, &file.key, &fields, &at)?;
            for ((_, row), (_, k)) in rows.into_iter().zip(places) {
                out.insert(k, row);
            }
        }
        Ok(out)
    }

    /// Sets the fields of `rows` but the key on the rows of their keys.
    pub(super) async fn update_rows(&mut self, rows: &RecordBatch) -> ConnectorResult<()> {
        let key_at = self.keyed()?.places_in(&rows.fields)?;
        let set: Vec<(usize, usize)> = rows
            .fields
            .iter()
            .enumerate()
            .filter(|(i, _)| !key_at.contains(i))
            .filter_map(|(i, f)| self.names.iter().position(|n| *n == f.name).map(|at| (i, at)))
            .collect();
        let keys: Vec<String> = rows.rows.iter().map(|r| key_text(key_at.iter().map(|i| &r[*i]))).collect();
        let mut current = self.current_rows(&keys).await?;
        let mut order: Vec<String> = Vec::new();
        for (r, k) in rows.rows.iter().zip(&keys) {
            let Some(row) = current.get_mut(k) else { continue };
            for (from, to) in &set {
                row[*to] = r[*from].clone();
            }
            if !order.contains(k) {
                order.push(k.clone());
            }
        }
        let out: Vec<Vec<Value>> = order.iter().filter_map(|k| current.remove(k)).collect();
        self.write_rows(out).await
    }

    /// Removes the rows whose key is in `range` (with `soft`, sets that
    /// column to now where it is null instead).
    pub(super) async fn clear_range(&mut self, range: &KeyRange, soft: Option<&str>) -> ConnectorResult<()> {
        let all = range.after.is_none() && range.upto.is_none();
        if all && soft.is_none() {
            self.keyed()?.clear_all();
            return Ok(());
        }
        let mut found: Vec<String> = Vec::new();
        if let Some(table) = self.table.filter(|_| !self.keyed.as_ref().is_some_and(|k| k.cleared)) {
            self.ensure_index().await?;
            found = keys::keys_in(&self.db, table, range).await?;
        }
        let k = self.keyed()?;
        found.retain(|key| k.touched.get(key) != Some(&Slot::Gone));
        for (key, slot) in &k.touched {
            if matches!(slot, Slot::Row(..)) && keys::in_range(range, &key_values(key)) {
                found.push(key.clone());
            }
        }
        found.sort();
        found.dedup();
        match soft {
            None => {
                for key in found {
                    k.gone(key);
                }
                Ok(())
            }
            Some(column) => {
                let at = self.names.iter().position(|n| n == column).ok_or_else(|| {
                    ConnectorError::Other(format!("the DuckLake table has no column {column} to mark deletes in"))
                })?;
                let now = Value::Timestamp(time::OffsetDateTime::now_utc());
                for part in found.chunks(10_000) {
                    let current = self.current_rows(part).await?;
                    let out: Vec<Vec<Value>> = part
                        .iter()
                        .filter_map(|key| current.get(key))
                        .filter(|r| r[at].is_null())
                        .map(|r| {
                            let mut r = r.clone();
                            r[at] = now.clone();
                            r
                        })
                        .collect();
                    self.write_rows(out).await?;
                }
                Ok(())
            }
        }
    }

    /// Writes whole rows (the written columns, in order).
    async fn write_rows(&mut self, rows: Vec<Vec<Value>>) -> ConnectorResult<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let batch = RecordBatch { fields: Arc::new(self.written.fields.clone()), rows };
        self.put_rows(&batch).await
    }

    /// The delete files this commit needs, written and put: for each file
    /// the catalog names, every place its live delete file hid and the
    /// places of the rows this commit replaces or deletes; for this
    /// commit's files, the places of rows a later one replaced.
    pub(super) async fn plan_deletes(&mut self) -> ConnectorResult<DeletePlan> {
        let mut plan = DeletePlan::default();
        let Some(k) = self.keyed.as_ref() else { return Ok(plan) };
        if k.is_empty() {
            return Ok(plan);
        }
        let mut per_new: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        for (f, p) in &k.superseded {
            per_new.entry(*f).or_default().push(*p);
        }
        let cleared = k.cleared;
        let mut per_old: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let mut files = Vec::new();
        if let Some(table) = self.table.filter(|_| !cleared) {
            let touched: Vec<String> = k.touched.keys().cloned().collect();
            self.ensure_index().await?;
            let refs: Vec<&str> = touched.iter().map(String::as_str).collect();
            let found = keys::lookup(&self.db, table, &refs).await?;
            let placer = keys::Placer::new(
                &*self.objects,
                keys::live_files(&self.db, &self.data_path, &self.folder, table).await?,
            )
            .await?;
            for (_, rid) in found {
                if let Some((i, p)) = placer.place(rid) {
                    per_old.entry(i).or_default().push(p);
                }
            }
            files = placer.files().to_vec();
        }
        let result = async {
            for (i, places) in per_old {
                let f = &files[i];
                let mut all = keys::deleted_places(&*self.objects, f).await?;
                all.extend(places);
                all.sort_unstable();
                all.dedup();
                let w = self.put_delete(&f.url, &all).await?;
                plan.files.push((Target::Old { id: f.id, had: f.deletes.as_ref().map(|d| d.0) }, w));
            }
            for (n, mut places) in per_new {
                let Some(file) = self.staged.get(n) else { continue };
                let url = format!("{}{}{}", self.data_path, self.folder, file.name);
                places.sort_unstable();
                places.dedup();
                let w = self.put_delete(&url, &places).await?;
                plan.files.push((Target::New(n), w));
            }
            ConnectorResult::Ok(())
        }
        .await;
        if let Err(e) = result {
            self.drop_plan(&plan).await;
            return Err(e);
        }
        Ok(plan)
    }

    async fn put_delete(&self, url: &str, places: &[u64]) -> ConnectorResult<Written> {
        let name = format!("sluice-{}-{}-delete.parquet", self.version, uuid::Uuid::now_v7());
        keys::put_delete_file(&*self.objects, &self.fenced_as, &self.folder, name, url, places).await
    }

    /// Removes a plan's files (one the commit no longer takes).
    pub(super) async fn drop_plan(&self, plan: &DeletePlan) {
        for (_, w) in &plan.files {
            let _ = self.objects.delete(&format!("{}{}", self.folder, w.name)).await;
        }
    }

    /// In the commit's transaction: the plan's delete files named (each
    /// replacing the live one of its data file, which must be the one the
    /// plan read), the index's changes; `starts` are this commit's files'
    /// ids and first row ids. Answers whether a row was deleted.
    pub(super) async fn commit_keys(
        &self,
        tx: &mut catalog::Tx,
        plan: &DeletePlan,
        (table, snapshot): (i64, i64),
        next_file: &mut i64,
        starts: &[(i64, i64)],
        (replaced, created): (bool, bool),
    ) -> ConnectorResult<bool> {
        let Some(k) = self.keyed.as_ref() else { return Ok(false) };
        // The index this commit planned on must still be true: another
        // writer (a user's DuckDB) that changed the rows since makes it
        // build the index again and plan anew.
        let holds = keys::holds_in(tx, table).await?;
        if !replaced && !created && holds != Some(true) {
            return Err(ConnectorError::Other(format!("{STALE_INDEX} (table {table})")));
        }
        let mut deleted = false;
        for (target, w) in &plan.files {
            let data_file = match *target {
                Target::Old { id, had } => {
                    if keys::file_now(tx, id).await? != Some(had) {
                        return Err(ConnectorError::Other(format!("{STALE} (data file {id})")));
                    }
                    if let Some(had) = had {
                        tx.exec(&format!(
                            "UPDATE ducklake_delete_file SET end_snapshot = {snapshot} WHERE delete_file_id = {had}"
                        ))
                        .await?;
                    }
                    id
                }
                Target::New(n) => match starts.get(n) {
                    Some((id, _)) => *id,
                    None => continue,
                },
            };
            let id = *next_file;
            *next_file += 1;
            tx.exec(&format!(
                "INSERT INTO ducklake_delete_file VALUES ({id}, {table}, {snapshot}, NULL, {data_file}, {}, true, \
                 'parquet', {}, {}, {}, NULL, NULL)",
                catalog::text(&w.name),
                w.count,
                w.bytes,
                w.footer
            ))
            .await?;
            deleted = true;
        }
        if replaced {
            tx.exec(&format!("DELETE FROM sluice_ducklake_keys WHERE table_id = {table}")).await?;
        } else {
            let touched: Vec<&str> = k.touched.keys().map(String::as_str).collect();
            for sql in keys::index_removals(table, &touched) {
                tx.exec(&sql).await?;
            }
        }
        let rows: Vec<String> = k
            .touched
            .iter()
            .filter_map(|(key, s)| match s {
                Slot::Row(f, p) => starts.get(*f).map(|(_, start)| keys::index_row(table, key, start + *p as i64)),
                Slot::Gone => None,
            })
            .collect();
        for sql in keys::index_inserts(&rows) {
            tx.exec(&sql).await?;
        }
        // True as of this snapshot where it was before it, and no one else
        // changed the rows in between.
        if holds.unwrap_or(true) || replaced || created {
            tx.exec(&format!(
                "INSERT INTO sluice_ducklake_indexed VALUES ({table}, {snapshot}) ON CONFLICT (table_id) \
                 DO UPDATE SET snapshot = excluded.snapshot"
            ))
            .await?;
        } else {
            tx.exec(&format!("DELETE FROM sluice_ducklake_indexed WHERE table_id = {table}")).await?;
        }
        Ok(deleted)
    }
}
