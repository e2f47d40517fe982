//! The data catalog's rules: what a schema contract may hold, how it is
//! read from and written to JSON, and whether a change between two versions
//! is breaking or compatible (the same rules as the IaC drift check).

use serde_json::{Map, Value, json};
use std::sync::Arc;
use time::OffsetDateTime;

use crate::connect::connector::FieldType;
use crate::connect::service::named_conflict;
use crate::gateway::{ContractField, Outcome, check};
use crate::identity::user::validate_name;
use crate::identity::{Permission, Principal};
use crate::monitoring::activity::ActivityEvent;
use crate::service::{Sluice, merge_validation};
use crate::shared::audit::AuditEntry;
use crate::shared::error::FieldError;
use crate::shared::ids::{AssetId, ConnectionId, FlowId, OrgId};
use crate::shared::page::{Page, PageRequest};
use crate::sync::flow::Flow;
use crate::{Error, Result};

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

/// Whether a new version of a contract can break its consumers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Breaking,
    Compatible,
}

impl Change {
    pub fn as_str(self) -> &'static str {
        match self {
            Change::Breaking => "breaking",
            Change::Compatible => "compatible",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Change::Breaking, Change::Compatible].into_iter().find(|c| c.as_str() == s)
    }
}

/// Reads a contract's `fields` array (`[{name, type, required?, tags?,
/// fields?}]`), reporting every problem with its JSON path
/// (`fields[2].type`). Names must be unique within their object; nested
/// `fields` are allowed only on `object` fields.
///
/// # Errors
/// The list of problems, when there is any.
pub fn parse_fields(value: &Value) -> Result<Vec<ContractField>, Vec<FieldError>> {
    let mut errors = Vec::new();
    let fields = parse_level(value, "fields", &mut errors);
    if errors.is_empty() { Ok(fields) } else { Err(errors) }
}

fn parse_level(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Vec<ContractField> {
    let Some(items) = value.as_array() else {
        errors.push(FieldError::new(path, "must be an array of fields"));
        return Vec::new();
    };
    let mut out: Vec<ContractField> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(obj) = item.as_object() else {
            errors.push(FieldError::new(at, "must be an object with name and type"));
            continue;
        };
        if let Some(f) = parse_field(obj, &at, errors) {
            if out.iter().any(|o| o.name == f.name) {
                errors.push(FieldError::new(format!("{at}.name"), format!("duplicate field name {:?}", f.name)));
            } else {
                out.push(f);
            }
        }
    }
    out
}

fn parse_field(obj: &Map<String, Value>, at: &str, errors: &mut Vec<FieldError>) -> Option<ContractField> {
    let before = errors.len();
    let name = match obj.get("name").and_then(Value::as_str).map(str::trim) {
        Some(n) if !n.is_empty() && n.len() <= 255 => n.to_string(),
        _ => {
            errors.push(FieldError::new(format!("{at}.name"), "must be a non-empty string of at most 255 characters"));
            String::new()
        }
    };
    let field_type = match obj.get("type").and_then(Value::as_str).and_then(FieldType::parse) {
        Some(t) => t,
        None => {
            let names: Vec<&str> = FieldType::ALL.iter().map(|t| t.as_str()).collect();
            errors.push(FieldError::new(format!("{at}.type"), format!("must be one of {}", names.join(", "))));
            FieldType::String
        }
    };
    let required = match obj.get("required") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => {
            errors.push(FieldError::new(format!("{at}.required"), "must be a boolean"));
            false
        }
    };
    let mut tags = Vec::new();
    match obj.get("tags") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (j, t) in items.iter().enumerate() {
                match t.as_str().map(str::trim) {
                    Some(t) if !t.is_empty() => {
                        if !tags.iter().any(|x: &String| x == t) {
                            tags.push(t.to_string());
                        }
                    }
                    _ => errors.push(FieldError::new(format!("{at}.tags[{j}]"), "must be a non-empty string")),
                }
            }
        }
        Some(_) => errors.push(FieldError::new(format!("{at}.tags"), "must be an array of strings")),
    }
    let fields = match obj.get("fields") {
        None | Some(Value::Null) => Vec::new(),
        Some(nested) if field_type == FieldType::Object => parse_level(nested, &format!("{at}.fields"), errors),
        Some(_) => {
            errors
                .push(FieldError::new(format!("{at}.fields"), "only fields of type object may declare nested fields"));
            Vec::new()
        }
    };
    (errors.len() == before).then_some(ContractField { name, field_type, required, tags, fields })
}

