//! Reading a DuckLake table back, for a verification of the mirror it
//! holds and for previews: its live data files' rows less those their
//! delete files (and the deletes DuckDB keeps in the catalog) hide, file
//! by file, one row group at a time; the rows of given keys through the
//! key index. The lake stays a destination: no flow reads from it.

use super::keys::{self, LiveFile};
use super::{DuckLake, field_of, read_table, text};
use crate::dataset::objects::{Fetched, Objects};
use sluice_domain::connect::connector::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// A table's live rows.
struct LakeReader {
    objects: Arc<dyn Objects>,
    fields: Arc<Vec<Field>>,
    files: VecDeque<(LiveFile, Vec<u64>)>,
    /// The file being read: its copy, what it hides, the next row group,
    /// and the place of that group's first row.
    current: Option<(Fetched, String, Vec<u64>, usize, u64)>,
    left: Option<u64>,
}

#[async_trait::async_trait]
impl RecordReader for LakeReader {
    fn fields(&self) -> Arc<Vec<Field>> {
        self.fields.clone()
    }

    async fn next_batch(&mut self) -> ConnectorResult<Option<RecordBatch>> {
        loop {
            if self.left == Some(0) {
                return Ok(None);
            }
            if self.current.is_none() {
                let Some((f, gone)) = self.files.pop_front() else { return Ok(None) };
                let local = self.objects.fetch(&f.key).await?;
                self.current = Some((local, f.key, gone, 0, 0));
            }
            let (local, key, gone, group, at) = self.current.as_mut().expect("opened above");
            let Some(rows) = crate::parquet_read::group_rows(&local.path, key, &self.fields, *group)? else {
                self.current = None;
                continue;
            };
            *group += 1;
            let mut out = Vec::with_capacity(rows.len());
            for r in rows {
                if gone.binary_search(at).is_err() {
                    out.push(r);
                }
                *at += 1;
            }
            if let Some(left) = self.left.as_mut() {
                out.truncate(*left as usize);
                *left -= out.len() as u64;
            }
            if !out.is_empty() {
                return Ok(Some(RecordBatch { fields: self.fields.clone(), rows: out }));
            }
        }
    }
}

impl DuckLake {
    /// The table `entity`: its id, folder and fields.
    async fn table_of(&self, entity: &str) -> ConnectorResult<super::Table> {
        self.ready().await?;
        let mut tx = self.db.begin().await?;
        let t = read_table(&mut tx, &self.data_path, &self.schema, entity).await?;
        tx.commit().await?;
        t.ok_or_else(|| ConnectorError::EntityNotFound(format!("the lake has no table {}.{entity}", self.schema)))
    }

    /// The table's live files, each with the places it hides.
    async fn readable_files(&self, t: &super::Table) -> ConnectorResult<VecDeque<(LiveFile, Vec<u64>)>> {
        if keys::has_inlined_rows(&self.db, t.id).await? {
            return Err(ConnectorError::Unsupported(
                "the DuckLake table holds rows DuckDB inlined in its catalog: Sluice reads it once they are in \
                 files (CALL ducklake_flush_inlined_data in DuckDB)"
                    .into(),
            ));
        }
        let inlined = keys::has_inlined_deletes(&self.db, t.id).await?;
        let mut out = VecDeque::new();
        for f in keys::live_files(&self.db, &self.data_path, &t.folder, t.id).await? {
            let gone = keys::hidden_places(&self.db, &*self.objects, &f, t.id, inlined).await?;
            out.push_back((f, gone));
        }
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Source for DuckLake {
    async fn check(&self) -> ConnectorResult<()> {
        self.ready().await?;
        self.objects.check_readable().await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        self.ready().await?;
        let rows = self
            .db
            .rows(&format!(
                "SELECT t.table_name FROM ducklake_table t JOIN ducklake_schema s ON s.schema_id = t.schema_id \
                 AND s.end_snapshot IS NULL WHERE s.schema_name = {} AND t.end_snapshot IS NULL ORDER BY 1",
                text(&self.schema)
            ))
            .await?;
        let mut out = Vec::new();
        for name in rows.into_iter().filter_map(|mut r| r.pop().flatten()) {
            let t = self.table_of(&name).await?;
            out.push(EntitySchema { name, fields: t.columns.iter().map(field_of).collect() });
        }
        Ok(out)
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        let t = self.table_of(entity).await?;
        Ok(Arc::new(t.columns.iter().map(field_of).collect()))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        if req.cursor.is_some() {
            return Err(ConnectorError::Unsupported("a DuckLake table is read whole here, not by a cursor".into()));
        }
        let t = self.table_of(&req.entity).await?;
        let fields = Arc::new(t.columns.iter().map(field_of).collect::<Vec<_>>());
        let files = self.readable_files(&t).await?;
        Ok(Box::new(LakeReader { objects: self.objects.clone(), fields, files, current: None, left: req.limit }))
    }

    /// The rows of the keys `read.only` names, through the key index (when
    /// it holds); a range is read whole instead (`None`).
    async fn read_keyed(&self, read: &KeyedRead) -> ConnectorResult<Option<Box<dyn RecordReader>>> {
        let Some(only) = &read.only else { return Ok(None) };
        let t = self.table_of(&read.entity).await?;
        if !keys::index_holds(&self.db, t.id).await? {
            return Ok(None);
        }
        let wanted: Vec<String> = only.iter().map(|k| keys::key_text(k.iter())).collect();
        let refs: Vec<&str> = wanted.iter().map(String::as_str).collect();
        let found = keys::lookup(&self.db, t.id, &refs).await?;
        let files = self.readable_files(&t).await?;
        let live: Vec<LiveFile> = files.iter().map(|(f, _)| f.clone()).collect();
        let placer = keys::Placer::new(&*self.objects, live).await?;
        let mut by_file: std::collections::BTreeMap<usize, Vec<u64>> = Default::default();
        for (_, rid) in found {
            if let Some((i, p)) = placer.place(rid) {
                by_file.entry(i).or_default().push(p);
            }
        }
        let fields = Arc::new(t.columns.iter().map(field_of).collect::<Vec<_>>());
        let mut rows = Vec::new();
        for (i, mut places) in by_file {
            let (f, gone) = &files[i];
            places.sort_unstable();
            places.retain(|p| gone.binary_search(p).is_err());
            let local = self.objects.fetch(&f.key).await?;
            rows.extend(
                crate::parquet_read::rows_at(&local.path, &f.key, &fields, &places)?.into_iter().map(|(_, r)| r),
            );
        }
        Ok(Some(Box::new(HeldRows { fields, rows: Some(rows) })))
    }
}
