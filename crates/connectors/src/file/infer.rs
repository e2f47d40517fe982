//! The field types of a file without a schema beside it, inferred from
//! its records (a sample for discovery and previews, every record for a
//! sync).

use super::formats::{Format, RawRecord, visit_records};
use sluice_domain::connect::connector::*;
use std::collections::HashMap;
use std::path::Path;

pub(super) const SAMPLE: usize = 1_000;

/// Each field's type, from the records observed: the narrowest type every
/// value fits, widened as values come (integer → decimal → number, date →
/// timestamp, anything else → string). Inferred fields are nullable: a
/// file declares nothing, and an empty value may come at any row.
#[derive(Default)]
struct Inference {
    types: HashMap<String, FieldType>,
}

impl Inference {
    fn observe(&mut self, rec: &RawRecord) {
        for (name, v) in rec {
            let vt = match v {
                serde_json::Value::Null => continue,
                serde_json::Value::Bool(_) => FieldType::Boolean,
                serde_json::Value::Number(x) if x.is_i64() => FieldType::Integer,
                serde_json::Value::Number(_) => FieldType::Number,
                serde_json::Value::Object(_) => FieldType::Object,
                serde_json::Value::Array(_) => FieldType::Array,
                serde_json::Value::String(s) => infer_text(s),
            };
            let merged = match self.types.get(name) {
                None => vt,
                Some(t) => widen(*t, vt),
            };
            self.types.insert(name.clone(), merged);
        }
    }

    fn fields(&self, names: &[String]) -> Vec<Field> {
        names
            .iter()
            .map(|n| Field {
                name: n.clone(),
                field_type: self.types.get(n).copied().unwrap_or(FieldType::String),
                nullable: true,
                primary_key: false,
                native_type: None,
            })
            .collect()
    }
}

/// The narrowest type both `a` and `b` values fit.
fn widen(a: FieldType, b: FieldType) -> FieldType {
    use FieldType::*;
    match (a, b) {
        (a, b) if a == b => a,
        (Integer, Decimal) | (Decimal, Integer) => Decimal,
        (Integer | Decimal, Number) | (Number, Integer | Decimal) => Number,
        (Date, Timestamp) | (Timestamp, Date) => Timestamp,
        _ => String,
    }
}

/// Infers each field's type from the file's records, streaming: the first
/// `limit` (a sample, for discovery and previews), or every one (what a
/// sync reads, so that no value after a sample meets a column too narrow
/// for it).
pub(super) fn infer_file(path: &Path, what: &str, format: Format, limit: Option<usize>) -> ConnectorResult<Vec<Field>> {
    let mut inf = Inference::default();
    let mut seen = 0;
    let names = visit_records(path, what, format, |rec| {
        if limit.is_some_and(|l| seen >= l) {
            return false;
        }
        seen += 1;
        inf.observe(&rec);
        true
    })?;
    Ok(inf.fields(&names))
}

fn infer_text(s: &str) -> FieldType {
    if s.parse::<i64>().is_ok() {
        FieldType::Integer
    } else if is_plain_decimal(s) {
        // `12.50` is exact: money must not become binary floating point.
        FieldType::Decimal
    } else if s.parse::<f64>().is_ok_and(f64::is_finite) {
        FieldType::Number
    } else if matches!(s, "true" | "false") {
        FieldType::Boolean
    } else if parse_date(s).is_some() && s.len() == 10 {
        FieldType::Date
    } else if parse_timestamp(s).is_some() {
        FieldType::Timestamp
    } else {
        FieldType::String
    }
}

/// `-12.50`, `0.5`, `3.`: digits with one point, no exponent, at most 38
/// significant digits (what every destination's exact type holds).
fn is_plain_decimal(s: &str) -> bool {
    let body = s.strip_prefix(['-', '+']).unwrap_or(s);
    let Some((int, frac)) = body.split_once('.') else { return false };
    let digits = int.len() + frac.len();
    digits > 0 && digits <= 38 && int.bytes().all(|b| b.is_ascii_digit()) && frac.bytes().all(|b| b.is_ascii_digit())
}
