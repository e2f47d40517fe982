//! Field-level diffs between what is stored and what a document asks for.

use crate::connect::integration::{Credentials, PLACEHOLDER};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeSet;

/// One changed leaf of a resource.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DiffEntry {
    pub path: String,
    pub before: Value,
    pub after: Value,
}

/// The leaf-level differences between two JSON values: objects are compared
/// key by key, lists of equal length item by item; anything else is one
/// entry at its path.
pub fn diff(before: &Value, after: &Value) -> Vec<DiffEntry> {
    fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<DiffEntry>) {
        match (a, b) {
            _ if a == b => {}
            (Value::Object(x), Value::Object(y)) => {
                let keys: BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                    walk(&p, x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), out);
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (p, q)) in x.iter().zip(y).enumerate() {
                    walk(&format!("{path}[{i}]"), p, q, out);
                }
            }
            _ => out.push(DiffEntry { path: path.to_string(), before: a.clone(), after: b.clone() }),
        }
    }
    let mut out = Vec::new();
    walk("", before, after, &mut out);
    out
}

pub(crate) fn secret_diff(before: &Credentials, after: &Credentials, prefix: &str) -> Vec<DiffEntry> {
    let keys: BTreeSet<&String> = before.0.keys().chain(after.0.keys()).collect();
    keys.into_iter()
        .filter(|k| before.0.get(*k) != after.0.get(*k))
        .map(|k| DiffEntry {
            path: format!("{prefix}.{k}"),
            before: before.0.get(k).map_or(Value::Null, |_| PLACEHOLDER.into()),
            after: after.0.get(k).map_or(Value::Null, |_| PLACEHOLDER.into()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diffs_walk_objects_and_equal_length_lists() {
        let d = diff(&json!({"a": 1, "b": [1, 2], "c": {"x": 1}}), &json!({"a": 1, "b": [1, 3], "c": {}, "d": true}));
        let paths: Vec<&str> = d.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(paths, ["b[1]", "c.x", "d"]);
        assert_eq!(diff(&json!([1]), &json!([1, 2]))[0].path, "");
    }
}
