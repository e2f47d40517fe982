//! SQLite's declared types and the vocabulary's field types, both ways,
//! and values as SQLite stores them: decoded from a stored value, bound as
//! a parameter.

use super::ENGINE;
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::Sqlite;

/// Declared type → vocabulary, by SQLite's affinity rules refined.
pub fn map_declared(declared: &str) -> FieldType {
    let t = declared.to_ascii_uppercase();
    if t.contains("BOOL") {
        FieldType::Boolean
    } else if t.contains("DECIMAL") || t.contains("NUMERIC") {
        FieldType::Decimal
    } else if t.contains("INT") {
        FieldType::Integer
    } else if t.contains("REAL") || t.contains("FLOA") || t.contains("DOUB") {
        FieldType::Number
    } else if t.contains("TIMESTAMP") || t.contains("DATETIME") {
        FieldType::Timestamp
    } else if t.starts_with("DATE") {
        FieldType::Date
    } else if t.contains("JSON_ARRAY") {
        FieldType::Array
    } else if t.contains("JSON") {
        FieldType::Object
    } else if t.contains("BLOB") {
        FieldType::Binary
    } else {
        FieldType::String
    }
}

/// Vocabulary → declared type for tables we create.
pub(super) fn declared_for(f: &Field) -> String {
    if let Some(n) = native_for(f, ENGINE) {
        return n.to_string();
    }
    match f.field_type {
        FieldType::String => "TEXT",
        FieldType::Integer => "INTEGER",
        FieldType::Number => "REAL",
        FieldType::Decimal => "DECIMAL_TEXT",
        FieldType::Boolean => "BOOLEAN",
        FieldType::Timestamp => "TIMESTAMP",
        FieldType::Date => "DATE",
        FieldType::Object => "JSON_TEXT",
        FieldType::Array => "JSON_ARRAY_TEXT",
        FieldType::Binary => "BLOB",
    }
    .to_string()
}

/// A stored value as a value of type `t`, by its storage class. Text that
/// is not UTF-8 fails the read, as it always did.
pub(super) fn decode(cell: rusqlite::types::ValueRef<'_>, i: usize, t: FieldType) -> ConnectorResult<Value> {
    use rusqlite::types::ValueRef as V;
    Ok(match cell {
        V::Null => Value::Null,
        V::Integer(n) => match t {
            FieldType::Boolean => Value::Bool(n != 0),
            FieldType::Number => Value::Float(n as f64),
            FieldType::Decimal => Value::Decimal(n.to_string()),
            FieldType::Timestamp => {
                time::OffsetDateTime::from_unix_timestamp(n).map(Value::Timestamp).unwrap_or(Value::Int(n))
            }
            FieldType::String => Value::String(n.to_string()),
            _ => Value::Int(n),
        },
        V::Real(f) => match t {
            FieldType::Decimal => Value::Decimal(f.to_string()),
            FieldType::String => Value::String(f.to_string()),
            _ => Value::Float(f),
        },
        V::Blob(b) => match t {
            FieldType::Binary => Value::Bytes(b.to_vec()),
            _ => Value::String(String::from_utf8_lossy(b).into_owned()),
        },
        V::Text(b) => match std::str::from_utf8(b) {
            Ok(text) => text_value(text.to_string(), t),
            Err(_) => return Err(ConnectorError::Other(format!("cannot read column {i}: its text is not UTF-8"))),
        },
    })
}

/// A value as SQLite stores it: what reads bind and writes insert.
pub(super) fn param(v: &Value) -> rusqlite::types::Value {
    use rusqlite::types::Value as P;
    match v {
        Value::Null => P::Null,
        Value::Bool(b) => P::Integer(i64::from(*b)),
        Value::Int(i) => P::Integer(*i),
        Value::Float(f) => P::Real(*f),
        Value::Decimal(s) | Value::String(s) | Value::RawJson(s) => P::Text(s.clone()),
        Value::Timestamp(t) => P::Text(format_timestamp(*t)),
        Value::Date(d) => P::Text(format_date(*d)),
        Value::Json(j) => P::Text(j.to_string()),
        Value::Bytes(b) => P::Blob(b.clone()),
    }
}

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, <Sqlite as sqlx::Database>::Arguments>;

/// Binds `v` as SQLite stores it ([`param`]).
pub(super) fn bind<'q>(q: SqliteQuery<'q>, v: &Value) -> SqliteQuery<'q> {
    use rusqlite::types::Value as P;
    match param(v) {
        P::Null => q.bind(Option::<String>::None),
        P::Integer(i) => q.bind(i),
        P::Real(f) => q.bind(f),
        P::Text(s) => q.bind(s),
        P::Blob(b) => q.bind(b),
    }
}
