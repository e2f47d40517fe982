//! Upkeep of a table a flow commits to often (a change stream's minute
//! commits): its small files merged into one once it has many, and
//! snapshots older than the connection's retention expired, the files only
//! they named removed. Each is one catalog transaction of its own, fenced
//! like the writer's commits; a kill at any instant leaves the table as it
//! was or as it is after, each row once.
//!
//! A merge gives the rows it moves new row ids (the rows a delete file hid
//! are left out, and DuckLake places a file's rows by its first row id), so
//! the key index follows them in the same transaction. The merged files
//! stay, ended, for time travel until their snapshots expire.

use super::LakeWriter;
use crate::ducklake::catalog::{int, opt, text};
use crate::ducklake::keys::{self, LiveFile};
use crate::ducklake::{Table, field_of, lake_type};
use crate::parquet::{Codec, ParquetFile};
use sluice_domain::connect::connector::*;
use std::collections::HashMap;
use std::io::BufWriter;

/// A table's small files (Sluice's, under a quarter of the file size) are
/// merged once it has this many.
pub(super) const MERGE_AT: usize = 16;

/// Snapshots are expired at most this often by one writer.
const EXPIRE_EVERY: std::time::Duration = std::time::Duration::from_secs(3600);

/// A merged file, put, waiting for its commit.
struct Merged {
    name: String,
    rows: u64,
    bytes: u64,
    footer: u64,
    counts: Vec<(u64, u64)>,
    stats: Vec<crate::ducklake::stats::Stat>,
    /// Each moved row's old row id and its place in the merged file.
    moved: Vec<(i64, u64)>,
    /// The files merged, each with the live delete file read.
    picked: Vec<(i64, Option<i64>)>,
}

impl LakeWriter {
    /// After a commit: small files merged, old snapshots expired. A
    /// failure is said in the service's log and leaves the table as it
    /// was; the next commit tries again.
    pub(super) async fn upkeep(&mut self) {
        if let Err(e) = self.merge_small_files().await {
            tracing::warn!(table = %self.fenced_as, error = %e, "merging a DuckLake table's small files failed");
        }
        let due = self.expired_at.is_none_or(|at| at.elapsed() >= EXPIRE_EVERY);
        if due {
            self.expired_at = Some(std::time::Instant::now());
            if let Err(e) = self.expire_snapshots().await {
                tracing::warn!(table = %self.fenced_as, error = %e, "expiring a DuckLake catalog's snapshots failed");
            }
        }
    }

    /// Merges the table's small files into one (up to the file size), once
    /// it has [`MERGE_AT`] of them; answers whether it did.
    pub(super) async fn merge_small_files(&mut self) -> ConnectorResult<bool> {
        let Some(table) = self.table else { return Ok(false) };
        let sizes = self
            .db
            .rows(&format!(
                "SELECT data_file_id, file_size_bytes, path FROM ducklake_data_file WHERE table_id = {table} \
                 AND end_snapshot IS NULL"
            ))
            .await?;
        let limit = (self.file_bytes / 4).max(1) as i64;
        let small: HashMap<i64, i64> = sizes
            .iter()
            .filter(|r| {
                r[2].as_deref().is_some_and(|p| p.rsplit('/').next().unwrap_or(p).starts_with("sluice-"))
                    && int(&r[1]) < limit
            })
            .map(|r| (int(&r[0]), int(&r[1])))
            .collect();
        if small.len() < MERGE_AT {
            return Ok(false);
        }
        // A file with deletes DuckDB keeps in the catalog is left alone
        // (its hidden rows would come back).
        let inlined = self.inlined_deletes(table).await?;
        let mut picked: Vec<LiveFile> = Vec::new();
        let mut total = 0i64;
        for f in keys::live_files(&self.db, &self.data_path, &self.folder, table).await? {
            let Some(bytes) = small.get(&f.id) else { continue };
            if inlined.contains(&f.id) {
                continue;
            }
            if total + bytes > self.file_bytes as i64 && !picked.is_empty() {
                break;
            }
            total += bytes;
            picked.push(f);
        }
        if picked.len() < 2 {
            return Ok(false);
        }
        let mut tx = self.db.begin().await?;
        let t = crate::ducklake::read_table(&mut tx, &self.data_path, &self.schema, &self.entity).await?;
        tx.commit().await?;
        let Some(t) = t else { return Ok(false) };
        // Only columns of the types Sluice writes itself (a user's nested
        // column is left alone).
        let fields: Vec<Field> = t.columns.iter().map(field_of).collect();
        if t.columns.iter().zip(&fields).any(|(c, f)| lake_type(f) != c.ty) {
            return Ok(false);
        }
        let merged = self.write_merged(&picked, &t, fields).await?;
        match self.commit_merge(table, &t, &merged).await {
            Ok(true) => Ok(true),
            Ok(false) => {
                let _ = self.objects.delete(&format!("{}{}", self.folder, merged.name)).await;
                Ok(false)
            }
            // The answer may be lost: the file stays (the next writer
            // removes it if no snapshot names it).
            Err(e) => Err(e),
        }
    }

