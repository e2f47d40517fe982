//! Organizations and what belongs to them directly: members, invitations,
//! API keys and the audit log.

use super::created;
use crate::AppState;
use crate::dto::RoleDto;
use crate::dto::*;
use crate::error::{ApiError, ApiResult, ErrorBody};
use crate::extract::{Body, Pagination};
use crate::session::Caller;
use actix_web::web::{Data, Json, Path, Query};
use actix_web::{HttpResponse, delete, get, post, put};
use serde::{Deserialize, Serialize};
use sluice_domain::FieldError;
use sluice_domain::identity::Principal;
use sluice_domain::identity::apikey::ApiKey;
use sluice_domain::identity::invitation::Invitation;
use sluice_domain::identity::org::{Member, Organization};
use sluice_domain::identity::service::{NewOrganization, OrganizationUpdate};
use sluice_domain::shared::audit::{Actor, AuditEntry, AuditFilter};
use sluice_domain::shared::ids::{ApiKeyId, InvitationId, OrgId, UserId};
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;
use utoipa::IntoParams;
use utoipa::ToSchema;
use uuid::Uuid;

/// The organizations the caller belongs to (an API key: its own).
#[utoipa::path(tag = "organizations", params(Pagination), security(("bearer" = []), ("api_key" = [])), responses(
    (status = 200, body = ListResponse<OrganizationResponse>), (status = 401, body = ErrorBody)))]
