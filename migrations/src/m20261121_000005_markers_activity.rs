//! Run markers (the unique keys that make scheduling and orchestration
//! happen once) and the activity feed.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum RunMarkers {
    Table,
    Key,
    RunId,
    CreatedAt,
}

#[derive(DeriveIden)]
enum ActivityEvents {
    Table,
    Id,
    OrgId,
    Type,
    Severity,
    Message,
    Data,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(RunMarkers::Table)
                .col(ColumnDef::new(RunMarkers::Key).text().not_null().primary_key())
                .col(ColumnDef::new(RunMarkers::RunId).uuid().not_null())
                .col(ColumnDef::new(RunMarkers::CreatedAt).timestamp_with_time_zone().not_null())
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ActivityEvents::Table)
                .col(ColumnDef::new(ActivityEvents::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(ActivityEvents::OrgId).uuid().not_null())
                .col(ColumnDef::new(ActivityEvents::Type).text().not_null())
                .col(ColumnDef::new(ActivityEvents::Severity).text().not_null())
                .col(ColumnDef::new(ActivityEvents::Message).text().not_null())
                .col(ColumnDef::new(ActivityEvents::Data).json_binary().not_null())
                .col(ColumnDef::new(ActivityEvents::CreatedAt).timestamp_with_time_zone().not_null())
                .foreign_key(
                    ForeignKey::create()
                        .from_col(ActivityEvents::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ix_activity_org")
                .table(ActivityEvents::Table)
                .col(ActivityEvents::OrgId)
                .col(ActivityEvents::Id)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(ActivityEvents::Table).to_owned()).await?;
        m.drop_table(Table::drop().table(RunMarkers::Table).to_owned()).await
    }
}
