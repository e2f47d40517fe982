//! A flow admitted before it is written (created, or changed): the rules
//! of [`super::validate`] with its connections' kinds, then what only the
//! connections and the organization's other flows can tell: the source's
//! schema, dependencies that resolve and make no cycle, a source that can
//! capture changes, and destination entities no other flow writes.

use super::SyncService;
use super::flow::*;
use crate::connect::connection::Connection;
use crate::connect::connector::ConnectorSpec;
use crate::shared::ids::{ConnectionId, FlowId};
use crate::{Error, FieldError, Result};
use serde_json::Value;
use std::collections::BTreeMap;

/// Validates a flow against its connections, the source's schema and
/// the other flows of the organization; normalizes `depends_on` to ids.
/// Checks a flow before it is written (see [`crate::sync::validate`]);
/// with `against_source` (see [`crate::sync::validate::touches_source`]),
/// against the source's schema as it is now.
pub(super) async fn flow(sync: &SyncService, flow: &mut Flow, against_source: bool) -> Result<()> {
    use crate::sync::validate::{Draft, End, check_against_source, check_flow, check_into_itself, once};
    let mut errors: Vec<FieldError> = Vec::new();
    let source = sync.connect.connection(flow.org_id, flow.source_connection_id).await?;
    let dest = sync.connect.connection(flow.org_id, flow.destination_connection_id).await?;
    for (field, c) in [("source_connection_id", &source), ("destination_connection_id", &dest)] {
        if c.is_none() {
            errors.push(FieldError::new(field, "no such connection in this organization"));
        }
    }
    let registry = sync.connect.registry();
    let specs = [&source, &dest]
        .map(|c| c.as_ref().and_then(|c| registry.spec(&c.connector_type).map(|s| s.with_config(&c.config))));
    fn end<'a>(field: &'a str, c: &'a Option<Connection>, spec: Option<&'a ConnectorSpec>) -> Option<End<'a>> {
        c.as_ref().map(|c| End { field, name: &c.name, id: c.id, capability: c.capability, spec })
    }
    let draft = Draft { name: &flow.name, schedule: flow.schedule.as_deref(), config: &flow.config };
    let ends = (
        end("source_connection_id", &source, specs[0].as_ref()),
        end("destination_connection_id", &dest, specs[1].as_ref()),
    );
    errors.extend(check_flow("", &draft, ends.0, ends.1));
    // Mappings or connections changed (or a new flow): none may write
    // the table it reads. A pause or a rename never depends on it.
    if against_source {
        errors.extend(check_into_itself("", &flow.config, ends.0, ends.1));
    }
    if let Some(src) = source.as_ref().filter(|c| c.capability.reads() && against_source)
        && let Some(schemas) = sync.source_schemas(src, &flow.config).await
    {
        errors.extend(check_against_source("", &flow.config, &src.name, &schemas));
    }
    let mut errors = once(errors);
    // Dependencies: resolve ids or names, and refuse cycles.
    let all = sync.flows.all(flow.org_id).await?;
    let mut names: BTreeMap<FlowId, String> = all.iter().map(|f| (f.id, f.name.clone())).collect();
    names.insert(flow.id, flow.name.clone());
    let mut edges: BTreeMap<FlowId, Vec<FlowId>> =
        all.iter().filter(|f| f.id != flow.id).map(|f| (f.id, upstream_ids(f))).collect();
    let find = |r: &str| all.iter().find(|f| f.id.to_string() == r || f.name == r).map(|f| f.id);
    errors.extend(resolve_dependencies("", flow.id, &mut flow.config, find, "in this organization"));
    edges.insert(flow.id, upstream_ids(flow));
    if let Some(cycle) = find_cycle(&edges, &names) {
        errors.push(FieldError::new("config.depends_on", format!("creates a cycle: {}", cycle.join(" → "))));
    }
    // A CDC mapping needs a source that can capture (what the
    // connection test says), checked unless the flow captured from that
    // source already (its stream exists; a slot of its own counts as
    // used). A source that cannot be reached is checked when it runs.
    let before = all.iter().find(|f| f.id == flow.id);
    let captured = before.is_some_and(|b| b.captures() && b.source_connection_id == flow.source_connection_id);
    if against_source && errors.is_empty() && flow.captures() && !captured {
        errors.extend(check_capture(sync, flow).await);
    }
    if !errors.is_empty() {
        return Err(Error::Validation(errors));
    }
    match dest.as_ref().filter(|_| against_source) {
        Some(dest) => check_entities_free(sync, flow, dest, &all).await,
        None => Ok(()),
    }
}

/// Why the flow's source cannot capture its CDC tables, at the first
/// CDC mapping's `sync_mode`, in the connection test's lines; nothing
/// when it can, or cannot be asked.
async fn check_capture(sync: &SyncService, flow: &Flow) -> Vec<FieldError> {
    let cdc: Vec<(usize, &Mapping)> =
        flow.config.mappings.iter().enumerate().filter(|(_, m)| m.sync_mode.cdc()).collect();
    let Some((first, _)) = cdc.first() else { return Vec::new() };
    let Ok(changes) = sync.engine.change_source_of(flow).await else { return Vec::new() };
    let entities: Vec<String> = cdc.iter().map(|(_, m)| m.source_entity.clone()).collect();
    match changes.readiness(&entities).await {
        Ok(reasons) if !reasons.is_empty() => vec![FieldError::new(
            format!("config.mappings[{first}].sync_mode"),
            format!("the source cannot capture changes: {}", reasons.join("; ")),
        )],
        _ => Vec::new(),
    }
}

/// Refuses (409) a mapping whose destination entity another flow of the
/// organization writes in the same place (the same connection, or one
/// to the same database or directory), unless both append into it: a
/// second mirror, overwrite or dedup would replace the first's rows, and
/// the first's positions or cursor would no longer say what it holds.
async fn check_entities_free(sync: &SyncService, flow: &Flow, dest: &Connection, all: &[Flow]) -> Result<()> {
    let place = |c: &Connection| {
        let keys = ["host", "port", "database", "path", "schema"];
        let at: Vec<String> = keys.iter().map(|k| c.config.get(*k).map(Value::to_string).unwrap_or_default()).collect();
        (c.connector_type.clone(), at)
    };
    let here = place(dest);
    let mut places: BTreeMap<ConnectionId, bool> = BTreeMap::new();
    for other in all.iter().filter(|f| f.id != flow.id) {
        let same = match places.get(&other.destination_connection_id) {
            Some(same) => *same,
            None => {
                let same = other.destination_connection_id == dest.id
                    || sync
                        .connect
                        .connection(flow.org_id, other.destination_connection_id)
                        .await?
                        .is_some_and(|c| c.integration_id == dest.integration_id && place(&c) == here);
                places.insert(other.destination_connection_id, same);
                same
            }
        };
        if !same {
            continue;
        }
        if let Some((i, o)) = crate::sync::validate::entity_written_by(&flow.config, &other.config) {
            let entity = flow.config.mappings[i].destination();
            let message = crate::sync::validate::entity_taken_message(entity, &other.name, o);
            return Err(Error::Conflict {
                code: crate::shared::error::Code::Conflict,
                message: format!("config.mappings[{i}].dest_entity: {message}"),
            });
        }
    }
    Ok(())
}
