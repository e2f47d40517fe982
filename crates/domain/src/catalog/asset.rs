//! Data assets: named, versioned schema contracts, their version history,
//! and the flows that depend on them.

use super::contract::{ContractField, fields_to_json};
use super::drift::Change;
use crate::shared::ids::{AssetId, ConnectionId, FlowId, OrgId};
use crate::sync::flow::Flow;
use serde_json::{Value, json};
use time::OffsetDateTime;

/// Where an asset comes from: declared by a user, or catalogued by discovery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssetKind {
    Virtual,
    Discovered,
}

impl AssetKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AssetKind::Virtual => "virtual",
            AssetKind::Discovered => "discovered",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [AssetKind::Virtual, AssetKind::Discovered].into_iter().find(|k| k.as_str() == s)
    }
}

/// A catalog entry: a named, versioned schema contract.
#[derive(Debug, Clone, PartialEq)]
pub struct DataAsset {
    pub id: AssetId,
    pub org_id: OrgId,
    pub name: String,
    pub kind: AssetKind,
    /// Starts at 1; grows by one with every change of `fields`.
    pub version: i32,
    pub fields: Vec<ContractField>,
    pub description: Option<String>,
    pub connection_id: Option<ConnectionId>,
    pub entity: Option<String>,
    pub created_at: OffsetDateTime,
    pub updated_at: OffsetDateTime,
}

/// One entry of an asset's version history.
#[derive(Debug, Clone, PartialEq)]
pub struct AssetVersion {
    pub version: i32,
    pub fields: Vec<ContractField>,
    pub change: Change,
    pub created_at: OffsetDateTime,
    pub created_by: Option<String>,
}

/// A new virtual asset: `fields` in the JSON form [`parse_fields`] reads.
#[derive(Debug, Clone, Default)]
pub struct NewAsset {
    pub name: String,
    pub fields: Value,
    pub description: Option<String>,
}

/// A partial update; `description: Some(None)` clears it.
#[derive(Debug, Clone, Default)]
pub struct AssetUpdate {
    pub name: Option<String>,
    pub fields: Option<Value>,
    pub description: Option<Option<String>>,
}

/// The JSON form of an asset, as the API and the audit log show it.
pub fn asset_json(a: &DataAsset) -> Value {
    json!({
        "id": a.id,
        "name": a.name,
        "kind": a.kind.as_str(),
        "version": a.version,
        "fields": fields_to_json(&a.fields),
        "description": a.description,
        "connection_id": a.connection_id,
        "entity": a.entity,
        "created_at": a.created_at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
        "updated_at": a.updated_at.format(&time::format_description::well_known::Rfc3339).unwrap_or_default(),
    })
}

/// A flow that depends on an asset, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependent {
    pub flow_id: FlowId,
    pub flow_name: String,
    /// `contract` (a mapping names the asset), `source` or `destination`
    /// (the flow reads or writes a discovered asset's entity).
    pub relation: &'static str,
}

/// The flows among `flows` that depend on `asset`, each once, with its
/// strongest relation.
pub fn dependents(asset: &DataAsset, flows: &[Flow]) -> Vec<Dependent> {
    let id = asset.id.to_string();
    let on_entity = |conn: ConnectionId, entity: &str| {
        asset.kind == AssetKind::Discovered
            && asset.connection_id == Some(conn)
            && asset.entity.as_deref() == Some(entity)
    };
    flows
        .iter()
        .filter_map(|f| {
            let maps = &f.config.mappings;
            let relation = if maps.iter().any(|m| m.asset.as_deref().is_some_and(|r| r == asset.name || r == id)) {
                "contract"
            } else if maps.iter().any(|m| on_entity(f.source_connection_id, &m.source_entity)) {
                "source"
            } else if maps.iter().any(|m| on_entity(f.destination_connection_id, m.destination())) {
                "destination"
            } else {
                return None;
            };
            Some(Dependent { flow_id: f.id, flow_name: f.name.clone(), relation })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovered_assets_are_depended_on_by_flows_that_read_or_write_their_entity() {
        use crate::sync::flow::{FlowConfig, FlowStatus};
        let now = time::macros::datetime!(2026-05-01 10:00 UTC);
        let (src, dst) = (ConnectionId::new(), ConnectionId::new());
        let asset = DataAsset {
            id: AssetId::new(),
            org_id: OrgId::new(),
            name: "crm.people".into(),
            kind: AssetKind::Discovered,
            version: 1,
            fields: vec![],
            description: None,
            connection_id: Some(src),
            entity: Some("people".into()),
            created_at: now,
            updated_at: now,
        };
        let flow = |name: &str, from: ConnectionId, to: ConnectionId, mapping: Value| Flow {
            id: FlowId::new(),
            org_id: asset.org_id,
            name: name.into(),
            source_connection_id: from,
            destination_connection_id: to,
            schedule: None,
            config: serde_json::from_value::<FlowConfig>(json!({"mappings": [mapping]})).unwrap(),
            status: FlowStatus::Active,
            next_run_at: None,
            created_at: now,
            updated_at: now,
        };
        let m = |src: &str, dest: &str| json!({"source_entity": src, "dest_entity": dest, "sync_mode": "full_refresh_overwrite"});
        let flows = [
            flow("reads", src, dst, m("people", "p")),
            flow("writes", dst, src, m("x", "people")),
            flow("other_entity", src, dst, m("orders", "o")),
            flow("other_connection", dst, dst, m("people", "people")),
            flow(
                "names_it",
                dst,
                dst,
                json!({"source_entity": "a", "sync_mode": "full_refresh_overwrite", "asset": asset.id.to_string()}),
            ),
        ];
        let got: Vec<(&str, &str)> = dependents(&asset, &flows)
            .iter()
            .map(|d| (flows.iter().find(|f| f.id == d.flow_id).unwrap().name.as_str(), d.relation))
            .collect();
        assert_eq!(got, [("reads", "source"), ("writes", "destination"), ("names_it", "contract")]);
        // A virtual asset is depended on only by name or id.
        let virt = DataAsset { kind: AssetKind::Virtual, ..asset.clone() };
        assert_eq!(dependents(&virt, &flows).len(), 1);
    }
}
