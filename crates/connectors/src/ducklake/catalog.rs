//! A DuckLake catalog's database, SQLite or PostgreSQL, spoken in the SQL
//! both take: its tables as DuckDB 1.5's `ducklake` extension makes them
//! (format 1.0), and two of Sluice's own beside them (which DuckDB never
//! reads): the marks each table holds per change stream, and the version
//! that fences a writer an attempt that took over has replaced.
//!
//! Statements carry their values as literals, each quoted here (values
//! are numbers, or names and paths the writer made or a source's column
//! names), so that one text runs on both engines.

use sluice_domain::connect::connector::{ConnectorError, ConnectorResult};
use sqlx::{AssertSqlSafe, Row};

fn raw(sql: &str) -> sqlx::RawSql {
    sqlx::raw_sql(AssertSqlSafe(sql.to_string()))
}

/// The format version written and read.
pub const FORMAT: &str = "1.0";

/// The catalog's tables, as DuckDB 1.5.5 creates them (column for column:
/// it reads them by name).
const TABLES: &[&str] = &[
    r#"CREATE TABLE ducklake_metadata("key" VARCHAR NOT NULL, "value" VARCHAR NOT NULL, "scope" VARCHAR, scope_id BIGINT)"#,
    "CREATE TABLE ducklake_snapshot(snapshot_id BIGINT PRIMARY KEY, snapshot_time VARCHAR, schema_version BIGINT, \
     next_catalog_id BIGINT, next_file_id BIGINT)",
    "CREATE TABLE ducklake_snapshot_changes(snapshot_id BIGINT PRIMARY KEY, changes_made VARCHAR, author VARCHAR, \
     commit_message VARCHAR, commit_extra_info VARCHAR)",
    "CREATE TABLE ducklake_schema(schema_id BIGINT PRIMARY KEY, schema_uuid VARCHAR, begin_snapshot BIGINT, \
     end_snapshot BIGINT, schema_name VARCHAR, path VARCHAR, path_is_relative BIGINT)",
    "CREATE TABLE ducklake_table(table_id BIGINT, table_uuid VARCHAR, begin_snapshot BIGINT, end_snapshot BIGINT, \
     schema_id BIGINT, table_name VARCHAR, path VARCHAR, path_is_relative BIGINT)",
    r#"CREATE TABLE ducklake_view(view_id BIGINT, view_uuid VARCHAR, begin_snapshot BIGINT, end_snapshot BIGINT, schema_id BIGINT, view_name VARCHAR, dialect VARCHAR, "sql" VARCHAR, column_aliases VARCHAR)"#,
    r#"CREATE TABLE ducklake_tag(object_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, "key" VARCHAR, "value" VARCHAR)"#,
    r#"CREATE TABLE ducklake_column_tag(table_id BIGINT, column_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, "key" VARCHAR, "value" VARCHAR)"#,
    "CREATE TABLE ducklake_data_file(data_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, \
     end_snapshot BIGINT, file_order BIGINT, path VARCHAR, path_is_relative BIGINT, file_format VARCHAR, \
     record_count BIGINT, file_size_bytes BIGINT, footer_size BIGINT, row_id_start BIGINT, partition_id BIGINT, \
     encryption_key VARCHAR, mapping_id BIGINT, partial_max BIGINT)",
    "CREATE TABLE ducklake_file_column_stats(data_file_id BIGINT, table_id BIGINT, column_id BIGINT, \
     column_size_bytes BIGINT, value_count BIGINT, null_count BIGINT, min_value VARCHAR, max_value VARCHAR, \
     contains_nan BIGINT, extra_stats VARCHAR)",
    "CREATE TABLE ducklake_file_variant_stats(data_file_id BIGINT, table_id BIGINT, column_id BIGINT, \
     variant_path VARCHAR, shredded_type VARCHAR, column_size_bytes BIGINT, value_count BIGINT, null_count BIGINT, \
     min_value VARCHAR, max_value VARCHAR, contains_nan BIGINT, extra_stats VARCHAR)",
    "CREATE TABLE ducklake_delete_file(delete_file_id BIGINT PRIMARY KEY, table_id BIGINT, begin_snapshot BIGINT, \
     end_snapshot BIGINT, data_file_id BIGINT, path VARCHAR, path_is_relative BIGINT, format VARCHAR, \
     delete_count BIGINT, file_size_bytes BIGINT, footer_size BIGINT, encryption_key VARCHAR, partial_max BIGINT)",
    "CREATE TABLE ducklake_column(column_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT, table_id BIGINT, \
     column_order BIGINT, column_name VARCHAR, column_type VARCHAR, initial_default VARCHAR, default_value VARCHAR, \
     nulls_allowed BIGINT, parent_column BIGINT, default_value_type VARCHAR, default_value_dialect VARCHAR)",
    "CREATE TABLE ducklake_table_stats(table_id BIGINT, record_count BIGINT, next_row_id BIGINT, file_size_bytes BIGINT)",
    "CREATE TABLE ducklake_table_column_stats(table_id BIGINT, column_id BIGINT, contains_null BIGINT, \
     contains_nan BIGINT, min_value VARCHAR, max_value VARCHAR, extra_stats VARCHAR)",
    "CREATE TABLE ducklake_partition_info(partition_id BIGINT, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT)",
    r#"CREATE TABLE ducklake_partition_column(partition_id BIGINT, table_id BIGINT, partition_key_index BIGINT, column_id BIGINT, "transform" VARCHAR)"#,
    "CREATE TABLE ducklake_file_partition_value(data_file_id BIGINT, table_id BIGINT, partition_key_index BIGINT, \
     partition_value VARCHAR)",
    "CREATE TABLE ducklake_files_scheduled_for_deletion(data_file_id BIGINT, path VARCHAR, path_is_relative BIGINT, \
     schedule_start VARCHAR)",
    "CREATE TABLE ducklake_inlined_data_tables(table_id BIGINT, table_name VARCHAR, schema_version BIGINT)",
    r#"CREATE TABLE ducklake_column_mapping(mapping_id BIGINT, table_id BIGINT, "type" VARCHAR)"#,
    "CREATE TABLE ducklake_name_mapping(mapping_id BIGINT, column_id BIGINT, source_name VARCHAR, \
     target_field_id BIGINT, parent_column BIGINT, is_partition BIGINT)",
    "CREATE TABLE ducklake_schema_versions(begin_snapshot BIGINT, schema_version BIGINT, table_id BIGINT)",
    "CREATE TABLE ducklake_macro(schema_id BIGINT, macro_id BIGINT, macro_name VARCHAR, begin_snapshot BIGINT, \
     end_snapshot BIGINT)",
    r#"CREATE TABLE ducklake_macro_impl(macro_id BIGINT, impl_id BIGINT, dialect VARCHAR, "sql" VARCHAR, "type" VARCHAR)"#,
    "CREATE TABLE ducklake_macro_parameters(macro_id BIGINT, impl_id BIGINT, column_id BIGINT, parameter_name VARCHAR, \
     parameter_type VARCHAR, default_value VARCHAR, default_value_type VARCHAR)",
    "CREATE TABLE ducklake_sort_info(sort_id BIGINT, table_id BIGINT, begin_snapshot BIGINT, end_snapshot BIGINT)",
    "CREATE TABLE ducklake_sort_expression(sort_id BIGINT, table_id BIGINT, sort_key_index BIGINT, expression VARCHAR, \
     dialect VARCHAR, sort_direction VARCHAR, null_order VARCHAR)",
];

