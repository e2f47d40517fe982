//! Change streams (a replication slot and its publication) that a flow
//! left on its source when the source could not be reached as the flow
//! was deleted or changed: kept until a retry drops them.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum StreamDrops {
    Table,
    Id,
    OrgId,
    ConnectionId,
    Stream,
    FlowId,
    FlowName,
    Error,
    Attempts,
    CreatedAt,
    TriedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        use StreamDrops as D;
        m.create_table(
            Table::create()
                .table(D::Table)
                .col(ColumnDef::new(D::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(D::OrgId).uuid().not_null())
                .col(ColumnDef::new(D::ConnectionId).uuid().not_null())
                .col(ColumnDef::new(D::Stream).string_len(64).not_null())
                .col(ColumnDef::new(D::FlowId).uuid().not_null())
                .col(ColumnDef::new(D::FlowName).string_len(255).not_null())
                .col(ColumnDef::new(D::Error).text().not_null())
                .col(ColumnDef::new(D::Attempts).integer().not_null())
                .col(ColumnDef::new(D::CreatedAt).timestamp_with_time_zone().not_null())
                .col(ColumnDef::new(D::TriedAt).timestamp_with_time_zone().not_null())
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("stream_drops_connection_stream")
                .table(D::Table)
                .col(D::ConnectionId)
                .col(D::Stream)
                .unique()
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(StreamDrops::Table).to_owned()).await
    }
}
