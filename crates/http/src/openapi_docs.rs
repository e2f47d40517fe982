//! What the handlers' annotations leave out of the OpenAPI document, added
//! in one pass: every response's description (required by OpenAPI), an
//! example of every error response (its contract code), and an example of
//! every success body, taken from the schema's own example or built from
//! the schema (formats, enums, nested objects).

use serde_json::{Map, Value, json};

/// A stable id and time for examples.
const EXAMPLE_ID: &str = "01a209ab-d1bf-74c3-aab3-d3368b8b9dec";
const EXAMPLE_TIME: &str = "2026-11-23T12:00:00Z";

/// Completes `doc` (the generated document as JSON) in place.
pub fn complete(doc: &mut Value) {
    let schemas = doc.pointer("/components/schemas").and_then(Value::as_object).cloned().unwrap_or_default();
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, op) in item.iter_mut() {
            qualify_operation_id(op);
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else { continue };
            for (status, response) in responses.iter_mut() {
                let Some(response) = response.as_object_mut() else { continue };
                if response.get("description").and_then(Value::as_str).is_none_or(str::is_empty) {
                    response.insert("description".into(), Value::String(describe(status, method).into()));
                }
                let Some(content) = response.get_mut("content").and_then(Value::as_object_mut) else { continue };
                for media in content.values_mut() {
                    let Some(media) = media.as_object_mut() else { continue };
                    if media.contains_key("example") || media.contains_key("examples") {
                        continue;
                    }
                    let example = if status.starts_with(['4', '5']) {
                        error_example(status, method, path)
                    } else {
                        match media.get("schema") {
                            Some(schema) => build(schema, &schemas, "", "", 0),
                            None => continue,
                        }
                    };
                    media.insert("example".into(), sorted(example));
                }
            }
        }
    }
}

/// The handlers' names repeat across tags (`list`, `get`): an operation's
/// id becomes `<tag>_<name>` (`flows_list`), unique as OpenAPI requires and
/// as client generators need.
fn qualify_operation_id(op: &mut Value) {
    let tag =
        op.pointer("/tags/0").and_then(Value::as_str).map(|t| t.replace(|c: char| !c.is_ascii_alphanumeric(), "_"));
    if let (Some(tag), Some(Value::String(id))) = (tag, op.get_mut("operationId"))
        && !id.starts_with(&format!("{tag}_"))
    {
        *id = format!("{tag}_{id}");
    }
}

/// `v` with every object's keys in order, so the document is the same
/// whether serde_json keeps insertion order (a feature another crate of the
/// build may turn on) or not.
fn sorted(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sorted).collect()),
        other => other,
    }
}

/// What a status means on this API (the contract's wording).
fn describe(status: &str, method: &str) -> &'static str {
    match status {
        "200" if method == "get" => "The resource, or a page of them (`{data, next_cursor}`).",
        "200" => "Done; the resource as it is now.",
        "201" => "Created; `Location` names the new resource.",
        "202" => "Accepted: queued, to happen in the background.",
        "204" => "Done; no body.",
        "302" => "A redirect (see `Location`).",
        "400" => "The body is not well-formed JSON or YAML (`malformed_json`, `malformed_yaml`).",
        "401" => "No valid session token or API key (`unauthenticated`).",
        "403" => "The caller's role is too low (`forbidden`) or the plan does not include this (`plan_required`).",
        "404" => "No such resource in this organization (`not_found`).",
        "409" => {
            "Conflicts with what exists: a duplicate name, a resource in use, or a request in progress under the same idempotency key."
        }
        "413" => "The body is too large (`payload_too_large`).",
        "415" => "The body's content type is not one this operation takes.",
        "422" => "The input is invalid (`validation_failed`; `details.errors` lists each field and its problem).",
        "429" => {
            "Too many requests or over the monthly quota (`rate_limited`, `quota_exceeded`); `Retry-After` says when to try again."
        }
        "503" => "A service this operation needs is not configured or not reachable.",
        _ => "See the error body's `code`.",
    }
}

