//! The metadata store's schema as sea-orm migrations. Every migration runs on
//! SQLite and PostgreSQL; tables are created whole (SQLite cannot alter
//! foreign keys), and later changes add tables rather than alter them.

pub use sea_orm_migration::prelude::*;

mod m20261121_000001_identity;
mod m20261121_000002_connections;
mod m20261121_000003_oauth_states;
mod m20261121_000004_flows;
mod m20261121_000005_markers_activity;
mod m20261121_000006_run_not_before;
mod m20261121_000007_validation_usage;
mod m20261121_000008_validation_counts;
mod m20261123_000001_instance;
mod m20261123_000002_billing;
mod m20261123_000003_notifications;
mod m20261128_000001_verifications;
mod m20261128_000002_verification_repairs;
mod m20261202_000001_stream_drops;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261121_000001_identity::Migration),
            Box::new(m20261121_000002_connections::Migration),
            Box::new(m20261121_000003_oauth_states::Migration),
            Box::new(m20261121_000004_flows::Migration),
            Box::new(m20261121_000005_markers_activity::Migration),
            Box::new(m20261121_000006_run_not_before::Migration),
            Box::new(m20261121_000007_validation_usage::Migration),
            Box::new(m20261121_000008_validation_counts::Migration),
            Box::new(m20261123_000001_instance::Migration),
            Box::new(m20261123_000002_billing::Migration),
            Box::new(m20261123_000003_notifications::Migration),
            Box::new(m20261128_000001_verifications::Migration),
            Box::new(m20261128_000002_verification_repairs::Migration),
            Box::new(m20261202_000001_stream_drops::Migration),
        ]
    }
}
