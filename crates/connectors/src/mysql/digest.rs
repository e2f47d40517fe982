//! Checksums of a table's rows by key range, computed in MariaDB or MySQL,
//! for a verification that reads only the ranges whose sums differ.

use super::MySqlConnector;
use crate::common::quote_bt;
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult, Digest, DigestRequest, FieldType};
use sqlx::{AssertSqlSafe, Row};

impl MySqlConnector {
    pub(super) async fn key_span_of(&self, entity: &str, key: &str) -> ConnectorResult<Option<(i64, i64)>> {
        let sql = format!(
            "SELECT CAST(MIN({k}) AS SIGNED), CAST(MAX({k}) AS SIGNED) FROM {t}",
            k = quote_bt(key),
            t = quote_bt(entity)
        );
        let (lo, hi): (Option<i64>, Option<i64>) =
            sqlx::query_as(AssertSqlSafe(sql)).fetch_one(&self.pool).await.map_err(|e| self.e(&e))?;
        Ok(lo.zip(hi))
    }

    /// Each bucket's count of rows and sum of the first 64 bits of the
    /// MD5 of the row's columns, each as its length and its bytes (so that
    /// no value can run into the next, and a null is `N`): text in UTF-8
    /// (whatever its character set), `FLOAT` as the double it holds (its
    /// own text keeps six digits), instants in UTC (the session's zone).
    /// A row too large to concatenate (past `max_allowed_packet`) makes
    /// the whole request fail, so that the verification reads instead.
    pub(super) async fn digests_of(&self, r: &DigestRequest) -> ConnectorResult<Vec<Digest>> {
        let schema = self.table(&r.entity).await?;
        let key = quote_bt(&r.key);
        let columns: Vec<String> = r
            .columns
            .iter()
            .map(|c| {
                let q = quote_bt(c);
                let value = match schema.fields.iter().find(|f| &f.name == c).map(|f| f.field_type) {
                    Some(FieldType::String | FieldType::Object) => format!("CONVERT({q} USING utf8mb4)"),
                    Some(FieldType::Number) => format!("CAST({q} AS DOUBLE)"),
                    _ => q,
                };
                format!("IFNULL(CONCAT(LENGTH(CAST({value} AS BINARY)), ':', CAST({value} AS BINARY)), 'N')")
            })
            .collect();
        let unless = r.unless.as_ref().map(|c| format!(" AND {} IS NULL", quote_bt(c))).unwrap_or_default();
        let sql = format!(
            "SELECT b, COUNT(*), CAST(SUM(h) AS CHAR), CAST(SUM(h IS NULL) AS SIGNED) FROM (\
               SELECT CAST(({key} - ?) DIV ? AS SIGNED) AS b, \
               CAST(CONV(LEFT(MD5(CONCAT_WS(',', {columns})), 16), 16, 10) AS UNSIGNED) AS h \
               FROM {table} WHERE {key} BETWEEN ? AND ?{unless}) AS rows_hashed GROUP BY b",
            columns = columns.join(", "),
            table = quote_bt(&r.entity),
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(r.lo)
            .bind(r.width.max(1))
            .bind(r.lo)
            .bind(r.hi)
            .fetch_all(&self.pool)
            .await
            .map_err(|e| self.e(&e))?;
        rows.iter()
            .map(|row| {
                let sum: Option<String> = row.get(2);
                let unhashed: i64 = row.try_get(3).map_err(|e| self.e(&e))?;
                if unhashed > 0 {
                    return Err(ConnectorError::Other(format!(
                        "{unhashed} rows of '{}' too large to hash in the database",
                        r.entity
                    )));
                }
                let sum = sum.unwrap_or_else(|| "0".into());
                Ok(Digest {
                    bucket: row.get(0),
                    rows: u64::try_from(row.get::<i64, _>(1)).unwrap_or(0),
                    sum: sum.parse().map_err(|_| ConnectorError::Other(format!("a digest sum '{sum}'")))?,
                })
            })
            .collect()
    }
}
