//! Rows by key in a DuckLake table: the key index Sluice keeps in the
//! catalog's database (`sluice_ducklake_keys`: each key's DuckLake row id),
//! where a row id is in the table's files (a data file holds the row ids
//! from its `row_id_start` on, one per row, merged files too), and the
//! delete files that hide rows (Parquet, a data file's path and a row's
//! place in it, at most one live per data file: a new one replaces it and
//! holds every place the old one held).
//!
//! Finding a key's row so costs one indexed lookup in the catalog, never a
//! scan of the table; the index is built from the table's files once, when
//! someone else changed the rows since Sluice last kept it.

use super::catalog::{Cells, Db, ident, int, text};
use crate::dataset::objects::Objects;
use crate::parquet::{Codec, ParquetFile};
use sluice_domain::connect::connector::*;
use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom};
use std::path::Path;

/// The column DuckDB writes a rewritten file's row ids into.
pub const ROW_ID_COLUMN: &str = "_ducklake_internal_row_id";
/// The field ids of a delete file's columns, as DuckLake defines them.
const PATH_FIELD_ID: i32 = 2147483646;
const POS_FIELD_ID: i32 = 2147483645;
/// Keys per statement.
const PER_STATEMENT: usize = 400;

/// A key as the index holds it: its values as a JSON array.
pub fn key_text<'a>(values: impl Iterator<Item = &'a Value>) -> String {
    serde_json::Value::Array(values.map(Value::to_json).collect()).to_string()
}

/// A key's values back from its text (numbers as numbers, the rest as
/// text), for ranges.
pub fn key_values(text: &str) -> Vec<Value> {
    let Ok(serde_json::Value::Array(parts)) = serde_json::from_str(text) else { return Vec::new() };
    parts
        .into_iter()
        .map(|p| match p {
            serde_json::Value::Null => Value::Null,
            serde_json::Value::Bool(b) => Value::Bool(b),
            serde_json::Value::Number(n) => match n.as_i64() {
                Some(i) => Value::Int(i),
                None => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => Value::String(s),
            other => Value::Json(other),
        })
        .collect()
}

/// Whether `key` lies in `range`.
pub fn in_range(range: &KeyRange, key: &[Value]) -> bool {
    use sluice_domain::sync::verification::key_cmp;
    range.after.as_ref().is_none_or(|a| key_cmp(key, a).is_gt())
        && range.upto.as_ref().is_none_or(|u| key_cmp(key, u).is_le())
}

/// A single integer key's value, which ranges of the index are read by.
pub fn ord_of(key: &[&Value]) -> Option<i64> {
    match key {
        [Value::Int(n)] => Some(*n),
        _ => None,
    }
}

/// A file of the table, as the catalog names it.
#[derive(Debug, Clone)]
pub struct LiveFile {
    pub id: i64,
    /// Its key under the data path.
    pub key: String,
    /// Its path as a delete file names it (the data path's own form).
    pub url: String,
    pub start: i64,
    pub count: i64,
    /// Its live delete file: id, key.
    pub deletes: Option<(i64, String)>,
}

/// A file the catalog records (`path`, relative to the table's `folder`
/// or not) as a key under the data path.
pub fn file_key(data_path: &str, folder: &str, path: &str, relative: bool) -> ConnectorResult<String> {
    let key = if relative {
        format!("{folder}{path}")
    } else {
        path.strip_prefix(data_path)
            .map(str::to_string)
            .ok_or_else(|| ConnectorError::InvalidConfig(format!("the lake keeps '{path}' outside its data path")))?
    };
    if key.split('/').any(|p| p == ".." || p == ".") || key.is_empty() {
        return Err(ConnectorError::InvalidConfig(format!("the lake's file '{key}' leaves its data path")));
    }
    Ok(key)
}

/// The table's live data files (with their live delete files), by first
/// row id.
pub async fn live_files(db: &Db, data_path: &str, folder: &str, table: i64) -> ConnectorResult<Vec<LiveFile>> {
    let rows = db
        .rows(&format!(
            "SELECT f.data_file_id, f.path, f.path_is_relative, f.row_id_start, f.record_count, d.delete_file_id, \
             d.path, d.path_is_relative FROM ducklake_data_file f LEFT JOIN ducklake_delete_file d \
             ON d.data_file_id = f.data_file_id AND d.end_snapshot IS NULL \
             WHERE f.table_id = {table} AND f.end_snapshot IS NULL ORDER BY f.row_id_start"
        ))
        .await?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let key = file_key(data_path, folder, r[1].as_deref().unwrap_or(""), int(&r[2]) == 1)?;
        if r[3].is_none() {
            return Err(ConnectorError::Other(format!(
                "the DuckLake file {key} records no first row id: Sluice cannot place its rows"
            )));
        }
        let deletes = match (&r[5], &r[6]) {
            (Some(id), Some(p)) => Some((id.parse().unwrap_or(0), file_key(data_path, folder, p, int(&r[7]) == 1)?)),
            _ => None,
        };
        out.push(LiveFile {
            id: int(&r[0]),
            url: format!("{data_path}{key}"),
            key,
            start: int(&r[3]),
            count: int(&r[4]),
            deletes,
        });
    }
    Ok(out)
}

