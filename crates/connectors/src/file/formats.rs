//! The two formats of a file connection, JSON Lines and CSV: records read
//! raw (JSON values by field name), and values read from and written as
//! their JSON or text.

use super::io;
use crate::common::*;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;
use sluice_domain::connect::connector::*;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
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

/// The file at `path` to read: its bytes, or what they decompress to when
/// they begin as gzip does (`.csv.gz`, `.jsonl.gz`; whatever the name).
pub(crate) fn open_input(path: &Path, what: &str) -> ConnectorResult<Box<dyn Read + Send>> {
    let mut file = File::open(path).map_err(|e| io(what, e))?;
    let mut magic = [0u8; 2];
    let gzip = matches!(file.read_exact(&mut magic), Ok(()) if magic == [0x1f, 0x8b]);
    use std::io::Seek;
    file.rewind().map_err(|e| io(what, e))?;
    Ok(if gzip { Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(file))) } else { Box::new(file) })
}

/// `rows` (in the order of `names`) as the format's text: a JSON object
/// per line, or CSV records (the header is [`csv_header_line`]'s).
pub(crate) fn encode(format: Format, names: &[String], rows: &[Vec<Value>]) -> Vec<u8> {
    match format {
        Format::Jsonl => {
            let mut buf = Vec::new();
            for r in rows {
                let obj: serde_json::Map<String, serde_json::Value> =
                    names.iter().zip(r).map(|(k, v)| (k.clone(), to_json(v))).collect();
                let _ = serde_json::to_writer(&mut buf, &obj);
                buf.push(b'\n');
            }
            buf
        }
        Format::Csv => {
            let mut w = csv::Writer::from_writer(Vec::new());
            for r in rows {
                let _ = w.write_record(r.iter().map(to_text));
            }
            w.into_inner().unwrap_or_default()
        }
    }
}

/// A CSV file's header line.
pub(crate) fn csv_header_line(names: &[String]) -> Vec<u8> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let _ = w.write_record(names);
    w.into_inner().unwrap_or_default()
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
    let file = open_input(path, what)?;
    let mut names: Vec<String> = Vec::new();
    match format {
        Format::Jsonl => each_line(file, what, |n, line| {
            let obj: serde_json::Map<String, serde_json::Value> = serde_json::from_str(line)
                .map_err(|e| ConnectorError::Other(format!("{what} line {}: not a JSON object: {e}", n + 1)))?;
            for k in obj.keys() {
                if !names.contains(k) {
                    names.push(k.clone());
                }
            }
            Ok(visit(obj.into_iter().collect()))
        })?,
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
                // A repeated name keeps its first column, the one a
                // streaming read takes; an empty field is null.
                let mut raw = RawRecord::with_capacity(names.len());
                for (k, v) in names.iter().zip(rec.iter()) {
                    if !raw.contains_key(k) {
                        let v = if v.is_empty() {
                            serde_json::Value::Null
                        } else {
                            serde_json::Value::String(v.to_string())
                        };
                        raw.insert(k.clone(), v);
                    }
                }
                if !visit(raw) {
                    break;
                }
            }
        }
    }
    Ok(names)
}

/// A raw JSON value as a value of type `t`.
pub(super) fn to_value(v: serde_json::Value, t: FieldType) -> Value {
    use serde_json::Value as J;
    match (v, t) {
        (J::Null, _) => Value::Null,
        (J::String(s), FieldType::Binary) => match B64.decode(&s) {
            Ok(b) => Value::Bytes(b),
            Err(_) => Value::String(s),
        },
        (J::String(s), t) => text_value(s, t),
        (J::Number(n), FieldType::Integer) => {
            n.as_i64().map(Value::Int).unwrap_or_else(|| Value::Float(n.as_f64().unwrap_or(f64::NAN)))
        }
        (J::Number(n), FieldType::Decimal) => Value::Decimal(n.to_string()),
        (J::Number(n), FieldType::String) => Value::String(n.to_string()),
        (J::Number(n), _) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        (J::Bool(b), FieldType::String) => Value::String(b.to_string()),
        (J::Bool(b), _) => Value::Bool(b),
        (j @ (J::Object(_) | J::Array(_)), FieldType::String) => Value::String(j.to_string()),
        (j, _) => Value::Json(j),
    }
}

/// Each name's first place among `names`.
pub(super) fn first_places<'a>(names: impl IntoIterator<Item = &'a str>) -> HashMap<&'a str, usize> {
    let mut places = HashMap::new();
    for (i, name) in names.into_iter().enumerate() {
        places.entry(name).or_insert(i);
    }
    places
}

