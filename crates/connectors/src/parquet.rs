//! Parquet files from record batches, for every destination that lands
//! files (object storage, and the lake tables after it): each Sluice type
//! as Parquet's logical type, rows buffered by column into row groups,
//! written while the source is read.
//!
//! | Sluice | Parquet |
//! |---|---|
//! | integer | INT64 |
//! | number | DOUBLE |
//! | decimal of a known precision p and scale s (`numeric(p,s)`) | DECIMAL(p,s): INT64 to p = 18, FIXED_LEN_BYTE_ARRAY(16) to 38 |
//! | decimal otherwise | BYTE_ARRAY STRING (its canonical text: no precision to declare) |
//! | boolean | BOOLEAN |
//! | timestamp | INT64 TIMESTAMP(MICROS, UTC) |
//! | date | INT32 DATE |
//! | string | BYTE_ARRAY STRING |
//! | object, array | BYTE_ARRAY JSON |
//! | binary | BYTE_ARRAY |
//!
//! A nullable field is OPTIONAL, a key field REQUIRED.

use ::parquet::basic::{Compression, LogicalType, Repetition, TimeUnit, Type as Physical, ZstdLevel};
use ::parquet::data_type::{
    BoolType, ByteArray, ByteArrayType, DoubleType, FixedLenByteArray, FixedLenByteArrayType, Int32Type, Int64Type,
};
use ::parquet::file::properties::WriterProperties;
use ::parquet::file::writer::SerializedFileWriter;
use ::parquet::schema::types::Type;
use sluice_domain::connect::connector::{ConnectorError, ConnectorResult, EntitySchema, Field, FieldType, Value};
use std::io::Write;
use std::sync::Arc;

/// How a file's pages are compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Zstd,
    Snappy,
    None,
}

impl Codec {
    /// `zstd` (the default), `snappy` or `none`.
    pub fn parse(s: Option<&str>) -> ConnectorResult<Codec> {
        match s.unwrap_or("zstd") {
            "zstd" => Ok(Codec::Zstd),
            "snappy" => Ok(Codec::Snappy),
            "none" | "uncompressed" => Ok(Codec::None),
            other => Err(ConnectorError::InvalidConfig(format!(
                "compression must be zstd, snappy or none for Parquet, not '{other}'"
            ))),
        }
    }

    fn parquet(self) -> Compression {
        match self {
            Codec::Zstd => Compression::ZSTD(ZstdLevel::default()),
            Codec::Snappy => Compression::SNAPPY,
            Codec::None => Compression::UNCOMPRESSED,
        }
    }
}

/// Rows a row group holds before it is written.
pub const ROW_GROUP_ROWS: usize = 122_880;

/// How one field is stored.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Int,
    Double,
    /// A decimal as an integer of `scale` digits after the point; `wide`:
    /// 16 bytes, big-endian, rather than an INT64.
    Decimal {
        scale: u32,
        wide: bool,
    },
    Bool,
    Timestamp,
    Date,
    /// Text: strings, a decimal of no declared precision, JSON.
    Text,
    Bytes,
}

/// The precision and scale of a decimal field, from its native type
/// (`postgres:numeric(12,2)`, `mysql:decimal(10,0)`); `None` when it has
/// none (an unconstrained numeric) or they do not fit 38 digits.
pub fn precision_of(f: &Field) -> Option<(u32, u32)> {
    let native = f.native_type.as_deref()?;
    let inner = native.split_once('(')?.1.strip_suffix(')')?;
    let (p, s) = match inner.split_once(',') {
        Some((p, s)) => (p.trim().parse().ok()?, s.trim().parse().ok()?),
        None => (inner.trim().parse().ok()?, 0),
    };
    ((1..=38).contains(&p) && s <= p).then_some((p, s))
}

