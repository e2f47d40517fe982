//! The connect context's store: integrations, connections and OAuth states.
//! Credentials are sealed with the store's [`Cipher`](crate::crypto::Cipher)
//! on the way in and opened on the way out; the domain sees plaintext only.

use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, EntityTrait, PaginatorTrait, QueryFilter, Select};
use serde_json::Value;
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::connect::connection::{Connection, ConnectionStatus};
use sluice_domain::connect::connector::Capability;
use sluice_domain::connect::integration::{Credentials, Integration};
use sluice_domain::connect::ports::{ConnectionRepository, IntegrationRepository};
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::{ConnectionId, IntegrationId, OrgId};
use sluice_domain::shared::page::{Page, PageRequest};
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
        written!(self, |tx| {
            let sealed = |rows: Vec<(Uuid, String)>, aad: fn(Uuid) -> String| {
                rows.into_iter().map(|(id, v)| (id, v, aad(id))).collect::<Vec<_>>()
            };
            let integrations = integrations::Entity::find().all(tx.c()).await.map_err(db_err)?;
            let rows = sealed(integrations.into_iter().map(|m| (m.id, m.credentials)).collect(), integration_aad);
            let n =
                reseal::<integrations::Entity>(tx.c(), integrations::Column::Credentials, rows, &self.cipher, &next)
                    .await?;
            let connections = connections::Entity::find().all(tx.c()).await.map_err(db_err)?;
            let rows = sealed(connections.into_iter().map(|m| (m.id, m.secrets)).collect(), connection_aad);
            let m =
                reseal::<connections::Entity>(tx.c(), connections::Column::Secrets, rows, &self.cipher, &next).await?;
            Ok(n + m)
        })
    }
}

/// Re-encrypts the sealed values `rows` (row id, value, its associated
/// data) of `column` from `old` to `next`; answers how many.
async fn reseal<E: crate::OrgTable>(
    c: &impl sea_orm::ConnectionTrait,
    column: E::Column,
    rows: Vec<(Uuid, String, String)>,
    old: &crate::crypto::Cipher,
    next: &crate::crypto::Cipher,
) -> Result<u64> {
    for (id, value, aad) in &rows {
        let plain = old.decrypt(value, aad)?;
        E::update_many()
            .col_expr(column, Expr::value(next.encrypt(&plain, aad)?))
            .filter(E::ID.eq(*id))
            .exec(c)
            .await
            .map_err(db_err)?;
    }
    Ok(rows.len() as u64)
}

#[async_trait]
impl IntegrationRepository for Store {
    async fn create(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            crate::insert(tx.c(), self.integration_model(i)?).await?;
        })
    }

    async fn get(&self, org: OrgId, id: IntegrationId) -> Result<Option<Integration>> {
        crate::owned::<integrations::Entity, _>(&self.db, id.as_uuid(), org.as_uuid(), |m| self.integration_from(m))
            .await
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Integration>> {
        crate::named::<integrations::Entity, _>(&self.db, org.as_uuid(), name, |m| self.integration_from(m)).await
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Integration>> {
        let q = integrations::Entity::find().filter(integrations::Column::OrgId.eq(org.as_uuid()));
        crate::keyset_page(
            &self.db,
            q,
            integrations::Column::Id,
            page,
            |m| self.integration_from(m),
            |i| i.id.as_uuid(),
        )
        .await
    }

    async fn update(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
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
        })
    }

    async fn delete(&self, org: OrgId, id: IntegrationId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let users = connections::Entity::find().filter(connections::Column::IntegrationId.eq(id.as_uuid()));
            refuse_if_used(tx.c(), users, "connection(s) use this integration; delete or move them first").await?;
            crate::delete_owned::<integrations::Entity>(tx.c(), id.as_uuid(), org.as_uuid(), "integration").await?;
        })
    }
}