#[get("/organizations")]
pub async fn list(
    state: Data<AppState>,
    caller: Caller,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<OrganizationResponse>>> {
    let page = state.sluice.identity.list_organizations(&caller.principal, q.page()?).await?;
    let mut data = Vec::with_capacity(page.items.len());
    for o in page.items {
        data.push(OrganizationResponse::of(&state, &caller.principal, o).await?);
    }
    Ok(Json(ListResponse { data, next_cursor: page.next_cursor }))
}

/// Creates an organization with the caller as its Admin.
#[utoipa::path(tag = "organizations", security(("bearer" = [])), request_body = CreateOrganizationBody, responses(
    (status = 201, body = OrganizationResponse), (status = 401, body = ErrorBody),
    (status = 409, description = "the slug is taken", body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations")]
pub async fn create(
    state: Data<AppState>,
    caller: Caller,
    body: Body<CreateOrganizationBody>,
) -> ApiResult<HttpResponse> {
    let body = body.into_inner();
    let org = state
        .sluice
        .identity
        .create_organization(&caller.principal, NewOrganization { name: body.name, slug: body.slug })
        .await?;
    let location = format!("/v1/organizations/{}", org.id);
    Ok(created(location, &OrganizationResponse::of(&state, &caller.principal, org).await?))
}

/// One organization.
#[utoipa::path(tag = "organizations", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])), responses(
    (status = 200, body = OrganizationResponse), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}")]
pub async fn get(state: Data<AppState>, caller: Caller, path: Path<Uuid>) -> ApiResult<Json<OrganizationResponse>> {
    let org = state.sluice.identity.get_organization(&caller.principal, OrgId::from(*path)).await?;
    Ok(Json(OrganizationResponse::of(&state, &caller.principal, org).await?))
}

/// Renames an organization or changes its slug (Admin).
#[utoipa::path(tag = "organizations", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = UpdateOrganizationBody, responses(
    (status = 200, body = OrganizationResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    (status = 409, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[put("/organizations/{orgId}")]
pub async fn update(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<UpdateOrganizationBody>,
) -> ApiResult<Json<OrganizationResponse>> {
    let body = body.into_inner();
    let org = state
        .sluice
        .identity
        .update_organization(
            &caller.principal,
            OrgId::from(*path),
            OrganizationUpdate { name: body.name, slug: body.slug },
        )
        .await?;
    Ok(Json(OrganizationResponse::of(&state, &caller.principal, org).await?))
}

/// Deletes an organization and everything in it (Admin). Its audit log is kept.
#[utoipa::path(tag = "organizations", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])), responses(
    (status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[delete("/organizations/{orgId}")]
pub async fn remove(state: Data<AppState>, caller: Caller, path: Path<Uuid>) -> ApiResult<HttpResponse> {
    state.sluice.identity.delete_organization(&caller.principal, OrgId::from(*path)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Members of an organization.
#[utoipa::path(tag = "members", params(("orgId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])), responses(
    (status = 200, body = ListResponse<MemberResponse>), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/members")]
pub async fn list_members(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<MemberResponse>>> {
    let page = state.sluice.identity.list_members(&caller.principal, OrgId::from(*path), q.page()?).await?;
    Ok(Json(ListResponse::from_page(page, Into::into)))
}

/// Changes a member's role (Admin). Demoting the last Admin is a 409.
#[utoipa::path(tag = "members", params(("orgId" = Uuid, Path), ("userId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = UpdateMemberBody, responses(
    (status = 200, body = MemberResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
    (status = 409, description = "the organization would have no Admin", body = ErrorBody)))]
#[put("/organizations/{orgId}/members/{userId}")]
pub async fn update_member(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
    body: Body<UpdateMemberBody>,
) -> ApiResult<Json<MemberResponse>> {
    let (org, user) = path.into_inner();
    let m = state
        .sluice
        .identity
        .update_member_role(&caller.principal, org.into(), UserId::from(user), body.role.into())
        .await?;
    Ok(Json(m.into()))
}

/// Removes a member (Admin). Removing the last Admin is a 409.
#[utoipa::path(tag = "members", params(("orgId" = Uuid, Path), ("userId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[delete("/organizations/{orgId}/members/{userId}")]
pub async fn remove_member(state: Data<AppState>, caller: Caller, path: Path<(Uuid, Uuid)>) -> ApiResult<HttpResponse> {
    let (org, user) = path.into_inner();
    state.sluice.identity.remove_member(&caller.principal, org.into(), UserId::from(user)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Invites an e-mail address with a role (Admin). The token is in this
/// response only; it expires in 7 days.
#[utoipa::path(tag = "invitations", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = CreateInvitationBody, responses(
    (status = 201, body = InvitationResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/invitations")]
pub async fn create_invitation(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<CreateInvitationBody>,
) -> ApiResult<HttpResponse> {
    let org = OrgId::from(*path);
    let c = state.sluice.identity.create_invitation(&caller.principal, org, &body.email, body.role.into()).await?;
    let id = c.invitation.id;
    let res = InvitationResponse::new(c.invitation, state.sluice.identity.now(), Some(c.token.expose().to_string()));
    Ok(created(format!("/v1/organizations/{org}/invitations/{id}"), &res))
}

/// Invitations of an organization, newest first (Admin).
#[utoipa::path(tag = "invitations", params(("orgId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])), responses(
    (status = 200, body = ListResponse<InvitationResponse>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/invitations")]
pub async fn list_invitations(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<InvitationResponse>>> {
    let page = state.sluice.identity.list_invitations(&caller.principal, OrgId::from(*path), q.page()?).await?;
    let now = state.sluice.identity.now();
    Ok(Json(ListResponse::from_page(page, |i| InvitationResponse::new(i, now, None))))
}

/// Revokes a pending invitation (Admin).
#[utoipa::path(tag = "invitations", params(("orgId" = Uuid, Path), ("invitationId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
#[delete("/organizations/{orgId}/invitations/{invitationId}")]
pub async fn revoke_invitation(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    state.sluice.identity.revoke_invitation(&caller.principal, org.into(), InvitationId::from(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Creates an API key (Admin). The plain key is in this response only.
#[utoipa::path(tag = "api-keys", params(("orgId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    request_body = CreateApiKeyBody, responses(
    (status = 201, body = ApiKeyResponse), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[post("/organizations/{orgId}/api-keys")]
pub async fn create_api_key(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    body: Body<CreateApiKeyBody>,
) -> ApiResult<HttpResponse> {
    let org = OrgId::from(*path);
    let roles: Vec<_> = body.roles.iter().map(|r| (*r).into()).collect();
    let c = state.sluice.identity.create_api_key(&caller.principal, org, &body.name, &roles).await?;
    let id = c.key.id;
    Ok(created(
        format!("/v1/organizations/{org}/api-keys/{id}"),
        &ApiKeyResponse::new(c.key, Some(c.plain.expose().to_string())),
    ))
}

/// Active API keys: name, prefix, roles, creation and last use (Admin).
#[utoipa::path(tag = "api-keys", params(("orgId" = Uuid, Path), Pagination), security(("bearer" = []), ("api_key" = [])), responses(
    (status = 200, body = ListResponse<ApiKeyResponse>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[get("/organizations/{orgId}/api-keys")]
pub async fn list_api_keys(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<Pagination>,
) -> ApiResult<Json<ListResponse<ApiKeyResponse>>> {
    let page = state.sluice.identity.list_api_keys(&caller.principal, OrgId::from(*path), q.page()?).await?;
    Ok(Json(ListResponse::from_page(page, |k| ApiKeyResponse::new(k, None))))
}

/// Revokes an API key (Admin); it stops working at once.
#[utoipa::path(tag = "api-keys", params(("orgId" = Uuid, Path), ("keyId" = Uuid, Path)), security(("bearer" = []), ("api_key" = [])),
    responses((status = 204), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
#[delete("/organizations/{orgId}/api-keys/{keyId}")]
pub async fn revoke_api_key(
    state: Data<AppState>,
    caller: Caller,
    path: Path<(Uuid, Uuid)>,
) -> ApiResult<HttpResponse> {
    let (org, id) = path.into_inner();
    state.sluice.identity.revoke_api_key(&caller.principal, org.into(), ApiKeyId::from(id)).await?;
    Ok(HttpResponse::NoContent().finish())
}

/// Filters of the audit log.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// An action (`member.role_updated`), or the start of actions up to a
    /// dot (`flow` lists `flow.created`, `flow.cursor.reset`, …).
    pub action: Option<String>,
    pub resource_type: Option<String>,
    pub resource_id: Option<String>,
    /// The id of the user or API key that acted.
    pub actor_id: Option<String>,
    /// Entries about this entity (cursor changes).
    pub entity: Option<String>,
    /// RFC 3339; entries at or after.
    pub since: Option<String>,
    /// RFC 3339; entries before.
    pub until: Option<String>,
    pub limit: Option<i64>,
    pub cursor: Option<String>,
}

fn parse_time(field: &str, v: &Option<String>) -> Result<Option<OffsetDateTime>, FieldError> {
    v.as_deref()
        .map(|s| {
            OffsetDateTime::parse(s, &Rfc3339).map_err(|_| FieldError::new(field, "must be an RFC 3339 timestamp"))
        })
        .transpose()
}

/// The audit log, newest first: every mutation with its actor and the
/// before/after values, secrets removed.
#[utoipa::path(tag = "audit", params(("orgId" = Uuid, Path), AuditQuery), security(("bearer" = []), ("api_key" = [])), responses(
    (status = 200, body = ListResponse<AuditLogResponse>), (status = 404, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[get("/organizations/{orgId}/audit-logs")]
pub async fn audit_logs(
    state: Data<AppState>,
    caller: Caller,
    path: Path<Uuid>,
    q: Query<AuditQuery>,
) -> ApiResult<Json<ListResponse<AuditLogResponse>>> {
    let (since, until) = (parse_time("since", &q.since), parse_time("until", &q.until));
    let errors: Vec<FieldError> = [since.as_ref().err(), until.as_ref().err()].into_iter().flatten().cloned().collect();
    if !errors.is_empty() {
        return Err(ApiError::validation(errors));
    }
    let q = q.into_inner();
    let filter = AuditFilter {
        action: q.action,
        resource_type: q.resource_type,
        resource_id: q.resource_id,
        actor_id: q.actor_id,
        entity: q.entity,
        since: since.ok().flatten(),
        until: until.ok().flatten(),
    };
    let page = sluice_domain::shared::page::PageRequest::parse(q.limit, q.cursor.as_deref())?;
    let page = state.sluice.identity.list_audit_logs(&caller.principal, OrgId::from(*path), &filter, page).await?;
    Ok(Json(ListResponse::from_page(page, Into::into)))
}

// ---- wire types ----------------------------------------------------------

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

impl OrganizationResponse {
    /// The organization with its plan, which billing keeps.
    pub async fn of(state: &AppState, p: &Principal, o: Organization) -> ApiResult<Self> {
        let plan = state.sluice.billing.plan(p, o.id).await?;
        Ok(Self {
            id: o.id.as_uuid(),
            name: o.name,
            slug: o.slug,
            plan: plan.as_str().into(),
            created_at: o.created_at,
        })
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "Acme Data", "slug": "acme-data"})))]
pub struct CreateOrganizationBody {
    pub name: String,
    /// Derived from the name when absent.
    pub slug: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"name": "Acme Analytics"})))]
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
#[schema(examples(json!({"role": "Editor"})))]
pub struct UpdateMemberBody {
    pub role: RoleDto,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"email": "ann@example.com", "role": "Viewer"})))]
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
#[schema(examples(json!({"name": "ci-deploy", "roles": ["Editor"]})))]
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
