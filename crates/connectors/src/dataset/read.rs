//! Reading a dataset: the `Source` impl. Entities are the folders under
//! the root that hold data files; an entity Sluice wrote is read as its
//! manifest commits it (its schema, its committed files only), any other
//! as the files its folder holds (the schema of their columns, by name).

use super::{DatasetConnector, FileFormat, check_entity, commit};
use crate::common::*;
use crate::parquet_read::{each_row, file_fields};
use sluice_domain::connect::connector::*;
use std::path::Path;
use std::sync::Arc;

/// The fields of a fetched file of `format` (`whole`: from every record;
/// else a text file's from its first ones).
fn fields_of(format: FileFormat, path: &Path, what: &str, whole: bool) -> ConnectorResult<Vec<Field>> {
    match format {
        FileFormat::Parquet(_) => file_fields(path, what),
        FileFormat::Text { format, .. } => {
            crate::file::infer_file(path, what, format, (!whole).then_some(crate::file::SAMPLE))
        }
    }
}

/// Passes each row of a fetched file of `format` to `visit` until it
/// answers `false`.
fn rows_of(
    format: FileFormat,
    path: &Path,
    what: &str,
    fields: &[Field],
    visit: impl FnMut(Vec<Value>) -> bool,
) -> ConnectorResult<()> {
    match format {
        FileFormat::Parquet(_) => each_row(path, what, fields, visit).map(|_| ()),
        FileFormat::Text { format, .. } => crate::file::each_record(path, what, format, fields, None, visit),
    }
}

/// The field every entity read from a dataset carries: where its record
/// is, as text that sorts in the order a read goes (see [`place`]). It is
/// the cursor of an incremental read of objects.
pub const OBJECT_FIELD: &str = "_sluice_object";

/// The beginning of the [`OBJECT_FIELD`] values of an object's records:
/// the object's modification time (UTC, to the microsecond, fixed width),
/// its key, and `#`; each record's ends with its place in the object
/// (from 0, twelve digits). As text, they sort by the time, then the key,
/// then the place.
pub fn place(modified: Option<std::time::SystemTime>, key: &str) -> String {
    // Past what a date holds (a file stamped after the year 9999): as if
    // it had no time.
    let at_time = modified.and_then(|m| {
        let nanos = match m.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => i128::try_from(d.as_nanos()).ok()?,
            Err(e) => -i128::try_from(e.duration().as_nanos()).ok()?,
        };
        time::OffsetDateTime::from_unix_timestamp_nanos(nanos).ok()
    });
    let at = match at_time {
        Some(t) => sluice_domain::shared::record::format_timestamp(t),
        None => "0000-00-00T00:00:00.000000Z".to_string(),
    };
    format!("{at} {key}#")
}

/// One record's [`OBJECT_FIELD`] value.
fn record_place(place: &str, n: u64) -> String {
    format!("{place}{n:012}")
}

/// Whether a mapping's source entity is a pattern of files rather than a
/// folder's name.
fn is_pattern(entity: &str) -> bool {
    entity.contains(['*', '?', '/'])
}

fn check_pattern(pattern: &str) -> ConnectorResult<()> {
    let bad = pattern.len() > 500
        || pattern.starts_with('/')
        || pattern.split('/').any(|s| s.is_empty() || s == "." || s == ".." || s == "_sluice")
        || pattern.chars().any(char::is_control);
    if bad {
        return Err(ConnectorError::InvalidConfig(format!(
            "'{pattern}' is not a pattern of files: folders and names under the root, `*` for any part of a \
             name, `?` for one character, `**` for any folders"
        )));
    }
    Ok(())
}