/// The JSON form of a contract, the inverse of [`parse_fields`]. Nested
/// `fields` appear only where there are some.
pub fn fields_to_json(fields: &[ContractField]) -> Value {
    Value::Array(
        fields
            .iter()
            .map(|f| {
                let mut v = json!({
                    "name": f.name,
                    "type": f.field_type.as_str(),
                    "required": f.required,
                    "tags": f.tags,
                });
                if !f.fields.is_empty() {
                    v["fields"] = fields_to_json(&f.fields);
                }
                v
            })
            .collect(),
    )
}

/// Whether a value of type `from` is always acceptable where `to` is
/// expected: the same type, integer to number, anything to string.
pub fn widens(from: FieldType, to: FieldType) -> bool {
    from == to || to == FieldType::String || (from == FieldType::Integer && to == FieldType::Number)
}

/// Classifies the change from `old` to `new`. Breaking: a removed field, a
/// type that does not widen, a field that became required (an added
/// required field included), recursively through nested objects.
/// Compatible: anything else (added optional fields, widened types,
/// relaxed requirements, tag edits).
pub fn classify_change(old: &[ContractField], new: &[ContractField]) -> Change {
    if breaking(old, new) { Change::Breaking } else { Change::Compatible }
}

fn breaking(old: &[ContractField], new: &[ContractField]) -> bool {
    let removed_or_narrowed = old.iter().any(|o| match new.iter().find(|n| n.name == o.name) {
        None => true,
        Some(n) => {
            !widens(o.field_type, n.field_type)
                || (n.required && !o.required)
                || (o.field_type == FieldType::Object
                    && n.field_type == FieldType::Object
                    && breaking(&o.fields, &n.fields))
        }
    });
    let added_required = new.iter().any(|n| n.required && !old.iter().any(|o| o.name == n.name));
    removed_or_narrowed || added_required
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

fn fields_or_errors(v: &Value) -> Result<Vec<ContractField>> {
    parse_fields(v).map_err(Error::Validation)
}

impl Sluice {
    pub async fn list_assets(&self, p: &Principal, org: OrgId, page: PageRequest) -> Result<Page<DataAsset>> {
        self.access(p, org, Permission::Read).await?;
        self.ports.catalog.list_assets(org, page).await
    }

    pub async fn get_asset(&self, p: &Principal, org: OrgId, id: AssetId) -> Result<DataAsset> {
        self.access(p, org, Permission::Read).await?;
        self.ports.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))
    }

    pub async fn asset_versions(&self, p: &Principal, org: OrgId, id: AssetId) -> Result<Vec<AssetVersion>> {
        self.access(p, org, Permission::Read).await?;
        self.ports.catalog.asset_versions(org, id).await
    }

    pub async fn create_asset(&self, p: &Principal, org: OrgId, new: NewAsset) -> Result<DataAsset> {
        self.access(p, org, Permission::Write).await?;
        let mut errors = Vec::new();
        let name = validate_name("name", &new.name).map_err(|e| errors.push(e)).ok();
        let fields = fields_or_errors(&new.fields).map_err(|e| errors.push(e)).ok();
        let (Some(name), Some(fields)) = (name, fields) else {
            return Err(merge_validation(errors));
        };
        let now = self.now();
        let asset = DataAsset {
            id: AssetId::new(),
            org_id: org,
            name,
            kind: AssetKind::Virtual,
            version: 1,
            fields,
            description: clean_description(new.description),
            connection_id: None,
            entity: None,
            created_at: now,
            updated_at: now,
        };
        let audit = AuditEntry::new(Some(org), p.actor(), "data_asset.created", "data_asset", asset.id, now)
            .with_change(Value::Null, asset_json(&asset));
        self.ports
            .catalog
            .create_asset(&asset, p.actor().name, &audit)
            .await
            .map_err(|e| named_conflict(e, "data asset", &asset.name))?;
        Ok(asset)
    }

    /// Applies `update`; fields that differ make version n+1, classified
    /// breaking or compatible.
    pub async fn update_asset(&self, p: &Principal, org: OrgId, id: AssetId, update: AssetUpdate) -> Result<DataAsset> {
        self.access(p, org, Permission::Write).await?;
        let before = self.ports.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))?;
        let mut after = before.clone();
        let mut errors = Vec::new();
        if let Some(n) = update.name {
            match validate_name("name", &n) {
                Ok(n) => after.name = n,
                Err(e) => errors.push(e),
            }
        }
        if let Some(f) = update.fields {
            match fields_or_errors(&f) {
                Ok(f) => after.fields = f,
                Err(e) => errors.push(e),
            }
        }
        if let Some(d) = update.description {
            after.description = clean_description(d);
        }
        if !errors.is_empty() {
            return Err(merge_validation(errors));
        }
        if after == before {
            return Ok(after);
        }
        after.updated_at = self.now();
        let new_version = (after.fields != before.fields).then(|| {
            after.version = before.version + 1;
            (classify_change(&before.fields, &after.fields), p.actor().name)
        });
        let mut details = json!({"before": asset_json(&before), "after": asset_json(&after)});
        if let Some((change, _)) = &new_version {
            details["change"] = json!(change.as_str());
        }
        let audit = AuditEntry::new(Some(org), p.actor(), "data_asset.updated", "data_asset", id, after.updated_at)
            .with_details(details);
        self.ports
            .catalog
            .update_asset(&after, new_version, &audit)
            .await
            .map_err(|e| named_conflict(e, "data asset", &after.name))?;
        self.forget_assets(org);
        Ok(after)
    }

    /// The flows that depend on the asset: mappings naming it as their
    /// contract, and for a discovered asset the flows reading or writing
    /// its entity on its connection.
    pub async fn asset_dependencies(&self, p: &Principal, org: OrgId, id: AssetId) -> Result<Vec<Dependent>> {
        self.access(p, org, Permission::Read).await?;
        let asset = self.ports.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))?;
        Ok(dependents(&asset, &self.ports.flows.all(org).await?))
    }

    /// Deletes an asset; one that flows depend on only with `force`.
    pub async fn delete_asset(&self, p: &Principal, org: OrgId, id: AssetId, force: bool) -> Result<()> {
        self.access(p, org, Permission::Write).await?;
        let before = self.ports.catalog.get_asset(org, id).await?.ok_or(Error::not_found("data asset"))?;
        if !force {
            let deps = dependents(&before, &self.ports.flows.all(org).await?);
            if !deps.is_empty() {
                let names: Vec<&str> = deps.iter().map(|d| d.flow_name.as_str()).collect();
                return Err(Error::Conflict {
                    code: crate::shared::error::code::IN_USE,
                    message: format!(
                        "flows depend on this data asset ({}); pass ?force=true to delete it anyway",
                        names.join(", ")
                    ),
                });
            }
        }
        let audit = AuditEntry::new(Some(org), p.actor(), "data_asset.deleted", "data_asset", id, self.now())
            .with_change(asset_json(&before), Value::Null);
        self.ports.catalog.delete_asset(org, id, &audit).await?;
        self.forget_assets(org);
        Ok(())
    }

    /// Drops the organization's cached contracts after a change made here.
    pub(crate) fn forget_assets(&self, org: OrgId) {
        self.cache.assets.remove_where(|(o, _), _| *o == org);
    }
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

