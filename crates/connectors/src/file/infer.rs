//! The field types of a file without a schema beside it, inferred from
//! its records (a sample for discovery and previews, every record for a
//! sync).

use super::formats::{Format, Members, each_line, member_error, open_input};
use serde_json::value::RawValue;
use sluice_domain::connect::connector::*;
use std::collections::HashMap;
use std::io::BufReader;
use std::path::Path;

pub(crate) const SAMPLE: usize = 1_000;

/// Each field's type, from the records observed: the narrowest type every
/// value fits, widened as values come (integer → decimal → number, date →
/// timestamp, anything else → string). Inferred fields are nullable: a
/// file declares nothing, and an empty value may come at any row.
#[derive(Default)]
struct Inference {
    /// Field names in order of first appearance (nulls included).
    names: Vec<String>,
    /// Each name's place in `names` and `types`.
    places: HashMap<String, usize>,
    /// Each field's type so far (`None` while only nulls came).
    types: Vec<Option<FieldType>>,
}

impl Inference {
    /// The place of field `name`, added at the end if it is new.
    fn place(&mut self, name: &str) -> usize {
        match self.places.get(name) {
            Some(&at) => at,
            None => {
                self.places.insert(name.to_owned(), self.names.len());
                self.names.push(name.to_owned());
                self.types.push(None);
                self.names.len() - 1
            }
        }
    }

    /// A value of type `kind` (`None`: null) for the field at `at`.
    fn observe(&mut self, at: usize, kind: Option<FieldType>) {
        if let Some(vt) = kind {
            let t = &mut self.types[at];
            *t = Some(t.map_or(vt, |t| widen(t, vt)));
        }
    }

    /// The fields named `names` (all observed, in order, when `None`).
    fn fields(&self, names: Option<&[String]>) -> Vec<Field> {
        names
            .unwrap_or(&self.names)
            .iter()
            .map(|n| Field::new(n, self.places.get(n).and_then(|&at| self.types[at]).unwrap_or(FieldType::String)))
            .collect()
    }
}

/// The type of a JSON value (`None` for null).
fn kind_of(v: &serde_json::Value) -> Option<FieldType> {
    Some(match v {
        serde_json::Value::Null => return None,
        serde_json::Value::Bool(_) => FieldType::Boolean,
        serde_json::Value::Number(x) if x.is_i64() => FieldType::Integer,
        serde_json::Value::Number(_) => FieldType::Number,
        serde_json::Value::Object(_) => FieldType::Object,
        serde_json::Value::Array(_) => FieldType::Array,
        serde_json::Value::String(s) => infer_text(s),
    })
}

/// The type of a member's text, without building an object or array; a
/// number out of range is an error, as it is to a whole-line parse.
fn raw_kind(raw: &RawValue) -> serde_json::Result<Option<FieldType>> {
    let text = raw.get();
    Ok(match text.as_bytes().first() {
        Some(b'{') => Some(FieldType::Object),
        Some(b'[') => Some(FieldType::Array),
        _ => kind_of(&serde_json::from_str(text)?),
    })
}