/// An error body as the API answers it for `status`.
fn error_example(status: &str, method: &str, path: &str) -> Value {
    let what = path.trim_end_matches('/').rsplit('/').find(|s| !s.starts_with('{')).unwrap_or("resource");
    let (code, message, details) = match status {
        "400" => (
            "malformed_json",
            "the body is not valid JSON: expected value at line 1 column 1".to_string(),
            json!({"line": 1, "column": 1}),
        ),
        "401" => ("unauthenticated", "missing or invalid credentials".to_string(), json!({})),
        "403" => ("forbidden", "this needs the Editor role; you have Viewer".to_string(), json!({})),
        "404" => ("not_found", format!("{} not found", singular(what)), json!({})),
        "409" if method == "delete" => ("conflict", format!("the {} is in use", singular(what)), json!({})),
        "409" => ("conflict", format!("a {} with this name already exists", singular(what)), json!({})),
        "413" => ("payload_too_large", "the body is larger than 1 MiB".to_string(), json!({})),
        "415" => ("unsupported_media_type", "send application/json".to_string(), json!({})),
        "422" => (
            "validation_failed",
            "the request is invalid".to_string(),
            json!({"errors": [{"field": "name", "message": "must not be empty"}]}),
        ),
        "429" => ("rate_limited", "too many requests; retry after 1 s".to_string(), json!({"retry_after_s": 1})),
        _ => ("unavailable", "the service is not available".to_string(), json!({})),
    };
    json!({"error": message, "code": code, "details": details, "request_id": "req_01a209abd1bf74c3"})
}

/// `flows` → `flow`, for messages.
fn singular(s: &str) -> String {
    let s = s.replace('-', " ");
    if let Some(x) = s.strip_suffix("ies") {
        format!("{x}y")
    } else if let Some(x) = s.strip_suffix('s') {
        x.to_string()
    } else {
        s
    }
}

/// An example value of `schema`: its own example when it has one, else
/// built from its type, format, enum and properties. `name` is the
/// property it is for (a hint for plain strings).
fn build(schema: &Value, schemas: &Map<String, Value>, parent: &str, name: &str, depth: usize) -> Value {
    if depth > 8 {
        return Value::Null;
    }
    let Some(s) = schema.as_object() else { return Value::Null };
    if let Some(r) = s.get("$ref").and_then(Value::as_str) {
        let target = r.rsplit('/').next().and_then(|n| schemas.get(n).map(|t| (n, t)));
        return target.map_or(Value::Null, |(n, t)| build(t, schemas, n, name, depth + 1));
    }
    if let Some(e) = s.get("examples").and_then(Value::as_array).and_then(|a| a.first()) {
        return e.clone();
    }
    if let Some(e) = s.get("example") {
        return e.clone();
    }
    if let Some(e) = s.get("enum").and_then(Value::as_array).and_then(|a| a.iter().find(|v| !v.is_null())) {
        return e.clone();
    }
    for key in ["oneOf", "anyOf"] {
        if let Some(variants) = s.get(key).and_then(Value::as_array) {
            let first = variants.iter().find(|v| v.get("type").and_then(Value::as_str) != Some("null"));
            return first.map_or(Value::Null, |v| build(v, schemas, parent, name, depth + 1));
        }
    }
    if let Some(parts) = s.get("allOf").and_then(Value::as_array) {
        let mut out = Map::new();
        for p in parts {
            if let Value::Object(o) = build(p, schemas, parent, name, depth + 1) {
                out.extend(o);
            }
        }
        return Value::Object(out);
    }
    let nullable = matches!(s.get("type"), Some(Value::Array(ts)) if ts.iter().any(|t| t == "null"));
    if nullable && matches!(name, "error" | "last_error" | "error_code" | "finished_at" | "next_cursor") {
        return Value::Null;
    }
    let kind = match s.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).find(|t| *t != "null").unwrap_or("null"),
        _ if s.contains_key("properties") => "object",
        _ => "",
    };
    match kind {
        "object" => {
            let mut out = Map::new();
            if let Some(props) = s.get("properties").and_then(Value::as_object) {
                for (k, v) in props {
                    out.insert(k.clone(), build(v, schemas, parent, k, depth + 1));
                }
            }
            Value::Object(out)
        }
        "array" => {
            let item = s.get("items").map_or(Value::Null, |i| build(i, schemas, parent, name, depth + 1));
            if item.is_null() { json!([]) } else { json!([item]) }
        }
        "integer" => json!(if name.ends_with("_ms") { 1250 } else { 1 }),
        "number" => json!(1.5),
        "boolean" => json!(true),
        "string" => match s.get("format").and_then(Value::as_str) {
            Some("uuid") => json!(EXAMPLE_ID),
            Some("date-time") => json!(EXAMPLE_TIME),
            Some("date") => json!("2026-11-23"),
            Some("email") => json!("ann@example.com"),
            Some("uri") => json!("https://example.com/"),
            _ => json!(string_for(parent, name)),
        },
        "null" => Value::Null,
        _ => json!({}),
    }
}

