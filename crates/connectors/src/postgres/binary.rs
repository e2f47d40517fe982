//! PostgreSQL's binary COPY format, decoded into records and encoded from
//! them: the reader's way out of PostgreSQL (no row protocol, no text to
//! parse for numbers and times), and the writer's way in from any source
//! (PostgreSQL parses no text either). Big-endian throughout; times are
//! microseconds and dates days since 2000-01-01.

use sluice_domain::connect::connector::{FieldType, Value};
use sluice_domain::shared::record::{format_timestamp, parse_date, parse_timestamp};

/// The signature, flags and extension length that open a binary COPY.
pub const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";
/// The field count of -1 that ends one.
pub const TRAILER: &[u8] = &[0xff, 0xff];

/// 2000-01-01 in Unix seconds, and in Julian days.
const EPOCH_2000: i64 = 946_684_800;
const JULIAN_2000: i32 = 2_451_545;

/// What a column of a read arrives as: the type its select expression
/// casts it to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wire {
    Int2,
    Int4,
    Int8,
    Float8,
    Bool,
    Date,
    Bytea,
    /// `timestamp` or `timestamptz`: microseconds, UTC.
    Micros,
    /// Text, read as the field's type (a decimal, JSON, or a string).
    Text(FieldType),
}

impl Wire {
    /// The wire type of a field read through the reader's select
    /// expressions (`int8`, `float8`, `timestamptz`, `…::text`).
    pub fn of(t: FieldType) -> Self {
        match t {
            FieldType::Integer => Wire::Int8,
            FieldType::Number => Wire::Float8,
            FieldType::Boolean => Wire::Bool,
            FieldType::Date => Wire::Date,
            FieldType::Binary => Wire::Bytea,
            FieldType::Timestamp => Wire::Micros,
            other => Wire::Text(other),
        }
    }

    /// The value of one field's bytes.
    ///
    /// # Errors
    /// Bytes of the wrong length, text that is not UTF-8, ±infinity, or a
    /// time out of range.
    pub fn decode(self, b: &[u8]) -> Result<Value, String> {
        let fixed = |n: usize| -> Result<[u8; 8], String> {
            if b.len() != n {
                return Err(format!("a {self:?} value of {} bytes", b.len()));
            }
            let mut out = [0u8; 8];
            out[..n].copy_from_slice(b);
            Ok(out)
        };
        Ok(match self {
            Wire::Int2 => {
                let a = fixed(2)?;
                Value::Int(i16::from_be_bytes([a[0], a[1]]).into())
            }
            Wire::Int4 => {
                let a = fixed(4)?;
                Value::Int(i32::from_be_bytes([a[0], a[1], a[2], a[3]]).into())
            }
            Wire::Int8 => Value::Int(i64::from_be_bytes(fixed(8)?)),
            Wire::Float8 => Value::Float(f64::from_be_bytes(fixed(8)?)),
            Wire::Bool => Value::Bool(fixed(1)?[0] != 0),
            Wire::Date => {
                let a = fixed(4)?;
                let days = i32::from_be_bytes([a[0], a[1], a[2], a[3]]);
                if days == i32::MAX || days == i32::MIN {
                    return Err("an infinite date has no value to carry".into());
                }
                let d = JULIAN_2000.checked_add(days).and_then(|j| time::Date::from_julian_day(j).ok());
                Value::Date(d.ok_or_else(|| format!("the date {days} days from 2000-01-01 is out of range"))?)
            }
            Wire::Micros => {
                let us = i64::from_be_bytes(fixed(8)?);
                if us == i64::MAX || us == i64::MIN {
                    return Err("an infinite timestamp has no value to carry".into());
                }
                let nanos = (i128::from(us) + i128::from(EPOCH_2000) * 1_000_000) * 1_000;
                Value::Timestamp(
                    time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
                        .map_err(|_| format!("the timestamp {us} µs from 2000-01-01 is out of range"))?,
                )
            }
            Wire::Bytea => Value::Bytes(b.to_vec()),
            Wire::Text(t) => {
                let s = std::str::from_utf8(b).map_err(|_| "text that is not UTF-8".to_string())?;
                match t {
                    FieldType::Decimal => Value::Decimal(s.to_string()),
                    FieldType::Object | FieldType::Array => Value::json_text(s.to_string()),
                    _ => Value::String(s.to_string()),
                }
            }
        })
    }
}

