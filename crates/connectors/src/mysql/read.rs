//! Reading MySQL: the catalog, and the `Source` impl (checks, reads,
//! previews, cursor reads).

use super::types::{Pick, bind, decode, keyed_sql, map_native, pick, select_expr};
use super::{ENGINE, MySqlConnector, err};
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::Row;
use sqlx::mysql::MySqlRow;
use std::collections::HashSet;
use std::sync::Arc;

impl MySqlConnector {
    /// One table's schema; `EntityNotFound` when there is none.
    pub(super) async fn table(&self, entity: &str) -> ConnectorResult<EntitySchema> {
        self.schemas(Some(entity))
            .await?
            .pop()
            .ok_or_else(|| ConnectorError::EntityNotFound(format!("table '{entity}' does not exist")))
    }

    pub(super) async fn schemas(&self, table: Option<&str>) -> ConnectorResult<Vec<EntitySchema>> {
        with_timeout("reading the catalog", CONNECT_TIMEOUT, async {
            let rows = sqlx::query(
                "SELECT CAST(TABLE_NAME AS CHAR), CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), \
                 CAST(DATA_TYPE AS CHAR), CAST(IS_NULLABLE AS CHAR), CAST(COLUMN_KEY AS CHAR), CAST(COLUMN_COMMENT AS CHAR) \
                 FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND (? IS NULL OR TABLE_NAME = ?) \
                 AND TABLE_NAME NOT LIKE '%\\_\\_sluice\\_%' ORDER BY TABLE_NAME, ORDINAL_POSITION",
            )
            .bind(table)
            .bind(table)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
            // MariaDB's JSON columns: LONGTEXT with a json_valid() check.
            let json_checks: HashSet<(String, String)> = sqlx::query(
                "SELECT CAST(TABLE_NAME AS CHAR), CAST(CHECK_CLAUSE AS CHAR) FROM information_schema.CHECK_CONSTRAINTS \
                 WHERE CONSTRAINT_SCHEMA = DATABASE()",
            )
            .fetch_all(&self.pool)
            .await
            .unwrap_or_default()
            .into_iter()
            .filter_map(|r| {
                let t: String = r.get(0);
                let clause: String = r.get(1);
                let col = clause.strip_prefix("json_valid(`")?.split('`').next()?.to_string();
                Some((t, col))
            })
            .collect();
            let mut out: Vec<EntitySchema> = Vec::new();
            for r in rows {
                let table: String = r.get(0);
                let name: String = r.get(1);
                let column_type: String = r.get(2);
                let data_type: String = r.get(3);
                let nullable: String = r.get(4);
                let key: String = r.get(5);
                let comment: String = r.get(6);
                let is_json = json_checks.contains(&(table.clone(), name.clone())) || data_type.eq_ignore_ascii_case("json");
                let native = if is_json { "json".to_string() } else { column_type };
                let field_type = match (is_json, comment == ARRAY_COMMENT) {
                    (true, true) => FieldType::Array,
                    (true, false) => FieldType::Object,
                    _ => map_native(&native, &data_type),
                };
                let f = Field {
                    field_type,
                    name,
                    nullable: nullable == "YES",
                    primary_key: key == "PRI",
                    native_type: Some(native_tag(ENGINE, &native)),
                };
                match out.last_mut() {
                    Some(s) if s.name == table => s.fields.push(f),
                    _ => out.push(EntitySchema { name: table, fields: vec![f] }),
                }
            }
            Ok(out)
        })
        .await
    }
}

#[async_trait::async_trait]
impl Source for MySqlConnector {
    async fn check(&self) -> ConnectorResult<()> {
        with_timeout(&format!("connecting to {}", self.host), CONNECT_TIMEOUT, async {
            use sqlx::Connection;
            let mut conn = sqlx::MySqlConnection::connect_with(&self.opts).await.map_err(|e| self.e(&e))?;
            sqlx::query("SELECT 1").execute(&mut conn).await.map_err(|e| self.e(&e))?;
            let _ = conn.close().await;
            Ok(())
        })
        .await
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        self.schemas(None).await
    }

    async fn entity_fields(&self, entity: &str) -> ConnectorResult<Arc<Vec<Field>>> {
        Ok(Arc::new(self.table(entity).await?.fields))
    }

    /// The rows in key order, text by its bytes (`BINARY`); lookups of
    /// single keys by the columns as they are, so that the key's index
    /// serves them.
    async fn key_span(&self, entity: &str, key: &str) -> ConnectorResult<Option<(i64, i64)>> {
        self.key_span_of(entity, key).await
    }

    async fn digests(&self, request: &DigestRequest) -> ConnectorResult<Option<Vec<Digest>>> {
        self.digests_of(request).await.map(Some)
    }

    async fn read_keyed(&self, read: &KeyedRead) -> ConnectorResult<Option<Box<dyn RecordReader>>> {
        let schema = self.table(&read.entity).await?;
        let (sql, values) = keyed_sql(&schema, read);
        let fields = Arc::new(schema.fields);
        let decode = self.row_decoder(&fields);
        let (host, db) = (self.host.clone(), self.database.clone());
        Ok(Some(select_reader(
            fields,
            self.pool.clone(),
            sql,
            move |mut q| {
                for v in &values {
                    q = bind(q, v);
                }
                q
            },
            read.batch_size.max(1),
            decode,
            move |e| err(e, &host, &db),
        )))
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let schema = self.table(&req.entity).await?;
        let cols: Vec<String> = schema.fields.iter().map(select_expr).collect();
        let batch_size = batch_size(&req);
        if let Some(name) = &req.snapshot {
            // A copy in a change stream's snapshot, on its connection.
            let held = super::snapshot::held(name).ok_or_else(|| {
                ConnectorError::Other(format!("snapshot {name} is no longer held: the copy begins again"))
            })?;
            let (sql, bound) =
                select_sql(&schema, &cols, &quote_bt(&schema.name), &req, quote_bt, |_| "?".to_string())?;
            let fields = Arc::new(schema.fields);
            let decode = self.row_decoder(&fields);
            return Ok(super::snapshot::read_in_snapshot(held, fields, sql, bound, batch_size, decode, {
                let (host, db) = (self.host.clone(), self.database.clone());
                move |e| err(e, &host, &db)
            }));
        }
        if may_split(&req)
            && let Some(reader) = self.read_in_ranges(&schema, &cols, req.ranges, batch_size).await?
        {
            return Ok(reader);
        }
        let (sql, bound) = select_sql(&schema, &cols, &quote_bt(&schema.name), &req, quote_bt, |_| "?".to_string())?;
        let fields = Arc::new(schema.fields);
        let decode = self.row_decoder(&fields);
        let (host, db) = (self.host.clone(), self.database.clone());
        Ok(select_reader(
            fields,
            self.pool.clone(),
            sql,
            move |q| match &bound {
                Some(v) => bind(q, v),
                None => q,
            },
            batch_size,
            decode,
            move |e| err(e, &host, &db),
        ))
    }
}

impl MySqlConnector {
    pub(super) fn row_decoder(
        &self,
        fields: &[Field],
    ) -> impl Fn(&MySqlRow) -> ConnectorResult<Vec<Value>> + Send + 'static {
        let picks: Vec<Pick> = fields.iter().map(pick).collect();
        let (host, db) = (self.host.clone(), self.database.clone());
        move |row| picks.iter().enumerate().map(|(i, p)| decode(row, i, *p).map_err(|e| err(&e, &host, &db))).collect()
    }
}
