//! The `connections` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "connections")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub integration_id: Option<Uuid>,
    #[sea_orm(column_name = "type")]
    pub connector_type: String,
    pub capability: String,
    pub config: Json,
    /// Encrypted JSON object (see `crypto`).
    pub secrets: String,
    pub status: String,
    pub last_tested_at: Option<TimeDateTimeWithTimeZone>,
    pub last_error: Option<String>,
    pub created_at: TimeDateTimeWithTimeZone,
    pub updated_at: TimeDateTimeWithTimeZone,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