/// Sluice's own tables in the catalog's database.
const OWN_TABLES: &[&str] = &[
    // The marks a table holds per change stream (a flow's), committed with
    // its rows.
    "CREATE TABLE IF NOT EXISTS sluice_ducklake_marks(table_id BIGINT NOT NULL, stream VARCHAR NOT NULL, \
     position VARCHAR NOT NULL, PRIMARY KEY (table_id, stream))",
    // Per table (`schema.table`), the version its writers commit under: an
    // attempt that takes a table over raises it, so that the writer it
    // replaced (a frozen process) commits nothing more; `run` is the run
    // of the writer that raised it last.
    "CREATE TABLE IF NOT EXISTS sluice_ducklake_writers(entity VARCHAR NOT NULL PRIMARY KEY, version BIGINT NOT NULL, \
     run VARCHAR)",
    // The key index of each table written by key: the DuckLake row id of
    // each key's row (every row, where a key was appended more than once),
    // and a single integer key's value (`ord`) for ranges. Kept in the
    // commits that change the rows.
    "CREATE TABLE IF NOT EXISTS sluice_ducklake_keys(table_id BIGINT NOT NULL, key VARCHAR NOT NULL, \
     row_id BIGINT NOT NULL, ord BIGINT, PRIMARY KEY (table_id, key, row_id))",
    "CREATE INDEX IF NOT EXISTS sluice_ducklake_keys_ord ON sluice_ducklake_keys(table_id, ord)",
    // Rows moved by a merge are found by their row ids.
    "CREATE INDEX IF NOT EXISTS sluice_ducklake_keys_row ON sluice_ducklake_keys(table_id, row_id)",
    // The snapshot a table's key index is true as of: a later snapshot
    // that changed the table's rows (a user's insert, an append) makes the
    // next keyed writer build it again.
    "CREATE TABLE IF NOT EXISTS sluice_ducklake_indexed(table_id BIGINT NOT NULL PRIMARY KEY, \
     snapshot BIGINT NOT NULL)",
];

