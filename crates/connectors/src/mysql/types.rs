//! MySQL's types and the vocabulary's field types: the mapping both ways,
//! how each column is selected and decoded (temporal values from the
//! binary protocol's parts), and values bound as parameters.

use super::ENGINE;
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::mysql::MySqlRow;
use sqlx::{MySql, Row};

/// MySQL type → vocabulary.
pub fn map_native(column_type: &str, data_type: &str) -> FieldType {
    let ct = column_type.to_ascii_lowercase();
    match data_type.to_ascii_lowercase().as_str() {
        "tinyint" if ct.starts_with("tinyint(1)") => FieldType::Boolean,
        "bool" | "boolean" => FieldType::Boolean,
        "tinyint" | "smallint" | "mediumint" | "int" | "integer" | "bigint" | "year" => FieldType::Integer,
        "float" | "double" | "real" => FieldType::Number,
        "decimal" | "numeric" => FieldType::Decimal,
        "datetime" | "timestamp" => FieldType::Timestamp,
        "date" => FieldType::Date,
        "json" => FieldType::Object,
        "binary" | "varbinary" | "tinyblob" | "blob" | "mediumblob" | "longblob" | "bit" => FieldType::Binary,
        _ => FieldType::String,
    }
}

/// Vocabulary → MySQL type for tables we create. Key columns cannot be
/// `LONGTEXT`, so string keys are `VARCHAR(255)`.
pub(super) fn native_for_field(f: &Field) -> String {
    if let Some(n) = native_for(f, ENGINE) {
        return n.to_string();
    }
    // From another engine: keep a decimal's precision and scale where
    // MySQL's DECIMAL can hold them.
    if let (FieldType::Decimal, Some((p, s))) = (f.field_type, decimal_args(f))
        && p <= 65
        && s <= 30
    {
        return format!("DECIMAL({p},{s})");
    }
    match f.field_type {
        FieldType::String if f.primary_key => "VARCHAR(255)",
        FieldType::String => "LONGTEXT",
        FieldType::Integer => "BIGINT",
        FieldType::Number => "DOUBLE",
        FieldType::Decimal => "DECIMAL(38,12)",
        FieldType::Boolean => "BOOLEAN",
        FieldType::Timestamp => "DATETIME(6)",
        FieldType::Date => "DATE",
        FieldType::Object | FieldType::Array => "JSON",
        FieldType::Binary => "LONGBLOB",
    }
    .to_string()
}

pub(super) fn array_comment(f: &Field) -> String {
    if f.field_type == FieldType::Array && native_for(f, ENGINE).is_none() {
        format!(" COMMENT '{ARRAY_COMMENT}'")
    } else {
        String::new()
    }
}

/// How a column is selected and decoded.
#[derive(Clone, Copy)]
pub(super) enum Pick {
    /// Cast by the server to a form sqlx decodes ([`select_expr`]).
    Cast(FieldType),
    /// A `DATETIME`, `TIMESTAMP` or `DATE` column as the server sends it
    /// (in the binary protocol a length byte and the parts), decoded here
    /// rather than formatted by the server and parsed again.
    Temporal(FieldType),
    /// A text, JSON or `DECIMAL` column's characters as sent, uncast.
    Text(FieldType),
}

pub(super) fn pick(f: &Field) -> Pick {
    let native = native_for(f, ENGINE).unwrap_or("").to_ascii_lowercase();
    let base = native.split('(').next().unwrap_or("").trim();
    match f.field_type {
        t @ (FieldType::Timestamp | FieldType::Date) if matches!(base, "datetime" | "timestamp" | "date") => {
            Pick::Temporal(t)
        }
        FieldType::Decimal if matches!(base, "decimal" | "numeric") => Pick::Text(FieldType::Decimal),
        t @ (FieldType::String | FieldType::Object | FieldType::Array)
            if matches!(base, "char" | "varchar" | "tinytext" | "text" | "mediumtext" | "longtext" | "json") =>
        {
            Pick::Text(t)
        }
        t => Pick::Cast(t),
    }
}

/// Text by the bytes of its UTF-8 (code point order), whatever the
/// column's character set: the order every destination compares keys in.
pub(super) fn bytewise(f: &Field, e: String) -> String {
    if f.field_type == FieldType::String { format!("BINARY CONVERT({e} USING utf8mb4)") } else { e }
}

