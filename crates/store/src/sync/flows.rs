//! Flows on sea-orm.

use super::corrupt;
use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::ids::{FlowId, OrgId};
use sluice_domain::shared::page::{Page, PageRequest};
use sluice_domain::sync::flow::*;
use sluice_domain::sync::ports::*;

pub(crate) fn flow_from(m: flows::Model) -> Result<Flow> {
    Ok(Flow {
        id: m.id.into(),
        org_id: m.org_id.into(),
        name: m.name,
        source_connection_id: m.source_connection_id.into(),
        destination_connection_id: m.destination_connection_id.into(),
        schedule: m.schedule,
        config: serde_json::from_value(m.config).map_err(|_| corrupt("flow config"))?,
        status: FlowStatus::parse(&m.status).ok_or_else(|| corrupt("flow status"))?,
        next_run_at: m.next_run_at,
        created_at: m.created_at,
        updated_at: m.updated_at,
    })
}

pub(crate) fn flow_model(f: &Flow) -> Result<flows::ActiveModel> {
    Ok(flows::ActiveModel {
        id: Set(f.id.as_uuid()),
        org_id: Set(f.org_id.as_uuid()),
        name: Set(f.name.clone()),
        source_connection_id: Set(f.source_connection_id.as_uuid()),
        destination_connection_id: Set(f.destination_connection_id.as_uuid()),
        schedule: Set(f.schedule.clone()),
        config: Set(serde_json::to_value(&f.config).map_err(|e| Error::Internal(e.into()))?),
        status: Set(f.status.as_str().to_string()),
        next_run_at: Set(f.next_run_at),
        created_at: Set(f.created_at),
        updated_at: Set(f.updated_at),
    })
}

#[async_trait]
impl FlowRepository for Store {
    async fn create(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            flows::Entity::insert(flow_model(f)?).exec_without_returning(tx.c()).await.map_err(db_err)?;
        })
    }

    async fn get(&self, org: OrgId, id: FlowId) -> Result<Option<Flow>> {
        crate::owned::<flows::Entity, _>(&self.db, id.as_uuid(), org.as_uuid(), flow_from).await
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Flow>> {
        crate::named::<flows::Entity, _>(&self.db, org.as_uuid(), name, flow_from).await
    }

    async fn list(&self, org: OrgId, status: Option<FlowStatus>, page: PageRequest) -> Result<Page<Flow>> {
        let mut q = flows::Entity::find().filter(flows::Column::OrgId.eq(org.as_uuid()));
        if let Some(s) = status {
            q = q.filter(flows::Column::Status.eq(s.as_str()));
        }
        crate::keyset_page(&self.db, q, flows::Column::Id, page, flow_from, |f| f.id.as_uuid()).await
    }

    async fn all(&self, org: OrgId) -> Result<Vec<Flow>> {
        crate::all(&self.db, flows::Entity::find().filter(flows::Column::OrgId.eq(org.as_uuid())), flow_from).await
    }

    async fn update(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let mut m = flow_model(f)?;
            m.id = sea_orm::ActiveValue::Unchanged(f.id.as_uuid());
            m.org_id = sea_orm::ActiveValue::NotSet;
            m.created_at = sea_orm::ActiveValue::NotSet;
            flows::Entity::update(m).exec(tx.c()).await.map_err(db_err)?;
        })
    }

    async fn delete(&self, org: OrgId, id: FlowId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            crate::delete_owned::<flows::Entity>(tx.c(), id.as_uuid(), org.as_uuid(), "flow").await?;
        })
    }
}