    /// The files of `table` that deletes DuckDB keeps in the catalog hide
    /// rows of.
    async fn inlined_deletes(&self, table: i64) -> ConnectorResult<Vec<i64>> {
        let name = format!("ducklake_inlined_delete_{table}");
        if !self.db.table_names().await?.contains(&name) {
            return Ok(Vec::new());
        }
        let rows = self.db.rows(&format!("SELECT DISTINCT file_id FROM {name}")).await?;
        Ok(rows.iter().map(|r| int(&r[0])).collect())
    }

    /// Writes the live rows of `picked` into one file and puts it.
    async fn write_merged(&self, picked: &[LiveFile], t: &Table, fields: Vec<Field>) -> ConnectorResult<Merged> {
        let name = format!("sluice-{}-{}.parquet", self.version, uuid::Uuid::now_v7());
        let fail = |e: std::io::Error| ConnectorError::Other(format!("merging into {name}: {e}"));
        let schema = EntitySchema { name: self.entity.clone(), fields: fields.clone() };
        let ids: Vec<i32> = t.columns.iter().map(|c| c.id as i32).collect();
        let (spooled, f) = self.objects.spool(&self.fenced_as, &name)?;
        let group = (self.file_bytes / 2).min(crate::parquet::ROW_GROUP_BYTES as u64) as usize;
        let mut out = ParquetFile::with_ids(BufWriter::with_capacity(1 << 20, f), &schema, Codec::Zstd, Some(&ids))?
            .with_group_bytes(group);
        let mut moved = Vec::new();
        let mut tracker = crate::ducklake::stats::Tracker::new(&fields);
        let mut done = Vec::with_capacity(picked.len());
        let written = async {
            for lf in picked {
                let local = self.objects.fetch(&lf.key).await?;
                let gone = keys::deleted_places(&*self.objects, lf).await?;
                let mut at = 0u64;
                let mut g = 0;
                while let Some(rows) = crate::parquet_read::group_rows(&local.path, &lf.key, &fields, g)? {
                    g += 1;
                    let mut keep = Vec::with_capacity(rows.len());
                    for r in rows {
                        if gone.binary_search(&at).is_err() {
                            moved.push((lf.start + at as i64, out.rows() + keep.len() as u64));
                            keep.push(r);
                        }
                        at += 1;
                    }
                    out.write(&keep)?;
                    tracker.add(&keep);
                }
                done.push((lf.id, lf.deletes.as_ref().map(|d| d.0)));
            }
            ConnectorResult::Ok(())
        }
        .await;
        if let Err(e) = written {
            drop(out);
            let _ = std::fs::remove_file(&spooled);
            return Err(e);
        }
        let counts = out.counts();
        let (w, rows) = out.finish()?;
        w.into_inner().map_err(|e| fail(e.into_error()))?;
        let bytes = std::fs::metadata(&spooled).map(|m| m.len()).map_err(fail)?;
        let footer = keys::footer_size(&spooled).map_err(fail)?;
        self.objects.upload(&spooled, &format!("{}{name}", self.folder)).await?;
        Ok(Merged { name, rows, bytes, footer, counts, stats: tracker.stats(), moved, picked: done })
    }

