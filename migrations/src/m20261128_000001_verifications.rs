//! Verifications of flows: queued, claimed by a worker for a lease, and
//! their per-entity findings.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Flows {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Verifications {
    Table,
    Id,
    OrgId,
    FlowId,
    Status,
    Requested,
    Repair,
    Entities,
    Error,
    QueuedAt,
    StartedAt,
    FinishedAt,
    ClaimedBy,
    ClaimedUntil,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        use Verifications as V;
        m.create_table(
            Table::create()
                .table(V::Table)
                .col(ColumnDef::new(V::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(V::OrgId).uuid().not_null())
                .col(ColumnDef::new(V::FlowId).uuid().not_null())
                .col(ColumnDef::new(V::Status).string_len(16).not_null())
                .col(ColumnDef::new(V::Requested).json_binary().not_null())
                .col(ColumnDef::new(V::Repair).boolean().not_null())
                .col(ColumnDef::new(V::Entities).json_binary().not_null())
                .col(ColumnDef::new(V::Error).text().null())
                .col(ColumnDef::new(V::QueuedAt).timestamp_with_time_zone().not_null())
                .col(ColumnDef::new(V::StartedAt).timestamp_with_time_zone().null())
                .col(ColumnDef::new(V::FinishedAt).timestamp_with_time_zone().null())
                .col(ColumnDef::new(V::ClaimedBy).string_len(255).null())
                .col(ColumnDef::new(V::ClaimedUntil).timestamp_with_time_zone().null())
                .foreign_key(
                    ForeignKey::create()
                        .from_col(V::FlowId)
                        .to(Flows::Table, Flows::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(Index::create().name("verifications_flow").table(V::Table).col(V::FlowId).col(V::Id).to_owned())
            .await?;
        m.create_index(Index::create().name("verifications_status").table(V::Table).col(V::Status).to_owned()).await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(Verifications::Table).to_owned()).await
    }
}
