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

use super::flow::{FlowConfig, check_schedule};
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
            errors.extend(super::check_capture_mode(&path, m, &spec.sync_modes, spec.connector_type, applies));
        }
        // Every destination that applies changes takes the CDC modes
        // (checked above); the others are the destination's to take.
        if let Some(spec) = dest_spec.filter(|_| !m.sync_mode.cdc())
            && !spec.sync_modes.is_empty()
            && !spec.sync_modes.contains(&m.sync_mode.as_str())
        {
            errors.push(FieldError::new(
                format!("{path}.sync_mode"),
                format!("{} destinations do not support {}", spec.connector_type, m.sync_mode.as_str()),
            ));
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
        errors.extend(super::check_capture_keys(&path, m, s));
        errors.extend(super::check_mapping(
            &path,
            m.sync_mode,
            m.cursor_field.as_deref(),
            m.primary_key.as_deref(),
            Some(s),
        ));
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
        if !dests.insert(m.destination().to_string()) {
            errors.push(FieldError::new(
                format!("{path}.dest_entity"),
                format!("'{}' is written by another mapping", m.destination()),
            ));
        }
        errors.extend(super::check_mapping(
            &path,
            m.sync_mode,
            m.cursor_field.as_deref(),
            m.primary_key.as_deref(),
            None,
        ));
        if let Some(l) = &m.cursor_lookback
            && let Err(e) = super::parse_lookback(l)
        {
            errors.push(FieldError::new(format!("{path}.cursor_lookback"), e));
        }
        errors.extend(super::check_capture(&path, m));
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
    errors
}

/// A continuous flow keeps one run going: it takes no schedule.
pub fn check_continuous(config: &FlowConfig, schedule: Option<&str>) -> Option<FieldError> {
    (config.continuous && schedule.is_some()).then(|| {
        FieldError::new("schedule", "a continuous flow keeps one run going and takes no schedule: leave it out")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(
            serde_json::from_value::<FlowConfig>(
                serde_json::json!({"mappings": [{"source_entity": "x", "sync_mode": "sometimes"}]})
            )
            .is_err()
        );
    }
}
