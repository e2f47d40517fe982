//! PostgreSQL's types and the vocabulary's field types: the mapping both
//! ways, the select and CSV expressions that make a column readable as its
//! field type, values decoded from rows and written as literals, and the
//! CSV rows of `COPY … FROM STDIN (FORMAT csv)`.

use super::ENGINE;
use crate::common::*;
use sluice_domain::connect::connector::*;
use sqlx::Row;
use sqlx::postgres::PgRow;

/// PostgreSQL type → vocabulary.
pub fn map_native(native: &str, category: &str) -> FieldType {
    if category == "A" {
        return FieldType::Array;
    }
    let t = native.to_ascii_lowercase();
    match t.as_str() {
        "smallint" | "integer" | "bigint" => FieldType::Integer,
        "real" | "double precision" => FieldType::Number,
        "boolean" => FieldType::Boolean,
        "date" => FieldType::Date,
        "json" | "jsonb" => FieldType::Object,
        "bytea" => FieldType::Binary,
        _ if t.starts_with("numeric") || t.starts_with("decimal") => FieldType::Decimal,
        _ if t.starts_with("timestamp") => FieldType::Timestamp,
        _ => FieldType::String,
    }
}

/// Vocabulary → PostgreSQL type for tables we create.
pub(super) fn native_for_field(f: &Field) -> String {
    if let Some(n) = native_for(f, ENGINE) {
        return n.to_string();
    }
    // From another engine: keep a decimal's precision and scale, and a
    // timestamp without a zone without one.
    if let (FieldType::Decimal, Some((p, s))) = (f.field_type, decimal_args(f)) {
        return format!("numeric({p},{s})");
    }
    if f.field_type == FieldType::Timestamp && zoneless(f) {
        return "timestamp".into();
    }
    match f.field_type {
        FieldType::String => "text",
        FieldType::Integer => "bigint",
        FieldType::Number => "double precision",
        FieldType::Decimal => "numeric",
        FieldType::Boolean => "boolean",
        FieldType::Timestamp => "timestamptz",
        FieldType::Date => "date",
        FieldType::Object | FieldType::Array => "jsonb",
        FieldType::Binary => "bytea",
    }
    .to_string()
}

/// The select expression that makes a column decodable as its vocabulary type.
pub(super) fn select_expr(f: &Field) -> String {
    let c = quote_dq(&f.name);
    let native = native_for(f, ENGINE).unwrap_or("").to_ascii_lowercase();
    match f.field_type {
        FieldType::Integer => format!("{c}::int8"),
        FieldType::Number => format!("{c}::float8"),
        FieldType::Boolean | FieldType::Date | FieldType::Binary => c,
        FieldType::Timestamp if native.starts_with("timestamp without") || native == "timestamp" => {
            format!("({c} AT TIME ZONE 'UTC')")
        }
        FieldType::Timestamp => format!("{c}::timestamptz"),
        FieldType::Object | FieldType::Array => json_text(&c, &native),
        FieldType::Decimal | FieldType::String => format!("{c}::text"),
    }
}

/// A JSON column's text as is (`jsonb` prints the same text `to_json`
/// would, without building it again); other types (arrays, composites)
/// through `to_json`.
fn json_text(c: &str, native: &str) -> String {
    if native == "jsonb" || native == "json" { format!("{c}::text") } else { format!("to_json({c})::text") }
}

/// The expression that formats a column in CSV as the file connector
/// writes the value read from it: integers and shortest round-trip floats
/// (non-finite ones empty, as JSON has none), `true`/`false`, RFC 3339 UTC
/// timestamps with microseconds, ISO dates, JSON text, base64 bytes.
pub(super) fn csv_expr(f: &Field) -> String {
    const ISO: &str = "'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'";
    let c = quote_dq(&f.name);
    let native = native_for(f, ENGINE).unwrap_or("").to_ascii_lowercase();
    match f.field_type {
        FieldType::Integer => format!("{c}::int8"),
        FieldType::Number => {
            format!("CASE WHEN {c}::float8 IN ('NaN', 'Infinity', '-Infinity') THEN NULL ELSE {c}::float8 END")
        }
        FieldType::Boolean => format!("CASE WHEN {c} THEN 'true' WHEN NOT {c} THEN 'false' END"),
        FieldType::Date => format!("to_char({c}, 'YYYY-MM-DD')"),
        FieldType::Timestamp if native.starts_with("timestamp without") || native == "timestamp" => {
            format!("to_char({c}, {ISO})")
        }
        FieldType::Timestamp => format!("to_char({c}::timestamptz AT TIME ZONE 'UTC', {ISO})"),
        FieldType::Object | FieldType::Array => json_text(&c, &native),
        FieldType::Binary => format!("translate(encode({c}, 'base64'), E'\\n', '')"),
        FieldType::Decimal | FieldType::String => format!("{c}::text"),
    }
}

