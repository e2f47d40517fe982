//! Gateway validations counted on several rows per organization and month
//! (`shard`), so that the commits counting them can overlap on PostgreSQL
//! (see `crates/store/src/meter.rs`). The counts so far move to shard 0.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ValidationCounts {
    Table,
    OrgId,
    Month,
    Shard,
    Count,
}

#[derive(DeriveIden)]
enum ValidationUsage {
    Table,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(ValidationCounts::Table)
                .col(ColumnDef::new(ValidationCounts::OrgId).uuid().not_null())
                .col(ColumnDef::new(ValidationCounts::Month).string_len(7).not_null())
                .col(ColumnDef::new(ValidationCounts::Shard).small_integer().not_null())
                .col(ColumnDef::new(ValidationCounts::Count).big_integer().not_null().default(0))
                .primary_key(
                    Index::create()
                        .col(ValidationCounts::OrgId)
                        .col(ValidationCounts::Month)
                        .col(ValidationCounts::Shard),
                )
                .to_owned(),
        )
        .await?;
        m.get_connection()
            .execute_unprepared(
                "INSERT INTO validation_counts (org_id, month, shard, count) \
                 SELECT org_id, month, 0, count FROM validation_usage",
            )
            .await?;
        m.drop_table(Table::drop().table(ValidationUsage::Table).to_owned()).await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection()
            .execute_unprepared(
                "CREATE TABLE validation_usage (org_id uuid NOT NULL, month varchar(7) NOT NULL, \
                 count bigint NOT NULL DEFAULT 0, PRIMARY KEY (org_id, month))",
            )
            .await?;
        m.get_connection()
            .execute_unprepared(
                "INSERT INTO validation_usage (org_id, month, count) \
                 SELECT org_id, month, SUM(count) FROM validation_counts GROUP BY org_id, month",
            )
            .await?;
        m.drop_table(Table::drop().table(ValidationCounts::Table).to_owned()).await
    }
}