/// Payloads up to this size are extracted on the calling task (tens of
/// microseconds); larger ones on the offload pool.
pub const INLINE_PAYLOAD: usize = 32 * 1024;

/// What the gateway made of one payload.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayResult {
    /// No JSON object could be found in the payload.
    NoJson,
    Checked(Outcome),
}

impl Sluice {
    /// Runs the gateway pipeline on `raw` against the contract of `asset`.
    /// Only an organization API key may call it; the organization is the
    /// key's.
    pub async fn gateway_validate(&self, p: &Principal, asset: AssetId, raw: &str) -> Result<GatewayResult> {
        let Principal::ApiKey { org_id, .. } = p else {
            return Err(Error::Unauthenticated("the gateway takes an organization API key (X-Api-Key)".into()));
        };
        let org = *org_id;
        self.access(p, org, Permission::Read).await?;
        let now = self.now();
        let asset = self
            .cache
            .assets
            .get_or_load(&(org, asset), now, async {
                Ok::<_, Error>(Arc::new(
                    self.ports.catalog.get_asset(org, asset).await?.ok_or(Error::not_found("data asset"))?,
                ))
            })
            .await?;
        let plan = self
            .cache
            .plans
            .get_or_load(&org, now, async {
                Ok::<_, Error>(self.ports.orgs.get(org).await?.ok_or(Error::not_found("organization"))?.plan)
            })
            .await?;
        let limit = plan.monthly_validations();
        if !self.ports.catalog.consume_validation(org, &usage_month(now), limit).await? {
            return Err(Error::Exhausted {
                code: crate::shared::error::code::QUOTA_EXCEEDED,
                message: format!(
                    "the monthly quota of {} validations of the {} plan is used up",
                    limit.unwrap_or_default(),
                    plan.as_str()
                ),
                retry_after: seconds_to_next_month(now),
            });
        }
        // Linear, but a payload of megabytes still takes milliseconds: off
        // the request threads.
        let outcome = if raw.len() <= INLINE_PAYLOAD {
            check(raw, &asset.fields)
        } else {
            let (asset, raw) = (asset.clone(), raw.to_string());
            self.off_thread(move || check(&raw, &asset.fields)).await?
        };
        let result = match outcome {
            None => GatewayResult::NoJson,
            Some(o) => GatewayResult::Checked(o),
        };
        if let GatewayResult::Checked(Outcome::Invalid { missing_fields, type_mismatches }) = &result {
            let n = missing_fields.len() + type_mismatches.len();
            self.ports
                .activity
                .record_event(&ActivityEvent {
                    id: uuid::Uuid::now_v7(),
                    org_id: org,
                    event_type: "schema.drift".into(),
                    severity: "warning".into(),
                    message: format!(
                        "LLM output drifted from data asset '{}' v{} ({n} problem{})",
                        asset.name,
                        asset.version,
                        if n == 1 { "" } else { "s" }
                    ),
                    data: json!({
                        "asset_id": asset.id,
                        "asset_name": asset.name,
                        "asset_version": asset.version,
                        "missing_fields": missing_fields,
                        "type_mismatches": type_mismatches,
                    }),
                    created_at: self.now(),
                })
                .await?;
        }
        Ok(result)
    }
}

