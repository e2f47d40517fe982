//! Reading PostgreSQL: the `Source` impl (the catalog, checks, reads,
//! previews, cursor reads and the bulk formats offered), and the decoding
//! of a binary COPY into batches of records.

use super::bulk::{CursorKind, PgBulkOut, PgRowsOut, RowsParser};
use super::types::{csv_expr, decode, dollar_quoted, literal, map_native, native_for_field, select_expr};
use super::{BULK_FORMAT, BULK_ROWS_FORMAT, ENGINE, PgConnector, binary};
use crate::common::*;
use sluice_domain::connect::connector::BulkFormat;
use sluice_domain::connect::connector::*;
use sqlx::{AssertSqlSafe, Row};
use std::sync::Arc;

impl PgConnector {
    pub(super) async fn schemas(&self, table: Option<&str>) -> ConnectorResult<Vec<EntitySchema>> {
        let sql = "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), t.typcategory::text, \
                   a.attnotnull, coalesce(a.attnum = ANY(i.indkey::int2[]), false), \
                   coalesce(col_description(c.oid, a.attnum), '') \
                   FROM pg_class c \
                   JOIN pg_namespace n ON n.oid = c.relnamespace \
                   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped \
                   JOIN pg_type t ON t.oid = a.atttypid \
                   LEFT JOIN pg_index i ON i.indrelid = c.oid AND i.indisprimary \
                   WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'v', 'm', 'f') \
                   AND ($2::text IS NULL OR c.relname = $2) AND c.relname NOT LIKE '%\\_\\_sluice\\_new' \
                   ORDER BY c.relname, a.attnum";
        let rows = with_timeout("reading the catalog", CONNECT_TIMEOUT, async {
            sqlx::query(sql).bind(&self.schema).bind(table).fetch_all(&self.pool).await.map_err(|e| self.e(&e))
        })
        .await?;
        let mut out: Vec<EntitySchema> = Vec::new();
        for r in rows {
            let table: String = r.get(0);
            let native: String = r.get(2);
            let category: String = r.get(3);
            let notnull: bool = r.get(4);
            let pk: bool = r.get(5);
            let comment: String = r.get(6);
            let mapped = map_native(&native, &category);
            let f = Field {
                name: r.get(1),
                field_type: if mapped == FieldType::Object && comment == ARRAY_COMMENT {
                    FieldType::Array
                } else {
                    mapped
                },
                nullable: !notnull,
                primary_key: pk,
                native_type: Some(native_tag(ENGINE, &native)),
            };
            match out.last_mut() {
                Some(s) if s.name == table => s.fields.push(f),
                _ => out.push(EntitySchema { name: table, fields: vec![f] }),
            }
        }
        Ok(out)
    }

    /// One table's schema; `EntityNotFound` when there is none.
    pub(super) async fn table(&self, entity: &str) -> ConnectorResult<EntitySchema> {
        self.schemas(Some(entity)).await?.pop().ok_or_else(|| {
            ConnectorError::EntityNotFound(format!("table \"{}.{}\" does not exist", self.schema, entity))
        })
    }
}

#[async_trait::async_trait]
impl Source for PgConnector {
    /// The start of the oldest transaction of this database that holds a
    /// transaction id (has written), other than this session's. Other
    /// roles' sessions are visible to superusers and members of
    /// `pg_read_all_stats` only; for the rest the lookback protects.
    async fn write_horizon(&self, cursor: &Field) -> ConnectorResult<Option<time::OffsetDateTime>> {
        // A column without a zone holds wall times, not instants: no
        // comparison with a transaction's start means anything.
        if zoneless(cursor) {
            return Ok(None);
        }
        with_timeout("reading open transactions", CONNECT_TIMEOUT, async {
            // With no writer open, now: a transaction that begins after
            // this query and commits after the read is caught next time.
            // A role that cannot see other roles' sessions (neither a
            // superuser nor a member of pg_read_all_stats) cannot tell.
            sqlx::query_scalar(
                "SELECT CASE WHEN (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) \
                   OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER') THEN \
                 (SELECT coalesce(min(xact_start), statement_timestamp()) FROM pg_stat_activity \
                 WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xid IS NOT NULL) END",
            )
            .fetch_one(&self.pool)
            .await
            .map_err(|e| self.e(&e))
        })
        .await
    }