fn kind_of(f: &Field) -> Kind {
    match f.field_type {
        FieldType::Integer => Kind::Int,
        FieldType::Number => Kind::Double,
        FieldType::Decimal => match precision_of(f) {
            Some((p, scale)) => Kind::Decimal { scale, wide: p > 18 },
            None => Kind::Text,
        },
        FieldType::Boolean => Kind::Bool,
        FieldType::Timestamp => Kind::Timestamp,
        FieldType::Date => Kind::Date,
        FieldType::String | FieldType::Object | FieldType::Array => Kind::Text,
        FieldType::Binary => Kind::Bytes,
    }
}

/// The Parquet schema of `schema`'s fields.
pub fn parquet_schema(schema: &EntitySchema) -> ConnectorResult<Type> {
    parquet_schema_with_ids(schema, None)
}

/// [`parquet_schema`], each field carrying the id of `ids` at its place
/// (what a lake table's reader matches columns by).
pub fn parquet_schema_with_ids(schema: &EntitySchema, ids: Option<&[i32]>) -> ConnectorResult<Type> {
    let bad = |e: ::parquet::errors::ParquetError| ConnectorError::Other(format!("a Parquet schema: {e}"));
    let mut fields = Vec::with_capacity(schema.fields.len());
    for (i, f) in schema.fields.iter().enumerate() {
        let (physical, logical) = match (kind_of(f), f.field_type) {
            (Kind::Int, _) => (Physical::INT64, None),
            (Kind::Double, _) => (Physical::DOUBLE, None),
            (Kind::Decimal { scale, wide }, _) => {
                let (p, _) = precision_of(f).unwrap_or((38, scale));
                let physical = if wide { Physical::FIXED_LEN_BYTE_ARRAY } else { Physical::INT64 };
                (physical, Some(LogicalType::decimal(scale as i32, p as i32)))
            }
            (Kind::Bool, _) => (Physical::BOOLEAN, None),
            (Kind::Timestamp, _) => (Physical::INT64, Some(LogicalType::timestamp(true, TimeUnit::MICROS))),
            (Kind::Date, _) => (Physical::INT32, Some(LogicalType::Date)),
            (Kind::Text, FieldType::Object | FieldType::Array) => (Physical::BYTE_ARRAY, Some(LogicalType::Json)),
            (Kind::Text, _) => (Physical::BYTE_ARRAY, Some(LogicalType::String)),
            (Kind::Bytes, _) => (Physical::BYTE_ARRAY, None),
        };
        let mut b = Type::primitive_type_builder(&f.name, physical)
            .with_repetition(if f.nullable && !f.primary_key { Repetition::OPTIONAL } else { Repetition::REQUIRED })
            .with_logical_type(logical.clone())
            .with_id(ids.and_then(|ids| ids.get(i).copied()));
        if let Some(LogicalType::Decimal(d)) = &logical {
            b = b.with_precision(d.precision).with_scale(d.scale);
            if physical == Physical::FIXED_LEN_BYTE_ARRAY {
                b = b.with_length(16);
            }
        }
        fields.push(Arc::new(b.build().map_err(bad)?));
    }
    Type::group_type_builder("schema").with_fields(fields).build().map_err(bad)
}

/// One column's buffered values and definition levels.
enum Buffer {
    Int(Vec<i64>),
    Int32(Vec<i32>),
    Double(Vec<f64>),
    Bool(Vec<bool>),
    Bytes(Vec<ByteArray>),
    Wide(Vec<FixedLenByteArray>),
}

struct Column {
    kind: Kind,
    optional: bool,
    name: String,
    values: Buffer,
    levels: Vec<i16>,
    /// Values and nulls taken, over the file.
    counts: (u64, u64),
}

/// A Parquet file being written to `W`: rows taken in batches, written a
/// row group at a time.
pub struct ParquetFile<W: Write + Send> {
    writer: SerializedFileWriter<W>,
    columns: Vec<Column>,
    buffered: usize,
    /// About how many bytes the buffered rows hold.
    buffered_bytes: usize,
    /// A row group is written once it holds about this many bytes (or
    /// [`ROW_GROUP_ROWS`] rows), so that wide rows keep memory bounded.
    group_bytes: usize,
    rows: u64,
}