    /// One transaction: the merged files (and their delete files) ended,
    /// the merged file named with new row ids, the key index moved with
    /// them. Answers `false` (nothing done) when a merged file changed
    /// since it was read.
    async fn commit_merge(&self, table: i64, t: &Table, m: &Merged) -> ConnectorResult<bool> {
        let mut tx = self.db.begin().await?;
        self.fence(&mut tx).await?;
        for (id, had) in &m.picked {
            if keys::file_now(&mut tx, *id).await? != Some(*had) {
                return Ok(false);
            }
        }
        let inlined = format!("ducklake_inlined_delete_{table}");
        let ids = m.picked.iter().map(|(id, _)| id.to_string()).collect::<Vec<_>>().join(", ");
        if tx.table_names().await?.contains(&inlined)
            && tx.int(&format!("SELECT count(*) FROM {inlined} WHERE file_id IN ({ids})")).await?.unwrap_or(0) > 0
        {
            return Ok(false);
        }
        let last = tx.last_snapshot().await?;
        let snapshot = last.id + 1;
        let file_id = last.next_file;
        tx.exec(&format!("UPDATE ducklake_data_file SET end_snapshot = {snapshot} WHERE data_file_id IN ({ids})"))
            .await?;
        tx.exec(&format!(
            "UPDATE ducklake_delete_file SET end_snapshot = {snapshot} WHERE data_file_id IN ({ids}) \
             AND end_snapshot IS NULL"
        ))
        .await?;
        let stats = tx
            .rows(&format!(
                "SELECT record_count, next_row_id, file_size_bytes FROM ducklake_table_stats WHERE table_id = {table}"
            ))
            .await?;
        let (records, start, size) = stats.first().map(|r| (int(&r[0]), int(&r[1]), int(&r[2]))).unwrap_or((0, 0, 0));
        let file = super::NamedFile { id: file_id, table, snapshot, name: &m.name, rows: m.rows, bytes: m.bytes };
        let columns: Vec<i64> = t.columns.iter().map(|c| c.id).collect();
        super::name_data_file(&mut tx, &file, (m.footer, start), &columns, &m.counts, &m.stats).await?;
        let rows = m.rows as i64;
        let sql = if stats.is_empty() {
            format!("INSERT INTO ducklake_table_stats VALUES ({table}, {rows}, {}, {})", start + rows, m.bytes)
        } else {
            format!(
                "UPDATE ducklake_table_stats SET record_count = {}, next_row_id = {}, file_size_bytes = {} \
                 WHERE table_id = {table}",
                records + rows,
                start + rows,
                size + m.bytes as i64
            )
        };
        tx.exec(&sql).await?;
        // The key index, where it holds, follows the rows to their new ids.
        if keys::holds_in(&mut tx, table).await? == Some(true) {
            for part in m.moved.chunks(400) {
                let cases: String =
                    part.iter().map(|(old, at)| format!(" WHEN {old} THEN {}", start + *at as i64)).collect();
                let olds = part.iter().map(|(old, _)| old.to_string()).collect::<Vec<_>>().join(", ");
                tx.exec(&format!(
                    "UPDATE sluice_ducklake_keys SET row_id = CASE row_id{cases} END WHERE table_id = {table} \
                     AND row_id IN ({olds})"
                ))
                .await?;
            }
            tx.exec(&format!("UPDATE sluice_ducklake_indexed SET snapshot = {snapshot} WHERE table_id = {table}"))
                .await?;
        }
        let now = tx.now();
        tx.exec(&format!(
            "INSERT INTO ducklake_snapshot VALUES ({snapshot}, {now}, {}, {}, {})",
            last.schema_version,
            last.next_catalog,
            file_id + 1
        ))
        .await?;
        let extra = serde_json::json!({"run": self.run, "merged": m.picked.len()}).to_string();
        tx.exec(&format!(
            "INSERT INTO ducklake_snapshot_changes VALUES ({snapshot}, {}, 'sluice', {}, {})",
            text(&format!("inserted_into_table:{table},deleted_from_table:{table}")),
            text(&format!("sluice run {}: {} small files merged", self.run, m.picked.len())),
            opt(Some(&extra))
        ))
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Expires the catalog's snapshots older than the retention (the
    /// latest is always kept), and removes this table's files that only
    /// they named.
    pub(super) async fn expire_snapshots(&self) -> ConnectorResult<()> {
        let (Some(hours), Some(table)) = (self.retention_hours.filter(|h| *h > 0), self.table) else { return Ok(()) };
        let cutoff = time::OffsetDateTime::now_utc() - time::Duration::hours(hours);
        let f =
            time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:6]+00");
        let cutoff = text(&cutoff.format(&f).unwrap_or_default());
        let mut tx = self.db.begin().await?;
        self.fence(&mut tx).await?;
        let latest = tx.int("SELECT max(snapshot_id) FROM ducklake_snapshot").await?.unwrap_or(0);
        let first_kept = tx
            .int(&format!("SELECT min(snapshot_id) FROM ducklake_snapshot WHERE snapshot_time >= {cutoff}"))
            .await?
            .unwrap_or(latest)
            .min(latest);
        let older = tx.int(&format!("SELECT count(*) FROM ducklake_snapshot WHERE snapshot_id < {first_kept}")).await?;
        if older.unwrap_or(0) == 0 {
            return tx.commit().await;
        }
        // A file no kept snapshot sees: ended at or before the first kept.
        let mut gone: Vec<String> = Vec::new();
        for (what, id) in [("data", "data_file_id"), ("delete", "delete_file_id")] {
            let rows = tx
                .rows(&format!(
                    "SELECT {id}, path, path_is_relative FROM ducklake_{what}_file WHERE table_id = {table} \
                     AND end_snapshot IS NOT NULL AND end_snapshot <= {first_kept}"
                ))
                .await?;
            let ids: Vec<String> = rows.iter().map(|r| int(&r[0]).to_string()).collect();
            for r in &rows {
                if let Ok(key) =
                    keys::file_key(&self.data_path, &self.folder, r[1].as_deref().unwrap_or(""), int(&r[2]) == 1)
                {
                    gone.push(key);
                }
            }
            for part in ids.chunks(400) {
                let list = part.join(", ");
                if what == "data" {
                    tx.exec(&format!("DELETE FROM ducklake_file_column_stats WHERE data_file_id IN ({list})")).await?;
                }
                tx.exec(&format!("DELETE FROM ducklake_{what}_file WHERE {id} IN ({list})")).await?;
            }
        }
        tx.exec(&format!("DELETE FROM ducklake_snapshot_changes WHERE snapshot_id < {first_kept}")).await?;
        tx.exec(&format!("DELETE FROM ducklake_snapshot WHERE snapshot_id < {first_kept}")).await?;
        tx.commit().await?;
        // Once no snapshot names them (a kill before this: the next writer
        // removes them).
        for key in gone {
            let _ = self.objects.delete(&key).await;
        }
        Ok(())
    }
}