/// Whether `key` matches `pattern`, folder by folder: `**` matches any
/// number of folders, `*` any run of characters within one name, `?` one.
fn matches_pattern(pattern: &str, key: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let k: Vec<&str> = key.split('/').collect();
    // at[j]: whether the pattern's parts from i on match the key's from j on.
    let mut at = vec![false; k.len() + 1];
    at[k.len()] = true;
    for part in p.iter().rev() {
        let mut next = vec![false; k.len() + 1];
        for j in (0..=k.len()).rev() {
            next[j] = if *part == "**" {
                at[j] || (j < k.len() && next[j + 1])
            } else {
                j < k.len() && at[j + 1] && matches_name(part, k[j])
            };
        }
        at = next;
    }
    at[0]
}

/// Whether one name matches one part of a pattern (`*`, `?`): greedy with
/// one point to go back to, so linear in practice, never exponential.
fn matches_name(part: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (part.chars().collect(), name.chars().collect());
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < n.len() {
        if i < p.len() && (p[i] == '?' || p[i] == n[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(s) = star {
            i = s + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

/// The files and fields a read of an entity takes.
struct Plan {
    /// Keys and their [`place`]s, in the order of their places.
    files: Vec<(String, String)>,
    /// The files' fields, then [`OBJECT_FIELD`] (`added`: unless a file has
    /// a column of that name).
    fields: Vec<Field>,
    added: bool,
    /// The first of `files` changed less than [`SETTLE`] before the
    /// listing, if any.
    settling: Option<usize>,
}

/// How long an object must have been there before a read by
/// [`OBJECT_FIELD`] takes it: S3 keeps an object's time to the second (two
/// objects put in one second sort by their keys, and a read that took the
/// later key first would pass the earlier), and clocks differ a little.
/// A read goes through the files in order and stops at the first this new.
pub const SETTLE: std::time::Duration = std::time::Duration::from_secs(5);

/// The fields and the place of the first settling file, for `files`
/// (sorted) listed with their times at `now`.
fn finish_plan(
    files: Vec<(String, String)>,
    times: &std::collections::HashMap<String, Option<std::time::SystemTime>>,
    mut fields: Vec<Field>,
    now: std::time::SystemTime,
) -> Plan {
    let cutoff = now.checked_sub(SETTLE);
    let settling = files
        .iter()
        .position(|(k, _)| matches!((times.get(k).copied().flatten(), cutoff), (Some(t), Some(c)) if t > c));
    let added = !fields.iter().any(|f| f.name == OBJECT_FIELD);
    if added {
        let mut f = Field::new(OBJECT_FIELD, FieldType::String);
        f.nullable = false;
        fields.push(f);
    }
    Plan { files, fields, added, settling }
}

/// Of a read from `from` (by [`OBJECT_FIELD`]), the records of the file at
/// `place` to skip: all, those up to a place in it, or none. The read is
/// strictly after `from`: a run goes on after the last record the one
/// before it read, and an object changed since has a new time, so is read
/// again whole.
fn skipped(place: &str, from: &str) -> Option<u64> {
    if let Some(n) = from.strip_prefix(place) {
        return Some(n.parse::<u64>().map_or(u64::MAX, |n| n.saturating_add(1)));
    }
    // Every record of the file sorts after `from`, or every one before it.
    (from > place).then_some(u64::MAX)
}

impl DatasetConnector {
    /// The entities of the root: folders that hold files of this format.
    async fn folders(&self) -> ConnectorResult<Vec<String>> {
        let mut out: Vec<String> = self
            .objects
            .list("")
            .await?
            .into_iter()
            .filter_map(|o| {
                let (entity, name) = o.key.split_once('/')?;
                (!name.contains('/') && self.format.holds(name) && check_entity(entity).is_ok())
                    .then(|| entity.to_string())
            })
            .collect();
        out.dedup();
        Ok(out)
    }

    /// What a read of `entity` takes; `whole`: every file's columns (a
    /// sync), else the first file's (a preview, discovery).
    async fn plan(&self, entity: &str, whole: bool) -> ConnectorResult<Option<Plan>> {
        if is_pattern(entity) {
            return self.plan_pattern(entity, whole).await;
        }
        check_entity(entity)?;
        // The manifest first: every file it names is then in the listing.
        let manifest = commit::manifest(&*self.objects, entity).await?;
        let now = std::time::SystemTime::now();
        let listed = self.objects.list(entity).await?;
        let (keys, schema): (Vec<String>, _) = match manifest.and_then(|m| m.schema.map(|s| (m.files, s))) {
            // Of an entity Sluice wrote, the files its manifest commits.
            Some((files, schema)) => (files.iter().map(|n| commit::data_key(entity, n)).collect(), Some(schema)),
            None => (
                listed
                    .iter()
                    .map(|o| o.key.clone())
                    .filter(|k| {
                        k.strip_prefix(&format!("{entity}/")).is_some_and(|n| !n.contains('/') && self.format.holds(n))
                    })
                    .collect(),
                None,
            ),
        };
        if keys.is_empty() && schema.is_none() {
            return Ok(None);
        }
        let times: std::collections::HashMap<String, _> = listed.into_iter().map(|o| (o.key, o.modified)).collect();
        let mut files: Vec<(String, String)> = keys
            .into_iter()
            .map(|k| {
                let at = place(times.get(&k).copied().flatten(), &k);
                (k, at)
            })
            .collect();
        files.sort_by(|a, b| a.1.cmp(&b.1));
        let fields: Vec<Field> = match schema {
            Some(s) => s.fields,
            None => self.fields_of_files(&files, whole).await?,
        };
        Ok(Some(finish_plan(files, &times, fields, now)))
    }

    /// The union of the columns of `files` (`whole`: of every file, else
    /// of the first).
    async fn fields_of_files(&self, files: &[(String, String)], whole: bool) -> ConnectorResult<Vec<Field>> {
        let mut fields: Vec<Field> = Vec::new();
        for (key, _) in files.iter().take(if whole { usize::MAX } else { 1 }) {
            let local = self.objects.fetch(key).await?;
            let what = format!("{}/{key}", self.objects.label().trim_end_matches('/'));
            let (path, format) = (local.path.clone(), self.format);
            let found = tokio::task::spawn_blocking(move || fields_of(format, &path, &what, whole))
                .await
                .map_err(|e| ConnectorError::Other(e.to_string()))??;
            for f in found {
                match fields.iter_mut().find(|x| x.name == f.name) {
                    // Text files type their columns by what they hold: one
                    // file's integers and another's decimals are decimals.
                    Some(x) if matches!(format, FileFormat::Text { .. }) => {
                        x.field_type = crate::file::widen(x.field_type, f.field_type);
                    }
                    Some(_) => {}
                    None => fields.push(f),
                }
            }
        }
        Ok(fields)
    }

    /// A read of the files a pattern names (`exports/*/orders-*.csv.gz`):
    /// the files of this format under the root whose keys it matches,
    /// never what Sluice keeps under `_sluice/`.
    async fn plan_pattern(&self, pattern: &str, whole: bool) -> ConnectorResult<Option<Plan>> {
        check_pattern(pattern)?;
        let now = std::time::SystemTime::now();
        let listed: Vec<_> = self
            .objects
            .list("")
            .await?
            .into_iter()
            .filter(|o| {
                !o.key.starts_with("_sluice/")
                    && o.key.rsplit('/').next().is_some_and(|n| self.format.holds(n))
                    && matches_pattern(pattern, &o.key)
            })
            .collect();
        if listed.is_empty() {
            return Ok(None);
        }
        let mut files: Vec<(String, String)> =
            listed.iter().map(|o| (o.key.clone(), place(o.modified, &o.key))).collect();
        files.sort_by(|a, b| a.1.cmp(&b.1));
        let times = listed.into_iter().map(|o| (o.key, o.modified)).collect();
        let fields = self.fields_of_files(&files, whole).await?;
        Ok(Some(finish_plan(files, &times, fields, now)))
    }
}

#[async_trait::async_trait]
impl Source for DatasetConnector {
    async fn check(&self) -> ConnectorResult<()> {
        self.objects.check_readable().await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        self.objects.check_readable().await?;
        let mut out = Vec::new();
        for name in self.folders().await? {
            if let Some(p) = self.plan(&name, false).await? {
                out.push(EntitySchema { name, fields: p.fields });
            }
        }
        Ok(out)
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        let p = self
            .plan(entity, true)
            .await?
            .ok_or_else(|| ConnectorError::EntityNotFound(format!("no files for entity '{entity}'")))?;
        Ok(Arc::new(p.fields))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let plan = self
            .plan(&req.entity, req.limit.is_none())
            .await?
            .ok_or_else(|| ConnectorError::EntityNotFound(format!("no files for entity '{}'", req.entity)))?;
        let cursor_idx = match &req.cursor {
            Some(c) => Some(plan.fields.iter().position(|f| f.name == c.field).ok_or_else(|| {
                ConnectorError::InvalidConfig(format!("cursor field '{}' is not in {}", c.field, req.entity))
            })?),
            None => None,
        };
        // The place of each record is ours to add unless a file has a
        // column of that name; an incremental read by it goes through the
        // files in its order, strictly after its value, without sorting.
        let added = plan.added;
        let by_object = added && cursor_idx == Some(plan.fields.len() - 1);
        let from_object = match req.cursor.as_ref().and_then(|c| c.from.as_ref()) {
            Some(v) if by_object => sluice_domain::sync::cursor_text(v),
            _ => None,
        };
        let sorted = cursor_idx.is_some() && !by_object;
        let file_fields: Arc<Vec<Field>> =
            Arc::new(if added { plan.fields[..plan.fields.len() - 1].to_vec() } else { plan.fields.clone() });
        let fields = Arc::new(plan.fields);
        let batch_size = if req.batch_size == 0 { DEFAULT_BATCH } else { req.batch_size };
        let (objects, label, f2) = (self.objects.clone(), self.objects.label().to_string(), fields.clone());
        let format = self.format;
        Ok(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            let limit = req.limit.unwrap_or(u64::MAX);
            // An incremental read by a column is ordered by it, which files
            // are not: loaded, filtered and sorted.
            let mut kept: Vec<Vec<Value>> = Vec::new();
            let mut count = 0u64;
            for (at, (key, place)) in plan.files.into_iter().enumerate() {
                // A read by place stops at the first file too new to be
                // sure no other comes before it (see SETTLE).
                if count >= limit || (by_object && plan.settling.is_some_and(|s| at >= s)) {
                    break;
                }
                let skip = from_object.as_deref().and_then(|from| skipped(&place, from)).unwrap_or(0);
                if skip == u64::MAX {
                    continue;
                }
                let local = match objects.fetch(&key).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                let what = format!("{}/{key}", label.trim_end_matches('/'));
                let (tx2, f3, read_fields, cursor) = (tx.clone(), f2.clone(), file_fields.clone(), req.cursor.clone());
                let path = local.path.clone();
                let done = tokio::task::spawn_blocking(move || {
                    let mut batch = Vec::with_capacity(batch_size);
                    let mut rows_kept = Vec::new();
                    let mut open = true;
                    let mut n = 0u64;
                    let read = rows_of(format, &path, &what, &read_fields, |mut row| {
                        n += 1;
                        if n <= skip {
                            return true;
                        }
                        if added {
                            row.push(Value::String(record_place(&place, n - 1)));
                        }
                        let from = cursor.as_ref().and_then(|c| c.from.as_ref());
                        if let (Some(ci), Some(from), false) = (cursor_idx, from, by_object)
                            && compare_values(&row[ci], from).is_none_or(|o| o == std::cmp::Ordering::Less)
                        {
                            return true;
                        }
                        if sorted {
                            rows_kept.push(row);
                            return true;
                        }
                        count += 1;
                        batch.push(row);
                        if batch.len() >= batch_size {
                            let full = std::mem::replace(&mut batch, Vec::with_capacity(batch_size));
                            open = tx2.blocking_send(Ok(RecordBatch { fields: f3.clone(), rows: full })).is_ok();
                        }
                        open && count < limit
                    });
                    if !batch.is_empty() && open {
                        let _ = tx2.blocking_send(Ok(RecordBatch { fields: f3.clone(), rows: batch }));
                    }
                    read.map(|_| (rows_kept, count))
                })
                .await;
                match done {
                    Ok(Ok((rows, n))) => {
                        kept.extend(rows);
                        count = n;
                    }
                    Ok(Err(e)) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    // The reader panicked on the file: the read fails, never
                    // ends early as if the file were done.
                    Err(_) => {
                        let _ = tx
                            .send(Err(ConnectorError::Other(format!(
                                "{label}/{key}: not a readable {} file",
                                format.name()
                            ))))
                            .await;
                        return;
                    }
                }
            }
            if let (Some(ci), true) = (cursor_idx, sorted) {
                // Off the async threads, and a failure rather than a panic.
                let sorted = tokio::task::spawn_blocking(move || {
                    kept.sort_by(|a, b| compare_values(&a[ci], &b[ci]).unwrap_or(std::cmp::Ordering::Equal));
                    kept
                })
                .await;
                let Ok(mut kept) = sorted else {
                    let _ =
                        tx.send(Err(ConnectorError::Other("the rows could not be ordered by the cursor".into()))).await;
                    return;
                };
                kept.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
                for chunk in kept.chunks(batch_size) {
                    if tx.send(Ok(RecordBatch { fields: f2.clone(), rows: chunk.to_vec() })).await.is_err() {
                        return;
                    }
                }
            }
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::{FileFormat, matches_pattern, place};

    #[test]
    fn a_time_past_the_year_9999_is_no_time_and_gzipped_parquet_is_not_parquet() {
        let far = std::time::UNIX_EPOCH + std::time::Duration::from_secs(300_000_000_000);
        assert_eq!(place(Some(far), "a.csv"), "0000-00-00T00:00:00.000000Z a.csv#");
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_767_225_600_123_456);
        assert_eq!(place(Some(t), "a.csv"), "2026-01-01T00:00:00.123456Z a.csv#");
        let parquet = FileFormat::Parquet(crate::parquet::Codec::Zstd);
        assert!(parquet.holds("x.parquet") && !parquet.holds("x.parquet.gz") && !parquet.holds(".parquet"));
        let csv = FileFormat::Text { format: crate::file::Format::Csv, gzip: false };
        assert!(csv.holds("x.csv") && csv.holds("x.csv.gz") && !csv.holds("x.jsonl"));
    }

    #[test]
    fn patterns_match_names_within_folders_and_any_folders_with_two_stars() {
        let yes = [
            ("orders/*.csv", "orders/a.csv"),
            ("exports/*/orders-*.csv.gz", "exports/2026-12/orders-1.csv.gz"),
            ("**/*.csv", "a.csv"),
            ("**/*.csv", "x/y/z/a.csv"),
            ("x/**/a?.csv", "x/a1.csv"),
            ("x/**/a?.csv", "x/y/a1.csv"),
            ("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaab"),
        ];
        for (p, k) in yes {
            assert!(matches_pattern(p, k), "{p} {k}");
        }
        let no = [
            ("orders/*.csv", "orders/x/a.csv"),
            ("orders/*.csv", "orders/a.csv.gz"),
            ("*/a.csv", "a.csv"),
            ("x/a?.csv", "x/a12.csv"),
            ("*a*a*a*a*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"),
        ];
        for (p, k) in no {
            assert!(!matches_pattern(p, k), "{p} {k}");
        }
    }
}
