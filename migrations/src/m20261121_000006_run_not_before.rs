//! Runs waiting out a retry backoff: not claimed before `not_before`.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Runs {
    Table,
    NotBefore,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Runs::Table)
                .add_column(ColumnDef::new(Runs::NotBefore).timestamp_with_time_zone().null())
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(Table::alter().table(Runs::Table).drop_column(Runs::NotBefore).to_owned()).await
    }
}
