//! Where a flow is validated: one rule book for every way a flow is
//! written (the API, an IaC document, the console), with the same paths
//! and messages everywhere, each problem reported once.
//!
//! A writer finds the connections the flow names its own way (by id in the
//! organization, or by name in the document and the organization) and
//! reports a reference that names nothing; everything else is here:
//! [`check_flow`] needs only the flow and its connections' kinds,
//! [`check_against_source`] the source's schema of each mapped entity, when
//! the source answers. Dependencies are resolved with
//! [`super::flow::resolve_dependencies`] by each writer, which knows where
//! names are looked up.

use super::cursor::cursor_type;
use super::flow::{FlowConfig, check_schedule};
use super::mode::SyncMode;
use crate::connect::connector::{Capability, ConnectorSpec, EntitySchema};
use crate::identity::user::validate_name;
use crate::{Error, FieldError};
use std::collections::{BTreeMap, BTreeSet};

/// A connection a flow names, as its writer found it.
#[derive(Debug, Clone, Copy)]
pub struct End<'a> {
    /// The field that names it (`source_connection_id`, `source_connection`).
    pub field: &'a str,
    pub name: &'a str,
    /// Which connection it is (one named twice, by name and by id, is one).
    pub id: crate::shared::ids::ConnectionId,
    pub capability: Capability,
    /// Its connector's spec (`None`: a type the registry does not know).
    pub spec: Option<&'a ConnectorSpec>,
}

/// A flow as written, whoever writes it.
pub struct Draft<'a> {
    pub name: &'a str,
    pub schedule: Option<&'a str>,
    pub config: &'a FlowConfig,
}

/// Checks a flow against itself and the kinds of its connections: name,
/// schedule, config (see [`check_config`]), a continuous flow's schedule,
/// each end's capability, and the modes each end takes. `prefix` places
/// the paths (`flows[2]` in a document, empty for the API); an end is
/// `None` when its reference named nothing (its writer reported that).
pub fn check_flow(prefix: &str, flow: &Draft<'_>, source: Option<End<'_>>, dest: Option<End<'_>>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let Err(Error::Validation(f)) = validate_name("name", flow.name) {
        errors.extend(f);
    }
    if let Err(Error::Validation(f)) = check_schedule(flow.schedule) {
        errors.extend(f);
    }
    errors.extend(check_config(flow.config));
    errors.extend(check_continuous(flow.config, flow.schedule));
    if let Some(s) = source.filter(|s| !s.capability.reads()) {
        errors.push(FieldError::new(s.field, format!("'{}' is a destination only; it cannot be read", s.name)));
    }
    if let Some(d) = dest.filter(|d| !d.capability.writes()) {
        errors.push(FieldError::new(d.field, format!("'{}' is a source only; it cannot be written", d.name)));
    }
    let source_spec = source.and_then(|s| s.spec);
    let dest_spec = dest.and_then(|d| d.spec);
    for (i, m) in flow.config.mappings.iter().enumerate() {
        let path = format!("config.mappings[{i}]");
        if let Some(spec) = source_spec {
            let applies = dest_spec.map(|d| (d.connector_type, d.features.as_slice()));
            errors.extend(check_capture_mode(&path, m, &spec.sync_modes, spec.connector_type, applies));
        }
        // Every destination that applies changes takes the CDC modes
        // (checked above); the others are the destination's to take.
        if let Some(spec) = dest_spec.filter(|_| !m.sync_mode.cdc())
            && !spec.sync_modes.is_empty()
            && !spec.sync_modes.contains(&m.sync_mode.as_str())
        {
            let message = if spec.features.contains(&super::mode::APPENDS_ONLY) {
                super::mode::lake_table_needed(spec.connector_type, m.sync_mode.as_str())
            } else {
                format!("{} destinations do not support {}", spec.connector_type, m.sync_mode.as_str())
            };
            errors.push(FieldError::new(format!("{path}.sync_mode"), message));
        }
    }
    placed(prefix, errors)
}