/// Calls `each` with every line of a JSON Lines file that is not blank,
/// and its number (from 0), until it answers `false`; one buffer serves
/// every line.
pub(super) fn each_line(
    file: impl Read,
    what: &str,
    mut each: impl FnMut(usize, &str) -> ConnectorResult<bool>,
) -> ConnectorResult<()> {
    let mut reader = BufReader::with_capacity(1 << 20, file);
    let mut line = String::new();
    for n in 0.. {
        line.clear();
        if reader.read_line(&mut line).map_err(|e| io(what, e))? == 0 {
            break;
        }
        let text = line.strip_suffix('\n').map_or(line.as_str(), |l| l.strip_suffix('\r').unwrap_or(l));
        if !text.trim().is_empty() && !each(n, text)? {
            break;
        }
    }
    Ok(())
}

/// One JSON Lines record's top-level members, in the order they come,
/// each value as the text it is in the line: nothing nested is built (an
/// object or array is kept as its text, as the database readers keep a
/// JSON column's), and a name without escapes is borrowed from the line.
pub(super) struct Members<'a>(pub Vec<(Cow<'a, str>, &'a RawValue)>);

impl<'a> Members<'a> {
    /// The record on `line` (number `n`, from 0), or why it is not one.
    pub(super) fn parse(line: &'a str, what: &str, n: usize) -> ConnectorResult<Self> {
        serde_json::from_str(line)
            .map_err(|e| ConnectorError::Other(format!("{what} line {}: not a JSON object: {e}", n + 1)))
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Object;
        impl<'de> Visitor<'de> for Object {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(8));
                while let Some(Name(name)) = map.next_key()? {
                    out.push((name, map.next_value()?));
                }
                Ok(Members(out))
            }
        }
        d.deserialize_map(Object)
    }
}

/// A member's name: borrowed from the line unless it holds an escape.
struct Name<'a>(Cow<'a, str>);

impl<'de> Deserialize<'de> for Name<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Text;
        impl<'de> Visitor<'de> for Text {
            type Value = Name<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Borrowed(s)))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s.to_owned())))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Name<'de>, E> {
                Ok(Name(Cow::Owned(s)))
            }
        }
        d.deserialize_str(Text)
    }
}

/// A member's text as a value of type `t`: what [`to_value`] makes of it
/// parsed, except that an object or array not read as a string stays the
/// text it was ([`Value::RawJson`], equal to the document it parses to).
/// It is checked as a parse would check it (numbers in range, escapes
/// whole, at most 128 levels deep) without building it.
pub(super) fn raw_to_value(raw: &RawValue, t: FieldType) -> serde_json::Result<Value> {
    let text = raw.get();
    Ok(match text.as_bytes().first() {
        Some(b'{' | b'[') if t != FieldType::String => {
            serde_json::from_str::<Checked>(text)?;
            Value::RawJson(text.to_owned())
        }
        _ => to_value(serde_json::from_str(text)?, t),
    })
}

/// A JSON document read through, every value visited as a parse into a
/// tree would visit it, nothing kept.
struct Checked;