/// Where a table's rows are by row id: a file of Sluice's holds its rows'
/// from its first row id on; a file DuckDB wrote its row ids into (an
/// update keeps a row's id in a new file, a flush of inlined rows) holds
/// the ids it names.
pub struct Placer {
    files: Vec<LiveFile>,
    /// The files placed by their first row id, by it.
    ranged: Vec<usize>,
    /// The live rows of the files that name their row ids.
    inside: std::collections::HashMap<i64, (usize, u64)>,
}

impl Placer {
    pub async fn new(objects: &dyn Objects, files: Vec<LiveFile>) -> ConnectorResult<Placer> {
        let mut ranged = Vec::with_capacity(files.len());
        let mut inside = std::collections::HashMap::new();
        let ids = [Field::new(ROW_ID_COLUMN, FieldType::Integer)];
        for (i, f) in files.iter().enumerate() {
            let ours = f.key.rsplit('/').next().is_some_and(|n| n.starts_with("sluice-"));
            if !ours {
                let local = objects.fetch(&f.key).await?;
                if crate::parquet_read::has_column(&local.path, &f.key, ROW_ID_COLUMN)? {
                    let gone = deleted_places(objects, f).await?;
                    let mut at = 0u64;
                    let mut group = 0;
                    while let Some(rows) = crate::parquet_read::group_rows(&local.path, &f.key, &ids, group)? {
                        group += 1;
                        for r in rows {
                            if let (Some(Value::Int(rid)), Err(_)) = (r.first(), gone.binary_search(&at)) {
                                inside.insert(*rid, (i, at));
                            }
                            at += 1;
                        }
                    }
                    continue;
                }
            }
            ranged.push(i);
        }
        Ok(Placer::ranged(files, ranged, inside))
    }

    /// Files placed by their first row id, and the rows `inside` placed
    /// by the ids they name.
    fn ranged(
        files: Vec<LiveFile>,
        mut ranged: Vec<usize>,
        inside: std::collections::HashMap<i64, (usize, u64)>,
    ) -> Placer {
        ranged.sort_by_key(|i| files[*i].start);
        Placer { files, ranged, inside }
    }

    pub fn files(&self) -> &[LiveFile] {
        &self.files
    }

    /// The file (its index in [`Placer::files`]) and place of row id `rid`.
    pub fn place(&self, rid: i64) -> Option<(usize, u64)> {
        if let Some(p) = self.inside.get(&rid) {
            return Some(*p);
        }
        let k = self.ranged.partition_point(|i| self.files[*i].start <= rid).checked_sub(1)?;
        let i = self.ranged[k];
        let f = &self.files[i];
        (rid < f.start + f.count).then(|| (i, (rid - f.start) as u64))
    }
}