/// A plain string example for a property named `name` of the schema
/// `parent`.
fn string_for(parent: &str, name: &str) -> String {
    let word = match name {
        "status" if parent.contains("Run") || parent.contains("Entity") => "running",
        "status" if parent.contains("Connection") => "healthy",
        "status" if parent.contains("Invitation") => "pending",
        "status" if parent.contains("Deliver") => "delivered",
        "status" if parent.contains("Billing") || parent.contains("Subscription") => "active",
        "status" if parent.contains("Validat") || parent.contains("Gateway") => "valid",
        "status" => "active",
        "" => "string",
        "name" | "flow_name" => "orders",
        "email" => "ann@example.com",
        "schedule" => "*/15 * * * *",
        "type" | "connector_type" | "integration_type" => "postgres",
        "trigger" => "manual",
        "entity" => "public.orders",
        "plan" => "team",
        "slug" => "acme",
        "kind" => "table",
        "event" | "event_type" => "run.failed",
        "severity" | "level" => "info",
        "role" => "Editor",
        "capability" => "both",
        "sync_mode" => "incremental_deduped",
        "cursor_field" => "updated_at",
        "cursor_value" => "2026-11-23T09:12:44Z",
        "secret" => "whsec_MfKQ9r8GKjw1eDdWgxXB",
        "key" | "token" => "sk_3kT9xQ2mZp7RwL5nV8cJ",
        "prefix" => "sk_3kT9",
        "issuer" => "https://login.example.com",
        "subject" => "user-1234",
        "action" => "flow.updated",
        "resource_type" => "flow",
        "outcome" => "delivered",
        "relation" => "feeds",
        "change" => "compatible",
        "state" => "done",
        "version" => "1",
        "description" => "Orders placed in the shop.",
        "message" | "error" | "last_error" => "connection refused by 10.0.0.5:5432",
        "error_code" => "refused",
        "on" => "run.failed",
        "created_by" => "ann@example.com",
        "database" => "warehouse",
        n if n.ends_with("_id") || n == "id" || n.ends_with("cursor") => EXAMPLE_ID,
        n if n.ends_with("_at") => EXAMPLE_TIME,
        n if n.ends_with("url") => "https://example.com/",
        n => return n.replace('_', " "),
    };
    word.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_response_gets_a_description_and_an_example() {
        let mut doc = json!({
            "paths": {"/v1/organizations/{orgId}/flows/{flowId}": {"get": {"responses": {
                "200": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/Flow"}}}},
                "404": {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}},
                "204": {}
            }}}},
            "components": {"schemas": {
                "Flow": {"type": "object", "properties": {
                    "id": {"type": "string", "format": "uuid"},
                    "name": {"type": "string"},
                    "status": {"type": "string", "enum": ["active", "paused"]},
                    "schedule": {"type": ["string", "null"]},
                    "mappings": {"type": "array", "items": {"$ref": "#/components/schemas/Mapping"}}
                }},
                "Mapping": {"type": "object", "properties": {"source_entity": {"type": "string"}}, "examples": [{"source_entity": "orders"}]},
                "ErrorBody": {"type": "object"}
            }}
        });
        complete(&mut doc);
        let r = &doc["paths"]["/v1/organizations/{orgId}/flows/{flowId}"]["get"]["responses"];
        for code in ["200", "404", "204"] {
            assert!(!r[code]["description"].as_str().unwrap().is_empty(), "{code}");
        }
        let ok = &r["200"]["content"]["application/json"]["example"];
        assert_eq!(ok["id"], EXAMPLE_ID);
        assert_eq!(ok["status"], "active", "an enum's first value");
        assert_eq!(ok["schedule"], "*/15 * * * *", "a nullable string is a string");
        assert_eq!(ok["mappings"], json!([{"source_entity": "orders"}]), "a referenced schema's own example");
        let err = &r["404"]["content"]["application/json"]["example"];
        assert_eq!((err["code"].as_str(), err["error"].as_str()), (Some("not_found"), Some("flow not found")));
    }

    #[test]
    fn operation_ids_are_qualified_by_tag() {
        let mut op = json!({"tags": ["data-assets"], "operationId": "list"});
        qualify_operation_id(&mut op);
        assert_eq!(op["operationId"], "data_assets_list");
        qualify_operation_id(&mut op);
        assert_eq!(op["operationId"], "data_assets_list", "once");
    }

    #[test]
    fn a_schema_that_refers_to_itself_ends() {
        let schemas: Map<String, Value> = serde_json::from_value(json!({
            "Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}}}}
        }))
        .unwrap();
        let v = build(&json!({"$ref": "#/components/schemas/Node"}), &schemas, "", "", 0);
        assert!(v["children"].is_array());
    }
}
