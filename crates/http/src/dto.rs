//! The wire types every route module shares: the list page and roles. Each
//! route module holds its own request and response types beside its
//! handlers (the convention of every area); domain entities never reach
//! the wire directly.

use serde::{Deserialize, Serialize};
use sluice_domain::identity::Role;
use sluice_domain::shared::page::Page;
use utoipa::ToSchema;

/// A page of a list: `{data, next_cursor}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ListResponse<T: ToSchema> {
    pub data: Vec<T>,
    /// Pass as `?cursor=` for the next page; `null` on the last page.
    pub next_cursor: Option<String>,
}

impl<T: ToSchema> ListResponse<T> {
    pub fn from_page<D>(page: Page<D>, f: impl FnMut(D) -> T) -> Self {
        let p = page.map(f);
        Self { data: p.items, next_cursor: p.next_cursor }
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema, PartialEq, Eq)]
pub enum RoleDto {
    Admin,
    Editor,
    Viewer,
}

impl From<RoleDto> for Role {
    fn from(r: RoleDto) -> Self {
        match r {
            RoleDto::Admin => Role::Admin,
            RoleDto::Editor => Role::Editor,
            RoleDto::Viewer => Role::Viewer,
        }
    }
}

impl From<Role> for RoleDto {
    fn from(r: Role) -> Self {
        match r {
            Role::Admin => RoleDto::Admin,
            Role::Editor => RoleDto::Editor,
            Role::Viewer => RoleDto::Viewer,
        }
    }
}