pub(super) fn decode(row: &PgRow, i: usize, t: FieldType) -> Result<Value, sqlx::Error> {
    Ok(match t {
        FieldType::Integer => row.try_get::<Option<i64>, _>(i)?.map(Value::Int),
        FieldType::Number => row.try_get::<Option<f64>, _>(i)?.map(Value::Float),
        FieldType::Boolean => row.try_get::<Option<bool>, _>(i)?.map(Value::Bool),
        FieldType::Date => row.try_get::<Option<time::Date>, _>(i)?.map(Value::Date),
        FieldType::Binary => row.try_get::<Option<Vec<u8>>, _>(i)?.map(Value::Bytes),
        FieldType::Timestamp => row.try_get::<Option<time::OffsetDateTime>, _>(i)?.map(Value::Timestamp),
        FieldType::Decimal => row.try_get::<Option<String>, _>(i)?.map(Value::Decimal),
        FieldType::String => row.try_get::<Option<String>, _>(i)?.map(Value::String),
        FieldType::Object | FieldType::Array => row.try_get::<Option<String>, _>(i)?.map(Value::json_text),
    }
    .unwrap_or(Value::Null))
}

/// The text form PostgreSQL parses back into the column's type.
pub(super) fn literal(v: &Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Bool(b) => Some(if *b { "t".into() } else { "f".into() }),
        Value::Int(i) => Some(i.to_string()),
        Value::Float(f) => Some(float_text(*f)),
        Value::Decimal(s) | Value::String(s) | Value::RawJson(s) => Some(s.clone()),
        Value::Timestamp(t) => Some(format_timestamp(*t)),
        Value::Date(d) => Some(format_date(*d)),
        Value::Json(j) => Some(j.to_string()),
        Value::Bytes(b) => Some(format!("\\x{}", hex(b))),
    }
}

fn float_text(f: f64) -> String {
    if f.is_nan() {
        "NaN".into()
    } else if f.is_infinite() {
        if f > 0.0 { "Infinity".into() } else { "-Infinity".into() }
    } else {
        // Shortest text that round-trips.
        format!("{f:?}")
    }
}

fn hex(b: &[u8]) -> String {
    const H: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(H[(x >> 4) as usize] as char);
        s.push(H[(x & 15) as usize] as char);
    }
    s
}

/// Appends one CSV row in COPY's format: NULL is an empty unquoted field,
/// every other text is quoted. Written in place, without a string per value.
pub fn csv_row(out: &mut Vec<u8>, row: &[Value]) {
    use std::io::Write;
    for (i, v) in row.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Writing into a Vec cannot fail.
        let _ = match v {
            Value::Null => Ok(()),
            Value::Int(n) => write!(out, "{n}"),
            Value::Bool(b) => {
                out.push(if *b { b't' } else { b'f' });
                Ok(())
            }
            // Texts that hold no quote: no escaping to do.
            Value::Decimal(d) => write!(out, "\"{d}\""),
            Value::Float(f) => write!(out, "\"{}\"", float_text(*f)),
            Value::Timestamp(t) => write!(out, "\"{}\"", TimestampText(*t)),
            Value::Date(d) => write!(out, "\"{}\"", DateText(*d)),
            Value::Bytes(b) => {
                out.extend_from_slice(b"\"\\x");
                out.extend_from_slice(hex(b).as_bytes());
                out.push(b'"');
                Ok(())
            }
            Value::String(text) | Value::RawJson(text) => {
                out.push(b'"');
                let r = Quoted(out).write_all(text.as_bytes());
                out.push(b'"');
                r
            }
            Value::Json(j) => {
                out.push(b'"');
                let r = serde_json::to_writer(Quoted(out), j).map_err(std::io::Error::other);
                out.push(b'"');
                r
            }
        };
    }
    out.push(b'\n');
}