/// Whether DuckDB keeps live rows of `table` inlined in its catalog
/// (small inserts), which Sluice can neither place nor read.
pub async fn has_inlined_rows(db: &Db, table: i64) -> ConnectorResult<bool> {
    for r in db.rows(&format!("SELECT table_name FROM ducklake_inlined_data_tables WHERE table_id = {table}")).await? {
        let Some(name) = &r[0] else { continue };
        let n = db.rows(&format!("SELECT count(*) FROM {} WHERE end_snapshot IS NULL", ident(name))).await?;
        if n.first().map(|r| int(&r[0])).unwrap_or(0) > 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Whether DuckDB keeps deletes of `table` in its catalog.
pub async fn has_inlined_deletes(db: &Db, table: i64) -> ConnectorResult<bool> {
    Ok(db.table_names().await?.contains(&format!("ducklake_inlined_delete_{table}")))
}

/// The places of `file` its rows are hidden at, in order: its delete
/// file's, and (`inlined`) those DuckDB keeps in the catalog.
pub async fn hidden_places(
    db: &Db,
    objects: &dyn Objects,
    file: &LiveFile,
    table: i64,
    inlined: bool,
) -> ConnectorResult<Vec<u64>> {
    let mut gone = deleted_places(objects, file).await?;
    if inlined {
        let sql = format!("SELECT row_id FROM ducklake_inlined_delete_{table} WHERE file_id = {}", file.id);
        gone.extend(db.rows(&sql).await?.iter().map(|r| int(&r[0]) as u64));
        gone.sort_unstable();
        gone.dedup();
    }
    Ok(gone)
}

/// Whether data file `id` is live, and then its live delete file, as a
/// commit's transaction sees them (a plan made on other is stale).
pub async fn file_now(tx: &mut super::catalog::Tx, id: i64) -> ConnectorResult<Option<Option<i64>>> {
    let live = tx
        .rows(&format!(
            "SELECT f.data_file_id, d.delete_file_id FROM ducklake_data_file f \
             LEFT JOIN ducklake_delete_file d ON d.data_file_id = f.data_file_id AND d.end_snapshot IS NULL \
             WHERE f.data_file_id = {id} AND f.end_snapshot IS NULL"
        ))
        .await?;
    Ok(live.first().map(|r| r[1].as_deref().and_then(|c| c.parse().ok())))
}

/// The row ids the index holds for `keys`.
pub async fn lookup(db: &Db, table: i64, keys: &[&str]) -> ConnectorResult<Vec<(String, i64)>> {
    let mut out = Vec::new();
    for part in keys.chunks(PER_STATEMENT) {
        let list = part.iter().map(|k| text(k)).collect::<Vec<_>>().join(", ");
        for r in db
            .rows(&format!("SELECT key, row_id FROM sluice_ducklake_keys WHERE table_id = {table} AND key IN ({list})"))
            .await?
        {
            if let Some(k) = &r[0] {
                out.push((k.clone(), int(&r[1])));
            }
        }
    }
    Ok(out)
}

/// The keys the index holds in `range`: read by their integer value where
/// the key is one integer, else every key of the table, filtered.
pub async fn keys_in(db: &Db, table: i64, range: &KeyRange) -> ConnectorResult<Vec<String>> {
    let ints = |v: &Option<Vec<Value>>| match v.as_deref() {
        None => Some(None),
        Some([Value::Int(n)]) => Some(Some(*n)),
        Some(_) => None,
    };
    let integer = range.fields.len() == 1 && range.fields[0].field_type == FieldType::Integer;
    if integer && let (Some(after), Some(upto)) = (ints(&range.after), ints(&range.upto)) {
        let mut sql = format!("SELECT key FROM sluice_ducklake_keys WHERE table_id = {table}");
        if let Some(a) = after {
            sql.push_str(&format!(" AND ord > {a}"));
        }
        if let Some(u) = upto {
            sql.push_str(&format!(" AND ord <= {u}"));
        }
        let rows = db.rows(&sql).await?;
        return Ok(rows.into_iter().filter_map(|mut r| r.pop().flatten()).collect());
    }
    let rows = db.rows(&format!("SELECT DISTINCT key FROM sluice_ducklake_keys WHERE table_id = {table}")).await?;
    Ok(rows.into_iter().filter_map(|mut r| r.pop().flatten()).filter(|k| in_range(range, &key_values(k))).collect())
}

/// The places a file's live delete file hides.
pub async fn deleted_places(objects: &dyn Objects, file: &LiveFile) -> ConnectorResult<Vec<u64>> {
    let Some((_, key)) = &file.deletes else { return Ok(Vec::new()) };
    let local = objects.fetch(key).await?;
    let mut out = Vec::new();
    let pos = [Field::new("pos", FieldType::Integer)];
    crate::parquet_read::each_row(&local.path, key, &pos, |r| {
        if let Some(Value::Int(p)) = r.first() {
            out.push(*p as u64);
        }
        true
    })?;
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// A Parquet file's footer size (its metadata, as DuckLake records it),
/// from its last 8 bytes.
pub fn footer_size(path: &Path) -> std::io::Result<u64> {
    let mut f = File::open(path)?;
    let mut tail = [0u8; 8];
    f.seek(SeekFrom::End(-8))?;
    f.read_exact(&mut tail)?;
    Ok(u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]])))
}

