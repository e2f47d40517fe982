//! Reading Parquet files back as records: a file's schema as Sluice's
//! fields (the inverse of `parquet`'s table, for files any engine wrote),
//! and its rows as values, row group by row group.

use parquet::basic::{ConvertedType, LogicalType, Type as Physical};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field as PField;
use parquet::schema::types::Type;
use sluice_domain::connect::connector::*;
use std::fs::File;
use std::path::Path;

fn failed(what: &str, e: impl std::fmt::Display) -> ConnectorError {
    ConnectorError::Other(format!("{what}: not a readable Parquet file: {e}"))
}

fn open(path: &Path, what: &str) -> ConnectorResult<SerializedFileReader<File>> {
    let f = File::open(path).map_err(|e| ConnectorError::Other(format!("{what}: {}", e.kind())))?;
    SerializedFileReader::new(f).map_err(|e| failed(what, e))
}

/// The fields of the Parquet file at `path` (`what` in messages).
pub fn file_fields(path: &Path, what: &str) -> ConnectorResult<Vec<Field>> {
    let r = open(path, what)?;
    let schema = r.metadata().file_metadata().schema().clone();
    Ok(schema.get_fields().iter().map(|t| field_of(t)).collect())
}

/// One column as a field: its type from the physical and logical types.
fn field_of(t: &Type) -> Field {
    let info = t.get_basic_info();
    let nullable = !info.has_repetition() || info.repetition() != parquet::basic::Repetition::REQUIRED;
    let mut native = None;
    let field_type = if t.is_group() {
        match info.converted_type() {
            ConvertedType::LIST => FieldType::Array,
            _ => FieldType::Object,
        }
    } else {
        let logical = info.logical_type_ref();
        let decimal = |p: i32, s: i32| (FieldType::Decimal, Some(format!("numeric({p},{s})")));
        let (ft, n) = match (t.get_physical_type(), logical) {
            (_, Some(LogicalType::Decimal(d))) => decimal(d.precision, d.scale),
            (_, _) if info.converted_type() == ConvertedType::DECIMAL => decimal(t.get_precision(), t.get_scale()),
            (Physical::BOOLEAN, _) => (FieldType::Boolean, None),
            (Physical::INT32, Some(LogicalType::Date)) => (FieldType::Date, None),
            (_, _) if info.converted_type() == ConvertedType::DATE => (FieldType::Date, None),
            // The unit travels in the native type: the row reader hands a
            // nanosecond timestamp over as a bare integer.
            (Physical::INT64, Some(LogicalType::Timestamp(t))) => {
                let unit = match t.unit {
                    parquet::basic::TimeUnit::NANOS => "nanos",
                    parquet::basic::TimeUnit::MICROS => "micros",
                    parquet::basic::TimeUnit::MILLIS => "millis",
                };
                (FieldType::Timestamp, Some(format!("parquet:timestamp({unit})")))
            }
            (Physical::INT96, _) => (FieldType::Timestamp, None),
            (_, Some(LogicalType::Time { .. })) => (FieldType::String, None),
            (_, _) if matches!(info.converted_type(), ConvertedType::TIME_MILLIS | ConvertedType::TIME_MICROS) => {
                (FieldType::String, None)
            }
            (_, _)
                if matches!(
                    info.converted_type(),
                    ConvertedType::TIMESTAMP_MICROS | ConvertedType::TIMESTAMP_MILLIS
                ) =>
            {
                (FieldType::Timestamp, None)
            }
            (Physical::INT32 | Physical::INT64, _) => (FieldType::Integer, None),
            (Physical::FLOAT | Physical::DOUBLE, _) => (FieldType::Number, None),
            (_, Some(LogicalType::Json)) => (FieldType::Object, None),
            (_, _) if info.converted_type() == ConvertedType::JSON => (FieldType::Object, None),
            (Physical::BYTE_ARRAY, Some(LogicalType::String | LogicalType::Enum)) => (FieldType::String, None),
            (_, _) if matches!(info.converted_type(), ConvertedType::UTF8 | ConvertedType::ENUM) => {
                (FieldType::String, None)
            }
            _ => (FieldType::Binary, None),
        };
        native = n;
        ft
    };
    Field { name: info.name().to_string(), field_type, nullable, primary_key: false, native_type: native }
}

/// A decimal's unscaled big-endian two's complement bytes, as canonical
/// text with `scale` digits after the point.
fn decimal_text(bytes: &[u8], scale: i32) -> Option<String> {
    if bytes.is_empty() || bytes.len() > 16 || !(0..=38).contains(&scale) {
        return None;
    }
    let mut n: i128 = if bytes[0] & 0x80 != 0 { -1 } else { 0 };
    for b in bytes {
        n = (n << 8) | i128::from(*b);
    }
    let (neg, digits) = (n < 0, n.unsigned_abs().to_string());
    let scale = usize::try_from(scale).ok()?;
    let text = if scale == 0 {
        digits
    } else {
        let padded = format!("{digits:0>width$}", width = scale + 1);
        let (int, frac) = padded.split_at(padded.len() - scale);
        format!("{int}.{frac}")
    };
    Some(if neg { format!("-{text}") } else { text })
}