    async fn check(&self) -> ConnectorResult<()> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            // A direct connection, so that the cause of a failure comes
            // through (the pool retries until its own timeout).
            use sqlx::Connection;
            let mut conn = sqlx::PgConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))?;
            let exists: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(&self.schema)
                .fetch_one(&mut conn)
                .await
                .map_err(|e| self.e(&e))?;
            let _ = conn.close().await;
            if exists {
                Ok(())
            } else {
                Err(ConnectorError::EntityNotFound(format!("schema \"{}\" does not exist", self.schema)))
            }
        })
        .await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        self.schemas(None).await
    }

    async fn bulk_out_in_snapshot(
        &self,
        entity: &str,
        format: BulkFormat,
        fields: &[Field],
        snapshot: &str,
    ) -> ConnectorResult<Option<Box<dyn BulkStream>>> {
        if format != BULK_FORMAT {
            return Ok(None);
        }
        Ok(Some(self.bulk_in_snapshot(entity, fields, snapshot).await?))
    }

    async fn bulk_out(
        &self,
        entity: &str,
        format: BulkFormat,
        fields: &[Field],
        cursor: Option<&CursorBound>,
        ranges: usize,
    ) -> ConnectorResult<Option<Box<dyn BulkStream>>> {
        use sqlx::postgres::PgPoolCopyExt;
        let cols = fields.iter().map(|f| quote_dq(&f.name)).collect::<Vec<_>>().join(", ");
        let table = self.qualified(entity);
        match (format, cursor) {
            (BULK_FORMAT, None) => {
                let sql = format!("COPY (SELECT {cols} FROM {table}) TO STDOUT (FORMAT binary)");
                Ok(Some(Box::new(self.copy_out(&sql).await?.binary())))
            }
            (SLUICE_CSV, None) => {
                // The values formatted by PostgreSQL as the file writer
                // would write them: nothing decoded here.
                let cols = fields.iter().map(csv_expr).collect::<Vec<_>>().join(", ");
                if ranges > 1 {
                    let schema = EntitySchema { name: entity.to_string(), fields: fields.to_vec() };
                    if let Some(stream) = self.csv_in_ranges(&schema, &cols, ranges).await {
                        return Ok(Some(stream));
                    }
                }
                let sql = format!("COPY (SELECT {cols} FROM {table}) TO STDOUT (FORMAT csv)");
                Ok(Some(Box::new(self.copy_out(&sql).await?)))
            }
            (BULK_ROWS_FORMAT, Some(c)) => {
                let Some(at) = fields.iter().position(|f| f.name == c.field) else {
                    return Err(ConnectorError::InvalidConfig(format!(
                        "cursor field '{}' is not in {entity}",
                        c.field
                    )));
                };
                let f = &fields[at];
                let Some((native, kind)) = native_for(f, ENGINE).and_then(|n| Some((n, CursorKind::of(n)?))) else {
                    return Ok(None);
                };
                let mut sql = format!("COPY (SELECT {cols} FROM {table}");
                if let Some(from) = &c.from {
                    let Some(text) = literal(from) else { return Ok(None) };
                    sql.push_str(&format!(
                        " WHERE {} >= CAST({} AS {native})",
                        quote_dq(&c.field),
                        dollar_quoted(&text)
                    ));
                }
                sql.push_str(&format!(" ORDER BY {}) TO STDOUT (FORMAT binary)", quote_dq(&c.field)));
                let stream = self.pool.copy_out_raw(&sql).await.map_err(|e| self.e(&e))?;
                Ok(Some(Box::new(PgRowsOut {
                    stream,
                    host: self.host.clone(),
                    database: self.database.clone(),
                    parser: RowsParser::new(fields.len(), at, kind),
                })))
            }
            _ => Ok(None),
        }
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        Ok(Arc::new(self.table(entity).await?.fields))
    }

    async fn max_cursor(&self, entity: &str, cursor: &Field) -> ConnectorResult<Option<Value>> {
        // The greatest value under the column's own name, so that the
        // select expression that decodes the column decodes it; by order,
        // not max(), which some types (uuid) lack, and an index serves.
        let c = quote_dq(&cursor.name);
        let sql = format!(
            "SELECT {} FROM (SELECT {c} FROM {} WHERE {c} IS NOT NULL ORDER BY {c} DESC LIMIT 1) m",
            select_expr(cursor),
            self.qualified(entity)
        );
        let row = sqlx::query(AssertSqlSafe(sql)).fetch_optional(&self.pool).await.map_err(|e| self.e(&e))?;
        let Some(row) = row else { return Ok(None) };
        let v = decode(&row, 0, cursor.field_type).map_err(|e| self.e(&e))?;
        Ok((!v.is_null()).then_some(v))
    }

    async fn key_span(&self, entity: &str, key: &str) -> ConnectorResult<Option<(i64, i64)>> {
        self.key_span_of(entity, key).await
    }

    async fn digests(&self, request: &DigestRequest) -> ConnectorResult<Option<Vec<Digest>>> {
        self.digests_of(request).await.map(Some)
    }

    /// A binary COPY of the rows in key order, text by its bytes.
    async fn read_keyed(&self, read: &KeyedRead) -> ConnectorResult<Option<Box<dyn RecordReader>>> {
        let schema = self.table(&read.entity).await?;
        let cols: Vec<String> = schema.fields.iter().map(select_expr).collect();
        let sql = keyed_select_sql(
            read,
            &cols,
            &self.qualified(&schema.name),
            // Text by its bytes, as it reads (enums, domains and the like
            // included): what every side and the merge compare.
            |f| {
                let native = crate::common::native_for(f, super::ENGINE).unwrap_or("text");
                if f.field_type == FieldType::String && !native.starts_with("uuid") {
                    format!("({}::text) COLLATE \"C\"", quote_dq(&f.name))
                } else {
                    quote_dq(&f.name)
                }
            },
            |f| quote_dq(&f.name),
            super::cdc::literal_of,
            false,
            true,
        );
        let sql = format!("COPY ({sql}) TO STDOUT (FORMAT binary)");
        let decoding = Decoding::new(&schema.fields, read.batch_size.max(1), &self.host, &self.database);
        let fields = decoding.fields.clone();
        let mut stream = self.copy_out(&sql).await?;
        Ok(Some(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            decoding.pump(&mut stream, &tx).await;
        }))))
    }

    /// Reads through a binary COPY of the select expressions, decoded here:
    /// no row protocol, and no text parsed for numbers and times.
    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let schema = self.table(&req.entity).await?;
        let cols: Vec<String> = schema.fields.iter().map(select_expr).collect();
        // COPY takes no parameters: the cursor's bound is a quoted literal.
        let from = req.cursor.as_ref().and_then(|c| c.from.as_ref()).map(|v| match literal(v) {
            Some(text) => dollar_quoted(&text),
            None => "NULL".to_string(),
        });
        let (sql, _) = select_sql(&schema, &cols, &self.qualified(&schema.name), &req, quote_dq, |f| {
            format!("CAST({} AS {})", from.as_deref().unwrap_or("NULL"), native_for_field(f))
        })?;
        let batch_size = batch_size(&req);
        if let Some(snapshot) = &req.snapshot {
            return self.read_in_snapshot(&schema, &sql, snapshot, batch_size).await;
        }
        if may_split(&req)
            && let Some(reader) = self.read_in_ranges(&schema, &cols, req.ranges, batch_size).await?
        {
            return Ok(reader);
        }
        let sql = format!("COPY ({sql}) TO STDOUT (FORMAT binary)");
        let decoding = Decoding::new(&schema.fields, batch_size, &self.host, &self.database);
        let fields = decoding.fields.clone();
        let mut stream = self.copy_out(&sql).await?;
        Ok(Box::new(ChannelReader::spawn(fields, move |tx| async move {
            decoding.pump(&mut stream, &tx).await;
        })))
    }
}

