//! Integrations, connections and discovered catalog assets on sea-orm.
//! Credentials are sealed with the store's [`Cipher`](crate::crypto::Cipher)
//! on the way in and opened on the way out; the domain sees plaintext only.

use crate::entities::*;
use crate::{Store, db_err, insert_audit};
use async_trait::async_trait;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::{Value, json};
use sluice_domain::catalog::{AssetKind, AssetVersion, Change, DataAsset, fields_to_json, parse_fields};
use sluice_domain::connect::connector::{Capability, EntitySchema};
use sluice_domain::connect::integration::{Connection, ConnectionStatus, Credentials, Integration};
use sluice_domain::gateway::ContractField;
use sluice_domain::ports::{CatalogRepository, ConnectionRepository, IntegrationRepository};
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::{AssetId, ConnectionId, IntegrationId, OrgId};
use sluice_domain::shared::page::{Page, PageRequest};
use sluice_domain::{Error, Result};
use std::collections::BTreeMap;
use time::OffsetDateTime;
use uuid::Uuid;

fn integration_aad(id: Uuid) -> String {
    format!("integration:{id}")
}

fn connection_aad(id: Uuid) -> String {
    format!("connection:{id}")
}

impl Store {
    pub(crate) fn integration_from(&self, m: integrations::Model) -> Result<Integration> {
        Ok(Integration {
            id: m.id.into(),
            org_id: m.org_id.into(),
            name: m.name,
            integration_type: m.integration_type,
            credentials: Credentials(self.cipher.open_map(&m.credentials, &integration_aad(m.id))?),
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }

    pub(crate) fn connection_from(&self, m: connections::Model) -> Result<Connection> {
        let config: BTreeMap<String, Value> = serde_json::from_value(m.config)
            .map_err(|e| Error::Internal(anyhow::anyhow!("stored connection config is invalid: {e}")))?;
        Ok(Connection {
            id: m.id.into(),
            org_id: m.org_id.into(),
            name: m.name,
            integration_id: m.integration_id.map(Into::into),
            connector_type: m.connector_type,
            capability: Capability::parse(&m.capability)
                .ok_or_else(|| Error::Internal(anyhow::anyhow!("stored capability {} is invalid", m.capability)))?,
            config,
            secrets: Credentials(self.cipher.open_map(&m.secrets, &connection_aad(m.id))?),
            status: ConnectionStatus::parse(&m.status)?,
            last_tested_at: m.last_tested_at,
            last_error: m.last_error,
            created_at: m.created_at,
            updated_at: m.updated_at,
        })
    }

    pub(crate) fn integration_model(&self, i: &Integration) -> Result<integrations::ActiveModel> {
        Ok(integrations::ActiveModel {
            id: Set(i.id.as_uuid()),
            org_id: Set(i.org_id.as_uuid()),
            name: Set(i.name.clone()),
            integration_type: Set(i.integration_type.clone()),
            credentials: Set(self.cipher.seal_map(&i.credentials.0, &integration_aad(i.id.as_uuid()))?),
            created_at: Set(i.created_at),
            updated_at: Set(i.updated_at),
        })
    }

    pub(crate) fn connection_model(&self, c: &Connection) -> Result<connections::ActiveModel> {
        Ok(connections::ActiveModel {
            id: Set(c.id.as_uuid()),
            org_id: Set(c.org_id.as_uuid()),
            name: Set(c.name.clone()),
            integration_id: Set(c.integration_id.map(|i| i.as_uuid())),
            connector_type: Set(c.connector_type.clone()),
            capability: Set(c.capability.as_str().to_string()),
            config: Set(serde_json::to_value(&c.config).map_err(|e| Error::Internal(e.into()))?),
            secrets: Set(self.cipher.seal_map(&c.secrets.0, &connection_aad(c.id.as_uuid()))?),
            status: Set(c.status.as_str().to_string()),
            last_tested_at: Set(c.last_tested_at),
            last_error: Set(c.last_error.clone()),
            created_at: Set(c.created_at),
            updated_at: Set(c.updated_at),
        })
    }

    /// Re-encrypts every stored credential with `new` (the `sluice
    /// rotate-master-key` command), in one transaction. Answers how many
    /// values were re-encrypted.
    ///
    /// # Errors
    /// When a value does not decrypt with the current key; nothing changes then.
    pub async fn rotate_master_key(&self, new: &[u8; 32]) -> Result<u64> {
        let next = crate::crypto::Cipher::new(new);
        let tx = self.write().await?;
        let r = async {
            let mut n = 0;
            for m in integrations::Entity::find().all(tx.c()).await.map_err(db_err)? {
                let aad = integration_aad(m.id);
                let plain = self.cipher.decrypt(&m.credentials, &aad)?;
                integrations::Entity::update_many()
                    .col_expr(integrations::Column::Credentials, Expr::value(next.encrypt(&plain, &aad)?))
                    .filter(integrations::Column::Id.eq(m.id))
                    .exec(tx.c())
                    .await
                    .map_err(db_err)?;
                n += 1;
            }
            for m in connections::Entity::find().all(tx.c()).await.map_err(db_err)? {
                let aad = connection_aad(m.id);
                let plain = self.cipher.decrypt(&m.secrets, &aad)?;
                connections::Entity::update_many()
                    .col_expr(connections::Column::Secrets, Expr::value(next.encrypt(&plain, &aad)?))
                    .filter(connections::Column::Id.eq(m.id))
                    .exec(tx.c())
                    .await
                    .map_err(db_err)?;
                n += 1;
            }
            Ok(n)
        }
        .await;
        tx.finish(r).await
    }
}

#[async_trait]
impl IntegrationRepository for Store {
    async fn create(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            integrations::Entity::insert(self.integration_model(i)?)
                .exec_without_returning(tx.c())
                .await
                .map_err(db_err)?;
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn get(&self, org: OrgId, id: IntegrationId) -> Result<Option<Integration>> {
        integrations::Entity::find_by_id(id.as_uuid())
            .filter(integrations::Column::OrgId.eq(org.as_uuid()))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(|m| self.integration_from(m))
            .transpose()
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Integration>> {
        integrations::Entity::find()
            .filter(integrations::Column::OrgId.eq(org.as_uuid()))
            .filter(integrations::Column::Name.eq(name))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(|m| self.integration_from(m))
            .transpose()
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Integration>> {
        let mut q = integrations::Entity::find().filter(integrations::Column::OrgId.eq(org.as_uuid()));
        if let Some(after) = page.after {
            q = q.filter(integrations::Column::Id.lt(after));
        }
        let rows =
            q.order_by_desc(integrations::Column::Id).limit(page.limit + 1).all(&self.db).await.map_err(db_err)?;
        let items = rows.into_iter().map(|m| self.integration_from(m)).collect::<Result<Vec<_>>>()?;
        Ok(Page::from_overfetch(items, page.limit, |i| i.id.as_uuid()))
    }

    async fn update(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            integrations::Entity::update_many()
                .col_expr(integrations::Column::Name, Expr::value(i.name.clone()))
                .col_expr(
                    integrations::Column::Credentials,
                    Expr::value(self.cipher.seal_map(&i.credentials.0, &integration_aad(i.id.as_uuid()))?),
                )
                .col_expr(integrations::Column::UpdatedAt, Expr::value(i.updated_at))
                .filter(integrations::Column::Id.eq(i.id.as_uuid()))
                .filter(integrations::Column::OrgId.eq(i.org_id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn delete(&self, org: OrgId, id: IntegrationId, audit: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            let users = connections::Entity::find()
                .filter(connections::Column::IntegrationId.eq(id.as_uuid()))
                .count(tx.c())
                .await
                .map_err(db_err)?;
            if users > 0 {
                return Err(Error::Conflict {
                    code: sluice_domain::shared::error::code::IN_USE,
                    message: format!("{users} connection(s) use this integration; delete or move them first"),
                });
            }
            let res = integrations::Entity::delete_many()
                .filter(integrations::Column::Id.eq(id.as_uuid()))
                .filter(integrations::Column::OrgId.eq(org.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::not_found("integration"));
            }
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }
}

#[async_trait]
impl ConnectionRepository for Store {
    async fn create(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            connections::Entity::insert(self.connection_model(c)?)
                .exec_without_returning(tx.c())
                .await
                .map_err(db_err)?;
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn get(&self, org: OrgId, id: ConnectionId) -> Result<Option<Connection>> {
        connections::Entity::find_by_id(id.as_uuid())
            .filter(connections::Column::OrgId.eq(org.as_uuid()))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(|m| self.connection_from(m))
            .transpose()
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Connection>> {
        connections::Entity::find()
            .filter(connections::Column::OrgId.eq(org.as_uuid()))
            .filter(connections::Column::Name.eq(name))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(|m| self.connection_from(m))
            .transpose()
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Connection>> {
        let mut q = connections::Entity::find().filter(connections::Column::OrgId.eq(org.as_uuid()));
        if let Some(after) = page.after {
            q = q.filter(connections::Column::Id.lt(after));
        }
        let rows =
            q.order_by_desc(connections::Column::Id).limit(page.limit + 1).all(&self.db).await.map_err(db_err)?;
        let items = rows.into_iter().map(|m| self.connection_from(m)).collect::<Result<Vec<_>>>()?;
        Ok(Page::from_overfetch(items, page.limit, |c| c.id.as_uuid()))
    }

    async fn update(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            let mut m = self.connection_model(c)?;
            m.id = sea_orm::ActiveValue::Unchanged(c.id.as_uuid());
            m.org_id = sea_orm::ActiveValue::NotSet;
            m.created_at = sea_orm::ActiveValue::NotSet;
            connections::Entity::update(m).exec(tx.c()).await.map_err(db_err)?;
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn delete(&self, org: OrgId, id: ConnectionId, audit: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            let users = flows::Entity::find()
                .filter(
                    sea_orm::Condition::any()
                        .add(flows::Column::SourceConnectionId.eq(id.as_uuid()))
                        .add(flows::Column::DestinationConnectionId.eq(id.as_uuid())),
                )
                .count(tx.c())
                .await
                .map_err(db_err)?;
            if users > 0 {
                return Err(Error::Conflict {
                    code: sluice_domain::shared::error::code::IN_USE,
                    message: format!("{users} flow(s) use this connection; delete or change them first"),
                });
            }
            let res = connections::Entity::delete_many()
                .filter(connections::Column::Id.eq(id.as_uuid()))
                .filter(connections::Column::OrgId.eq(org.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::not_found("connection"));
            }
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn record_test(
        &self,
        org: OrgId,
        id: ConnectionId,
        status: ConnectionStatus,
        tested_at: OffsetDateTime,
        error: Option<String>,
    ) -> Result<()> {
        let tx = self.write().await?;
        let r = connections::Entity::update_many()
            .col_expr(connections::Column::Status, Expr::value(status.as_str()))
            .col_expr(connections::Column::LastTestedAt, Expr::value(Some(tested_at)))
            .col_expr(connections::Column::LastError, Expr::value(error))
            .filter(connections::Column::Id.eq(id.as_uuid()))
            .filter(connections::Column::OrgId.eq(org.as_uuid()))
            .exec(tx.c())
            .await
            .map(|_| ())
            .map_err(db_err);
        tx.finish(r).await
    }
}

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
impl CatalogRepository for Store {
    async fn upsert_discovered(
        &self,
        org: OrgId,
        name: &str,
        connection: ConnectionId,
        schema: &EntitySchema,
        now: OffsetDateTime,
    ) -> Result<()> {
        let fields = asset_fields(schema);
        let tx = self.write().await?;
        let r = async {
            let existing = data_assets::Entity::find()
                .filter(data_assets::Column::OrgId.eq(org.as_uuid()))
                .filter(data_assets::Column::Name.eq(name))
                .one(tx.c())
                .await
                .map_err(db_err)?;
            let (asset_id, version) = match existing {
                Some(a) if a.fields == fields => return Ok(()),
                Some(a) => {
                    let version = a.version + 1;
                    data_assets::Entity::update_many()
                        .col_expr(data_assets::Column::Fields, Expr::value(fields.clone()))
                        .col_expr(data_assets::Column::Version, Expr::value(version))
                        .col_expr(data_assets::Column::UpdatedAt, Expr::value(now))
                        .filter(data_assets::Column::Id.eq(a.id))
                        .exec(tx.c())
                        .await
                        .map_err(db_err)?;
                    (a.id, version)
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
                    (id, 1)
                }
            };
            data_asset_versions::Entity::insert(data_asset_versions::ActiveModel {
                id: Set(Uuid::now_v7()),
                asset_id: Set(asset_id),
                version: Set(version),
                fields: Set(fields.clone()),
                change: Set(if version == 1 { "compatible".into() } else { "discovered".into() }),
                created_at: Set(now),
                created_by: Set(Some("discovery".into())),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
            Ok(())
        }
        .await;
        tx.finish(r).await
    }

    async fn create_asset(&self, a: &DataAsset, created_by: Option<String>, audit: &AuditEntry) -> Result<()> {
        let fields = fields_to_json(&a.fields);
        let tx = self.write().await?;
        let r = async {
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
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn find_discovered(&self, org: OrgId, connection: ConnectionId, entity: &str) -> Result<Option<DataAsset>> {
        data_assets::Entity::find()
            .filter(data_assets::Column::OrgId.eq(org.as_uuid()))
            .filter(data_assets::Column::ConnectionId.eq(connection.as_uuid()))
            .filter(data_assets::Column::Entity.eq(entity))
            .filter(data_assets::Column::Kind.eq(AssetKind::Discovered.as_str()))
            .order_by_desc(data_assets::Column::UpdatedAt)
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(asset_from)
            .transpose()
    }

    async fn get_asset(&self, org: OrgId, id: AssetId) -> Result<Option<DataAsset>> {
        data_assets::Entity::find_by_id(id.as_uuid())
            .filter(data_assets::Column::OrgId.eq(org.as_uuid()))
            .one(&self.db)
            .await
            .map_err(db_err)?
            .map(asset_from)
            .transpose()
    }

    async fn list_assets(&self, org: OrgId, page: PageRequest) -> Result<Page<DataAsset>> {
        let mut q = data_assets::Entity::find().filter(data_assets::Column::OrgId.eq(org.as_uuid()));
        if let Some(after) = page.after {
            q = q.filter(data_assets::Column::Id.lt(after));
        }
        let rows =
            q.order_by_desc(data_assets::Column::Id).limit(page.limit + 1).all(&self.db).await.map_err(db_err)?;
        let items = rows.into_iter().map(asset_from).collect::<Result<Vec<_>>>()?;
        Ok(Page::from_overfetch(items, page.limit, |a| a.id.as_uuid()))
    }

    async fn update_asset(
        &self,
        a: &DataAsset,
        new_version: Option<(Change, Option<String>)>,
        audit: &AuditEntry,
    ) -> Result<()> {
        let fields = fields_to_json(&a.fields);
        let tx = self.write().await?;
        let r = async {
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
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn delete_asset(&self, org: OrgId, id: AssetId, audit: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            let res = data_assets::Entity::delete_many()
                .filter(data_assets::Column::Id.eq(id.as_uuid()))
                .filter(data_assets::Column::OrgId.eq(org.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::NotFound { resource: "data asset" });
            }
            // Explicit, so SQLite needs no foreign-key pragma for the cascade.
            data_asset_versions::Entity::delete_many()
                .filter(data_asset_versions::Column::AssetId.eq(id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            insert_audit(tx.c(), audit).await
        }
        .await;
        tx.finish(r).await
    }

    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<bool> {
        // Group commit: see meter.rs.
        self.meter.consume(self, org, month, limit).await
    }

    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64> {
        crate::meter::used(&self.db, org, month).await
    }

    async fn asset_versions(&self, org: OrgId, id: AssetId) -> Result<Vec<AssetVersion>> {
        if self.get_asset(org, id).await?.is_none() {
            return Err(Error::NotFound { resource: "data asset" });
        }
        data_asset_versions::Entity::find()
            .filter(data_asset_versions::Column::AssetId.eq(id.as_uuid()))
            .order_by_asc(data_asset_versions::Column::Version)
            .all(&self.db)
            .await
            .map_err(db_err)?
            .into_iter()
            .map(|m| {
                Ok(AssetVersion {
                    version: m.version,
                    fields: stored_fields(&m.fields)?,
                    // Discovery's own entries say "discovered"; they are read
                    // by the drift rules like any other change.
                    change: Change::parse(&m.change).unwrap_or(Change::Compatible),
                    created_at: m.created_at,
                    created_by: m.created_by,
                })
            })
            .collect()
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

#[async_trait]
impl sluice_domain::connect::oauth::OAuthStateStore for Store {
    async fn put(&self, s: &sluice_domain::connect::oauth::OAuthState) -> Result<()> {
        let tx = self.write().await?;
        let r = async {
            // Flows older than their expiry are forgotten as new ones start.
            oauth_states::Entity::delete_many()
                .filter(oauth_states::Column::ExpiresAt.lt(OffsetDateTime::now_utc()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            oauth_states::Entity::insert(oauth_states::ActiveModel {
                id: Set(s.id.clone()),
                org_id: Set(s.org_id.as_uuid()),
                provider: Set(s.provider.clone()),
                integration_name: Set(s.integration_name.clone()),
                verifier: Set(self.cipher.encrypt(s.verifier.as_bytes(), &format!("oauth_state:{}", s.id))?),
                actor: Set(serde_json::to_value(&s.actor).map_err(|e| Error::Internal(e.into()))?),
                expires_at: Set(s.expires_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
            Ok(())
        }
        .await;
        tx.finish(r).await
    }

    async fn take(&self, id: &str) -> Result<Option<sluice_domain::connect::oauth::OAuthState>> {
        let tx = self.write().await?;
        let r = async {
            let Some(m) = oauth_states::Entity::find_by_id(id.to_string()).one(tx.c()).await.map_err(db_err)? else {
                return Ok(None);
            };
            // Deleting first makes the state single-use even under a race:
            // only the transaction that deletes the row goes on.
            let res = oauth_states::Entity::delete_by_id(id.to_string()).exec(tx.c()).await.map_err(db_err)?;
            if res.rows_affected != 1 {
                return Ok(None);
            }
            let verifier = String::from_utf8(self.cipher.decrypt(&m.verifier, &format!("oauth_state:{}", m.id))?)
                .map_err(|e| Error::Internal(e.into()))?;
            Ok(Some(sluice_domain::connect::oauth::OAuthState {
                id: m.id,
                org_id: m.org_id.into(),
                provider: m.provider,
                integration_name: m.integration_name,
                verifier,
                actor: serde_json::from_value(m.actor).map_err(|e| Error::Internal(e.into()))?,
                expires_at: m.expires_at,
            }))
        }
        .await;
        tx.finish(r).await
    }
}