/// The narrowest type both `a` and `b` values fit.
pub(crate) fn widen(a: FieldType, b: FieldType) -> FieldType {
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
pub(crate) fn infer_file(path: &Path, what: &str, format: Format, limit: Option<usize>) -> ConnectorResult<Vec<Field>> {
    let mut inf = Inference::default();
    let mut seen = 0;
    let names = match format {
        Format::Jsonl => {
            let file = open_input(path, what)?;
            // Per field, the last line that gave it a value: a name a line
            // repeats counts once, its last value (the one a read keeps).
            let mut given: Vec<usize> = Vec::new();
            let mut line_kinds: Vec<(usize, Option<FieldType>)> = Vec::new();
            if limit != Some(0) {
                each_line(file, what, |n, line| {
                    line_kinds.clear();
                    for (name, raw) in Members::parse(line, what, n)?.0 {
                        let kind = raw_kind(raw).map_err(|e| member_error(what, n, &name, e))?;
                        line_kinds.push((inf.place(&name), kind));
                    }
                    given.resize(inf.names.len(), usize::MAX);
                    for &(at, kind) in line_kinds.iter().rev() {
                        if given[at] != n {
                            given[at] = n;
                            inf.observe(at, kind);
                        }
                    }
                    seen += 1;
                    // At the limit, the next line is not read.
                    Ok(limit.is_none_or(|l| seen < l))
                })?;
            }
            None
        }
        Format::Csv => {
            let file = open_input(path, what)?;
            let mut rdr = csv::ReaderBuilder::new()
                .has_headers(true)
                .flexible(true)
                .from_reader(BufReader::with_capacity(1 << 20, file));
            let bad = |e: csv::Error| ConnectorError::Other(format!("{what}: {e}"));
            let headers: Vec<String> = rdr.headers().map_err(bad)?.iter().map(str::to_string).collect();
            // The first column of each name, the one a sync reads.
            let mut columns: Vec<(usize, usize)> = Vec::with_capacity(headers.len());
            for (i, h) in headers.iter().enumerate() {
                if !inf.places.contains_key(h) {
                    columns.push((i, inf.place(h)));
                }
            }
            let mut rec = csv::StringRecord::new();
            while limit.is_none_or(|l| seen < l) && rdr.read_record(&mut rec).map_err(bad)? {
                seen += 1;
                for &(i, at) in &columns {
                    // An empty field is null.
                    inf.observe(at, rec.get(i).filter(|v| !v.is_empty()).map(infer_text));
                }
            }
            Some(headers)
        }
    };
    Ok(inf.fields(names.as_deref()))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
        let path = std::env::temp_dir().join(format!("sluice-infer-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn a_json_lines_file_gives_its_fields_in_order_with_the_narrowest_types() {
        let path = temp_file(
            "types.jsonl",
            concat!(
                r#"{"id": 1, "gone": null, "when": "2026-01-02", "doc": {"k": [1]}, "tags": ["a"], "amount": "12.50", "n": 1}"#,
                "\n\n",
                r#"{"id": 2, "when": "2026-01-02T03:04:05Z", "amount": "3.25", "n": 2.5, "flag": true, "na\u006de": "x"}"#,
                "\r\n",
                r#"{"id": 3, "doc": null, "n": "7"}"#,
                "\n",
            ),
        );
        let fields = infer_file(&path, "t", Format::Jsonl, None).unwrap();
        let got: Vec<(&str, FieldType)> = fields.iter().map(|f| (f.name.as_str(), f.field_type)).collect();
        use FieldType::*;
        assert_eq!(
            got,
            [
                ("id", Integer),
                ("gone", String),
                ("when", Timestamp),
                ("doc", Object),
                ("tags", Array),
                ("amount", Decimal),
                ("n", Number),
                ("flag", Boolean),
                ("name", String),
            ]
        );
        let sample = infer_file(&path, "t", Format::Jsonl, Some(1)).unwrap();
        assert_eq!(
            sample.iter().map(|f| f.name.as_str()).collect::<Vec<_>>(),
            ["id", "gone", "when", "doc", "tags", "amount", "n"]
        );
        assert_eq!(sample[2].field_type, Date, "the first line alone");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_csv_file_gives_its_header_with_the_narrowest_types() {
        let path = temp_file(
            "types.csv",
            "id,when,amount,n,flag,gone,id,note\n\
             1,2026-01-02,12.50,1,true,,x,\n\
             2,2026-01-02T03:04:05Z,3.25,2.5,false,,y,\"a, b\"\n\
             3,,,7\n",
        );
        let fields = infer_file(&path, "t", Format::Csv, None).unwrap();
        let got: Vec<(&str, FieldType)> = fields.iter().map(|f| (f.name.as_str(), f.field_type)).collect();
        use FieldType::*;
        assert_eq!(
            got,
            [
                ("id", Integer),
                ("when", Timestamp),
                ("amount", Decimal),
                // Text `2.5` is exact.
                ("n", Decimal),
                ("flag", Boolean),
                ("gone", String),
                // A repeated name is typed by its first column, the one a sync reads.
                ("id", Integer),
                ("note", String),
            ]
        );
        let sample = infer_file(&path, "t", Format::Csv, Some(1)).unwrap();
        assert_eq!((sample[1].field_type, sample[3].field_type), (Date, Integer), "the first row alone");
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_name_a_line_repeats_counts_once_and_a_sample_reads_no_further() {
        let path = temp_file(
            "repeated.jsonl",
            "{\"a\": \"x\", \"a\": 1, \"b\": 1}\n{\"a\": 2, \"b\": \"y\", \"b\": 2.5}\n\u{ff}\n",
        );
        let sample = infer_file(&path, "t", Format::Jsonl, Some(2)).unwrap();
        let got: Vec<(&str, FieldType)> = sample.iter().map(|f| (f.name.as_str(), f.field_type)).collect();
        assert_eq!(got, [("a", FieldType::Integer), ("b", FieldType::Number)], "the last value of each name");
        assert!(infer_file(&path, "t", Format::Jsonl, None).is_err(), "the third line is not JSON");
        assert!(infer_file(&path, "t", Format::Jsonl, Some(0)).unwrap().is_empty());
        std::fs::remove_file(path).unwrap();
    }

    #[test]
    fn a_bad_line_is_named() {
        let path = temp_file("bad.jsonl", "{\"id\": 1}\n{\"id\": 1e400}\n");
        let e = infer_file(&path, "people.jsonl", Format::Jsonl, None).unwrap_err();
        assert!(e.to_string().contains("people.jsonl line 2: id:"), "{e}");
        std::fs::write(&path, "{\"id\": 1}\n\n[1]\n").unwrap();
        let e = infer_file(&path, "people.jsonl", Format::Jsonl, None).unwrap_err();
        assert!(e.to_string().contains("people.jsonl line 3: not a JSON object"), "{e}");
        std::fs::remove_file(path).unwrap();
    }
}
