//! The `runs` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub flow_id: Uuid,
    pub trace_id: Uuid,
    pub trigger: String,
    pub status: String,
    pub queued_at: TimeDateTimeWithTimeZone,
    pub started_at: Option<TimeDateTimeWithTimeZone>,
    pub finished_at: Option<TimeDateTimeWithTimeZone>,
    pub entities: Json,
    pub error: Option<String>,
    pub attempt: i32,
    pub claimed_by: Option<String>,
    pub heartbeat_at: Option<TimeDateTimeWithTimeZone>,
    pub not_before: Option<TimeDateTimeWithTimeZone>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
