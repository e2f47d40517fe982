//! Gateway validations counted per organization and calendar month (UTC),
//! for the monthly quota.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ValidationUsage {
    Table,
    OrgId,
    Month,
    Count,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(ValidationUsage::Table)
                .col(ColumnDef::new(ValidationUsage::OrgId).uuid().not_null())
                .col(ColumnDef::new(ValidationUsage::Month).string_len(7).not_null())
                .col(ColumnDef::new(ValidationUsage::Count).big_integer().not_null().default(0))
                .primary_key(Index::create().col(ValidationUsage::OrgId).col(ValidationUsage::Month))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(ValidationUsage::Table).to_owned()).await
    }
}
