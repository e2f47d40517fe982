//! OAuth flows in progress: single-use, short-lived.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum OauthStates {
    Table,
    Id,
    OrgId,
    Provider,
    IntegrationName,
    Verifier,
    Actor,
    ExpiresAt,
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
                .table(OauthStates::Table)
                .col(ColumnDef::new(OauthStates::Id).text().not_null().primary_key())
                .col(ColumnDef::new(OauthStates::OrgId).uuid().not_null())
                .col(ColumnDef::new(OauthStates::Provider).text().not_null())
                .col(ColumnDef::new(OauthStates::IntegrationName).text().not_null())
                .col(ColumnDef::new(OauthStates::Verifier).text().not_null())
                .col(ColumnDef::new(OauthStates::Actor).json_binary().not_null())
                .col(ColumnDef::new(OauthStates::ExpiresAt).timestamp_with_time_zone().not_null())
                .foreign_key(
                    ForeignKey::create()
                        .from_col(OauthStates::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(OauthStates::Table).to_owned()).await
    }
}
