//! Checksums of a table's rows by key range, computed in PostgreSQL, for a
//! verification that reads only the ranges whose sums differ.

use super::PgConnector;
use crate::common::quote_dq;
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult, Digest, DigestRequest, FieldType};
use sqlx::{AssertSqlSafe, Row};

/// The session settings a row's text depends on, set alike on every side
/// so that equal values hash alike whatever each role's defaults are.
const SETTINGS: &str = "SET LOCAL TimeZone = 'UTC'; SET LOCAL DateStyle = 'ISO, YMD'; \
     SET LOCAL IntervalStyle = 'postgres'; SET LOCAL extra_float_digits = 1; SET LOCAL bytea_output = 'hex'";

impl PgConnector {
    pub(super) async fn key_span_of(&self, entity: &str, key: &str) -> ConnectorResult<Option<(i64, i64)>> {
        let sql =
            format!("SELECT min({k})::int8, max({k})::int8 FROM {t}", k = quote_dq(key), t = self.qualified(entity));
        let (lo, hi): (Option<i64>, Option<i64>) =
            sqlx::query_as(AssertSqlSafe(sql)).fetch_one(&self.pool).await.map_err(|e| self.e(&e))?;
        Ok(lo.zip(hi))
    }

    /// Each bucket's count of rows and sum of a 64-bit hash of the row of
    /// the request's columns: `hash_record_extended` (PostgreSQL 14 and
    /// later) of the values themselves where their type's own hash tells
    /// values apart exactly (numbers, instants, dates, booleans, `jsonb`,
    /// `bytea`: no text printed, `1.5` and `1.50` alike), of the text, by
    /// its bytes, for the rest (text of any collation, `citext`, enums,
    /// arrays, `json`); where that fails (a type without a hash function,
    /// an older server), `hashtextextended` of the row's text. Each row's
    /// hash is mixed again before it is summed: `hash_record_extended`
    /// adds its columns' hashes, so that a sum of them alone would not see
    /// two rows of a bucket swap a value.
    pub(super) async fn digests_of(&self, r: &DigestRequest) -> ConnectorResult<Vec<Digest>> {
        let schema = self.table(&r.entity).await?;
        let by_value: Vec<String> = r
            .columns
            .iter()
            .map(|c| {
                let q = quote_dq(c);
                let native = schema.fields.iter().find(|f| &f.name == c).map(|f| {
                    (f.field_type, crate::common::native_for(f, super::ENGINE).unwrap_or("").to_ascii_lowercase())
                });
                match native {
                    Some((
                        FieldType::Integer
                        | FieldType::Number
                        | FieldType::Decimal
                        | FieldType::Boolean
                        | FieldType::Timestamp
                        | FieldType::Date,
                        _,
                    )) => q,
                    Some((FieldType::Object, n)) if n == "jsonb" => q,
                    Some((FieldType::Binary, n)) if n == "bytea" => q,
                    _ => format!("({q}::text) COLLATE \"C\""),
                }
            })
            .collect();
        let fast = format!("hashint8extended(hash_record_extended(ROW({}), 0), 0)", by_value.join(", "));
        match self.sum_buckets(r, &fast).await {
            Err(ConnectorError::Other(_)) => {
                let columns: Vec<String> = r.columns.iter().map(|c| quote_dq(c)).collect();
                self.sum_buckets(r, &format!("hashtextextended(ROW({})::text, 0)", columns.join(", "))).await
            }
            other => other,
        }
    }

    /// The buckets of `r`, each row hashed by `hash`.
    async fn sum_buckets(&self, r: &DigestRequest, hash: &str) -> ConnectorResult<Vec<Digest>> {
        let key = quote_dq(&r.key);
        let unless = r.unless.as_ref().map(|c| format!(" AND {} IS NULL", quote_dq(c))).unwrap_or_default();
        let sql = format!(
            "SELECT ({key}::int8 - $1) / $3, count(*), sum({hash})::text \
             FROM {table} WHERE {key} BETWEEN $1 AND $2{unless} GROUP BY 1",
            table = self.qualified(&r.entity),
        );
        let mut tx = self.pool.begin().await.map_err(|e| self.e(&e))?;
        sqlx::raw_sql(SETTINGS).execute(&mut *tx).await.map_err(|e| self.e(&e))?;
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(r.lo)
            .bind(r.hi)
            .bind(r.width.max(1))
            .fetch_all(&mut *tx)
            .await
            .map_err(|e| self.e(&e))?;
        tx.rollback().await.map_err(|e| self.e(&e))?;
        rows.iter()
            .map(|row| {
                let sum: String = row.get(2);
                Ok(Digest {
                    bucket: row.get(0),
                    rows: u64::try_from(row.get::<i64, _>(1)).unwrap_or(0),
                    sum: sum.parse().map_err(|_| ConnectorError::Other(format!("a digest sum '{sum}'")))?,
                })
            })
            .collect()
    }
}