/// A delete file written and put: its name in the table's folder, places,
/// bytes and footer.
#[derive(Debug, Clone)]
pub struct Written {
    pub name: String,
    pub count: u64,
    pub bytes: u64,
    pub footer: u64,
}

/// Writes the delete file hiding `places` (ascending) of the data file
/// `url`, and puts it into `folder` as `name`.
pub async fn put_delete_file(
    objects: &dyn Objects,
    spool_as: &str,
    folder: &str,
    name: String,
    url: &str,
    places: &[u64],
) -> ConnectorResult<Written> {
    let fail = |e: std::io::Error| ConnectorError::Other(format!("writing the delete file {name}: {e}"));
    let (spooled, f) = objects.spool(spool_as, &name)?;
    let mut path = Field::new("file_path", FieldType::String);
    path.nullable = false;
    let mut pos = Field::new("pos", FieldType::Integer);
    pos.nullable = false;
    let schema = EntitySchema { name: "delete".into(), fields: vec![path, pos] };
    let written = (|| {
        let mut file =
            ParquetFile::with_ids(BufWriter::new(f), &schema, Codec::Zstd, Some(&[PATH_FIELD_ID, POS_FIELD_ID]))?;
        for part in places.chunks(10_000) {
            let rows: Vec<Vec<Value>> =
                part.iter().map(|p| vec![Value::String(url.to_string()), Value::Int(*p as i64)]).collect();
            file.write(&rows)?;
        }
        let (out, _) = file.finish()?;
        out.into_inner().map_err(|e| fail(e.into_error()))?;
        ConnectorResult::Ok(())
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&spooled);
        return Err(e);
    }
    let bytes = std::fs::metadata(&spooled).map(|m| m.len()).map_err(fail)?;
    let footer = footer_size(&spooled).map_err(fail)?;
    objects.upload(&spooled, &format!("{folder}{name}")).await?;
    Ok(Written { name, count: places.len() as u64, bytes, footer })
}

/// One row of the index: table, key, row id.
pub fn index_row(table: i64, key: &str, rid: i64) -> String {
    let ord = ord_of(&key_values(key).iter().collect::<Vec<_>>()).map_or("NULL".into(), |n| n.to_string());
    format!("({table}, {}, {rid}, {ord})", text(key))
}

/// The statements that add `rows` (see [`index_row`]) to the index.
pub fn index_inserts(rows: &[String]) -> Vec<String> {
    rows.chunks(PER_STATEMENT)
        .map(|part| format!("INSERT INTO sluice_ducklake_keys VALUES {}", part.join(", ")))
        .collect()
}

/// The statements that remove `keys` of `table` from the index.
pub fn index_removals(table: i64, keys: &[&str]) -> Vec<String> {
    keys.chunks(PER_STATEMENT)
        .map(|part| {
            let list = part.iter().map(|k| text(k)).collect::<Vec<_>>().join(", ");
            format!("DELETE FROM sluice_ducklake_keys WHERE table_id = {table} AND key IN ({list})")
        })
        .collect()
}

/// Whether a snapshot's changes (`changes_made`) changed the rows of
/// `table` (a merge of its files keeps every row id, so it does not).
pub fn changes_rows(changes: &str, table: i64) -> bool {
    let id = table.to_string();
    changes.split(',').any(|c| {
        let Some((what, of)) = c.split_once(':') else { return false };
        of.trim_matches('"') == id
            && !matches!(what, "merge_adjacent" | "altered_table" | "created_table" | "dropped_table")
            && what != "created_schema"
    })
}