/// The bytes a row group buffers at most, unless told otherwise.
pub const ROW_GROUP_BYTES: usize = 64 << 20;

/// About how many bytes `v` takes in a column's buffer.
fn approx_bytes(v: &Value) -> usize {
    match v {
        Value::String(s) | Value::Decimal(s) | Value::RawJson(s) => s.len() + 4,
        Value::Bytes(b) => b.len() + 4,
        Value::Json(_) => 64,
        _ => 8,
    }
}

impl<W: Write + Send> ParquetFile<W> {
    /// A file of `schema`'s fields, compressed with `codec`.
    pub fn new(out: W, schema: &EntitySchema, codec: Codec) -> ConnectorResult<Self> {
        Self::with_ids(out, schema, codec, None)
    }

    /// [`ParquetFile::new`], its fields carrying `ids` (see
    /// [`parquet_schema_with_ids`]).
    pub fn with_ids(out: W, schema: &EntitySchema, codec: Codec, ids: Option<&[i32]>) -> ConnectorResult<Self> {
        let props = WriterProperties::builder()
            .set_compression(codec.parquet())
            .set_created_by(format!("sluice {}", env!("CARGO_PKG_VERSION")))
            .build();
        let writer = SerializedFileWriter::new(out, Arc::new(parquet_schema_with_ids(schema, ids)?), Arc::new(props))
            .map_err(|e| ConnectorError::Other(format!("opening a Parquet file: {e}")))?;
        let columns = schema
            .fields
            .iter()
            .map(|f| {
                let kind = kind_of(f);
                let values = match kind {
                    Kind::Int | Kind::Timestamp | Kind::Decimal { wide: false, .. } => Buffer::Int(Vec::new()),
                    Kind::Decimal { wide: true, .. } => Buffer::Wide(Vec::new()),
                    Kind::Date => Buffer::Int32(Vec::new()),
                    Kind::Double => Buffer::Double(Vec::new()),
                    Kind::Bool => Buffer::Bool(Vec::new()),
                    Kind::Text | Kind::Bytes => Buffer::Bytes(Vec::new()),
                };
                let optional = f.nullable && !f.primary_key;
                Column { kind, optional, name: f.name.clone(), values, levels: Vec::new(), counts: (0, 0) }
            })
            .collect();
        Ok(ParquetFile { writer, columns, buffered: 0, buffered_bytes: 0, group_bytes: ROW_GROUP_BYTES, rows: 0 })
    }

    /// Writes a row group once it buffers about `bytes` (at least 1 KiB).
    pub fn with_group_bytes(mut self, bytes: usize) -> Self {
        self.group_bytes = bytes.max(1024);
        self
    }