/// What one step of decoding found.
#[derive(Debug, PartialEq)]
pub enum Step {
    Record(Vec<Value>),
    /// The bytes so far end inside a record (or the header).
    NeedMore,
    /// The trailer.
    End,
}

/// Decodes a binary COPY stream, fed in pieces of any size, into records.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
    pos: usize,
    header_done: bool,
    ended: bool,
}

impl Decoder {
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.pos > 0 && self.pos * 2 >= self.buf.len() {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Whether the stream is cut: its trailer was not seen (bytes left
    /// that make no whole record, or a stream that ended between records).
    pub fn is_cut(&self) -> bool {
        !self.ended
    }

    /// The next record, if its bytes are all here.
    ///
    /// # Errors
    /// A stream that is not a binary COPY of `wires.len()` columns of these
    /// types; the text names the column by `names`.
    pub fn next(&mut self, wires: &[Wire], names: &[String]) -> Result<Step, String> {
        if self.ended {
            return if self.pos < self.buf.len() {
                Err("data after the end of a binary COPY".into())
            } else {
                Ok(Step::End)
            };
        }
        let b = &self.buf[self.pos..];
        if !self.header_done {
            if b.len() < 19 {
                return Ok(Step::NeedMore);
            }
            if &b[..11] != b"PGCOPY\n\xff\r\n\0" {
                return Err("not a binary COPY stream".into());
            }
            let ext = u32::from_be_bytes([b[15], b[16], b[17], b[18]]) as usize;
            if b.len() < 19 + ext {
                return Ok(Step::NeedMore);
            }
            self.pos += 19 + ext;
            self.header_done = true;
            return self.next(wires, names);
        }
        if b.len() < 2 {
            return Ok(Step::NeedMore);
        }
        let count = i16::from_be_bytes([b[0], b[1]]);
        if count == -1 {
            self.pos += 2;
            self.ended = true;
            return self.next(wires, names);
        }
        if count as usize != wires.len() {
            return Err(format!("a record of {count} columns where {} were asked for", wires.len()));
        }
        // Only a whole record is decoded.
        let mut at = 2;
        let mut spans = Vec::with_capacity(wires.len());
        for _ in wires {
            if b.len() < at + 4 {
                return Ok(Step::NeedMore);
            }
            let len = i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
            at += 4;
            if len < 0 {
                spans.push(None);
                continue;
            }
            let len = len as usize;
            if b.len() < at + len {
                return Ok(Step::NeedMore);
            }
            spans.push(Some(at..at + len));
            at += len;
        }
        let mut record = Vec::with_capacity(wires.len());
        for (i, (span, wire)) in spans.into_iter().zip(wires).enumerate() {
            record.push(match span {
                None => Value::Null,
                Some(r) => wire
                    .decode(&b[r])
                    .map_err(|e| format!("column {}: {e}", names.get(i).map(String::as_str).unwrap_or("?")))?,
            });
        }
        self.pos += at;
        Ok(Step::Record(record))
    }
}

/// How a value is written into a column of a table's own type.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Column {
    Int2,
    Int4,
    Int8,
    Float4,
    Float8,
    Bool,
    Text,
    Json,
    Jsonb,
    Bytea,
    /// `timestamp` or `timestamptz`.
    Micros,
    Date,
    Numeric,
}

impl Column {
    /// The encoder for a column of this PostgreSQL type (as `format_type`
    /// or a `CREATE TABLE` names it), if the type is one we encode.
    pub fn of(native: &str) -> Option<Self> {
        let t = native.trim().to_ascii_lowercase();
        let base = t.split('(').next().unwrap_or("").trim();
        Some(match base {
            "smallint" | "int2" => Column::Int2,
            "integer" | "int" | "int4" => Column::Int4,
            "bigint" | "int8" => Column::Int8,
            "real" | "float4" => Column::Float4,
            "double precision" | "float8" => Column::Float8,
            "boolean" | "bool" => Column::Bool,
            "text" | "character varying" | "varchar" => Column::Text,
            "json" => Column::Json,
            "jsonb" => Column::Jsonb,
            "bytea" => Column::Bytea,
            "timestamp with time zone" | "timestamptz" | "timestamp without time zone" | "timestamp" => Column::Micros,
            "date" => Column::Date,
            "numeric" | "decimal" => Column::Numeric,
            _ => return None,
        })
    }

