//! Notification rules and the outbox of their deliveries.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum NotificationRules {
    Table,
    Id,
    OrgId,
    Name,
    Event,
    FlowId,
    ChannelType,
    Url,
    Secret,
    Enabled,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    OrgId,
    RuleId,
    EventId,
    EventType,
    MessageId,
    Body,
    Status,
    Attempts,
    ResponseCode,
    Error,
    NextAttemptAt,
    ClaimedBy,
    ClaimedUntil,
    CreatedAt,
    UpdatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        use NotificationRules as R;
        use WebhookDeliveries as D;
        m.create_table(
            Table::create()
                .table(R::Table)
                .col(ColumnDef::new(R::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(R::OrgId).uuid().not_null())
                .col(ColumnDef::new(R::Name).string_len(255).not_null())
                .col(ColumnDef::new(R::Event).string_len(100).not_null())
                .col(ColumnDef::new(R::FlowId).uuid().null())
                .col(ColumnDef::new(R::ChannelType).string_len(32).not_null())
                .col(ColumnDef::new(R::Url).text().not_null())
                .col(ColumnDef::new(R::Secret).text().null())
                .col(ColumnDef::new(R::Enabled).boolean().not_null())
                .col(ColumnDef::new(R::CreatedAt).timestamp_with_time_zone().not_null())
                .col(ColumnDef::new(R::UpdatedAt).timestamp_with_time_zone().not_null())
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create().name("notification_rules_org_event").table(R::Table).col(R::OrgId).col(R::Event).to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(D::Table)
                .col(ColumnDef::new(D::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(D::OrgId).uuid().not_null())
                .col(ColumnDef::new(D::RuleId).uuid().not_null())
                .col(ColumnDef::new(D::EventId).uuid().not_null())
                .col(ColumnDef::new(D::EventType).string_len(100).not_null())
                .col(ColumnDef::new(D::MessageId).string_len(64).not_null())
                .col(ColumnDef::new(D::Body).text().not_null())
                .col(ColumnDef::new(D::Status).string_len(16).not_null())
                .col(ColumnDef::new(D::Attempts).integer().not_null())
                .col(ColumnDef::new(D::ResponseCode).integer().null())
                .col(ColumnDef::new(D::Error).text().null())
                .col(ColumnDef::new(D::NextAttemptAt).timestamp_with_time_zone().null())
                .col(ColumnDef::new(D::ClaimedBy).string_len(255).null())
                .col(ColumnDef::new(D::ClaimedUntil).timestamp_with_time_zone().null())
                .col(ColumnDef::new(D::CreatedAt).timestamp_with_time_zone().not_null())
                .col(ColumnDef::new(D::UpdatedAt).timestamp_with_time_zone().not_null())
                .to_owned(),
        )
        .await?;
        // One delivery of an event per rule, however often it is recorded.
        m.create_index(
            Index::create()
                .name("webhook_deliveries_rule_event")
                .table(D::Table)
                .col(D::RuleId)
                .col(D::EventId)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("webhook_deliveries_due")
                .table(D::Table)
                .col(D::Status)
                .col(D::NextAttemptAt)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(WebhookDeliveries::Table).to_owned()).await?;
        m.drop_table(Table::drop().table(NotificationRules::Table).to_owned()).await
    }
}