    /// Takes `rows` (in the schema's field order); a full row group is
    /// written out.
    ///
    /// # Errors
    /// `InvalidConfig` naming the field of a value its type cannot hold
    /// (nothing of that row is taken), a write's failure.
    pub fn write(&mut self, rows: &[Vec<Value>]) -> ConnectorResult<()> {
        for row in rows {
            if row.len() != self.columns.len() {
                return Err(ConnectorError::Other(format!(
                    "a row of {} values for {} columns",
                    row.len(),
                    self.columns.len()
                )));
            }
            // Checked whole first, so that a bad value leaves no column a
            // value longer than another.
            for (c, v) in self.columns.iter().zip(row) {
                c.check(v)?;
            }
            for (c, v) in self.columns.iter_mut().zip(row) {
                self.buffered_bytes += approx_bytes(v);
                c.push(v);
            }
            self.buffered += 1;
            if self.buffered >= ROW_GROUP_ROWS || self.buffered_bytes >= self.group_bytes {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// Each column's count of values and of nulls so far, in the schema's
    /// order.
    pub fn counts(&self) -> Vec<(u64, u64)> {
        self.columns.iter().map(|c| c.counts).collect()
    }

    /// Rows taken so far.
    pub fn rows(&self) -> u64 {
        self.rows + self.buffered as u64
    }

    /// The bytes written out so far (the row groups closed).
    pub fn bytes_written(&self) -> u64 {
        self.writer.bytes_written() as u64
    }

    fn flush(&mut self) -> ConnectorResult<()> {
        if self.buffered == 0 {
            return Ok(());
        }
        let failed = |e: ::parquet::errors::ParquetError| ConnectorError::Other(format!("writing Parquet: {e}"));
        let mut group = self.writer.next_row_group().map_err(failed)?;
        for c in &mut self.columns {
            let mut col = group
                .next_column()
                .map_err(failed)?
                .ok_or_else(|| ConnectorError::Other(format!("the Parquet file has no column for {}", c.name)))?;
            let levels = c.optional.then_some(c.levels.as_slice());
            match &mut c.values {
                Buffer::Int(v) => col.typed::<Int64Type>().write_batch(v, levels, None).map(|_| ()),
                Buffer::Int32(v) => col.typed::<Int32Type>().write_batch(v, levels, None).map(|_| ()),
                Buffer::Double(v) => col.typed::<DoubleType>().write_batch(v, levels, None).map(|_| ()),
                Buffer::Bool(v) => col.typed::<BoolType>().write_batch(v, levels, None).map(|_| ()),
                Buffer::Bytes(v) => col.typed::<ByteArrayType>().write_batch(v, levels, None).map(|_| ()),
                Buffer::Wide(v) => col.typed::<FixedLenByteArrayType>().write_batch(v, levels, None).map(|_| ()),
            }
            .map_err(failed)?;
            col.close().map_err(failed)?;
            c.clear();
        }
        group.close().map_err(failed)?;
        self.rows += self.buffered as u64;
        self.buffered = 0;
        self.buffered_bytes = 0;
        Ok(())
    }

    /// Writes what is buffered and the footer; answers the rows written.
    pub fn finish(mut self) -> ConnectorResult<(W, u64)> {
        self.flush()?;
        let rows = self.rows;
        let out = self.writer.into_inner().map_err(|e| ConnectorError::Other(format!("closing Parquet: {e}")))?;
        Ok((out, rows))
    }
}

/// A decimal's canonical text (`-12.5`) as an integer of `scale` digits
/// after the point; `None` when it has more digits after the point than
/// `scale`, or does not fit.
fn decimal_units(text: &str, scale: u32) -> Option<i128> {
    let (neg, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    let frac = frac.trim_end_matches('0');
    if frac.len() > scale as usize || int.is_empty() && frac.is_empty() {
        return None;
    }
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut n: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        n = n.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    n = n.checked_mul(10i128.checked_pow(scale - frac.len() as u32)?)?;
    Some(if neg { -n } else { n })
}

impl Column {
    /// Whether `v` can go in this column.
    fn check(&self, v: &Value) -> ConnectorResult<()> {
        let ok = match (self.kind, v) {
            (_, Value::Null) => self.optional,
            (Kind::Int, Value::Int(_))
            | (Kind::Double, Value::Float(_) | Value::Int(_))
            | (Kind::Bool, Value::Bool(_))
            | (Kind::Timestamp, Value::Timestamp(_))
            | (Kind::Date, Value::Date(_))
            | (Kind::Bytes, Value::Bytes(_))
            | (Kind::Text, _) => true,
            (Kind::Decimal { scale, wide }, Value::Decimal(d)) => decimal_units(d, scale)
                .is_some_and(|n| wide || i64::try_from(n).is_ok_and(|n| n.unsigned_abs() < 10u64.pow(18))),
            (Kind::Decimal { scale, .. }, Value::Int(i)) => decimal_units(&i.to_string(), scale).is_some(),
            _ => false,
        };
        if ok {
            return Ok(());
        }
        let what = match v {
            Value::Null => "null".to_string(),
            other => format!("{other:?}").chars().take(60).collect(),
        };
        Err(ConnectorError::InvalidConfig(format!("column {}: {what} does not fit its Parquet type", self.name)))
    }

    /// Appends `v` (checked).
    fn push(&mut self, v: &Value) {
        if matches!(v, Value::Null) {
            self.levels.push(0);
            self.counts.1 += 1;
            return;
        }
        self.levels.push(1);
        self.counts.0 += 1;
        match (&mut self.values, v) {
            (Buffer::Int(out), Value::Int(i)) if self.kind == Kind::Int => out.push(*i),
            (Buffer::Int(out), Value::Timestamp(t)) => {
                out.push((t.unix_timestamp_nanos() / 1_000) as i64);
            }
            (Buffer::Int(out), v) => {
                let Kind::Decimal { scale, .. } = self.kind else { return };
                out.push(decimal_of(v, scale) as i64);
            }
            (Buffer::Wide(out), v) => {
                let Kind::Decimal { scale, .. } = self.kind else { return };
                out.push(FixedLenByteArray::from(decimal_of(v, scale).to_be_bytes().to_vec()));
            }
            (Buffer::Int32(out), Value::Date(d)) => out.push(d.to_julian_day() - EPOCH_JULIAN_DAY),
            (Buffer::Double(out), Value::Float(f)) => out.push(*f),
            (Buffer::Double(out), Value::Int(i)) => out.push(*i as f64),
            (Buffer::Bool(out), Value::Bool(b)) => out.push(*b),
            (Buffer::Bytes(out), Value::Bytes(b)) => out.push(ByteArray::from(b.clone())),
            (Buffer::Bytes(out), v) => out.push(ByteArray::from(text_of(v).into_bytes())),
            _ => {}
        }
    }

    fn clear(&mut self) {
        self.levels.clear();
        match &mut self.values {
            Buffer::Int(v) => v.clear(),
            Buffer::Int32(v) => v.clear(),
            Buffer::Double(v) => v.clear(),
            Buffer::Bool(v) => v.clear(),
            Buffer::Bytes(v) => v.clear(),
            Buffer::Wide(v) => v.clear(),
        }
    }
}

/// 1970-01-01 as a Julian day.
const EPOCH_JULIAN_DAY: i32 = 2_440_588;

fn decimal_of(v: &Value, scale: u32) -> i128 {
    match v {
        Value::Decimal(d) => decimal_units(d, scale).unwrap_or_default(),
        Value::Int(i) => decimal_units(&i.to_string(), scale).unwrap_or_default(),
        _ => 0,
    }
}

/// A value as the text a STRING or JSON column holds.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) | Value::Decimal(s) | Value::RawJson(s) => s.clone(),
        Value::Json(j) => j.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Bool(b) => b.to_string(),
        other => other.to_json().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_become_integers_of_their_scale() {
        assert_eq!(decimal_units("-12.5", 2), Some(-1250));
        assert_eq!(decimal_units("12", 2), Some(1200));
        assert_eq!(decimal_units("0.125", 2), None, "more digits than the scale");
        assert_eq!(decimal_units("1.20", 1), Some(12));
        assert_eq!(decimal_units("x", 2), None);
        assert_eq!(decimal_units("", 2), None);
        assert_eq!(decimal_units("99999999999999999999999999999999999999", 0), Some(10i128.pow(38) - 1));
    }

    #[test]
    fn a_decimal_declares_the_precision_its_native_type_has() {
        let mut f = Field::new("d", FieldType::Decimal);
        f.native_type = Some("postgres:numeric(12,2)".into());
        assert_eq!(precision_of(&f), Some((12, 2)));
        f.native_type = Some("mysql:decimal(30)".into());
        assert_eq!(kind_of(&f), Kind::Decimal { scale: 0, wide: true });
        f.native_type = Some("postgres:numeric".into());
        assert_eq!(kind_of(&f), Kind::Text);
    }
}