/// A Parquet value as the value of `field`; `None` when it cannot be one.
fn value_of(v: &PField, field: &Field) -> Option<Value> {
    use time::OffsetDateTime;
    let micros = |us: i64| OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).ok().map(Value::Timestamp);
    Some(match (v, field.field_type) {
        (PField::Null, _) => Value::Null,
        (PField::Bool(b), _) => Value::Bool(*b),
        (PField::Byte(n), _) => Value::Int((*n).into()),
        (PField::Short(n), _) => Value::Int((*n).into()),
        (PField::Int(n), _) => Value::Int((*n).into()),
        (PField::Long(n), FieldType::Timestamp) => {
            let nanos = match field.native_type.as_deref() {
                Some("parquet:timestamp(nanos)") => i128::from(*n),
                Some("parquet:timestamp(millis)") => i128::from(*n) * 1_000_000,
                _ => i128::from(*n) * 1000,
            };
            // Microseconds are kept, as everywhere (nanoseconds are cut).
            Value::Timestamp(OffsetDateTime::from_unix_timestamp_nanos(nanos - nanos.rem_euclid(1000)).ok()?)
        }
        (PField::Long(n), _) => Value::Int(*n),
        (PField::UByte(n), _) => Value::Int((*n).into()),
        (PField::UShort(n), _) => Value::Int((*n).into()),
        (PField::UInt(n), _) => Value::Int((*n).into()),
        (PField::ULong(n), _) => Value::Int(i64::try_from(*n).ok()?),
        (PField::Float16(f), _) => Value::Float(f64::from(f32::from(*f))),
        (PField::Float(f), _) => Value::Float((*f).into()),
        (PField::Double(f), _) => Value::Float(*f),
        (PField::Decimal(d), _) => Value::Decimal(decimal_text(d.data(), d.scale())?),
        (PField::Str(s), FieldType::Object | FieldType::Array) => {
            serde_json::from_str::<serde::de::IgnoredAny>(s).ok()?;
            Value::RawJson(s.clone())
        }
        (PField::Str(s), _) => Value::String(s.clone()),
        (PField::Bytes(b), FieldType::Object | FieldType::Array | FieldType::String) => {
            let s = std::str::from_utf8(b.data()).ok()?;
            if field.field_type == FieldType::String {
                Value::String(s.to_string())
            } else {
                serde_json::from_str::<serde::de::IgnoredAny>(s).ok()?;
                Value::RawJson(s.to_string())
            }
        }
        (PField::Bytes(b), _) => Value::Bytes(b.data().to_vec()),
        (PField::Date(d), _) => Value::Date(
            time::Date::from_julian_day(
                time::Date::from_calendar_date(1970, time::Month::January, 1).ok()?.to_julian_day() + d,
            )
            .ok()?,
        ),
        (PField::TimestampMicros(us), _) => micros(*us)?,
        (PField::TimestampMillis(ms), _) => micros(ms.checked_mul(1000)?)?,
        (PField::TimeMillis(_) | PField::TimeMicros(_), _) => Value::String(v.to_string()),
        (PField::Group(_) | PField::ListInternal(_) | PField::MapInternal(_), _) => Value::Json(json_of(v)),
    })
}

/// A nested value as JSON.
fn json_of(v: &PField) -> serde_json::Value {
    use serde_json::Value as J;
    match v {
        PField::Null => J::Null,
        PField::Bool(b) => J::Bool(*b),
        PField::Group(row) => J::Object(row.get_column_iter().map(|(k, v)| (k.clone(), json_of(v))).collect()),
        PField::ListInternal(l) => J::Array(l.elements().iter().map(json_of).collect()),
        PField::MapInternal(m) => J::Array(
            m.entries().iter().map(|(k, v)| serde_json::json!({"key": json_of(k), "value": json_of(v)})).collect(),
        ),
        PField::Str(s) => J::String(s.clone()),
        other => {
            let f = Field::new("", FieldType::String);
            match value_of(other, &f) {
                Some(Value::Int(n)) => J::from(n),
                Some(Value::Float(x)) => serde_json::Number::from_f64(x).map(J::Number).unwrap_or(J::Null),
                Some(v) => v.to_json(),
                None => J::Null,
            }
        }
    }
}