/// Builds the index of `table` (its files under `folder`) from its rows:
/// each live row's key (`key`, the key's fields) and row id, read from
/// the files one row group at a time, in transactions of their own; it
/// counts as true as of the last snapshot once no snapshot came in
/// between (else it is built again).
///
/// # Errors
/// `InvalidConfig` where DuckDB keeps rows of the table inlined in the
/// catalog, or wrote a file's row ids inside it: Sluice cannot place them.
pub async fn rebuild(
    db: &Db,
    objects: &dyn Objects,
    data_path: &str,
    folder: &str,
    table: i64,
    key: &[Field],
) -> ConnectorResult<()> {
    for _ in 0..5 {
        let last = db.rows("SELECT max(snapshot_id) FROM ducklake_snapshot").await?;
        let last = last.first().map(|r| int(&r[0])).unwrap_or(0);
        if has_inlined_rows(db, table).await? {
            return Err(ConnectorError::InvalidConfig(
                "the DuckLake table holds rows DuckDB inlined in its catalog (small inserts): Sluice writes a \
                 table by key once they are in files (CALL ducklake_flush_inlined_data in DuckDB)"
                    .into(),
            ));
        }
        let inlined_deletes = has_inlined_deletes(db, table).await?;
        let mut tx = db.begin().await?;
        tx.exec(&format!("DELETE FROM sluice_ducklake_keys WHERE table_id = {table}")).await?;
        tx.exec(&format!("DELETE FROM sluice_ducklake_indexed WHERE table_id = {table}")).await?;
        tx.commit().await?;
        for f in live_files(db, data_path, folder, table).await? {
            let local = objects.fetch(&f.key).await?;
            // A file DuckDB wrote its row ids into (an update, inlined rows
            // flushed): each row's id is its own.
            let mut read = key.to_vec();
            let inside = crate::parquet_read::has_column(&local.path, &f.key, ROW_ID_COLUMN)?;
            if inside {
                read.push(Field::new(ROW_ID_COLUMN, FieldType::Integer));
            }
            let gone = hidden_places(db, objects, &f, table, inlined_deletes).await?;
            let mut at = 0u64;
            let mut g = 0;
            let mut group = 0;
            while let Some(rows) = crate::parquet_read::group_rows(&local.path, &f.key, &read, group)? {
                group += 1;
                let mut entries = Vec::with_capacity(rows.len());
                for mut r in rows {
                    let mut rid = f.start + at as i64;
                    if inside {
                        match r.pop() {
                            Some(Value::Int(n)) => rid = n,
                            _ => {
                                return Err(ConnectorError::InvalidConfig(format!(
                                    "the DuckLake file {} names a row without its row id: Sluice cannot place it",
                                    f.key
                                )));
                            }
                        }
                    }
                    while g < gone.len() && gone[g] < at {
                        g += 1;
                    }
                    if gone.get(g) != Some(&at) {
                        entries.push(index_row(table, &key_text(r.iter()), rid));
                    }
                    at += 1;
                }
                for part in entries.chunks(20_000) {
                    let mut tx = db.begin().await?;
                    for sql in index_inserts(part) {
                        tx.exec(&sql).await?;
                    }
                    tx.commit().await?;
                }
            }
        }
        let mut tx = db.begin().await?;
        if tx.int("SELECT max(snapshot_id) FROM ducklake_snapshot").await?.unwrap_or(0) == last {
            tx.exec(&format!(
                "INSERT INTO sluice_ducklake_indexed VALUES ({table}, {last}) ON CONFLICT (table_id) \
                 DO UPDATE SET snapshot = excluded.snapshot"
            ))
            .await?;
            return tx.commit().await;
        }
        tx.commit().await?;
    }
    Err(ConnectorError::Other("the DuckLake table kept changing while Sluice built its key index: try again".into()))
}

/// Whether an index true as of snapshot `at` still is: every snapshot since
/// is there to tell (none expired in between: `span`, the count and the
/// greatest id from `at` on), and none of them changed the table's rows.
fn holds_since(at: i64, span: &[Cells], later: &[Cells], table: i64) -> bool {
    let (count, max) = span.first().map(|r| (int(&r[0]), int(&r[1]))).unwrap_or((0, 0));
    count == max - at + 1 && !later.iter().any(|r| r[0].as_deref().is_some_and(|c| changes_rows(c, table)))
}

fn span_sql(at: i64) -> String {
    format!("SELECT count(*), max(snapshot_id) FROM ducklake_snapshot WHERE snapshot_id >= {at}")
}

