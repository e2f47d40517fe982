//! The two formats of a file connection, JSON Lines and CSV: records read
//! raw (JSON values by field name), and values read from and written as
//! their JSON or text.

use super::io;
use crate::common::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use sluice_domain::connect::connector::*;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Jsonl,
    Csv,
}

impl Format {
    pub fn parse(s: &str) -> ConnectorResult<Self> {
        match s {
            "jsonl" | "ndjson" => Ok(Format::Jsonl),
            "csv" => Ok(Format::Csv),
            other => Err(ConnectorError::InvalidConfig(format!("format must be jsonl or csv, not '{other}'"))),
        }
    }

    pub(super) fn ext(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
        }
    }
}

/// Raw records: JSON values by field name, from either format.
pub(super) type RawRecord = HashMap<String, serde_json::Value>;

pub(super) fn read_records(
    path: &Path,
    what: &str,
    format: Format,
    limit: Option<usize>,
) -> ConnectorResult<(Vec<String>, Vec<RawRecord>)> {
    let mut out = Vec::new();
    let names = visit_records(path, what, format, |rec| {
        if limit.is_some_and(|l| out.len() >= l) {
            return false;
        }
        out.push(rec);
        true
    })?;
    Ok((names, out))
}

/// Passes each record of `path` to `visit` until it answers `false`;
/// answers the field names (a CSV's header, else in order of appearance).
pub(super) fn visit_records(
    path: &Path,
    what: &str,
    format: Format,
    mut visit: impl FnMut(RawRecord) -> bool,
) -> ConnectorResult<Vec<String>> {
    let file = File::open(path).map_err(|e| io(what, e))?;
    let mut names: Vec<String> = Vec::new();
    match format {
        Format::Jsonl => {
            for (n, line) in BufReader::new(file).lines().enumerate() {
                let line = line.map_err(|e| io(what, e))?;
                if line.trim().is_empty() {
                    continue;
                }
                let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(&line)
                    .map_err(|e| ConnectorError::Other(format!("{what} line {}: not a JSON object: {e}", n + 1)))?;
                for k in obj.keys() {
                    if !names.contains(k) {
                        names.push(k.clone());
                    }
                }
                if !visit(obj.into_iter().collect()) {
                    break;
                }
            }
        }
        Format::Csv => {
            let mut rdr = csv::ReaderBuilder::new().has_headers(true).flexible(true).from_reader(BufReader::new(file));
            names = rdr
                .headers()
                .map_err(|e| ConnectorError::Other(format!("{what}: {e}")))?
                .iter()
                .map(str::to_string)
                .collect();
            for rec in rdr.records() {
                let rec = rec.map_err(|e| ConnectorError::Other(format!("{what}: {e}")))?;
                let raw = names
                    .iter()
                    .zip(rec.iter())
                    .map(|(k, v)| {
                        let v = if v.is_empty() {
                            serde_json::Value::Null
                        } else {
                            serde_json::Value::String(v.to_string())
                        };
                        (k.clone(), v)
                    })
                    .collect();
                if !visit(raw) {
                    break;
                }
            }
        }
    }
    Ok(names)
}

/// A raw JSON value as a value of type `t`.
pub(super) fn to_value(v: &serde_json::Value, t: FieldType) -> Value {
    use serde_json::Value as J;
    match (v, t) {
        (J::Null, _) => Value::Null,
        (J::String(s), FieldType::Binary) => B64.decode(s).map(Value::Bytes).unwrap_or(Value::String(s.clone())),
        (J::String(s), t) => text_value(s.clone(), t),
        (J::Number(n), FieldType::Integer) => {
            n.as_i64().map(Value::Int).unwrap_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN)))
        }
        (J::Number(n), FieldType::Decimal) => Value::Decimal(n.to_string()),
        (J::Number(n), FieldType::String) => Value::String(n.to_string()),
        (J::Number(n), _) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        (J::Bool(b), FieldType::String) => Value::String(b.to_string()),
        (J::Bool(b), _) => Value::Bool(*b),
        (j @ (J::Object(_) | J::Array(_)), FieldType::String) => Value::String(j.to_string()),
        (j, _) => Value::Json(j.clone()),
    }
}

/// A value as JSON for a file: decimals as strings (exact), bytes base64.
pub(super) fn to_json(v: &Value) -> serde_json::Value {
    v.to_json()
}

pub(super) fn to_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) | Value::Decimal(s) | Value::RawJson(s) => s.clone(),
        Value::Json(j) => j.to_string(),
        other => match other.to_json() {
            serde_json::Value::String(s) => s,
            j => j.to_string(),
        },
    }
}

pub(super) fn records_of(schema_fields: &[Field], raws: Vec<RawRecord>) -> Vec<Vec<Value>> {
    raws.into_iter()
        .map(|r| {
            schema_fields
                .iter()
                .map(|f| r.get(&f.name).map(|v| to_value(v, f.field_type)).unwrap_or(Value::Null))
                .collect()
        })
        .collect()
}