/// A value as an SQL string literal.
pub fn text(s: &str) -> String {
    format!("'{}'", s.replace('\0', "").replace('\'', "''"))
}

/// An optional value as a literal or `NULL`.
pub fn opt(s: Option<&str>) -> String {
    s.map(text).unwrap_or_else(|| "NULL".into())
}

/// The catalog's database.
#[derive(Debug, Clone)]
pub enum Db {
    Sqlite(sqlx::SqlitePool),
    /// With the schema its tables are in.
    Postgres(sqlx::PgPool, String),
}

/// One row, every cell as text (or null).
pub type Cells = Vec<Option<String>>;

/// A transaction of the catalog (rolled back when dropped uncommitted).
pub enum Tx {
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
}

/// What failed, said without the server's address or credentials.
pub fn failed(e: &sqlx::Error) -> ConnectorError {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Tls(_) | sqlx::Error::PoolClosed => {
            ConnectorError::Unreachable(format!("the DuckLake catalog: {e}"))
        }
        sqlx::Error::Database(d) => ConnectorError::Other(format!("the DuckLake catalog: {}", d.message())),
        other => ConnectorError::Other(format!("the DuckLake catalog: {other}")),
    }
}

/// Whether `e` is another writer's commit met (a snapshot id taken, the
/// database busy): the commit is tried again on what it left.
pub fn conflict(e: &ConnectorError) -> bool {
    let m = e.to_string();
    m.contains("UNIQUE constraint")
        || m.contains("duplicate key")
        || m.contains("database is locked")
        || m.contains("could not serialize")
}

fn cell_sqlite(r: &sqlx::sqlite::SqliteRow, i: usize) -> Option<String> {
    if let Ok(v) = r.try_get::<Option<i64>, _>(i) {
        return v.map(|v| v.to_string());
    }
    if let Ok(v) = r.try_get::<Option<String>, _>(i) {
        return v;
    }
    r.try_get::<Option<f64>, _>(i).ok().flatten().map(|v| v.to_string())
}

fn cell_pg(r: &sqlx::postgres::PgRow, i: usize) -> Option<String> {
    if let Ok(v) = r.try_get::<Option<i64>, _>(i) {
        return v.map(|v| v.to_string());
    }
    if let Ok(v) = r.try_get::<Option<bool>, _>(i) {
        return v.map(|v| if v { "1" } else { "0" }.to_string());
    }
    if let Ok(v) = r.try_get::<Option<String>, _>(i) {
        return v;
    }
    if let Ok(v) = r.try_get::<Option<i32>, _>(i) {
        return v.map(|v| v.to_string());
    }
    r.try_get::<Option<uuid::Uuid>, _>(i).ok().flatten().map(|v| v.to_string())
}

/// A name quoted as an SQL identifier.
pub fn ident(s: &str) -> String {
    format!("\"{}\"", s.replace('\0', "").replace('"', "\"\""))
}

/// The catalog's tables as made on PostgreSQL: DuckDB 1.5.5 gives flags
/// `BOOLEAN`, ids `UUID` and times `TIMESTAMPTZ` there (on SQLite, integers
/// and text).
fn postgres_table(sql: &str) -> String {
    let mut out = sql.to_string();
    for flag in ["path_is_relative", "nulls_allowed", "contains_nan", "contains_null", "is_partition"] {
        out = out.replace(&format!("{flag} BIGINT"), &format!("{flag} BOOLEAN"));
    }
    for id in ["schema_uuid", "table_uuid", "view_uuid"] {
        out = out.replace(&format!("{id} VARCHAR"), &format!("{id} UUID"));
    }
    for at in ["snapshot_time", "schedule_start"] {
        out = out.replace(&format!("{at} VARCHAR"), &format!("{at} TIMESTAMPTZ"));
    }
    out
}

impl Db {
    pub async fn rows(&self, sql: &str) -> ConnectorResult<Vec<Cells>> {
        match self {
            Db::Sqlite(p) => {
                let rows = raw(sql).fetch_all(p).await.map_err(|e| failed(&e))?;
                Ok(rows.iter().map(|r| (0..r.len()).map(|i| cell_sqlite(r, i)).collect()).collect())
            }
            // In a transaction of its own, for the catalog's schema.
            Db::Postgres(..) => {
                let mut tx = self.begin().await?;
                let rows = tx.rows(sql).await?;
                tx.commit().await?;
                Ok(rows)
            }
        }
    }

