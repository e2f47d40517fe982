//! Change streams left on a source, on sea-orm.

use crate::entities::*;
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use sluice_domain::Result;
use sluice_domain::shared::ids::{ConnectionId, OrgId};
use sluice_domain::sync::flow::StreamDrop;
use sluice_domain::sync::ports::StreamDropRepository;
use time::OffsetDateTime;
use uuid::Uuid;

fn drop_from(m: stream_drops::Model) -> StreamDrop {
    StreamDrop {
        id: m.id,
        org_id: m.org_id.into(),
        connection_id: m.connection_id.into(),
        stream: m.stream,
        flow_id: m.flow_id.into(),
        flow_name: m.flow_name,
        error: m.error,
        attempts: u32::try_from(m.attempts).unwrap_or(0),
        created_at: m.created_at,
        tried_at: m.tried_at,
    }
}

#[async_trait]
impl StreamDropRepository for Store {
    async fn record_drop(&self, d: &StreamDrop) -> Result<()> {
        written!(self, |tx| {
            stream_drops::Entity::delete_many()
                .filter(stream_drops::Column::ConnectionId.eq(d.connection_id.as_uuid()))
                .filter(stream_drops::Column::Stream.eq(d.stream.clone()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            stream_drops::Entity::insert(stream_drops::ActiveModel {
                id: Set(d.id),
                org_id: Set(d.org_id.as_uuid()),
                connection_id: Set(d.connection_id.as_uuid()),
                stream: Set(d.stream.clone()),
                flow_id: Set(d.flow_id.as_uuid()),
                flow_name: Set(d.flow_name.clone()),
                error: Set(d.error.clone()),
                attempts: Set(i32::try_from(d.attempts).unwrap_or(i32::MAX)),
                created_at: Set(d.created_at),
                tried_at: Set(d.tried_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map(|_| ())
            .map_err(db_err)
        })
    }

    async fn drops_of(&self, org: OrgId, connection: ConnectionId) -> Result<Vec<StreamDrop>> {
        let q = stream_drops::Entity::find()
            .filter(stream_drops::Column::OrgId.eq(org.as_uuid()))
            .filter(stream_drops::Column::ConnectionId.eq(connection.as_uuid()))
            .order_by_asc(stream_drops::Column::CreatedAt);
        crate::all(&self.db, q, |m| Ok(drop_from(m))).await
    }

    async fn due_drops(&self, before: OffsetDateTime, limit: u64) -> Result<Vec<StreamDrop>> {
        let q = stream_drops::Entity::find()
            .filter(stream_drops::Column::TriedAt.lt(before))
            .order_by_asc(stream_drops::Column::TriedAt)
            .limit(limit);
        crate::all(&self.db, q, |m| Ok(drop_from(m))).await
    }

    async fn forget_drop(&self, id: Uuid) -> Result<()> {
        stream_drops::Entity::delete_by_id(id).exec(&self.db).await.map(|_| ()).map_err(db_err)
    }
}