/// Checks a flow's mappings against the source's schema of each mapped
/// entity (`schemas`, as the source `source` answered): the entity exists,
/// its cursor and key fields are fields of it, a CDC mapping's key is the
/// table's, and the transform plans. What [`check_config`] reports already
/// (a missing cursor field, say) is not reported again.
pub fn check_against_source(
    prefix: &str,
    config: &FlowConfig,
    source: &str,
    schemas: &BTreeMap<String, EntitySchema>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (i, m) in config.mappings.iter().enumerate() {
        let path = format!("config.mappings[{i}]");
        let Some(s) = schemas.get(&m.source_entity) else {
            errors.push(FieldError::new(
                format!("{path}.source_entity"),
                format!("'{}' does not exist in '{source}'", m.source_entity),
            ));
            continue;
        };
        errors.extend(check_capture_keys(&path, m, s));
        errors.extend(check_mapping(&path, m.sync_mode, m.cursor_field.as_deref(), m.primary_key.as_deref(), Some(s)));
        if let Err(f) = super::transform::plan(&format!("{path}.transform"), &m.transform, &s.fields) {
            errors.extend(f);
        }
    }
    placed(prefix, errors)
}

/// Whether a change of a flow (`before` it, `None` for a new one) is
/// checked against the source's schema: a new flow, or changed mappings or
/// connections. A change that touches neither (pause, resume, schedule,
/// name) never depends on the source, so that a flow the source broke can
/// still be paused.
pub fn touches_source(before: Option<&super::flow::Flow>, after: &super::flow::Flow) -> bool {
    before.is_none_or(|b| {
        after.config != b.config
            || after.source_connection_id != b.source_connection_id
            || after.destination_connection_id != b.destination_connection_id
    })
}

/// The first mapping of `config` (its index) whose destination entity a
/// mapping of `other` (another flow into the same place) writes too, with
/// that mapping; none when both append into it, by design. Any other pair
/// (two mirrors, an overwrite, a dedup) would replace the first's rows,
/// and its positions or cursor would no longer say what it holds.
pub fn entity_written_by<'a>(config: &FlowConfig, other: &'a FlowConfig) -> Option<(usize, &'a super::flow::Mapping)> {
    use crate::connect::connector::WriteMode;
    config.mappings.iter().enumerate().find_map(|(i, m)| {
        other
            .mappings
            .iter()
            .find(|o| {
                o.destination() == m.destination()
                    && !(o.sync_mode.write_mode() == WriteMode::Append && m.sync_mode.write_mode() == WriteMode::Append)
            })
            .map(|o| (i, o))
    })
}

/// Why a mapping may not write its entity (see [`entity_written_by`]).
pub fn entity_taken_message(entity: &str, flow: &str, other: &super::flow::Mapping) -> String {
    format!(
        "the destination entity '{entity}' is written by flow '{flow}' ({} from '{}'): two flows write one entity \
         only when both append into it; choose another dest_entity",
        other.sync_mode.as_str(),
        other.source_entity
    )
}

/// A flow with one connection at both ends must not write a table it
/// reads (a full refresh would empty its own source). Checked where a flow
/// is made or its connections or mappings change, never for a pause.
pub fn check_into_itself(
    prefix: &str,
    config: &FlowConfig,
    source: Option<End<'_>>,
    dest: Option<End<'_>>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if let (Some(s), Some(d)) = (source, dest)
        && s.id == d.id
    {
        for (i, m) in config.mappings.iter().enumerate().filter(|(_, m)| m.destination() == m.source_entity) {
            errors.push(FieldError::new(
                format!("config.mappings[{i}].dest_entity"),
                format!(
                    "'{}' would be read from and written to the same table of '{}': name another dest_entity, \
                     or pick another destination",
                    m.source_entity, s.name
                ),
            ));
        }
    }
    placed(prefix, errors)
}

/// `errors` under `prefix`.
fn placed(prefix: &str, errors: Vec<FieldError>) -> Vec<FieldError> {
    errors
        .into_iter()
        .map(|mut e| {
            if !prefix.is_empty() {
                e.field = format!("{prefix}.{}", e.field);
            }
            e
        })
        .collect()
}

