//! The service's own instance id, written once at first start: a connection
//! that can read it points at this metadata store and is refused (see
//! `docs/security.md`).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum SluiceInstance {
    Table,
    Id,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(SluiceInstance::Table)
                .col(ColumnDef::new(SluiceInstance::Id).string_len(64).not_null().primary_key())
                .col(ColumnDef::new(SluiceInstance::CreatedAt).timestamp_with_time_zone().not_null())
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(SluiceInstance::Table).to_owned()).await
    }
}