/// The SQL of a keyed read of `schema` (rows in key order, text by its
/// bytes; lookups of single keys by the columns as they are, so that the
/// key's index serves them), and the values it binds, in order.
pub(super) fn keyed_sql(schema: &EntitySchema, read: &KeyedRead) -> (String, Vec<Value>) {
    let cols: Vec<String> = schema.fields.iter().map(select_expr).collect();
    let mut values = Vec::new();
    let sql = keyed_select_sql(
        read,
        &cols,
        &quote_bt(&schema.name),
        |f| bytewise(f, quote_bt(&f.name)),
        |f| quote_bt(&f.name),
        |_, v| {
            values.push(v.clone());
            "?".into()
        },
        false,
        false,
    );
    (sql, values)
}

pub(super) fn select_expr(f: &Field) -> String {
    let c = quote_bt(&f.name);
    match pick(f) {
        Pick::Temporal(_) | Pick::Text(_) => c,
        Pick::Cast(FieldType::Integer | FieldType::Boolean) => format!("CAST({c} AS SIGNED)"),
        Pick::Cast(FieldType::Number) => format!("CAST({c} AS DOUBLE)"),
        Pick::Cast(FieldType::Binary) => c,
        Pick::Cast(FieldType::Timestamp) => format!("DATE_FORMAT({c}, '%Y-%m-%dT%H:%i:%s.%fZ')"),
        Pick::Cast(_) => format!("CAST({c} AS CHAR)"),
    }
}

pub(super) fn decode(row: &MySqlRow, i: usize, pick: Pick) -> Result<Value, sqlx::Error> {
    let t = match pick {
        Pick::Temporal(t) => {
            return row.try_get_unchecked::<Option<&[u8]>, _>(i)?.map_or(Ok(Value::Null), |b| temporal(b, t));
        }
        Pick::Text(t) => {
            let s = row.try_get_unchecked::<Option<&[u8]>, _>(i)?.map(std::str::from_utf8).transpose();
            let s = s.map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
            return Ok(s.map_or(Value::Null, |s| text_value(s.to_owned(), t)));
        }
        Pick::Cast(t) => t,
    };
    Ok(match t {
        FieldType::Integer => row.try_get::<Option<i64>, _>(i)?.map(Value::Int),
        FieldType::Boolean => row.try_get::<Option<i64>, _>(i)?.map(|n| Value::Bool(n != 0)),
        FieldType::Number => row.try_get::<Option<f64>, _>(i)?.map(Value::Float),
        FieldType::Binary => row.try_get::<Option<Vec<u8>>, _>(i)?.map(Value::Bytes),
        FieldType::Timestamp | FieldType::Date => row.try_get::<Option<String>, _>(i)?.map(|s| date_text(s, t)),
        other => row.try_get::<Option<String>, _>(i)?.map(|s| text_value(s, other)),
    }
    .unwrap_or(Value::Null))
}

/// A temporal column's value as sent: in the binary protocol a length
/// byte (0, 4, 7 or 11) then year (2 bytes), month, day, hour, minute,
/// second and microseconds (4 bytes), little-endian; a zero date is NULL
/// (see [`zero_date`]). sqlx prepares every statement, so rows come in
/// the binary protocol; a value in text (which starts with a digit, never
/// a length byte) would be parsed as the cast columns are.
fn temporal(b: &[u8], t: FieldType) -> Result<Value, sqlx::Error> {
    let Some((&len, parts)) = b.split_first().filter(|(len, parts)| **len <= 11 && parts.len() == **len as usize)
    else {
        let s = std::str::from_utf8(b).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
        return Ok(date_text(s.to_owned(), t));
    };
    if len == 0 || (len >= 4 && (parts[..2] == [0, 0] || parts[2] == 0 || parts[3] == 0)) {
        return Ok(Value::Null);
    }
    if !matches!(len, 4 | 7 | 11) {
        return Err(sqlx::Error::Decode(format!("a temporal value of {len} bytes from the server").into()));
    }
    let year = u16::from_le_bytes([parts[0], parts[1]]);
    let (h, m, sec) = if len >= 7 { (parts[4], parts[5], parts[6]) } else { (0, 0, 0) };
    let micro = if len >= 11 { u32::from_le_bytes([parts[7], parts[8], parts[9], parts[10]]) } else { 0 };
    let date = time::Month::try_from(parts[2])
        .ok()
        .and_then(|month| time::Date::from_calendar_date(i32::from(year), month, parts[3]).ok());
    let value = match (t, date) {
        (FieldType::Date, Some(date)) => Some(Value::Date(date)),
        (_, Some(date)) => time::Time::from_hms_micro(h, m, sec, micro)
            .ok()
            .map(|time| Value::Timestamp(time::PrimitiveDateTime::new(date, time).assume_utc())),
        _ => None,
    };
    // A date no calendar has (`2024-02-31`, stored under
    // ALLOW_INVALID_DATES) is kept as the text the server prints for it.
    Ok(value.unwrap_or_else(|| {
        let day = format!("{year:04}-{:02}-{:02}", parts[2], parts[3]);
        match t {
            FieldType::Date => Value::String(day),
            _ => Value::String(format!("{day}T{h:02}:{m:02}:{sec:02}.{micro:06}Z")),
        }
    }))
}

