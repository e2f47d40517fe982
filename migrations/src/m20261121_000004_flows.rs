//! Flows, their runs with log lines, and per-entity cursors.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Connections {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Flows {
    Table,
    Id,
    OrgId,
    Name,
    SourceConnectionId,
    DestinationConnectionId,
    Schedule,
    Config,
    Status,
    NextRunAt,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum Runs {
    Table,
    Id,
    OrgId,
    FlowId,
    TraceId,
    Trigger,
    Status,
    QueuedAt,
    StartedAt,
    FinishedAt,
    Entities,
    Error,
    Attempt,
    ClaimedBy,
    HeartbeatAt,
}

#[derive(DeriveIden)]
enum RunLogs {
    Table,
    Id,
    RunId,
    Ts,
    Level,
    Entity,
    Message,
}

#[derive(DeriveIden)]
enum Cursors {
    Table,
    FlowId,
    Entity,
    CursorField,
    CursorValue,
    UpdatedAt,
}

fn ts<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).timestamp_with_time_zone().not_null().to_owned()
}

fn ts_null<T: IntoIden>(c: T) -> ColumnDef {
    ColumnDef::new(c).timestamp_with_time_zone().null().to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Flows::Table)
                .col(ColumnDef::new(Flows::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(Flows::OrgId).uuid().not_null())
                .col(ColumnDef::new(Flows::Name).text().not_null())
                .col(ColumnDef::new(Flows::SourceConnectionId).uuid().not_null())
                .col(ColumnDef::new(Flows::DestinationConnectionId).uuid().not_null())
                .col(ColumnDef::new(Flows::Schedule).text().null())
                .col(ColumnDef::new(Flows::Config).json_binary().not_null())
                .col(ColumnDef::new(Flows::Status).text().not_null())
                .col(ts_null(Flows::NextRunAt))
                .col(ts(Flows::CreatedAt))
                .col(ts(Flows::UpdatedAt))
                .foreign_key(
                    ForeignKey::create()
                        .from_col(Flows::OrgId)
                        .to(Organizations::Table, Organizations::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from_col(Flows::SourceConnectionId)
                        .to(Connections::Table, Connections::Id)
                        .on_delete(ForeignKeyAction::Restrict),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from_col(Flows::DestinationConnectionId)
                        .to(Connections::Table, Connections::Id)
                        .on_delete(ForeignKeyAction::Restrict),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ux_flows_org_name")
                .table(Flows::Table)
                .col(Flows::OrgId)
                .col(Flows::Name)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(Index::create().name("ix_flows_next_run").table(Flows::Table).col(Flows::NextRunAt).to_owned())
            .await?;

        m.create_table(
            Table::create()
                .table(Runs::Table)
                .col(ColumnDef::new(Runs::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(Runs::OrgId).uuid().not_null())
                .col(ColumnDef::new(Runs::FlowId).uuid().not_null())
                .col(ColumnDef::new(Runs::TraceId).uuid().not_null())
                .col(ColumnDef::new(Runs::Trigger).text().not_null())
                .col(ColumnDef::new(Runs::Status).text().not_null())
                .col(ts(Runs::QueuedAt))
                .col(ts_null(Runs::StartedAt))
                .col(ts_null(Runs::FinishedAt))
                .col(ColumnDef::new(Runs::Entities).json_binary().not_null())
                .col(ColumnDef::new(Runs::Error).text().null())
                .col(ColumnDef::new(Runs::Attempt).integer().not_null())
                .col(ColumnDef::new(Runs::ClaimedBy).text().null())
                .col(ts_null(Runs::HeartbeatAt))
                .foreign_key(
                    ForeignKey::create()
                        .from_col(Runs::FlowId)
                        .to(Flows::Table, Flows::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create().name("ix_runs_status").table(Runs::Table).col(Runs::Status).col(Runs::Id).to_owned(),
        )
        .await?;
        m.create_index(
            Index::create().name("ix_runs_flow").table(Runs::Table).col(Runs::FlowId).col(Runs::Id).to_owned(),
        )
        .await?;
        m.create_index(Index::create().name("ix_runs_trace").table(Runs::Table).col(Runs::TraceId).to_owned()).await?;
        // At most one running run per flow, whatever the number of workers.
        m.get_connection()
            .execute_unprepared("CREATE UNIQUE INDEX ux_runs_one_running ON runs (flow_id) WHERE status = 'running'")
            .await?;

        m.create_table(
            Table::create()
                .table(RunLogs::Table)
                .col(ColumnDef::new(RunLogs::Id).uuid().not_null().primary_key())
                .col(ColumnDef::new(RunLogs::RunId).uuid().not_null())
                .col(ts(RunLogs::Ts))
                .col(ColumnDef::new(RunLogs::Level).text().not_null())
                .col(ColumnDef::new(RunLogs::Entity).text().null())
                .col(ColumnDef::new(RunLogs::Message).text().not_null())
                .foreign_key(
                    ForeignKey::create()
                        .from_col(RunLogs::RunId)
                        .to(Runs::Table, Runs::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("ix_run_logs_run")
                .table(RunLogs::Table)
                .col(RunLogs::RunId)
                .col(RunLogs::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Cursors::Table)
                .col(ColumnDef::new(Cursors::FlowId).uuid().not_null())
                .col(ColumnDef::new(Cursors::Entity).text().not_null())
                .col(ColumnDef::new(Cursors::CursorField).text().null())
                .col(ColumnDef::new(Cursors::CursorValue).text().null())
                .col(ts(Cursors::UpdatedAt))
                .primary_key(Index::create().col(Cursors::FlowId).col(Cursors::Entity))
                .foreign_key(
                    ForeignKey::create()
                        .from_col(Cursors::FlowId)
                        .to(Flows::Table, Flows::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for t in
            [Cursors::Table.into_iden(), RunLogs::Table.into_iden(), Runs::Table.into_iden(), Flows::Table.into_iden()]
        {
            m.drop_table(Table::drop().table(t).to_owned()).await?;
        }
        Ok(())
    }
}
