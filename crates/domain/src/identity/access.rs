//! Who is asking and what they may do: roles, permissions, principals, and
//! the one function that decides access.

use crate::identity::user::User;
use crate::shared::audit::{Actor, ActorKind};
use crate::shared::ids::{ApiKeyId, OrgId, UserId};
use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A member's role. Roles are ordered: Admin ⊇ Editor ⊇ Viewer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Role {
    Viewer,
    Editor,
    Admin,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Admin, Role::Editor, Role::Viewer];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "Admin",
            Role::Editor => "Editor",
            Role::Viewer => "Viewer",
        }
    }

    /// Whether this role grants `permission`.
    pub fn allows(self, permission: Permission) -> bool {
        self >= permission.minimum_role()
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = Error;
    /// Accepts the contract's spelling and its lowercase form.
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "Admin" | "admin" => Ok(Role::Admin),
            "Editor" | "editor" => Ok(Role::Editor),
            "Viewer" | "viewer" => Ok(Role::Viewer),
            other => Err(Error::invalid("role", format!("unknown role '{other}': expected Admin, Editor or Viewer"))),
        }
    }
}

/// What an operation needs. Each maps to the least role that grants it; this
/// table is the only place role requirements are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Read any resource of the organization (billing status included).
    Read,
    /// Create, update and delete integrations, connections, flows, runs,
    /// cursors, data assets, rules and IaC.
    Write,
    /// Members, invitations, API keys, billing, organization update/delete,
    /// and reading decrypted secrets.
    Administer,
}

impl Permission {
    pub fn minimum_role(self) -> Role {
        match self {
            Permission::Read => Role::Viewer,
            Permission::Write => Role::Editor,
            Permission::Administer => Role::Admin,
        }
    }
}

/// The highest of a set of roles: an API key has the union of its roles,
/// which, as roles nest, is the greatest one.
pub fn effective_role(roles: &[Role]) -> Option<Role> {
    roles.iter().copied().max()
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub enum Principal {
    User(User),
    ApiKey { id: ApiKeyId, org_id: OrgId, name: String, roles: Vec<Role> },
}

impl Principal {
    pub fn actor(&self) -> Actor {
        match self {
            Principal::User(u) => {
                Actor { kind: ActorKind::User, id: Some(u.id.to_string()), name: Some(u.display_name()) }
            }
            Principal::ApiKey { id, name, .. } => {
                Actor { kind: ActorKind::ApiKey, id: Some(id.to_string()), name: Some(name.clone()) }
            }
        }
    }

    /// The user behind a session; API keys are refused on user endpoints.
    pub fn user(&self) -> Result<&User> {
        match self {
            Principal::User(u) => Ok(u),
            Principal::ApiKey { .. } => Err(Error::forbidden("this endpoint needs a user session, not an API key")),
        }
    }

    pub fn user_id(&self) -> Option<UserId> {
        match self {
            Principal::User(u) => Some(u.id),
            Principal::ApiKey { .. } => None,
        }
    }
}

/// The decision for one request: given the caller's role in the organization
/// (`None` when the caller is not a member, or the key belongs to another
/// organization), may it do `permission`? A non-member gets 404, never 403,
/// so that the existence of other organizations' resources does not leak.
pub fn authorize(role: Option<Role>, permission: Permission) -> Result<Role> {
    match role {
        None => Err(Error::not_found("organization")),
        Some(r) if r.allows(permission) => Ok(r),
        Some(r) => Err(Error::forbidden(format!("this needs the {} role; you have {}", permission.minimum_role(), r))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_role_gets_exactly_the_permissions_of_the_contract() {
        let table = [
            (Role::Viewer, Permission::Read, true),
            (Role::Viewer, Permission::Write, false),
            (Role::Viewer, Permission::Administer, false),
            (Role::Editor, Permission::Read, true),
            (Role::Editor, Permission::Write, true),
            (Role::Editor, Permission::Administer, false),
            (Role::Admin, Permission::Read, true),
            (Role::Admin, Permission::Write, true),
            (Role::Admin, Permission::Administer, true),
        ];
        for (role, perm, allowed) in table {
            assert_eq!(role.allows(perm), allowed, "{role} {perm:?}");
        }
    }

    #[test]
    fn a_non_member_is_told_not_found_not_forbidden() {
        let err = authorize(None, Permission::Read).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
    }

    #[test]
    fn a_member_with_too_low_a_role_is_forbidden() {
        let err = authorize(Some(Role::Viewer), Permission::Write).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Forbidden);
        assert!(err.to_string().contains("Editor"));
        assert_eq!(authorize(Some(Role::Editor), Permission::Write).unwrap(), Role::Editor);
    }

    #[test]
    fn an_api_key_has_the_union_of_its_roles() {
        assert_eq!(effective_role(&[Role::Viewer, Role::Admin]), Some(Role::Admin));
        assert_eq!(effective_role(&[Role::Editor]), Some(Role::Editor));
        assert_eq!(effective_role(&[]), None);
    }

    #[test]
    fn roles_parse_in_both_spellings_and_reject_others() {
        assert_eq!("Admin".parse::<Role>().unwrap(), Role::Admin);
        assert_eq!("viewer".parse::<Role>().unwrap(), Role::Viewer);
        assert!("Owner".parse::<Role>().is_err());
    }
}