/// Problems found together, each kept once, in order: the checks with a
/// schema repeat some of the ones without (`is required by …`).
pub fn once(errors: Vec<FieldError>) -> Vec<FieldError> {
    let mut seen = BTreeSet::new();
    errors.into_iter().filter(|e| seen.insert((e.field.clone(), e.message.clone()))).collect()
}

/// Checks a flow's config on its own: mappings present, names unique,
/// each mode's fields named, transforms parsable.
pub fn check_config(config: &FlowConfig) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if config.mappings.is_empty() {
        errors.push(FieldError::new("config.mappings", "must hold at least one mapping"));
    }
    let mut dests = BTreeSet::new();
    for (i, m) in config.mappings.iter().enumerate() {
        let path = format!("config.mappings[{i}]");
        if m.source_entity.trim().is_empty() {
            errors.push(FieldError::new(format!("{path}.source_entity"), "is required"));
        }
        // A pattern of files (an object source's glob) names no table to
        // write into.
        if m.source_entity.contains(['*', '?', '/']) && m.dest_entity.as_deref().is_none_or(|d| d.trim().is_empty()) {
            errors.push(FieldError::new(
                format!("{path}.dest_entity"),
                format!("is required when source_entity is a pattern of files ('{}')", m.source_entity),
            ));
        }
        if !dests.insert(m.destination().to_string()) {
            errors.push(FieldError::new(
                format!("{path}.dest_entity"),
                format!("'{}' is written by another mapping", m.destination()),
            ));
        }
        errors.extend(check_mapping(&path, m.sync_mode, m.cursor_field.as_deref(), m.primary_key.as_deref(), None));
        if let Some(l) = &m.cursor_lookback
            && let Err(e) = super::parse_lookback(l)
        {
            errors.push(FieldError::new(format!("{path}.cursor_lookback"), e));
        }
        errors.extend(check_capture(&path, m));
    }
    if config.continuous
        && let Some((i, m)) = config.mappings.iter().enumerate().find(|(_, m)| !m.sync_mode.cdc())
    {
        errors.push(FieldError::new(
            "config.continuous",
            format!(
                "a continuous flow captures changes only: mappings[{i}] syncs in {} mode (cdc_deduped or \
                 cdc_append)",
                m.sync_mode.as_str()
            ),
        ));
    }
    if config.verify.is_some() {
        if config.continuous {
            errors.push(FieldError::new(
                "config.verify",
                "a continuous flow's run never ends: verify it with POST …/verify instead",
            ));
        } else if !config.mappings.iter().any(super::verification::verifiable) {
            errors.push(FieldError::new(
                "config.verify",
                "no mapping mirrors its entity by key (full_refresh_overwrite, incremental_deduped or cdc_deduped): \
                 appended rows cannot be verified",
            ));
        }
    }
    errors
}

/// A continuous flow keeps one run going: it takes no schedule.
pub fn check_continuous(config: &FlowConfig, schedule: Option<&str>) -> Option<FieldError> {
    (config.continuous && schedule.is_some()).then(|| {
        FieldError::new("schedule", "a continuous flow keeps one run going and takes no schedule: leave it out")
    })
}