/// Each field's column in the file `r` (by name).
fn places_of(r: &SerializedFileReader<File>, fields: &[Field]) -> Vec<Option<usize>> {
    let names: Vec<String> =
        r.metadata().file_metadata().schema().get_fields().iter().map(|t| t.name().to_string()).collect();
    fields.iter().map(|f| names.iter().position(|n| *n == f.name)).collect()
}

/// One row of a file as `fields` (a field the file lacks is null).
fn decode(
    row: &parquet::record::Row,
    what: &str,
    fields: &[Field],
    places: &[Option<usize>],
) -> ConnectorResult<Vec<Value>> {
    let columns: Vec<&PField> = row.get_column_iter().map(|(_, v)| v).collect();
    let mut out = Vec::with_capacity(fields.len());
    for (f, place) in fields.iter().zip(places) {
        let v = match place.and_then(|i| columns.get(i)) {
            Some(v) => value_of(v, f).ok_or_else(|| {
                ConnectorError::Other(format!("{what}: column {} holds {v}, which is not a {:?}", f.name, f.field_type))
            })?,
            None => Value::Null,
        };
        out.push(v);
    }
    Ok(out)
}

/// Reads the rows of the Parquet file at `path` as `fields` (by column
/// name; a field the file lacks is null), handing each to `each` until it
/// answers `false`.
pub fn each_row(
    path: &Path,
    what: &str,
    fields: &[Field],
    mut each: impl FnMut(Vec<Value>) -> bool,
) -> ConnectorResult<()> {
    let r = open(path, what)?;
    let places = places_of(&r, fields);
    for row in r.get_row_iter(None).map_err(|e| failed(what, e))? {
        let row = row.map_err(|e| failed(what, e))?;
        if !each(decode(&row, what, fields, &places)?) {
            break;
        }
    }
    Ok(())
}

/// The rows at `positions` (ascending places in the whole file, from 0)
/// of the Parquet file at `path`, as `fields`, each with its place; row
/// groups that hold none of them are not read.
pub fn rows_at(
    path: &Path,
    what: &str,
    fields: &[Field],
    positions: &[u64],
) -> ConnectorResult<Vec<(u64, Vec<Value>)>> {
    let r = open(path, what)?;
    let places = places_of(&r, fields);
    let mut out = Vec::with_capacity(positions.len());
    let mut want = positions.iter().copied().peekable();
    let mut start = 0u64;
    for g in 0..r.num_row_groups() {
        let end = start + r.metadata().row_group(g).num_rows().max(0) as u64;
        while want.peek().is_some_and(|p| *p < start) {
            want.next();
        }
        if want.peek().is_some_and(|p| *p < end) {
            let group = r.get_row_group(g).map_err(|e| failed(what, e))?;
            for (i, row) in group.get_row_iter(None).map_err(|e| failed(what, e))?.enumerate() {
                let at = start + i as u64;
                if want.peek() == Some(&at) {
                    let row = row.map_err(|e| failed(what, e))?;
                    out.push((at, decode(&row, what, fields, &places)?));
                    want.next();
                }
                if want.peek().is_none_or(|p| *p >= end) {
                    break;
                }
            }
        }
        start = end;
    }
    Ok(out)
}

/// The rows of row group `group` of the Parquet file at `path`, as
/// `fields`; `None` past the last group.
pub fn group_rows(path: &Path, what: &str, fields: &[Field], group: usize) -> ConnectorResult<Option<Vec<Vec<Value>>>> {
    let r = open(path, what)?;
    if group >= r.num_row_groups() {
        return Ok(None);
    }
    let places = places_of(&r, fields);
    let reader = r.get_row_group(group).map_err(|e| failed(what, e))?;
    let mut out = Vec::new();
    for row in reader.get_row_iter(None).map_err(|e| failed(what, e))? {
        out.push(decode(&row.map_err(|e| failed(what, e))?, what, fields, &places)?);
    }
    Ok(Some(out))
}

/// Whether the Parquet file at `path` has a column named `name`.
pub fn has_column(path: &Path, what: &str, name: &str) -> ConnectorResult<bool> {
    let r = open(path, what)?;
    Ok(r.metadata().file_metadata().schema().get_fields().iter().any(|t| t.name() == name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_read_back_as_their_canonical_text() {
        assert_eq!(decimal_text(&[0x04, 0xD2], 2).as_deref(), Some("12.34"));
        assert_eq!(decimal_text(&[0xFB, 0x2E], 2).as_deref(), Some("-12.34"));
        assert_eq!(decimal_text(&[0x05], 3).as_deref(), Some("0.005"));
        assert_eq!(decimal_text(&[0x00, 0x7B], 0).as_deref(), Some("123"));
        assert_eq!(decimal_text(&[0u8; 17], 0), None);
    }
}
