//! Users, organizations, memberships, invitations, API keys, the audit log
//! and idempotency keys.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
    Issuer,
    Subject,
    Email,
    Name,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
    Name,
    Slug,
    Plan,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Memberships {
    Table,
    Id,
    OrgId,
    UserId,
    Role,
    JoinedAt,
}

#[derive(DeriveIden)]
enum Invitations {
    Table,
    Id,
    OrgId,
    Email,
    Role,
    Status,
    TokenHash,
    ExpiresAt,
    CreatedAt,
    InvitedBy,
    AcceptedBy,
    AcceptedAt,
}

#[derive(DeriveIden)]
enum ApiKeys {
    Table,
    Id,
    OrgId,
    Name,
    Prefix,
    KeyHash,
    Roles,
    CreatedAt,
    LastUsedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum AuditLogs {
    Table,
    Id,
    OrgId,
    ActorType,
    ActorId,
    ActorName,
    Action,
    ResourceType,
    ResourceId,
    Details,
    CreatedAt,
}

#[derive(DeriveIden)]
enum IdempotencyKeys {
    Table,
    Scope,
    Key,
    Fingerprint,
    Status,
    Body,
    ContentType,
    Location,
    CreatedAt,
}

fn uuid_pk<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).uuid().not_null().primary_key().to_owned()
}

fn text<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).text().not_null().to_owned()
}

fn text_null<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).text().null().to_owned()
}

fn ts<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).timestamp_with_time_zone().not_null().to_owned()
}

fn ts_null<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).timestamp_with_time_zone().null().to_owned()
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
                .table(Users::Table)
                .col(uuid_pk(Users::Id))
                .col(text(Users::Issuer))
                .col(text(Users::Subject))
                .col(text_null(Users::Email))
                .col(text_null(Users::Name))
                .col(ts(Users::CreatedAt))
                .col(ts(Users::UpdatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_users_identity")
                .table(Users::Table)
                .col(Users::Issuer)
                .col(Users::Subject)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Organizations::Table)
                .col(uuid_pk(Organizations::Id))
                .col(text(Organizations::Name))
                .col(text(Organizations::Slug))
                .col(text(Organizations::Plan))
                .col(ts(Organizations::CreatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_organizations_slug")
                .table(Organizations::Table)
                .col(Organizations::Slug)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Memberships::Table)
                .col(uuid_pk(Memberships::Id))
                .col(ColumnDef::new(Memberships::OrgId).uuid().not_null())
                .col(ColumnDef::new(Memberships::UserId).uuid().not_null())
                .col(text(Memberships::Role))
                .col(ts(Memberships::JoinedAt))
                .foreign_key(&mut org_fk(Memberships::OrgId))
                .foreign_key(
                    ForeignKey::create()
                        .from_col(Memberships::UserId)
                        .to(Users::Table, Users::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_memberships_org_user")
                .table(Memberships::Table)
                .col(Memberships::OrgId)
                .col(Memberships::UserId)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create().name("ix_memberships_user").table(Memberships::Table).col(Memberships::UserId).to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Invitations::Table)
                .col(uuid_pk(Invitations::Id))
                .col(ColumnDef::new(Invitations::OrgId).uuid().not_null())
                .col(text(Invitations::Email))
                .col(text(Invitations::Role))
                .col(text(Invitations::Status))
                .col(text(Invitations::TokenHash))
                .col(ts(Invitations::ExpiresAt))
                .col(ts(Invitations::CreatedAt))
                .col(ColumnDef::new(Invitations::InvitedBy).uuid().null())
                .col(ColumnDef::new(Invitations::AcceptedBy).uuid().null())
                .col(ts_null(Invitations::AcceptedAt))
                .foreign_key(&mut org_fk(Invitations::OrgId))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_invitations_token_hash")
                .table(Invitations::Table)
                .col(Invitations::TokenHash)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ApiKeys::Table)
                .col(uuid_pk(ApiKeys::Id))
                .col(ColumnDef::new(ApiKeys::OrgId).uuid().not_null())
                .col(text(ApiKeys::Name))
                .col(text(ApiKeys::Prefix))
                .col(text(ApiKeys::KeyHash))
                .col(text(ApiKeys::Roles))
                .col(ts(ApiKeys::CreatedAt))
                .col(ts_null(ApiKeys::LastUsedAt))
                .col(ts_null(ApiKeys::RevokedAt))
                .foreign_key(&mut org_fk(ApiKeys::OrgId))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create().name("ux_api_keys_hash").table(ApiKeys::Table).col(ApiKeys::KeyHash).unique().to_owned(),
        )
        .await?;

        // No foreign key: the log outlives what it describes, the
        // organization included.
        m.create_table(
            Table::create()
                .table(AuditLogs::Table)
                .col(uuid_pk(AuditLogs::Id))
                .col(ColumnDef::new(AuditLogs::OrgId).uuid().null())
                .col(text(AuditLogs::ActorType))
                .col(text_null(AuditLogs::ActorId))
                .col(text_null(AuditLogs::ActorName))
                .col(text(AuditLogs::Action))
                .col(text(AuditLogs::ResourceType))
                .col(text_null(AuditLogs::ResourceId))
                .col(ColumnDef::new(AuditLogs::Details).json_binary().not_null())
                .col(ts(AuditLogs::CreatedAt))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ix_audit_logs_org_id")
                .table(AuditLogs::Table)
                .col(AuditLogs::OrgId)
                .col(AuditLogs::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(IdempotencyKeys::Table)
                .col(text(IdempotencyKeys::Scope))
                .col(text(IdempotencyKeys::Key))
                .col(text(IdempotencyKeys::Fingerprint))
                .col(ColumnDef::new(IdempotencyKeys::Status).integer().null())
                .col(ColumnDef::new(IdempotencyKeys::Body).blob().null())
                .col(text_null(IdempotencyKeys::ContentType))
                .col(text_null(IdempotencyKeys::Location))
                .col(ts(IdempotencyKeys::CreatedAt))
                .primary_key(Index::create().col(IdempotencyKeys::Scope).col(IdempotencyKeys::Key))
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            IdempotencyKeys::Table.into_iden(),
            AuditLogs::Table.into_iden(),
            ApiKeys::Table.into_iden(),
            Invitations::Table.into_iden(),
            Memberships::Table.into_iden(),
            Organizations::Table.into_iden(),
            Users::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(t).to_owned()).await?;
        }
        Ok(())
    }
}