impl<'de> Deserialize<'de> for Checked {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Any;
        impl<'de> Visitor<'de> for Any {
            type Value = Checked;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a JSON value")
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Checked, E> {
                Ok(Checked)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Checked, A::Error> {
                while seq.next_element::<Checked>()?.is_some() {}
                Ok(Checked)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Checked, A::Error> {
                while map.next_entry::<Checked, Checked>()?.is_some() {}
                Ok(Checked)
            }
        }
        d.deserialize_any(Any)
    }
}

/// The error of line `n`'s member `name` (serde's position is within the
/// member, so it is left out).
pub(super) fn member_error(what: &str, n: usize, name: &str, e: serde_json::Error) -> ConnectorError {
    let e = e.to_string();
    let e = e.rfind(" at line ").map_or(e.as_str(), |at| &e[..at]);
    ConnectorError::Other(format!("{what} line {}: {name}: {e}", n + 1))
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
    // A field whose name an earlier field has takes that field's value.
    let firsts = first_places(schema_fields.iter().map(|f| f.name.as_str()));
    let earlier: Vec<Option<usize>> =
        schema_fields.iter().enumerate().map(|(i, f)| Some(firsts[f.name.as_str()]).filter(|&j| j != i)).collect();
    raws.into_iter()
        .map(|mut r| {
            let mut row: Vec<Value> = Vec::with_capacity(schema_fields.len());
            for (f, earlier) in schema_fields.iter().zip(&earlier) {
                let v = match earlier {
                    Some(j) => row[*j].clone(),
                    None => r.remove(&f.name).map(|v| to_value(v, f.field_type)).unwrap_or(Value::Null),
                };
                row.push(v);
            }
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_members_text_reads_as_the_value_it_parses_to() {
        let texts = [
            "null",
            "true",
            "false",
            "0",
            "-12",
            "12.5",
            "1e3",
            "18446744073709551615",
            r#""abc""#,
            r#""12.50""#,
            r#""42""#,
            r#""2026-01-02""#,
            r#""2026-01-02T03:04:05Z""#,
            r#""TRUE""#,
            r#"" f ""#,
            r#""aGVsbG8=""#,
            r#""\u00e9\n\"q\"""#,
            r#""{\"k\": 1}""#,
            r#"{"a": [1, {"b": null}], "c": "\u00e9"}"#,
            r#"[1, "x", {}]"#,
            "{}",
            "[]",
        ];
        for text in texts {
            let line = format!(r#"{{"v": {text}}}"#);
            let members = Members::parse(&line, "t", 0).unwrap();
            let [(name, raw)] = members.0.as_slice() else { panic!("one member in {line}") };
            assert_eq!(name, "v");
            for t in FieldType::ALL {
                let fast = raw_to_value(raw, t).unwrap();
                let parsed = to_value(serde_json::from_str(text).unwrap(), t);
                assert_eq!(fast, parsed, "{text} as {t:?}");
                if text.starts_with(['{', '[']) && t != FieldType::String {
                    assert!(matches!(&fast, Value::RawJson(kept) if kept == text), "kept as written: {fast:?}");
                }
            }
        }
    }

    #[test]
    fn members_come_in_order_with_their_names_unescaped() {
        let line = r#"  {"a\u0062": 1, "c": {"d": [2]}, "ab": "again", "e":null}  "#;
        let members = Members::parse(line, "t", 0).unwrap();
        let names: Vec<&str> = members.0.iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["ab", "c", "ab", "e"]);
        assert!(matches!(members.0[0].0, Cow::Owned(_)), "an escaped name is unescaped");
        assert!(matches!(members.0[1].0, Cow::Borrowed(_)), "a plain name is borrowed");
        let raws: Vec<&str> = members.0.iter().map(|(_, r)| r.get()).collect();
        assert_eq!(raws, ["1", r#"{"d": [2]}"#, r#""again""#, "null"]);
    }

    #[test]
    fn a_line_that_is_not_an_object_or_a_number_out_of_range_is_refused() {
        for line in ["[1, 2]", "5", r#""x""#, r#"{"a": 1"#, r#"{"a": 1} x"#, r#"{"a": tru}"#] {
            let e = Members::parse(line, "people.jsonl", 6).err().unwrap_or_else(|| panic!("{line} refused"));
            assert!(e.to_string().contains("people.jsonl line 7: not a JSON object"), "{e}");
        }
        let members = Members::parse(r#"{"big": 1e400}"#, "t", 0).unwrap();
        for t in FieldType::ALL {
            assert!(raw_to_value(members.0[0].1, t).is_err(), "1e400 as {t:?}");
        }
        assert!(serde_json::from_str::<serde_json::Value>(r#"{"big": 1e400}"#).is_err(), "as a whole-line parse");
    }

    #[test]
    fn a_nested_document_is_checked_as_a_parse_would_check_it() {
        let deep = format!("{}{}", "[".repeat(200), "]".repeat(200));
        let fine = format!("{}{}", "[".repeat(100), "]".repeat(100));
        for (text, ok) in [
            (r#"{"x": 1e400}"#, false),
            (r#"["\ud800"]"#, false),
            (r#"{"k": "\ud83d\ude00"}"#, true),
            (r#"[1, -0.5e-3, "a\"b", {"c": null, "d": [true]}]"#, true),
            (deep.as_str(), false),
            (fine.as_str(), true),
        ] {
            let line = format!(r#"{{"v": {text}}}"#);
            let members = Members::parse(&line, "t", 0).unwrap();
            let parsed = serde_json::from_str::<serde_json::Value>(text);
            assert_eq!(parsed.is_ok(), ok, "{text} parsed into a tree");
            for t in FieldType::ALL {
                assert_eq!(raw_to_value(members.0[0].1, t).is_ok(), ok, "{text} as {t:?}");
            }
        }
        let e = raw_to_value(Members::parse(r#"{"v": {"x": 1e400}}"#, "t", 0).unwrap().0[0].1, FieldType::Object)
            .unwrap_err();
        let told = member_error("people.jsonl", 4, "v", e).to_string();
        assert!(told.contains("people.jsonl line 5: v: number out of range"), "{told}");
        assert!(!told.contains("column"), "no position within the member: {told}");
    }

    #[test]
    fn fields_that_share_a_name_share_its_value() {
        let fields = [
            Field::new("id", FieldType::Integer),
            Field::new("note", FieldType::String),
            Field::new("id", FieldType::String),
        ];
        let raw: RawRecord =
            [("id".to_string(), serde_json::json!(7)), ("note".to_string(), serde_json::json!("x"))].into();
        assert_eq!(records_of(&fields, vec![raw]), [vec![Value::Int(7), Value::String("x".into()), Value::Int(7)]]);
        let path = std::env::temp_dir().join(format!("sluice-formats-{}-repeated.csv", std::process::id()));
        std::fs::write(&path, "id,note,id\n1,a,2\n").unwrap();
        let (names, raws) = read_records(&path, "t", Format::Csv, None).unwrap();
        assert_eq!(names, ["id", "note", "id"]);
        assert_eq!(raws[0]["id"], serde_json::json!("1"), "the first column, as a streaming read takes it");
        std::fs::remove_file(path).unwrap();
    }
}
