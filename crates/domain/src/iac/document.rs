//! The IaC document: its shape, read from YAML with every problem named
//! by its path, line and column, and written back.

use crate::connect::connector::Capability;
use crate::sync::flow::{FlowConfig, FlowStatus};
use crate::{Error, FieldError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The document versions this build understands.
pub const VERSION: &str = "1";

/// The IaC document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Document {
    /// `"1"` (a bare `1` is accepted too).
    #[serde(deserialize_with = "version_string")]
    pub version: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub integrations: Vec<IntegrationDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<ConnectionDoc>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flows: Vec<FlowDoc>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IntegrationDoc {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    /// Values are secrets, secret references (`env:NAME`,
    /// `aws:secretsmanager:ARN`) or `***` (keep the stored value). Keys
    /// that are absent keep their stored value.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub credentials: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectionDoc {
    pub name: String,
    /// The name (or id) of an integration in the document or the organization.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub integration: Option<String>,
    #[serde(rename = "type")]
    pub kind: String,
    pub capability: Capability,
    /// Settings; credential fields follow the rules of integration
    /// credentials.
    #[serde(default)]
    pub config: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowDoc {
    pub name: String,
    /// The name (or id) of a connection in the document or the organization.
    pub source_connection: String,
    pub destination_connection: String,
    /// A five-field cron expression; absent for a flow run on demand only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// `active` or `paused`; absent keeps a flow's current status (new
    /// flows start active).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<FlowStatus>,
    /// `mappings` and `depends_on` (flow names or ids).
    pub config: FlowConfig,
}

fn version_string<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    struct V;
    impl serde::de::Visitor<'_> for V {
        type Value = String;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a version string such as \"1\"")
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
            Ok(v.to_string())
        }
        fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
            Ok(v.to_string())
        }
    }
    d.deserialize_any(V)
}

// ---- parsing --------------------------------------------------------------

/// Why a document was refused before planning.
#[derive(Debug, Clone, PartialEq)]
pub enum ParseError {
    /// Not YAML at all (400 `malformed_yaml`).
    Malformed { message: String, line: Option<u64>, column: Option<u64> },
    /// YAML, but not an IaC document: each problem with its path (422).
    Invalid(Vec<FieldError>),
}

impl From<ParseError> for Error {
    fn from(e: ParseError) -> Self {
        match e {
            ParseError::Malformed { message, line, column } => Error::BadRequest {
                code: crate::shared::error::Code::MalformedYaml,
                message: match (line, column) {
                    (Some(l), Some(c)) => format!("malformed YAML at line {l}, column {c}: {message}"),
                    _ => format!("malformed YAML: {message}"),
                },
                details: json!({"line": line, "column": column}),
            },
            ParseError::Invalid(errors) => Error::Validation(errors),
        }
    }
}

fn yaml_options() -> serde_saphyr::Options {
    let mut o = serde_saphyr::Options::default();
    o.with_snippet = false;
    o
}

fn location(e: &serde_saphyr::Error) -> (Option<u64>, Option<u64>) {
    match e.location() {
        Some(l) if l.line() > 0 => (Some(l.line()), Some(l.column())),
        _ => (None, None),
    }
}

/// The first line of a parser message, without the position it repeats.
fn short_message(e: &serde_saphyr::Error) -> String {
    let text = e.to_string();
    let first = text.lines().next().unwrap_or("").trim();
    let first = match first.find(" at line ") {
        Some(i) => &first[..i],
        None => first,
    };
    let first = first.split(", set DuplicateKeyPolicy").next().unwrap_or(first);
    let first = first.trim_end_matches(['.', ':']);
    match first {
        "expected sequence start" => "must be a list".into(),
        "expected mapping start" => "must be a mapping".into(),
        other => other.to_string(),
    }
}