    /// A write transaction: SQLite's takes the write lock at once (so that
    /// what it reads is what it commits on); PostgreSQL's reads and writes
    /// the catalog's schema.
    pub async fn begin(&self) -> ConnectorResult<Tx> {
        Ok(match self {
            Db::Sqlite(p) => Tx::Sqlite(p.begin_with("BEGIN IMMEDIATE").await.map_err(|e| failed(&e))?),
            Db::Postgres(p, schema) => {
                let mut tx = Tx::Postgres(p.begin().await.map_err(|e| failed(&e))?);
                tx.exec(&format!("SET LOCAL search_path TO {}", ident(schema))).await?;
                // Literals are quoted as the standard says (a backslash is
                // a character), whatever the server's default.
                tx.exec("SET LOCAL standard_conforming_strings = on").await?;
                tx
            }
        })
    }

    /// The names of the tables in the catalog's database (its schema's,
    /// on PostgreSQL).
    pub async fn table_names(&self) -> ConnectorResult<Vec<String>> {
        let sql = match self {
            Db::Sqlite(_) => "SELECT name FROM sqlite_master WHERE type = 'table'".to_string(),
            Db::Postgres(_, schema) => {
                format!("SELECT table_name::text FROM information_schema.tables WHERE table_schema = {}", text(schema))
            }
        };
        Ok(self.rows(&sql).await?.into_iter().filter_map(|mut r| r.pop().flatten()).collect())
    }

    /// Makes a new catalog (every table, the schema `main`, the first
    /// snapshot, the data path) where the database has none, and Sluice's
    /// tables beside it; checks an existing one's format version.
    ///
    /// # Errors
    /// `InvalidConfig` saying what the database holds instead.
    pub async fn init(&self, data_path: &str) -> ConnectorResult<()> {
        if let Db::Postgres(p, schema) = self {
            let sql = format!("CREATE SCHEMA IF NOT EXISTS {}", ident(schema));
            if let Err(e) = raw(&sql).execute(p).await {
                // A role that may not create it: the schema must be there.
                let there = raw(&format!("SELECT 1 FROM pg_namespace WHERE nspname = {}", text(schema)))
                    .fetch_optional(p)
                    .await
                    .map_err(|e| failed(&e))?;
                if there.is_none() {
                    return Err(failed(&e));
                }
            }
        }
        let names = self.table_names().await?;
        if !names.iter().any(|n| n == "ducklake_metadata") {
            let foreign: Vec<&String> = names.iter().filter(|n| !n.starts_with("sluice_ducklake_")).collect();
            if !foreign.is_empty() {
                return Err(ConnectorError::InvalidConfig(format!(
                    "the catalog database is not a DuckLake catalog: it holds other tables ({}) and no \
                     ducklake_metadata",
                    foreign.iter().take(3).map(|s| s.as_str()).collect::<Vec<_>>().join(", ")
                )));
            }
            let mut tx = self.begin().await?;
            if !tx.table_names().await?.iter().any(|n| n == "ducklake_metadata") {
                for t in TABLES {
                    match self {
                        Db::Sqlite(_) => tx.exec(t).await?,
                        Db::Postgres(..) => tx.exec(&postgres_table(t)).await?,
                    };
                }
                let now = tx.now();
                for sql in [
                    format!(
                        "INSERT INTO ducklake_metadata VALUES ('version', {}, NULL, NULL), ('created_by', {}, NULL, NULL), \
                         ('data_path', {}, NULL, NULL), ('encrypted', 'false', NULL, NULL)",
                        text(FORMAT),
                        text(&format!("Sluice {}", env!("CARGO_PKG_VERSION"))),
                        text(data_path)
                    ),
                    format!("INSERT INTO ducklake_snapshot VALUES (0, {now}, 0, 1, 0)"),
                    "INSERT INTO ducklake_snapshot_changes VALUES (0, 'created_schema:\"main\"', NULL, NULL, NULL)"
                        .into(),
                    format!(
                        "INSERT INTO ducklake_schema VALUES (0, {}, 0, NULL, 'main', 'main/', true)",
                        text(&uuid::Uuid::new_v4().to_string())
                    ),
                ] {
                    tx.exec(&sql).await?;
                }
            }
            tx.commit().await?;
        }
        let version =
            self.rows("SELECT \"value\" FROM ducklake_metadata WHERE \"key\" = 'version' AND scope IS NULL").await?;
        match version.first().and_then(|r| r[0].as_deref()) {
            Some(FORMAT) => {}
            Some(other) => {
                return Err(ConnectorError::InvalidConfig(format!(
                    "the catalog is DuckLake format {other}; Sluice writes format {FORMAT} (what DuckDB 1.5 reads and \
                     writes)"
                )));
            }
            None => return Err(ConnectorError::InvalidConfig("the DuckLake catalog names no format version".into())),
        }
        if !names.iter().any(|n| n == "sluice_ducklake_indexed") {
            let mut tx = self.begin().await?;
            for t in OWN_TABLES {
                tx.exec(t).await?;
            }
            tx.commit().await?;
        }
        Ok(())
    }

