//! The catalog context's store: data assets, their versions and
//! dependencies, and the discovered schemas.

use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::catalog::asset::{AssetKind, AssetVersion, DataAsset};
use sluice_domain::catalog::contract::{fields_to_json, parse_fields};
use sluice_domain::catalog::drift::{Change, classify_change};
use sluice_domain::catalog::ports::CatalogRepository;
use sluice_domain::connect::connector::EntitySchema;
use sluice_domain::connect::ports::DiscoveredSchemas;
use sluice_domain::gateway::ContractField;
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::{AssetId, ConnectionId, OrgId};
use sluice_domain::shared::page::{Page, PageRequest};
use time::OffsetDateTime;
use uuid::Uuid;

/// The catalog's field list of a discovered entity.
fn asset_fields(schema: &EntitySchema) -> Value {
    Value::Array(
        schema
            .fields
            .iter()
            .map(|f| {
                json!({
                    "name": f.name,
                    "type": f.field_type.as_str(),
                    "required": !f.nullable,
                    "tags": [],
                    "primary_key": f.primary_key,
                })
            })
            .collect(),
    )
}

#[async_trait]
impl DiscoveredSchemas for Store {
    async fn upsert_discovered(
        &self,
        org: OrgId,
        name: &str,
        connection: ConnectionId,
        schema: &EntitySchema,
        now: OffsetDateTime,
    ) -> Result<()> {
        let fields = asset_fields(schema);
        written!(self, |tx| {
            let existing = data_assets::Entity::find()
                .filter(data_assets::Column::OrgId.eq(org.as_uuid()))
                .filter(data_assets::Column::Name.eq(name))
                .one(tx.c())
                .await
                .map_err(db_err)?;
            let (asset_id, version, change) = match existing {
                Some(a) if a.fields == fields => return Ok(()),
                Some(a) => {
                    let version = a.version + 1;
                    // Classified like any other change: a renamed source
                    // column removes a field, which breaks consumers.
                    let change = classify_change(&stored_fields(&a.fields)?, &stored_fields(&fields)?);
                    data_assets::Entity::update_many()
                        .col_expr(data_assets::Column::Fields, Expr::value(fields.clone()))
                        .col_expr(data_assets::Column::Version, Expr::value(version))
                        .col_expr(data_assets::Column::UpdatedAt, Expr::value(now))
                        .filter(data_assets::Column::Id.eq(a.id))
                        .exec(tx.c())
                        .await
                        .map_err(db_err)?;
                    (a.id, version, change)
                }
                None => {
                    let id = Uuid::now_v7();
                    data_assets::Entity::insert(data_assets::ActiveModel {
                        id: Set(id),
                        org_id: Set(org.as_uuid()),
                        name: Set(name.to_string()),
                        kind: Set("discovered".into()),
                        version: Set(1),
                        fields: Set(fields.clone()),
                        description: Set(None),
                        connection_id: Set(Some(connection.as_uuid())),
                        entity: Set(Some(schema.name.clone())),
                        created_at: Set(now),
                        updated_at: Set(now),
                    })
                    .exec_without_returning(tx.c())
                    .await
                    .map_err(db_err)?;
                    (id, 1, Change::Compatible)
                }
            };
            data_asset_versions::Entity::insert(data_asset_versions::ActiveModel {
                id: Set(Uuid::now_v7()),
                asset_id: Set(asset_id),
                version: Set(version),
                fields: Set(fields.clone()),
                change: Set(change.as_str().into()),
                created_at: Set(now),
                created_by: Set(Some("discovery".into())),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
            Ok(())
        })
    }
}

#[async_trait]
impl CatalogRepository for Store {
    async fn create_asset(&self, a: &DataAsset, created_by: Option<String>, audit: &AuditEntry) -> Result<()> {
        let fields = fields_to_json(&a.fields);
        audited!(self, audit, |tx| {
            data_assets::Entity::insert(data_assets::ActiveModel {
                id: Set(a.id.as_uuid()),
                org_id: Set(a.org_id.as_uuid()),
                name: Set(a.name.clone()),
                kind: Set(a.kind.as_str().into()),
                version: Set(a.version),
                fields: Set(fields.clone()),
                description: Set(a.description.clone()),
                connection_id: Set(a.connection_id.map(|c| c.as_uuid())),
                entity: Set(a.entity.clone()),
                created_at: Set(a.created_at),
                updated_at: Set(a.updated_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
            insert_version(tx.c(), a.id.as_uuid(), a.version, fields, Change::Compatible, created_by, a.created_at)
                .await?;
        })
    }

    async fn find_discovered(&self, org: OrgId, connection: ConnectionId, entity: &str) -> Result<Option<DataAsset>> {
        crate::first(
            &self.db,
            data_assets::Entity::find()
                .filter(data_assets::Column::OrgId.eq(org.as_uuid()))
                .filter(data_assets::Column::ConnectionId.eq(connection.as_uuid()))
                .filter(data_assets::Column::Entity.eq(entity))
                .filter(data_assets::Column::Kind.eq(AssetKind::Discovered.as_str()))
                .order_by_desc(data_assets::Column::UpdatedAt),
            asset_from,
        )
        .await
    }

    async fn get_asset(&self, org: OrgId, id: AssetId) -> Result<Option<DataAsset>> {
        crate::owned::<data_assets::Entity, _>(&self.db, id.as_uuid(), org.as_uuid(), asset_from).await
    }

    async fn list_assets(&self, org: OrgId, page: PageRequest) -> Result<Page<DataAsset>> {
        let q = data_assets::Entity::find().filter(data_assets::Column::OrgId.eq(org.as_uuid()));
        crate::keyset_page(&self.db, q, data_assets::Column::Id, page, asset_from, |a| a.id.as_uuid()).await
    }

    async fn update_asset(
        &self,
        a: &DataAsset,
        new_version: Option<(Change, Option<String>)>,
        audit: &AuditEntry,
    ) -> Result<()> {
        let fields = fields_to_json(&a.fields);
        audited!(self, audit, |tx| {
            let res = data_assets::Entity::update_many()
                .col_expr(data_assets::Column::Name, Expr::value(a.name.clone()))
                .col_expr(data_assets::Column::Description, Expr::value(a.description.clone()))
                .col_expr(data_assets::Column::Fields, Expr::value(fields.clone()))
                .col_expr(data_assets::Column::Version, Expr::value(a.version))
                .col_expr(data_assets::Column::UpdatedAt, Expr::value(a.updated_at))
                .filter(data_assets::Column::Id.eq(a.id.as_uuid()))
                .filter(data_assets::Column::OrgId.eq(a.org_id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::NotFound { resource: "data asset" });
            }
            if let Some((change, by)) = new_version {
                insert_version(tx.c(), a.id.as_uuid(), a.version, fields, change, by, a.updated_at).await?;
            }
        })
    }

    async fn delete_asset(&self, org: OrgId, id: AssetId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            crate::delete_owned::<data_assets::Entity>(tx.c(), id.as_uuid(), org.as_uuid(), "data asset").await?;
            // Explicit, so SQLite needs no foreign-key pragma for the cascade.
            data_asset_versions::Entity::delete_many()
                .filter(data_asset_versions::Column::AssetId.eq(id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
        })
    }

    async fn asset_versions(&self, org: OrgId, id: AssetId) -> Result<Vec<AssetVersion>> {
        if self.get_asset(org, id).await?.is_none() {
            return Err(Error::NotFound { resource: "data asset" });
        }
        let rows = data_asset_versions::Entity::find()
            .filter(data_asset_versions::Column::AssetId.eq(id.as_uuid()))
            .order_by_asc(data_asset_versions::Column::Version)
            .all(&self.db)
            .await
            .map_err(db_err)?;
        let mut versions: Vec<AssetVersion> = Vec::with_capacity(rows.len());
        for m in rows {
            let fields = stored_fields(&m.fields)?;
            // Versions discovery stored before it classified them say
            // "discovered": classified now against the version before.
            let change = match (Change::parse(&m.change), versions.last()) {
                (Some(c), _) => c,
                (None, Some(prev)) => classify_change(&prev.fields, &fields),
                (None, None) => Change::Compatible,
            };
            versions.push(AssetVersion {
                version: m.version,
                fields,
                change,
                created_at: m.created_at,
                created_by: m.created_by,
            });
        }
        Ok(versions)
    }
}

async fn insert_version(
    c: &impl ConnectionTrait,
    asset: Uuid,
    version: i32,
    fields: Value,
    change: Change,
    created_by: Option<String>,
    at: OffsetDateTime,
) -> Result<()> {
    data_asset_versions::Entity::insert(data_asset_versions::ActiveModel {
        id: Set(Uuid::now_v7()),
        asset_id: Set(asset),
        version: Set(version),
        fields: Set(fields),
        change: Set(change.as_str().into()),
        created_at: Set(at),
        created_by: Set(created_by),
    })
    .exec_without_returning(c)
    .await
    .map_err(db_err)?;
    Ok(())
}

fn stored_fields(v: &Value) -> Result<Vec<ContractField>> {
    parse_fields(v).map_err(|e| Error::Internal(anyhow::anyhow!("stored asset fields are invalid: {e:?}")))
}

fn asset_from(m: data_assets::Model) -> Result<DataAsset> {
    Ok(DataAsset {
        id: AssetId::from_uuid(m.id),
        org_id: OrgId::from_uuid(m.org_id),
        name: m.name,
        kind: AssetKind::parse(&m.kind).unwrap_or(AssetKind::Virtual),
        version: m.version,
        fields: stored_fields(&m.fields)?,
        description: m.description,
        connection_id: m.connection_id.map(ConnectionId::from_uuid),
        entity: m.entity,
        created_at: m.created_at,
        updated_at: m.updated_at,
    })
}