/// Parses an IaC document. Unparseable YAML is [`ParseError::Malformed`]
/// with its position; unknown fields, wrong types, missing fields and an
/// unsupported `version` are [`ParseError::Invalid`] with the YAML path
/// (`flows[1].config.mappings[0].sync_mode`) and, where the parser knows
/// them, line and column.
pub fn parse(text: &str) -> Result<Document, ParseError> {
    // Syntax first, so that a broken file is told apart from a wrong shape.
    let value: Value = serde_saphyr::from_str_with_options(text, yaml_options()).map_err(|e| {
        let (line, column) = location(&e);
        ParseError::Malformed { message: short_message(&e), line, column }
    })?;
    if !value.is_object() {
        let found = match value {
            Value::Null => "an empty document",
            Value::Array(_) => "a list",
            _ => "a scalar",
        };
        return Err(ParseError::Invalid(vec![FieldError::new(
            "$",
            format!("must be a mapping with version, integrations, connections and flows; found {found}"),
        )]));
    }
    if let Some(at) = crate::shared::error::nul_in(&value, "$") {
        return Err(ParseError::Invalid(vec![FieldError::new(
            at.trim_start_matches("$.").to_string(),
            "must not contain a NUL character",
        )]));
    }
    let mut path = String::new();
    let doc: Document = serde_saphyr::with_deserializer_from_str_with_options(text, yaml_options(), |de| {
        serde_path_to_error::deserialize(de).map_err(|e| {
            path = e.path().to_string();
            e.into_inner()
        })
    })
    .map_err(|e| {
        let (line, column) = location(&e);
        let message = short_message(&e);
        // Name the offending field itself where serde names it.
        let mut field = if path == "." { String::new() } else { path.clone() };
        if let Some(name) = backticked(&message).filter(|_| message.starts_with("missing field")) {
            field = if field.is_empty() { name.to_string() } else { format!("{field}.{name}") };
        }
        if field.is_empty() {
            field = "$".into();
        }
        let mut fe = FieldError::new(field, message);
        fe.line = line;
        fe.column = column;
        ParseError::Invalid(vec![fe])
    })?;
    if doc.version != VERSION {
        return Err(ParseError::Invalid(vec![FieldError::new(
            "version",
            format!("version '{}' is not supported; this server understands version \"{VERSION}\"", doc.version),
        )]));
    }
    Ok(doc)
}

fn backticked(message: &str) -> Option<&str> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(&message[start..start + len])
}

/// Serializes a document as YAML.
///
/// # Errors
/// Only if a value cannot be represented, which the document's types rule out.
pub fn to_yaml(doc: &Document) -> Result<String, Error> {
    serde_saphyr::to_string(doc).map_err(|e| Error::Internal(anyhow::anyhow!("serializing the IaC document: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_checked_and_a_bare_number_is_accepted() {
        assert_eq!(parse("version: 1").unwrap().version, "1");
        assert_eq!(
            parse("version: '1'\nflows: []").unwrap(),
            Document { version: "1".into(), integrations: vec![], connections: vec![], flows: vec![] }
        );
        let ParseError::Invalid(e) = parse("version: '2'").unwrap_err() else { panic!() };
        assert_eq!(e[0].field, "version");
        let ParseError::Invalid(e) = parse("integrations: []").unwrap_err() else { panic!() };
        assert_eq!((e[0].field.as_str(), e[0].message.as_str()), ("version", "missing field `version`"));
    }

    #[test]
    fn broken_yaml_is_malformed_with_its_position() {
        let e = parse("version: 1\nflows: [\n").unwrap_err();
        let ParseError::Malformed { line, column, .. } = e else { panic!("{e:?}") };
        assert_eq!(line, Some(2), "where the unclosed bracket opens");
        assert!(column.is_some());
        let e = parse("version: 1\nversion: 1\n").unwrap_err();
        let ParseError::Malformed { message, line, .. } = e else { panic!("{e:?}") };
        assert!(message.contains("duplicate"), "{message}");
        assert_eq!(line, Some(2));
    }

    #[test]
    fn wrong_shapes_name_their_yaml_path_line_and_column() {
        let cases = [
            (
                "version: '1'\nintegrations:\n  - name: a\n    type: postgres\n    colour: red\n",
                "integrations[0].colour",
                5,
            ),
            (
                "version: '1'\nflows:\n  - name: a\n    source_connection: s\n    destination_connection: d\n    config:\n      mappings:\n        - source_entity: x\n          sync_mode: sometimes\n",
                "flows[0].config.mappings[0].sync_mode",
                9,
            ),
            ("version: '1'\nconnections:\n  - name: a\n    type: postgres\n", "connections[0].capability", 4),
            ("version: '1'\nconnections: 5\n", "connections", 2),
            ("version: '1'\nconnections:\n  - name: [1, 2]\n", "connections[0].name", 3),
        ];
        for (text, path, line) in cases {
            let ParseError::Invalid(e) = parse(text).unwrap_err() else { panic!("{text}") };
            assert_eq!(e[0].field, path, "{text}");
            assert_eq!(e[0].line, Some(line), "{text}");
            assert!(e[0].column.is_some());
        }
        let ParseError::Invalid(e) = parse("- a\n- b\n").unwrap_err() else { panic!() };
        assert_eq!(e[0].field, "$");
    }
}
