//! A verification's repair: the run that syncs its differing keys again.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Verifications {
    Table,
    RepairRunId,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Verifications::Table)
                .add_column(ColumnDef::new(Verifications::RepairRunId).uuid().null())
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("verifications_repair_run")
                .table(Verifications::Table)
                .col(Verifications::RepairRunId)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(Index::drop().name("verifications_repair_run").table(Verifications::Table).to_owned()).await?;
        m.alter_table(Table::alter().table(Verifications::Table).drop_column(Verifications::RepairRunId).to_owned())
            .await
    }
}