    /// Appends `v` as a field (its length, then its bytes; -1 for NULL).
    ///
    /// # Errors
    /// A value this column's type cannot hold, told as PostgreSQL would.
    pub fn encode(self, out: &mut Vec<u8>, v: &Value) -> Result<(), String> {
        if v.is_null() {
            out.extend_from_slice(&(-1i32).to_be_bytes());
            return Ok(());
        }
        let start = out.len();
        out.extend_from_slice(&[0; 4]);
        self.body(out, v)?;
        let len = i32::try_from(out.len() - start - 4).map_err(|_| "a value over 2 GB".to_string())?;
        out[start..start + 4].copy_from_slice(&len.to_be_bytes());
        Ok(())
    }

    fn body(self, out: &mut Vec<u8>, v: &Value) -> Result<(), String> {
        match self {
            Column::Int2 | Column::Int4 | Column::Int8 => {
                let n = match v {
                    Value::Int(n) => *n,
                    other => text(other).trim().parse::<i64>().map_err(|_| invalid(other, "an integer"))?,
                };
                match self {
                    Column::Int2 => out.extend_from_slice(
                        &i16::try_from(n).map_err(|_| format!("{n} is out of range for type smallint"))?.to_be_bytes(),
                    ),
                    Column::Int4 => out.extend_from_slice(
                        &i32::try_from(n).map_err(|_| format!("{n} is out of range for type integer"))?.to_be_bytes(),
                    ),
                    _ => out.extend_from_slice(&n.to_be_bytes()),
                }
            }
            Column::Float4 | Column::Float8 => {
                let f = match v {
                    Value::Float(f) => *f,
                    Value::Int(n) => *n as f64,
                    other => parse_float(&text(other)).ok_or_else(|| invalid(other, "a number"))?,
                };
                if self == Column::Float4 {
                    out.extend_from_slice(&(f as f32).to_be_bytes());
                } else {
                    out.extend_from_slice(&f.to_be_bytes());
                }
            }
            Column::Bool => {
                let b = match v {
                    Value::Bool(b) => *b,
                    other => match text(other).trim().to_ascii_lowercase().as_str() {
                        "t" | "true" | "yes" | "on" | "1" | "y" => true,
                        "f" | "false" | "no" | "off" | "0" | "n" => false,
                        _ => return Err(invalid(other, "a boolean")),
                    },
                };
                out.push(u8::from(b));
            }
            Column::Text | Column::Json => write_text(out, v),
            Column::Jsonb => {
                out.push(1);
                write_text(out, v);
            }
            Column::Bytea => match v {
                Value::Bytes(b) => out.extend_from_slice(b),
                other => {
                    let s = text(other);
                    match s.strip_prefix("\\x") {
                        Some(h) => out.extend_from_slice(&unhex(h).ok_or_else(|| invalid(other, "bytea"))?),
                        None => out.extend_from_slice(s.as_bytes()),
                    }
                }
            },
            Column::Micros => {
                let t = match v {
                    Value::Timestamp(t) => *t,
                    Value::Date(d) => d.midnight().assume_utc(),
                    other => parse_timestamp(&text(other)).ok_or_else(|| invalid(other, "a timestamp"))?,
                };
                let us = t.unix_timestamp_nanos() / 1_000 - i128::from(EPOCH_2000) * 1_000_000;
                out.extend_from_slice(&i64::try_from(us).map_err(|_| invalid(v, "a timestamp"))?.to_be_bytes());
            }
            Column::Date => {
                let d = match v {
                    Value::Date(d) => *d,
                    Value::Timestamp(t) => t.to_offset(time::UtcOffset::UTC).date(),
                    other => parse_date(&text(other)).ok_or_else(|| invalid(other, "a date"))?,
                };
                out.extend_from_slice(&(d.to_julian_day() - JULIAN_2000).to_be_bytes());
            }
            Column::Numeric => {
                let s = match v {
                    Value::Float(f) if f.is_nan() => "NaN".to_string(),
                    Value::Float(f) if f.is_infinite() => if *f > 0.0 { "Infinity" } else { "-Infinity" }.to_string(),
                    other => text(other),
                };
                numeric(out, s.trim()).ok_or_else(|| invalid(v, "a numeric"))?;
            }
        }
        Ok(())
    }
}

/// A value's text, as the CSV path would have sent it.
fn text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Bool(b) => if *b { "t" } else { "f" }.into(),
        Value::Int(n) => n.to_string(),
        Value::Float(f) => format!("{f:?}"),
        Value::Decimal(s) | Value::String(s) => s.clone(),
        Value::Timestamp(t) => format_timestamp(*t),
        Value::Date(d) => sluice_domain::shared::record::format_date(*d),
        Value::Json(j) => j.to_string(),
        Value::RawJson(t) => t.clone(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

fn write_text(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::String(s) | Value::Decimal(s) | Value::RawJson(s) => out.extend_from_slice(s.as_bytes()),
        Value::Json(j) => {
            let _ = serde_json::to_writer(&mut *out, j); // into a Vec: cannot fail
        }
        other => out.extend_from_slice(text(other).as_bytes()),
    }
}

fn invalid(v: &Value, what: &str) -> String {
    let mut s = text(v);
    if s.len() > 60 {
        let mut end = 60;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    format!("'{s}' is not {what}")
}

pub(super) fn parse_float(s: &str) -> Option<f64> {
    match s.trim().to_ascii_lowercase().as_str() {
        "nan" => Some(f64::NAN),
        "infinity" | "inf" | "+infinity" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        t => t.parse().ok(),
    }
}

pub(super) fn unhex(h: &str) -> Option<Vec<u8>> {
    let h = h.as_bytes();
    if !h.len().is_multiple_of(2) {
        return None;
    }
    let d = |c: u8| (c as char).to_digit(16).map(|x| x as u8);
    h.chunks(2).map(|p| Some(d(p[0])? << 4 | d(p[1])?)).collect()
}

/// Appends a decimal text (`-12.50`, `1e-3`, `NaN`, `Infinity`) in
/// numeric's binary form: digit count, weight, sign and display scale, then
/// base-10000 digits. `None` when the text is not a number.
pub fn numeric(out: &mut Vec<u8>, s: &str) -> Option<()> {
    const NEG: u16 = 0x4000;
    let is = |names: &[&str]| names.iter().any(|n| s.eq_ignore_ascii_case(n));
    let special = if is(&["nan"]) {
        Some(0xC000u16)
    } else if is(&["infinity", "+infinity", "inf"]) {
        Some(0xD000)
    } else if is(&["-infinity", "-inf"]) {
        Some(0xF000)
    } else {
        None
    };
    if let Some(sign) = special {
        out.extend_from_slice(&[0, 0, 0, 0]);
        out.extend_from_slice(&sign.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        return Some(());
    }
    let (neg, body) = match s.as_bytes().first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let (mantissa, exp) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i32>().ok()?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let (int, frac) = (int.as_bytes(), frac.as_bytes());
    if !int.iter().chain(frac).all(u8::is_ascii_digit) {
        return None;
    }
    // The digits are int then frac, the point `point` digits from their
    // start (before the first when negative, past the last beyond them);
    // zeros stand outside them. `dscale` digits follow the point.
    let len = (int.len() + frac.len()) as i64;
    let point = int.len() as i64 + i64::from(exp);
    let dscale = (len - point).max(0);
    if dscale > 0x3FFF || point > 131_072 {
        return None;
    }
    let digit = |j: i64| -> i16 {
        match usize::try_from(j) {
            Ok(j) if j < int.len() => i16::from(int[j] - b'0'),
            Ok(j) if j < len as usize => i16::from(frac[j - int.len()] - b'0'),
            _ => 0,
        }
    };
    // Groups of four digits aligned on the point: group g holds the digits
    // from point + 4g, and weighs -1 - g (the one just before the point
    // weighs 0). Leading and trailing zero groups are left out.
    let header = out.len();
    out.extend_from_slice(&[0; 8]);
    let (mut weight, mut kept) = (None, out.len());
    for g in -((point.max(0) + 3) / 4)..(dscale + 3) / 4 {
        let at = point + 4 * g;
        let group = (at..at + 4).fold(0i16, |acc, j| acc * 10 + digit(j));
        if weight.is_none() {
            if group == 0 {
                continue;
            }
            weight = Some(-1 - g);
        }
        out.extend_from_slice(&group.to_be_bytes());
        if group != 0 {
            kept = out.len();
        }
    }
    out.truncate(kept);
    // More than 32,767 groups: more digits than a numeric holds.
    let groups = (kept - header - 8) / 2;
    let (Ok(ndigits), Ok(weight)) = (i16::try_from(groups), i16::try_from(weight.unwrap_or(0))) else {
        out.truncate(header);
        return None;
    };
    // Zero: no digits, no sign, keeping the scale.
    let sign = if neg && ndigits > 0 { NEG } else { 0 };
    let dscale = dscale as u16; // at most 0x3FFF, checked above
    out[header..header + 2].copy_from_slice(&ndigits.to_be_bytes());
    out[header + 2..header + 4].copy_from_slice(&weight.to_be_bytes());
    out[header + 4..header + 6].copy_from_slice(&sign.to_be_bytes());
    out[header + 6..header + 8].copy_from_slice(&dscale.to_be_bytes());
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn num(s: &str) -> (i16, i16, u16, u16, Vec<i16>) {
        let mut out = Vec::new();
        numeric(&mut out, s).unwrap_or_else(|| panic!("{s} is a number"));
        let w = |i: usize| i16::from_be_bytes([out[i], out[i + 1]]);
        let n = w(0) as usize;
        (w(0), w(2), w(4) as u16, w(6) as u16, (0..n).map(|i| w(8 + 2 * i)).collect())
    }

    #[test]
    fn numerics_encode_as_postgres_stores_them() {
        assert_eq!(num("0"), (0, 0, 0, 0, vec![]));
        assert_eq!(num("0.00"), (0, 0, 0, 2, vec![]));
        assert_eq!(num("1"), (1, 0, 0, 0, vec![1]));
        assert_eq!(num("12345.678"), (3, 1, 0, 3, vec![1, 2345, 6780]));
        assert_eq!(num("-0.0001"), (1, -1, 0x4000, 4, vec![1]));
        assert_eq!(num("0.00001"), (1, -2, 0, 5, vec![1000]));
        assert_eq!(num("10000"), (1, 1, 0, 0, vec![1]));
        assert_eq!(num("99999999999999999999.99"), (6, 4, 0, 2, vec![9999, 9999, 9999, 9999, 9999, 9900]));
        assert_eq!(num("1e5"), (1, 1, 0, 0, vec![10]));
        assert_eq!(num("1.5E-3"), (1, -1, 0, 4, vec![15]));
        assert_eq!(num(".5"), (1, -1, 0, 1, vec![5000]));
        assert_eq!(num("000123.4500"), (2, 0, 0, 4, vec![123, 4500]));
        assert_eq!(num("-0"), (0, 0, 0, 0, vec![]));
        assert_eq!(num("-12e-2"), (1, -1, 0x4000, 2, vec![1200]));
        assert_eq!(num("1e-16383"), (1, -4096, 0, 16383, vec![10]));
        assert!(numeric(&mut Vec::new(), "1e-16384").is_none(), "scale beyond PostgreSQL's");
        assert_eq!(num("5e131071").1, 32767);
        assert!(numeric(&mut Vec::new(), "1e131072").is_none(), "digits before the point beyond PostgreSQL's");
        let mut out = vec![9];
        let many = format!("{}.{}", "1".repeat(131_072), "1".repeat(16_383));
        assert!(numeric(&mut out, &many).is_none(), "36,864 groups of digits");
        assert_eq!(out, [9], "nothing written for a value refused");
        // Appended after what the buffer held.
        let mut out = vec![9];
        numeric(&mut out, "1.5").unwrap();
        assert_eq!(out, [9, 0, 2, 0, 0, 0, 0, 0, 1, 0, 1, 19, 136]);
        assert_eq!(num("NaN").2, 0xC000);
        assert_eq!(num("INF").2, 0xD000);
        assert_eq!(num("-Infinity").2, 0xF000);
        for bad in ["", "-", "1.2.3", "12a", "1e", "--1", "."] {
            assert!(numeric(&mut Vec::new(), bad).is_none(), "{bad:?} is not a number");
        }
    }

    #[test]
    fn values_encode_for_their_columns_and_mismatches_are_told() {
        let mut out = Vec::new();
        Column::Int4.encode(&mut out, &Value::String(" 42 ".into())).unwrap();
        assert_eq!(out, [0, 0, 0, 4, 0, 0, 0, 42]);
        assert!(Column::Int2.encode(&mut Vec::new(), &Value::Int(70_000)).unwrap_err().contains("out of range"));
        assert!(Column::Int8.encode(&mut Vec::new(), &Value::String("x".into())).unwrap_err().contains("'x' is not"));
        let mut out = Vec::new();
        Column::Jsonb.encode(&mut out, &Value::Json(serde_json::json!({"a": 1}))).unwrap();
        assert_eq!(&out[4..], b"\x01{\"a\":1}");
        // A document read as text goes out as it came, never parsed.
        let raw = Wire::Text(FieldType::Object).decode(b"{\"a\":  [1, 2.50]}").unwrap();
        assert!(matches!(&raw, Value::RawJson(t) if t == "{\"a\":  [1, 2.50]}"), "{raw:?}");
        let mut out = Vec::new();
        Column::Jsonb.encode(&mut out, &raw).unwrap();
        assert_eq!(&out[4..], b"\x01{\"a\":  [1, 2.50]}");
        assert_eq!(Wire::Text(FieldType::Object).decode(b"{oops").unwrap(), Value::String("{oops".into()));
        let mut out = Vec::new();
        Column::Text.encode(&mut out, &Value::Null).unwrap();
        assert_eq!(out, (-1i32).to_be_bytes());
    }

    #[test]
    fn a_stream_in_pieces_decodes_into_records() {
        let t = time::macros::datetime!(2026-01-02 03:04:05.123456 UTC);
        let row = [Value::Int(-7), Value::Null, Value::Timestamp(t), Value::Date(time::macros::date!(1999 - 12 - 31))];
        let columns = [Column::Int8, Column::Text, Column::Micros, Column::Date];
        let mut stream = HEADER.to_vec();
        for _ in 0..2 {
            stream.extend_from_slice(&4i16.to_be_bytes());
            for (c, v) in columns.iter().zip(&row) {
                c.encode(&mut stream, v).unwrap();
            }
        }
        stream.extend_from_slice(TRAILER);
        let wires = [Wire::Int8, Wire::Text(FieldType::String), Wire::Micros, Wire::Date];
        let names: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let mut d = Decoder::default();
        let mut got = Vec::new();
        for piece in stream.chunks(5) {
            d.feed(piece);
            while let Step::Record(r) = d.next(&wires, &names).unwrap() {
                got.push(r);
            }
        }
        assert_eq!(d.next(&wires, &names).unwrap(), Step::End);
        assert!(!d.is_cut());
        // Cut between records: not whole either.
        let mut d = Decoder::default();
        d.feed(&stream[..stream.len() - TRAILER.len()]);
        while let Step::Record(_) = d.next(&wires, &names).unwrap() {}
        assert!(d.is_cut());
        assert_eq!(got, vec![row.to_vec(), row.to_vec()]);

        let mut d = Decoder::default();
        d.feed(b"COPY not binary at all");
        assert!(d.next(&wires, &names).is_err());
        let mut d = Decoder::default();
        let mut wrong = HEADER.to_vec();
        wrong.extend_from_slice(&1i16.to_be_bytes());
        wrong.extend_from_slice(&3i32.to_be_bytes());
        wrong.extend_from_slice(b"abc");
        d.feed(&wrong);
        assert!(d.next(&[Wire::Int8], &names).unwrap_err().contains("column a"));
    }
}