/// How a binary COPY of a read's select expressions becomes batches of
/// records.
pub(super) struct Decoding {
    pub(super) fields: Arc<Vec<Field>>,
    wires: Vec<binary::Wire>,
    names: Vec<String>,
    batch_size: usize,
    source: String,
}

impl Decoding {
    pub(super) fn new(fields: &[Field], batch_size: usize, host: &str, database: &str) -> Self {
        Decoding {
            wires: fields.iter().map(|f| binary::Wire::of(f.field_type)).collect(),
            names: fields.iter().map(|f| f.name.clone()).collect(),
            fields: Arc::new(fields.to_vec()),
            batch_size,
            source: format!("{host}/{database}"),
        }
    }

    /// Decodes `stream` into batches sent through `tx`, until its end, the
    /// first failure (sent on) or the reader going away.
    pub(super) async fn pump(
        &self,
        stream: &mut PgBulkOut<'_>,
        tx: &tokio::sync::mpsc::Sender<ConnectorResult<RecordBatch>>,
    ) {
        let mut decoder = binary::Decoder::default();
        let mut batch = Vec::with_capacity(self.batch_size);
        let bad = |e: String| ConnectorError::Other(format!("reading {}: {e}", self.source));
        loop {
            match stream.chunk().await {
                Ok(Some(bytes)) => decoder.feed(&bytes),
                Err(e) => {
                    send(tx, Err(e)).await;
                    return;
                }
                // Whole streams end with their trailer: one that ends
                // without it was cut (its connection lost), not done.
                Ok(None) if decoder.is_cut() => {
                    send(tx, Err(bad("the binary COPY stream was cut before its end".into()))).await;
                    return;
                }
                Ok(None) => break,
            }
            loop {
                match decoder.next(&self.wires, &self.names) {
                    Ok(binary::Step::Record(r)) => {
                        batch.push(r);
                        if batch.len() >= self.batch_size {
                            let rows = std::mem::replace(&mut batch, Vec::with_capacity(self.batch_size));
                            if !send(tx, Ok(RecordBatch { fields: self.fields.clone(), rows })).await {
                                return;
                            }
                        }
                    }
                    Ok(binary::Step::NeedMore | binary::Step::End) => break,
                    Err(e) => {
                        send(tx, Err(bad(e))).await;
                        return;
                    }
                }
            }
        }
        if !batch.is_empty() {
            send(tx, Ok(RecordBatch { fields: self.fields.clone(), rows: batch })).await;
        }
    }
}