fn later_sql(at: i64) -> String {
    format!("SELECT changes_made FROM ducklake_snapshot_changes WHERE snapshot_id > {at}")
}

/// In `tx`: whether the index of `table` is true as of its last snapshot
/// (`None`: never built, or built again since).
pub async fn holds_in(tx: &mut super::catalog::Tx, table: i64) -> ConnectorResult<Option<bool>> {
    let Some(at) = tx.int(&format!("SELECT snapshot FROM sluice_ducklake_indexed WHERE table_id = {table}")).await?
    else {
        return Ok(None);
    };
    let span = tx.rows(&span_sql(at)).await?;
    let later = tx.rows(&later_sql(at)).await?;
    Ok(Some(holds_since(at, &span, &later, table)))
}

/// Whether the index of `table` is true now: built, and no snapshot since
/// changed the table's rows.
pub async fn index_holds(db: &Db, table: i64) -> ConnectorResult<bool> {
    let at = db.rows(&format!("SELECT snapshot FROM sluice_ducklake_indexed WHERE table_id = {table}")).await?;
    let Some(at) = at.first().map(|r| int(&r[0])) else { return Ok(false) };
    let span = db.rows(&span_sql(at)).await?;
    let later = db.rows(&later_sql(at)).await?;
    Ok(holds_since(at, &span, &later, table))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(start: i64, count: i64) -> LiveFile {
        LiveFile { id: start, key: String::new(), url: String::new(), start, count, deletes: None }
    }

    #[test]
    fn a_row_id_is_placed_in_the_file_that_holds_it() {
        // Out of order, as the catalog may list them; the third file's row
        // 21 an update of DuckDB's moved into the fourth, which names it.
        let files = vec![file(10, 5), file(0, 10), file(20, 3), file(100, 1)];
        let moved = std::collections::HashMap::from([(21, (3, 0))]);
        let p = Placer::ranged(files, vec![0, 1, 2], moved);
        assert_eq!(p.place(0), Some((1, 0)));
        assert_eq!(p.place(9), Some((1, 9)));
        assert_eq!(p.place(10), Some((0, 0)));
        assert_eq!(p.place(15), None, "between files: a row deleted with its file");
        assert_eq!(p.place(22), Some((2, 2)));
        assert_eq!(p.place(21), Some((3, 0)), "placed by the id its file names");
        assert_eq!(p.place(23), None);
        assert_eq!(p.place(100), None, "a file that names its ids is not placed by its first");
        assert_eq!(Placer::ranged(Vec::new(), Vec::new(), Default::default()).place(1), None);
    }

    #[test]
    fn keys_read_back_and_order_as_their_values() {
        let k = key_text([Value::Int(10), Value::String("b".into())].iter());
        assert_eq!(k, r#"[10,"b"]"#);
        assert_eq!(key_values(&k), vec![Value::Int(10), Value::String("b".into())]);
        let range = KeyRange {
            fields: vec![Field::new("a", FieldType::Integer), Field::new("b", FieldType::String)],
            after: Some(vec![Value::Int(9), Value::String("z".into())]),
            upto: Some(vec![Value::Int(10), Value::String("b".into())]),
        };
        assert!(in_range(&range, &key_values(&k)), "9 < 10 as numbers, whatever the text");
        assert!(!in_range(&range, &[Value::Int(10), Value::String("c".into())]));
        assert!(!in_range(&range, &[Value::Int(2), Value::String("a".into())]));
        assert!(in_range(&KeyRange::all(), &[Value::Int(2)]));
        assert_eq!(ord_of(&[&Value::Int(4)]), Some(4));
        assert_eq!(ord_of(&[&Value::Int(4), &Value::Int(5)]), None);
    }

    #[test]
    fn only_changes_of_a_tables_rows_count() {
        assert!(changes_rows("inserted_into_table:3", 3));
        assert!(changes_rows("created_table:\"main\".\"t\",inserted_into_table:3", 3));
        assert!(changes_rows("deleted_from_table:3", 3));
        assert!(!changes_rows("inserted_into_table:31", 3));
        assert!(!changes_rows("merge_adjacent:3", 3));
        assert!(!changes_rows("altered_table:3", 3));
    }
}