/// A date or timestamp in text. MySQL's zero dates ('0000-00-00', or a
/// zero month or day, which non-strict modes store) name no time: NULL, as
/// MySQL's own drivers read them (zeroDateTimeBehavior).
fn date_text(s: String, t: FieldType) -> Value {
    if zero_date(&s) { Value::Null } else { text_value(s, t) }
}

/// A date whose year, month or day is zero (`0000-00-00`, `2024-00-10`).
fn zero_date(s: &str) -> bool {
    let mut parts = s.get(..10).unwrap_or("").split('-');
    let (Some(y), Some(m), Some(d)) = (parts.next(), parts.next(), parts.next()) else { return false };
    [y, m, d].iter().any(|p| !p.is_empty() && p.bytes().all(|b| b == b'0'))
}

type MyQuery<'q> = sqlx::query::Query<'q, MySql, <MySql as sqlx::Database>::Arguments>;

pub(super) fn bind<'q>(q: MyQuery<'q>, v: &Value) -> MyQuery<'q> {
    match v {
        Value::Null => q.bind(Option::<String>::None),
        Value::Bool(b) => q.bind(*b),
        Value::Int(i) => q.bind(*i),
        Value::Float(f) => q.bind(*f),
        Value::Decimal(s) | Value::String(s) | Value::RawJson(s) => q.bind(s.clone()),
        Value::Timestamp(t) => {
            let t = t.to_offset(time::UtcOffset::UTC);
            q.bind(time::PrimitiveDateTime::new(t.date(), t.time()))
        }
        Value::Date(d) => q.bind(*d),
        Value::Json(j) => q.bind(j.to_string()),
        Value::Bytes(b) => q.bind(b.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temporal_values_decode_from_binary_and_from_text() {
        use time::macros::{date, datetime};
        let ts = FieldType::Timestamp;
        let dt = |len: u8, rest: &[u8]| [&[len][..], rest].concat();
        assert_eq!(temporal(&dt(0, &[]), ts).unwrap(), Value::Null, "the zero datetime");
        assert_eq!(temporal(&dt(4, &[0xE8, 0x07, 0, 10]), FieldType::Date).unwrap(), Value::Null, "a zero month");
        assert_eq!(temporal(&dt(4, &[0, 0, 5, 1]), ts).unwrap(), Value::Null, "a zero year");
        assert_eq!(temporal(&dt(4, &[0xE8, 0x07, 5, 1]), FieldType::Date).unwrap(), Value::Date(date!(2024 - 05 - 01)));
        assert_eq!(
            temporal(&dt(7, &[0xE8, 0x07, 5, 1, 10, 11, 12]), ts).unwrap(),
            Value::Timestamp(datetime!(2024-05-01 10:11:12 UTC))
        );
        assert_eq!(
            temporal(&dt(11, &[0xE8, 0x07, 5, 1, 10, 11, 12, 0x3F, 0x42, 0x0F, 0]), ts).unwrap(),
            Value::Timestamp(datetime!(2024-05-01 10:11:12.999999 UTC)),
            "999,999 microseconds, little-endian"
        );
        // Dates no calendar has, kept as the server prints them.
        assert_eq!(
            temporal(&dt(4, &[0xE8, 0x07, 2, 31]), FieldType::Date).unwrap(),
            Value::String("2024-02-31".into())
        );
        assert_eq!(
            temporal(&dt(11, &[0xE8, 0x07, 2, 31, 10, 0, 0, 0x20, 0xA1, 0x07, 0]), ts).unwrap(),
            Value::String("2024-02-31T10:00:00.500000Z".into())
        );
        assert_eq!(
            temporal(&dt(4, &[0xE8, 0x07, 13, 1]), ts).unwrap(),
            Value::String("2024-13-01T00:00:00.000000Z".into())
        );
        assert!(temporal(&dt(2, &[0xE8, 0x07]), ts).is_err(), "a length MySQL never sends");
        // Text, as an unprepared statement sends it.
        assert_eq!(
            temporal(b"2024-05-01 10:11:12.5", ts).unwrap(),
            Value::Timestamp(datetime!(2024-05-01 10:11:12.5 UTC))
        );
        assert_eq!(temporal(b"0000-00-00 00:00:00", ts).unwrap(), Value::Null);
    }
}
