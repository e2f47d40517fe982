//! Wire types: what the API reads and writes. Domain entities never reach the
//! wire directly.

use serde::{Deserialize, Serialize};
use sluice_domain::identity::apikey::ApiKey;
use sluice_domain::identity::invitation::Invitation;
use sluice_domain::identity::org::{Member, Organization};
use sluice_domain::identity::user::User;
use sluice_domain::identity::{Actor, Role};
use sluice_domain::shared::audit::AuditEntry;
use sluice_domain::shared::page::Page;
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

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

#[derive(Debug, Serialize, ToSchema)]
pub struct HealthResponse {
    /// `ok`, or `degraded` when the metadata store does not answer.
    pub status: String,
    pub database: String,
    pub version: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UserResponse {
    pub id: Uuid,
    pub email: Option<String>,
    pub name: Option<String>,
    /// The identity provider (`iss`) and the subject (`sub`) that identify the user.
    pub issuer: String,
    pub subject: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub updated_at: OffsetDateTime,
}

impl From<User> for UserResponse {
    fn from(u: User) -> Self {
        Self {
            id: u.id.as_uuid(),
            email: u.email,
            name: u.name,
            issuer: u.issuer,
            subject: u.subject,
            created_at: u.created_at,
            updated_at: u.updated_at,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMeBody {
    pub name: Option<String>,
    pub email: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct OrganizationResponse {
    pub id: Uuid,
    pub name: String,
    pub slug: String,
    /// `free`, `pro` or `enterprise`.
    pub plan: String,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

impl From<Organization> for OrganizationResponse {
    fn from(o: Organization) -> Self {
        Self { id: o.id.as_uuid(), name: o.name, slug: o.slug, plan: o.plan.as_str().into(), created_at: o.created_at }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateOrganizationBody {
    pub name: String,
    /// Derived from the name when absent.
    pub slug: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateOrganizationBody {
    pub name: Option<String>,
    pub slug: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct MemberResponse {
    pub user_id: Uuid,
    pub email: Option<String>,
    pub name: Option<String>,
    pub role: RoleDto,
    #[serde(with = "time::serde::rfc3339")]
    pub joined_at: OffsetDateTime,
}

impl From<Member> for MemberResponse {
    fn from(m: Member) -> Self {
        Self { user_id: m.user_id.as_uuid(), email: m.email, name: m.name, role: m.role.into(), joined_at: m.joined_at }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateMemberBody {
    pub role: RoleDto,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateInvitationBody {
    pub email: String,
    pub role: RoleDto,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct InvitationResponse {
    pub id: Uuid,
    pub organization_id: Uuid,
    pub email: String,
    pub role: RoleDto,
    /// `pending`, `accepted`, `revoked` or `expired`.
    pub status: String,
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// The single-use token; present only in the create response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
}

impl InvitationResponse {
    pub fn new(i: Invitation, now: OffsetDateTime, token: Option<String>) -> Self {
        Self {
            id: i.id.as_uuid(),
            organization_id: i.org_id.as_uuid(),
            email: i.email.clone(),
            role: i.role.into(),
            status: i.status_at(now).as_str().into(),
            expires_at: i.expires_at,
            created_at: i.created_at,
            token,
        }
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptInvitationBody {
    pub token: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AcceptInvitationResponse {
    pub organization: OrganizationResponse,
    pub role: RoleDto,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateApiKeyBody {
    pub name: String,
    pub roles: Vec<RoleDto>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApiKeyResponse {
    pub id: Uuid,
    pub name: String,
    /// The first 8 characters of the key.
    pub prefix: String,
    pub roles: Vec<RoleDto>,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_used_at: Option<OffsetDateTime>,
    /// The plain key; present only in the create response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

impl ApiKeyResponse {
    pub fn new(k: ApiKey, plain: Option<String>) -> Self {
        Self {
            id: k.id.as_uuid(),
            name: k.name,
            prefix: k.prefix,
            roles: k.roles.into_iter().map(Into::into).collect(),
            created_at: k.created_at,
            last_used_at: k.last_used_at,
            key: plain,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ActorDto {
    /// `user`, `api_key` or `system`.
    #[serde(rename = "type")]
    pub kind: String,
    pub id: Option<String>,
    pub name: Option<String>,
}

impl From<Actor> for ActorDto {
    fn from(a: Actor) -> Self {
        Self { kind: a.kind.as_str().into(), id: a.id, name: a.name }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditLogResponse {
    pub id: Uuid,
    pub actor: ActorDto,
    /// `<resource>.<verb>`.
    pub action: String,
    pub resource_type: String,
    pub resource_id: Option<String>,
    /// `before` and `after` snapshots with secrets removed, or action-specific fields.
    #[schema(value_type = Object)]
    pub details: serde_json::Value,
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
}

impl From<AuditEntry> for AuditLogResponse {
    fn from(e: AuditEntry) -> Self {
        Self {
            id: e.id.as_uuid(),
            actor: e.actor.into(),
            action: e.action,
            resource_type: e.resource_type,
            resource_id: e.resource_id,
            details: e.details,
            created_at: e.created_at,
        }
    }
}
