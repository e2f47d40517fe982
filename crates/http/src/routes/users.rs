//! The current user: `/v1/users/me`, `/v1/users/sync-profile`, and accepting
//! invitations.

use crate::AppState;
use crate::dto::RoleDto;
use crate::error::{ApiResult, ErrorBody};
use crate::extract::Body;
use crate::routes::orgs::OrganizationResponse;
use crate::session::Caller;
use actix_web::web::{Data, Json};
use actix_web::{get, patch, post};
use serde::{Deserialize, Serialize};
use sluice_domain::identity::user::{ProfileUpdate, User};
use time::OffsetDateTime;
use utoipa::ToSchema;
use uuid::Uuid;

/// The calling user (session tokens only).
#[utoipa::path(tag = "users", security(("bearer" = [])), responses(
    (status = 200, body = UserResponse), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[get("/users/me")]
pub async fn me(state: Data<AppState>, caller: Caller) -> ApiResult<Json<UserResponse>> {
    Ok(Json(state.sluice.identity.me(&caller.principal).await?.into()))
}

/// Changes the calling user's name or e-mail address.
#[utoipa::path(tag = "users", security(("bearer" = [])), request_body = UpdateMeBody, responses(
    (status = 200, body = UserResponse), (status = 401, body = ErrorBody), (status = 422, body = ErrorBody)))]
#[patch("/users/me")]
pub async fn update_me(
    state: Data<AppState>,
    caller: Caller,
    body: Body<UpdateMeBody>,
) -> ApiResult<Json<UserResponse>> {
    let body = body.into_inner();
    let user = state
        .sluice
        .identity
        .update_me(&caller.principal, ProfileUpdate { name: body.name, email: body.email })
        .await?;
    Ok(Json(user.into()))
}

/// Copies the e-mail address and name from the session token's claims.
#[utoipa::path(tag = "users", security(("bearer" = [])), responses(
    (status = 200, body = UserResponse), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody)))]
#[post("/users/sync-profile")]
pub async fn sync_profile(state: Data<AppState>, caller: Caller) -> ApiResult<Json<UserResponse>> {
    let claims = caller.claims.clone().ok_or_else(|| {
        crate::error::ApiError::from(sluice_domain::Error::forbidden(
            "this endpoint needs a user session, not an API key",
        ))
    })?;
    Ok(Json(state.sluice.identity.sync_profile(&caller.principal, &claims).await?.into()))
}

/// Joins an organization with an invitation token; the session's e-mail
/// address must be the invited one.
#[utoipa::path(tag = "invitations", security(("bearer" = [])), request_body = AcceptInvitationBody, responses(
    (status = 200, body = AcceptInvitationResponse),
    (status = 403, description = "the invitation is for another e-mail address", body = ErrorBody),
    (status = 404, body = ErrorBody),
    (status = 409, description = "expired, already used, revoked, or already a member", body = ErrorBody)))]
#[post("/invitations/accept")]
pub async fn accept_invitation(
    state: Data<AppState>,
    caller: Caller,
    body: Body<AcceptInvitationBody>,
) -> ApiResult<Json<AcceptInvitationResponse>> {
    let (org, role) = state.sluice.identity.accept_invitation(&caller.principal, body.token.trim()).await?;
    let organization = OrganizationResponse::of(&state, &caller.principal, org).await?;
    Ok(Json(AcceptInvitationResponse { organization, role: role.into() }))
}

// ---- wire types ----------------------------------------------------------

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
#[schema(examples(json!({"name": "Ann Lee"})))]
pub struct UpdateMeBody {
    pub name: Option<String>,
    pub email: Option<String>,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"token": "inv_3kT9xQ2mZp7RwL5nV8cJ"})))]
pub struct AcceptInvitationBody {
    pub token: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AcceptInvitationResponse {
    pub organization: OrganizationResponse,
    pub role: RoleDto,
}
