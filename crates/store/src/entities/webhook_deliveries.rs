//! The `webhook_deliveries` table: the outbox of notification deliveries.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    pub org_id: Uuid,
    pub rule_id: Uuid,
    pub event_id: Uuid,
    pub event_type: String,
    pub message_id: String,
    pub body: String,
    pub status: String,
    pub attempts: i32,
    pub response_code: Option<i32>,
    pub error: Option<String>,
    pub next_attempt_at: Option<TimeDateTimeWithTimeZone>,
    pub claimed_by: Option<String>,
    pub claimed_until: Option<TimeDateTimeWithTimeZone>,
    pub created_at: TimeDateTimeWithTimeZone,
    pub updated_at: TimeDateTimeWithTimeZone,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
