//! The `cursors` table.

use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "cursors")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub flow_id: Uuid,
    #[sea_orm(primary_key, auto_increment = false)]
    pub entity: String,
    pub cursor_field: Option<String>,
    pub cursor_value: Option<String>,
    pub updated_at: TimeDateTimeWithTimeZone,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
