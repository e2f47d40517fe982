//! Integrations, connections, and the data catalog's assets and versions.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Integrations {
    Table,
    Id,
    OrgId,
    Name,
    Type,
    Credentials,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Connections {
    Table,
    Id,
    OrgId,
    Name,
    IntegrationId,
    Type,
    Capability,
    Config,
    Secrets,
    Status,
    LastTestedAt,
    LastError,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum DataAssets {
    Table,
    Id,
    OrgId,
    Name,
    Kind,
    Version,
    Fields,
    Description,
    ConnectionId,
    Entity,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum DataAssetVersions {
    Table,
    Id,
    AssetId,
    Version,
    Fields,
    Change,
    CreatedAt,
    CreatedBy,
}

fn ts<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).timestamp_with_time_zone().not_null().to_owned()
}

fn org_fk<T: IntoIden + 'static>(from: T) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from_col(from)
        .to(Organizations::Table, Organizations::Id)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Integrations::Table)
                .col(ColumnDef::new(Integrations::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(Integrations::OrgId).uuid().not_null())
                .col(ColumnDef::new(Integrations::Name).text().not_null())
                .col(ColumnDef::new(Integrations::Type).text().not_null())
                .col(ColumnDef::new(Integrations::Credentials).text().not_null())
                .col(ts(Integrations::CreatedAt))
                .col(ts(Integrations::UpdatedAt))
                .foreign_key(&mut org_fk(Integrations::OrgId))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_integrations_org_name")
                .table(Integrations::Table)
                .col(Integrations::OrgId)
                .col(Integrations::Name)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Connections::Table)
                .col(ColumnDef::new(Connections::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(Connections::OrgId).uuid().not_null())
                .col(ColumnDef::new(Connections::Name).text().not_null())
                .col(ColumnDef::new(Connections::IntegrationId).uuid().null())
                .col(ColumnDef::new(Connections::Type).text().not_null())
                .col(ColumnDef::new(Connections::Capability).text().not_null())
                .col(ColumnDef::new(Connections::Config).json_binary().not_null())
                .col(ColumnDef::new(Connections::Secrets).text().not_null())
                .col(ColumnDef::new(Connections::Status).text().not_null())
                .col(ColumnDef::new(Connections::LastTestedAt).timestamp_with_time_zone().null())
                .col(ColumnDef::new(Connections::LastError).text().null())
                .col(ts(Connections::CreatedAt))
                .col(ts(Connections::UpdatedAt))
                .foreign_key(&mut org_fk(Connections::OrgId))
                .foreign_key(
                    ForeignKey::create()
                        .from_col(Connections::IntegrationId)
                        .to(Integrations::Table, Integrations::Id)
                        .on_delete(ForeignKeyAction::Restrict),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_connections_org_name")
                .table(Connections::Table)
                .col(Connections::OrgId)
                .col(Connections::Name)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(DataAssets::Table)
                .col(ColumnDef::new(DataAssets::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(DataAssets::OrgId).uuid().not_null())
                .col(ColumnDef::new(DataAssets::Name).text().not_null())
                .col(ColumnDef::new(DataAssets::Kind).text().not_null())
                .col(ColumnDef::new(DataAssets::Version).integer().not_null())
                .col(ColumnDef::new(DataAssets::Fields).json_binary().not_null())
                .col(ColumnDef::new(DataAssets::Description).text().null())
                .col(ColumnDef::new(DataAssets::ConnectionId).uuid().null())
                .col(ColumnDef::new(DataAssets::Entity).text().null())
                .col(ts(DataAssets::CreatedAt))
                .col(ts(DataAssets::UpdatedAt))
                .foreign_key(&mut org_fk(DataAssets::OrgId))
                .foreign_key(
                    ForeignKey::create()
                        .from_col(DataAssets::ConnectionId)
                        .to(Connections::Table, Connections::Id)
                        .on_delete(ForeignKeyAction::SetNull),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_data_assets_org_name")
                .table(DataAssets::Table)
                .col(DataAssets::OrgId)
                .col(DataAssets::Name)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(DataAssetVersions::Table)
                .col(ColumnDef::new(DataAssetVersions::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(DataAssetVersions::AssetId).uuid().not_null())
                .col(ColumnDef::new(DataAssetVersions::Version).integer().not_null())
                .col(ColumnDef::new(DataAssetVersions::Fields).json_binary().not_null())
                .col(ColumnDef::new(DataAssetVersions::Change).text().not_null())
                .col(ts(DataAssetVersions::CreatedAt))
                .col(ColumnDef::new(DataAssetVersions::CreatedBy).text().null())
                .foreign_key(
                    ForeignKey::create()
                        .from_col(DataAssetVersions::AssetId)
                        .to(DataAssets::Table, DataAssets::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_data_asset_versions")
                .table(DataAssetVersions::Table)
                .col(DataAssetVersions::AssetId)
                .col(DataAssetVersions::Version)
                .unique()
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            DataAssetVersions::Table.into_iden(),
            DataAssets::Table.into_iden(),
            Connections::Table.into_iden(),
            Integrations::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(t).to_owned()).await?;
        }
        Ok(())
    }
}