    /// The catalog's data path, as DuckDB wrote it (or Sluice, making it).
    pub async fn data_path(&self) -> ConnectorResult<Option<String>> {
        let rows =
            self.rows("SELECT \"value\" FROM ducklake_metadata WHERE \"key\" = 'data_path' AND scope IS NULL").await?;
        Ok(rows.into_iter().next().and_then(|mut r| r.pop().flatten()))
    }
}

/// The catalog's latest snapshot: what the next one goes on from.
pub struct LastSnapshot {
    pub id: i64,
    pub schema_version: i64,
    pub next_catalog: i64,
    pub next_file: i64,
}

impl Tx {
    pub async fn last_snapshot(&mut self) -> ConnectorResult<LastSnapshot> {
        let rows = self
            .rows(
                "SELECT snapshot_id, schema_version, next_catalog_id, next_file_id FROM ducklake_snapshot \
                 ORDER BY snapshot_id DESC LIMIT 1",
            )
            .await?;
        let r = rows.first().ok_or_else(|| ConnectorError::Other("the DuckLake catalog has no snapshot".into()))?;
        Ok(LastSnapshot { id: int(&r[0]), schema_version: int(&r[1]), next_catalog: int(&r[2]), next_file: int(&r[3]) })
    }

    pub async fn rows(&mut self, sql: &str) -> ConnectorResult<Vec<Cells>> {
        match self {
            Tx::Sqlite(t) => {
                let rows = raw(sql).fetch_all(&mut **t).await.map_err(|e| failed(&e))?;
                Ok(rows.iter().map(|r| (0..r.len()).map(|i| cell_sqlite(r, i)).collect()).collect())
            }
            Tx::Postgres(t) => {
                let rows = raw(sql).fetch_all(&mut **t).await.map_err(|e| failed(&e))?;
                Ok(rows.iter().map(|r| (0..r.len()).map(|i| cell_pg(r, i)).collect()).collect())
            }
        }
    }

    /// Runs `sql`; answers the rows it changed.
    pub async fn exec(&mut self, sql: &str) -> ConnectorResult<u64> {
        match self {
            Tx::Sqlite(t) => raw(sql).execute(&mut **t).await.map(|r| r.rows_affected()),
            Tx::Postgres(t) => raw(sql).execute(&mut **t).await.map(|r| r.rows_affected()),
        }
        .map_err(|e| failed(&e))
    }

    pub async fn commit(self) -> ConnectorResult<()> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
        }
        .map_err(|e| failed(&e))
    }

    pub async fn table_names(&mut self) -> ConnectorResult<Vec<String>> {
        let sql = match self {
            Tx::Sqlite(_) => "SELECT name FROM sqlite_master WHERE type = 'table'".to_string(),
            Tx::Postgres(_) => "SELECT table_name::text FROM information_schema.tables \
                                WHERE table_schema = current_schema()"
                .to_string(),
        };
        Ok(self.rows(&sql).await?.into_iter().filter_map(|mut r| r.pop().flatten()).collect())
    }

    /// The time now as a snapshot records it (DuckDB's text form).
    pub fn now(&self) -> String {
        let t = time::OffsetDateTime::now_utc();
        let f =
            time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second].[subsecond digits:6]+00");
        text(&t.format(&f).unwrap_or_default())
    }

    /// The first cell of the first row, as an integer.
    pub async fn int(&mut self, sql: &str) -> ConnectorResult<Option<i64>> {
        let rows = self.rows(sql).await?;
        Ok(rows.first().and_then(|r| r.first()).and_then(|c| c.as_deref()).and_then(|c| c.parse().ok()))
    }
}

/// A cell as an integer (0 when null or not one).
pub fn int(c: &Option<String>) -> i64 {
    c.as_deref().and_then(|c| c.parse().ok()).unwrap_or(0)
}
