//! Billing: an organization's subscription (status, period end, payment
//! provider customer) beside its plan, and the provider's events already
//! processed, by id, so each is processed once.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    BillingStatus,
    CurrentPeriodEnd,
    CustomerId,
}

#[derive(DeriveIden)]
enum BillingEvents {
    Table,
    Id,
    EventType,
    OrgId,
    ReceivedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite alters one at a time.
        let add = |c: &mut ColumnDef| Table::alter().table(Organizations::Table).add_column(c).to_owned();
        m.alter_table(add(ColumnDef::new(Organizations::BillingStatus).string_len(32).not_null().default("active")))
            .await?;
        m.alter_table(add(ColumnDef::new(Organizations::CurrentPeriodEnd).timestamp_with_time_zone().null())).await?;
        m.alter_table(add(ColumnDef::new(Organizations::CustomerId).string_len(255).null())).await?;
        m.create_index(
            Index::create()
                .name("organizations_customer_id")
                .table(Organizations::Table)
                .col(Organizations::CustomerId)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(BillingEvents::Table)
                .col(ColumnDef::new(BillingEvents::Id).string_len(255).not_null().primary_key())
                .col(ColumnDef::new(BillingEvents::EventType).string_len(255).not_null())
                .col(ColumnDef::new(BillingEvents::OrgId).uuid().null())
                .col(ColumnDef::new(BillingEvents::ReceivedAt).timestamp_with_time_zone().not_null())
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(BillingEvents::Table).to_owned()).await?;
        m.drop_index(Index::drop().name("organizations_customer_id").table(Organizations::Table).to_owned()).await?;
        for c in [Organizations::CustomerId, Organizations::CurrentPeriodEnd, Organizations::BillingStatus] {
            m.alter_table(Table::alter().table(Organizations::Table).drop_column(c).to_owned()).await?;
        }
        Ok(())
    }
}