/// The quota month of `at`: `YYYY-MM` in UTC.
pub fn usage_month(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!("{:04}-{:02}", at.year(), u8::from(at.month()))
}

/// Seconds from `at` until the next month starts (UTC), when the quota
/// renews: the `Retry-After` of `quota_exceeded`.
pub fn seconds_to_next_month(at: OffsetDateTime) -> u64 {
    let at = at.to_offset(time::UtcOffset::UTC);
    let (y, m) =
        if at.month() == time::Month::December { (at.year() + 1, 1) } else { (at.year(), u8::from(at.month()) + 1) };
    let next = time::Date::from_calendar_date(y, time::Month::try_from(m).unwrap_or(time::Month::January), 1)
        .map(|d| d.midnight().assume_utc())
        .unwrap_or(at);
    u64::try_from((next - at).whole_seconds()).unwrap_or(0).max(1)
}

fn clean_description(d: Option<String>) -> Option<String> {
    d.map(|d| d.trim().to_string()).filter(|d| !d.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_renews_at_the_next_month_utc() {
        use time::macros::datetime;
        assert_eq!(seconds_to_next_month(datetime!(2026-11-30 23:59:00 UTC)), 60);
        assert_eq!(seconds_to_next_month(datetime!(2026-12-31 23:00:00 UTC)), 3600);
        assert_eq!(seconds_to_next_month(datetime!(2027-01-01 00:30:00 +01:00)), 1800, "23:30 UTC on 31 December");
    }

    fn parse(v: Value) -> Vec<ContractField> {
        parse_fields(&v).expect("valid fields")
    }

    #[test]
    fn parses_and_round_trips_nested_contracts() {
        let v = json!([
            {"name": "email", "type": "string", "required": true, "tags": ["PII.Sensitive"]},
            {"name": "age", "type": "integer"},
            {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string", "required": true}]}
        ]);
        let fields = parse(v);
        assert_eq!(fields.len(), 3);
        assert!(fields[0].sensitive() && fields[0].required);
        assert!(!fields[1].required && fields[1].tags.is_empty());
        assert_eq!(fields[2].fields[0].name, "zip");
        assert_eq!(parse(fields_to_json(&fields)), fields);
        assert!(fields_to_json(&fields)[1].get("fields").is_none());
    }

    #[test]
    fn reports_every_problem_with_its_path() {
        let v = json!([
            {"name": "", "type": "string"},
            {"name": "a", "type": "text"},
            {"name": "b", "type": "string", "required": "yes", "tags": ["ok", 3]},
            {"name": "c", "type": "string", "fields": []},
            {"name": "d", "type": "object", "fields": [{"name": "x", "type": "integer"}, {"name": "x", "type": "integer"}]},
            "e"
        ]);
        let errors = parse_fields(&v).unwrap_err();
        let paths: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            paths,
            [
                "fields[0].name",
                "fields[1].type",
                "fields[2].required",
                "fields[2].tags[1]",
                "fields[3].fields",
                "fields[4].fields[1].name",
                "fields[5]"
            ]
        );
        assert!(errors[1].message.contains("integer"), "the message lists the accepted types: {}", errors[1].message);
        assert_eq!(parse_fields(&json!({"name": "a"})).unwrap_err()[0].field, "fields");
    }

    #[test]
    fn duplicate_tags_collapse_and_names_are_trimmed() {
        let f = parse(json!([{"name": " a ", "type": "string", "tags": ["t", "t"]}]));
        assert_eq!(f[0].name, "a");
        assert_eq!(f[0].tags, ["t"]);
    }

    #[test]
    fn classifies_changes_like_the_drift_check() {
        let base = parse(json!([
            {"name": "id", "type": "integer", "required": true},
            {"name": "note", "type": "string"},
            {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}
        ]));
        let with = |v: Value| classify_change(&base, &parse(v));
        // Compatible: widen integer to number, add an optional field, relax required, tag.
        assert_eq!(
            with(json!([
                {"name": "id", "type": "number"},
                {"name": "note", "type": "string", "tags": ["PII.Sensitive"]},
                {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}, {"name": "city", "type": "string"}]},
                {"name": "extra", "type": "boolean"}
            ])),
            Change::Compatible
        );
        assert_eq!(classify_change(&base, &base), Change::Compatible);
        // Breaking: removal, narrowing, newly required, added required, nested removal.
        let breaking = [
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "integer"}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "string", "required": true}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "string"}, {"name": "address", "type": "object", "fields": [{"name": "zip", "type": "string"}]}, {"name": "new", "type": "string", "required": true}]),
            json!([{"name": "id", "type": "integer", "required": true}, {"name": "note", "type": "string"}, {"name": "address", "type": "object", "fields": []}]),
        ];
        for (i, v) in breaking.into_iter().enumerate() {
            assert_eq!(with(v), Change::Breaking, "case {i}");
        }
    }

    #[test]
    fn usage_month_is_the_utc_calendar_month() {
        assert_eq!(usage_month(time::macros::datetime!(2026-11-30 23:30 -02:00)), "2026-12");
        assert_eq!(usage_month(time::macros::datetime!(2026-01-05 00:00 UTC)), "2026-01");
    }

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

    #[test]
    fn widening_rules() {
        assert!(widens(FieldType::Integer, FieldType::Number));
        assert!(widens(FieldType::Boolean, FieldType::String));
        assert!(!widens(FieldType::Number, FieldType::Integer));
        assert!(!widens(FieldType::String, FieldType::Timestamp));
    }
}