/// Checks the fields a sync mode needs, against the source schema when it
/// is known. `path` prefixes the field names in errors (`config.mappings[0]`).
pub fn check_mapping(
    path: &str,
    mode: SyncMode,
    cursor_field: Option<&str>,
    primary_key: Option<&str>,
    schema: Option<&EntitySchema>,
) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if mode.incremental() {
        match cursor_field {
            None | Some("") => errors
                .push(FieldError::new(format!("{path}.cursor_field"), format!("is required by {}", mode.as_str()))),
            // Stored cursors whose field starts with '$' are Sluice's own
            // marks (a CDC position, a pending clear): a column named so
            // would be read as one.
            Some(c) if c.starts_with('$') => errors.push(FieldError::new(
                format!("{path}.cursor_field"),
                format!("'{c}' starts with '$', which Sluice keeps for its own marks: pick another cursor column"),
            )),
            Some(c) => {
                if let Some(s) = schema {
                    match s.field(c) {
                        None => errors.push(FieldError::new(
                            format!("{path}.cursor_field"),
                            format!("'{c}' is not a field of {}", s.name),
                        )),
                        Some(f) if !cursor_type(f.field_type) => errors.push(FieldError::new(
                            format!("{path}.cursor_field"),
                            format!(
                                "'{c}' is {}; a cursor must be an integer, number, decimal, timestamp, date or string",
                                f.field_type
                            ),
                        )),
                        Some(_) => {}
                    }
                }
            }
        }
    }
    if mode.needs_primary_key() {
        match primary_key {
            None | Some("") => {
                errors.push(FieldError::new(format!("{path}.primary_key"), format!("is required by {}", mode.as_str())))
            }
            Some(k) => {
                if let Some(s) = schema {
                    for part in k.split(',').map(str::trim) {
                        if s.field(part).is_none() {
                            errors.push(FieldError::new(
                                format!("{path}.primary_key"),
                                format!("'{part}' is not a field of {}", s.name),
                            ));
                        }
                    }
                }
            }
        }
    }
    errors
}

/// The rules of a mapping's change data capture settings that need no
/// schema: `delete_mode` belongs to `cdc_deduped`, and a CDC mode reads the
/// source's log, not a cursor.
pub fn check_capture(path: &str, m: &super::flow::Mapping) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if m.delete_mode.is_some() && m.sync_mode != SyncMode::CdcDeduped {
        errors.push(FieldError::new(format!("{path}.delete_mode"), "applies to cdc_deduped only"));
    }
    // A mirror with a filter holds the rows that pass it; a change log
    // cannot tell a delete's row (it carries the key alone) from one the
    // filter dropped, and would keep some of a row's changes.
    if m.sync_mode == SyncMode::CdcAppend
        && m.transform.iter().any(|s| matches!(s, crate::sync::transform::Step::Filter { .. }))
    {
        errors.push(FieldError::new(
            format!("{path}.transform"),
            "cdc_append logs every change of the table: a filter would keep some of a row's changes and drop others \
             (a delete carries the key alone); filter a cdc_deduped mirror instead",
        ));
    }
    if m.sync_mode.cdc() {
        for (field, set) in
            [("cursor_field", m.cursor_field.is_some()), ("cursor_lookback", m.cursor_lookback.is_some())]
        {
            if set {
                errors.push(FieldError::new(
                    format!("{path}.{field}"),
                    format!("{} reads the source's change log: it takes no {field}", m.sync_mode.as_str()),
                ));
            }
        }
    }
    errors
}

/// A CDC mapping needs a source type that captures changes and a
/// destination type that applies them (`dest`: its type and features, when
/// known).
pub fn check_capture_mode(
    path: &str,
    m: &super::flow::Mapping,
    source_modes: &[&str],
    source_type: &str,
    dest: Option<(&str, &[&str])>,
) -> Option<FieldError> {
    if !m.sync_mode.cdc() {
        return None;
    }
    let field = format!("{path}.sync_mode");
    if !source_modes.contains(&m.sync_mode.as_str()) {
        return Some(FieldError::new(
            field,
            format!(
                "{source_type} sources do not capture changes ({} needs a PostgreSQL or MySQL/MariaDB source)",
                m.sync_mode.as_str()
            ),
        ));
    }
    use super::mode::{APPENDS_ONLY, APPLIES_CHANGES};
    match dest {
        Some((_, features)) if features.contains(&APPLIES_CHANGES) => None,
        // A change log is appended: plain files take it.
        Some((_, features)) if features.contains(&APPENDS_ONLY) && m.sync_mode == super::SyncMode::CdcAppend => None,
        Some((t, features)) if features.contains(&APPENDS_ONLY) => {
            Some(FieldError::new(field, super::mode::lake_table_needed(t, m.sync_mode.as_str())))
        }
        Some((t, _)) => Some(FieldError::new(field, format!("{t} destinations cannot apply captured changes"))),
        None => None,
    }
}