#[async_trait]
impl ConnectionRepository for Store {
    async fn create(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            crate::insert(tx.c(), self.connection_model(c)?).await?;
        })
    }

    async fn get(&self, org: OrgId, id: ConnectionId) -> Result<Option<Connection>> {
        crate::owned::<connections::Entity, _>(&self.db, id.as_uuid(), org.as_uuid(), |m| self.connection_from(m)).await
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Connection>> {
        crate::named::<connections::Entity, _>(&self.db, org.as_uuid(), name, |m| self.connection_from(m)).await
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Connection>> {
        let q = connections::Entity::find().filter(connections::Column::OrgId.eq(org.as_uuid()));
        crate::keyset_page(&self.db, q, connections::Column::Id, page, |m| self.connection_from(m), |c| c.id.as_uuid())
            .await
    }

    async fn update(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let mut m = self.connection_model(c)?;
            m.id = sea_orm::ActiveValue::Unchanged(c.id.as_uuid());
            m.org_id = sea_orm::ActiveValue::NotSet;
            m.created_at = sea_orm::ActiveValue::NotSet;
            connections::Entity::update(m).exec(tx.c()).await.map_err(db_err)?;
        })
    }

    async fn delete(&self, org: OrgId, id: ConnectionId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let users = flows::Entity::find().filter(
                sea_orm::Condition::any()
                    .add(flows::Column::SourceConnectionId.eq(id.as_uuid()))
                    .add(flows::Column::DestinationConnectionId.eq(id.as_uuid())),
            );
            refuse_if_used(tx.c(), users, "flow(s) use this connection; delete or change them first").await?;
            crate::delete_owned::<connections::Entity>(tx.c(), id.as_uuid(), org.as_uuid(), "connection").await?;
        })
    }

    async fn record_test(
        &self,
        org: OrgId,
        id: ConnectionId,
        status: ConnectionStatus,
        tested_at: OffsetDateTime,
        error: Option<String>,
    ) -> Result<()> {
        written!(self, |tx| {
            connections::Entity::update_many()
                .col_expr(connections::Column::Status, Expr::value(status.as_str()))
                .col_expr(connections::Column::LastTestedAt, Expr::value(Some(tested_at)))
                .col_expr(connections::Column::LastError, Expr::value(error))
                .filter(connections::Column::Id.eq(id.as_uuid()))
                .filter(connections::Column::OrgId.eq(org.as_uuid()))
                .exec(tx.c())
                .await
                .map(|_| ())
                .map_err(db_err)
        })
    }

    async fn record_working(&self, org: OrgId, ids: &[ConnectionId], at: OffsetDateTime) -> Result<()> {
        let healthy = ConnectionStatus::Healthy.as_str();
        let ids: Vec<uuid::Uuid> = ids.iter().map(|i| i.as_uuid()).collect();
        written!(self, |tx| {
            connections::Entity::update_many()
                .col_expr(connections::Column::Status, Expr::value(healthy))
                .col_expr(connections::Column::LastTestedAt, Expr::value(Some(at)))
                .col_expr(connections::Column::LastError, Expr::value(None::<String>))
                .filter(connections::Column::Id.is_in(ids.clone()))
                .filter(connections::Column::OrgId.eq(org.as_uuid()))
                .filter(connections::Column::Status.ne(healthy))
                .exec(tx.c())
                .await
                .map(|_| ())
                .map_err(db_err)
        })
    }
}

#[async_trait]
impl sluice_domain::connect::ports::OAuthStateStore for Store {
    async fn put(&self, s: &sluice_domain::connect::oauth::OAuthState) -> Result<()> {
        written!(self, |tx| {
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
        })
    }

    async fn take(&self, id: &str) -> Result<Option<sluice_domain::connect::oauth::OAuthState>> {
        written!(self, |tx| {
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
        })
    }
}

/// Refuses a delete with 409 `in_use` while `users` finds rows that still
/// point at what is deleted; `what` says what they are and what to do.
async fn refuse_if_used<E: EntityTrait>(c: &impl ConnectionTrait, users: Select<E>, what: &str) -> Result<()>
where
    E::Model: Sync,
{
    let count = users.count(c).await.map_err(db_err)?;
    if count > 0 {
        return Err(Error::Conflict {
            code: sluice_domain::shared::error::Code::InUse,
            message: format!("{count} {what}"),
        });
    }
    Ok(())
}