/// Writes into a CSV field between quotes, doubling every quote.
struct Quoted<'a>(&'a mut Vec<u8>);

impl std::io::Write for Quoted<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let mut rest = buf;
        while let Some(q) = rest.iter().position(|b| *b == b'"') {
            self.0.extend_from_slice(&rest[..=q]);
            self.0.push(b'"');
            rest = &rest[q + 1..];
        }
        self.0.extend_from_slice(rest);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A SQL string literal that no content can end early: dollar-quoted with
/// a tag the text does not hold.
pub(super) fn dollar_quoted(text: &str) -> String {
    let mut tag = String::from("s");
    // Text ending in `$s` would close `$s$` early, one character in.
    while text.contains(&format!("${tag}$")) || text.ends_with(&format!("${tag}")) {
        tag.push('s');
    }
    format!("${tag}${text}${tag}$")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollar_quotes_hold_any_text() {
        assert_eq!(dollar_quoted("ab"), "$s$ab$s$");
        assert_eq!(dollar_quoted("a$s$b"), "$ss$a$s$b$ss$");
        assert_eq!(dollar_quoted("ab$s"), "$ss$ab$s$ss$");
        assert_eq!(dollar_quoted("ab$ss"), "$s$ab$ss$s$");
    }

    #[test]
    fn csv_rows_quote_text_and_leave_null_empty() {
        let mut out = Vec::new();
        csv_row(
            &mut out,
            &[
                Value::Int(1),
                Value::Null,
                Value::String("a\"b,c\nd".into()),
                Value::String(String::new()),
                Value::Bool(true),
                Value::Bytes(vec![0xde, 0xad]),
            ],
        );
        assert_eq!(String::from_utf8(out).unwrap(), "1,,\"a\"\"b,c\nd\",\"\",t,\"\\xdead\"\n");
    }
    #[test]
    fn dollar_quoting_outlives_any_text() {
        assert_eq!(dollar_quoted("2026-01-01"), "$s$2026-01-01$s$");
        assert_eq!(dollar_quoted("a$s$b"), "$ss$a$s$b$ss$");
        assert_eq!(dollar_quoted("'; DROP TABLE x; --"), "$s$'; DROP TABLE x; --$s$");
    }

    #[test]
    fn csv_rows_write_every_type_as_copy_reads_it() {
        let mut out = Vec::new();
        let t = time::macros::datetime!(2026-03-04 05:06:07.089 +05:30);
        csv_row(
            &mut out,
            &[
                Value::Int(-9_223_372_036_854_775_808),
                Value::Decimal("-12.50".into()),
                Value::Float(1e308),
                Value::Float(f64::NAN),
                Value::Timestamp(t),
                Value::Date(time::macros::date!(2026 - 03 - 04)),
                Value::Json(serde_json::json!({"q": ["say \"hi\"", 2]})),
                Value::Bool(false),
            ],
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-9223372036854775808,\"-12.50\",\"1e308\",\"NaN\",\"2026-03-03T23:36:07.089000Z\",\"2026-03-04\",\
             \"{\"\"q\"\":[\"\"say \\\"\"hi\\\"\"\"\",2]}\",f\n"
        );
    }

    #[test]
    fn native_types_map_to_the_vocabulary() {
        assert_eq!(map_native("numeric(12,2)", "N"), FieldType::Decimal);
        assert_eq!(map_native("timestamp with time zone", "D"), FieldType::Timestamp);
        assert_eq!(map_native("integer[]", "A"), FieldType::Array);
        assert_eq!(map_native("uuid", "U"), FieldType::String);
        assert_eq!(map_native("jsonb", "U"), FieldType::Object);
    }

    #[test]
    fn floats_print_so_they_round_trip() {
        assert_eq!(float_text(0.1), "0.1");
        assert_eq!(float_text(f64::MAX).parse::<f64>().unwrap(), f64::MAX);
        assert_eq!(float_text(f64::NEG_INFINITY), "-Infinity");
    }
}