/// A CDC mapping needs a table with a primary key (the log names a row by
/// it), which the mapping's `primary_key`, if it names one, must be.
pub fn check_capture_keys(path: &str, m: &super::flow::Mapping, schema: &EntitySchema) -> Option<FieldError> {
    if !m.sync_mode.cdc() {
        return None;
    }
    let keys: Vec<&str> = schema.fields.iter().filter(|f| f.primary_key).map(|f| f.name.as_str()).collect();
    if keys.is_empty() {
        return Some(FieldError::new(
            format!("{path}.source_entity"),
            format!("'{}' has no primary key: change data capture needs one to name each changed row", schema.name),
        ));
    }
    let mut named = m.key_fields();
    named.sort_unstable();
    let mut source_keys = keys.clone();
    source_keys.sort_unstable();
    (!named.is_empty() && named != source_keys).then(|| {
        FieldError::new(
            format!("{path}.primary_key"),
            format!("must be the source's primary key ({}) or left out", keys.join(", ")),
        )
    })
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_cursor_column_named_like_a_mark_is_refused() {
        let errors = check_mapping("m", SyncMode::IncrementalAppend, Some("$clear"), None, None);
        assert_eq!(errors.len(), 1);
        assert_eq!(errors[0].field, "m.cursor_field");
        assert!(errors[0].message.contains("its own marks"), "{}", errors[0].message);
        assert!(check_mapping("m", SyncMode::IncrementalAppend, Some("updated_at"), None, None).is_empty());
    }
    use super::*;
    use crate::shared::record::{Field, FieldType};

    #[test]
    fn configs_name_every_problem() {
        let config: FlowConfig = serde_json::from_value(serde_json::json!({"mappings": [
            {"source_entity": "orders", "sync_mode": "incremental_deduped"},
            {"source_entity": "users", "dest_entity": "orders", "sync_mode": "full_refresh_overwrite"}
        ]}))
        .unwrap();
        let fields: Vec<String> = check_config(&config).into_iter().map(|e| e.field).collect();
        assert_eq!(
            fields,
            ["config.mappings[0].cursor_field", "config.mappings[0].primary_key", "config.mappings[1].dest_entity"]
        );
        assert!(!check_config(&FlowConfig::default()).is_empty());
        let pattern = |dest: serde_json::Value| -> Vec<String> {
            let m = serde_json::json!({"source_entity": "exports/*.csv", "dest_entity": dest,
                "sync_mode": "full_refresh_overwrite"});
            let config: FlowConfig = serde_json::from_value(serde_json::json!({"mappings": [m]})).unwrap();
            check_config(&config).into_iter().map(|e| e.field).collect()
        };
        assert_eq!(pattern(serde_json::Value::Null), ["config.mappings[0].dest_entity"], "a pattern names no table");
        assert!(pattern(serde_json::json!("exports")).is_empty());
        assert!(
            serde_json::from_value::<FlowConfig>(
                serde_json::json!({"mappings": [{"source_entity": "x", "sync_mode": "sometimes"}]})
            )
            .is_err()
        );
    }

    #[test]
    fn one_connection_at_both_ends_writes_no_table_it_reads() {
        let config: FlowConfig = serde_json::from_value(serde_json::json!({"mappings": [
            {"source_entity": "orders", "sync_mode": "full_refresh_overwrite"},
            {"source_entity": "orders", "dest_entity": "orders_copy", "sync_mode": "full_refresh_overwrite"}
        ]}))
        .unwrap();
        let id = crate::shared::ids::ConnectionId::new();
        let end = |field, name, id| End { field, name, id, capability: Capability::Both, spec: None };
        // Named twice, once by name and once by id: one connection.
        let errors = check_into_itself("flows[0]", &config, Some(end("s", "wh", id)), Some(end("d", "0190-id", id)));
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(fields, ["flows[0].config.mappings[0].dest_entity"]);
        let other = crate::shared::ids::ConnectionId::new();
        assert!(check_into_itself("", &config, Some(end("s", "wh", id)), Some(end("d", "wh", other))).is_empty());
        assert!(check_into_itself("", &config, Some(end("s", "wh", id)), None).is_empty());
    }

    #[test]
    fn mappings_name_what_their_mode_needs() {
        let mut id = Field::new("id", FieldType::Integer);
        id.primary_key = true;
        let schema = EntitySchema {
            name: "orders".into(),
            fields: vec![id, Field::new("updated", FieldType::Timestamp), Field::new("meta", FieldType::Object)],
        };
        assert!(check_mapping("m", SyncMode::FullRefreshOverwrite, None, None, Some(&schema)).is_empty());
        let e = check_mapping("m", SyncMode::IncrementalDeduped, None, None, Some(&schema));
        assert_eq!(e.iter().map(|x| x.field.as_str()).collect::<Vec<_>>(), ["m.cursor_field", "m.primary_key"]);
        let e = check_mapping("m", SyncMode::IncrementalAppend, Some("nope"), None, Some(&schema));
        assert!(e[0].message.contains("not a field"));
        let e = check_mapping("m", SyncMode::IncrementalAppend, Some("meta"), None, Some(&schema));
        assert!(e[0].message.contains("cannot") || e[0].message.contains("must be"));
        assert!(
            check_mapping("m", SyncMode::IncrementalDeduped, Some("updated"), Some("id"), Some(&schema)).is_empty()
        );
        // Without the source's schema only presence is checked.
        assert!(check_mapping("m", SyncMode::IncrementalDeduped, Some("x"), Some("y"), None).is_empty());
    }

    /// A type whose settings change what it takes: a folder of files
    /// takes appends alone, and the refusals name the lake tables.
    #[test]
    fn a_destination_of_plain_files_refuses_the_modes_that_update_by_key_naming_the_lake_tables() {
        use crate::connect::connector::{ConnectorSpec, Variant};
        let files = ConnectorSpec {
            connector_type: "file",
            sync_modes: vec![
                "full_refresh_overwrite",
                "full_refresh_append",
                "incremental_append",
                "incremental_deduped",
            ],
            features: vec!["apply_changes"],
            variants: vec![Variant {
                key: "format",
                value: "parquet",
                sync_modes: vec!["full_refresh_overwrite", "full_refresh_append", "incremental_append"],
                features: vec![super::super::mode::APPENDS_ONLY],
            }],
            ..Default::default()
        };
        let source = ConnectorSpec {
            connector_type: "postgres",
            sync_modes: vec!["incremental_deduped", "incremental_append", "cdc_deduped", "cdc_append"],
            ..Default::default()
        };
        let parquet = files.with_config(&[("format".to_string(), serde_json::json!("parquet"))].into());
        let jsonl = files.with_config(&[("format".to_string(), serde_json::json!("jsonl"))].into());
        let id = crate::shared::ids::ConnectionId::new();
        let refused = |mode: &str, dest: &ConnectorSpec| {
            let end = |field, spec| Some(End { field, name: "x", id, capability: Capability::Both, spec: Some(spec) });
            let mut m = serde_json::json!({"source_entity": "t", "sync_mode": mode, "primary_key": "id"});
            if mode.starts_with("incremental") {
                m["cursor_field"] = serde_json::json!("u");
            }
            let config: FlowConfig = serde_json::from_value(serde_json::json!({ "mappings": [m] })).unwrap();
            let draft = Draft { name: "f", schedule: None, config: &config };
            check_flow("", &draft, end("s", &source), end("d", dest))
                .into_iter()
                .map(|e| e.message)
                .collect::<Vec<_>>()
                .join("; ")
        };
        for mode in ["incremental_deduped", "cdc_deduped"] {
            let said = refused(mode, &parquet);
            assert!(said.contains("ducklake") && said.contains("iceberg") && said.contains(mode), "{mode}: {said}");
            assert_eq!(refused(mode, &jsonl), "", "{mode} into JSON Lines files");
        }
        for mode in ["incremental_append", "cdc_append", "full_refresh_append"] {
            assert_eq!(refused(mode, &parquet), "", "{mode} into Parquet files");
        }
    }
}
