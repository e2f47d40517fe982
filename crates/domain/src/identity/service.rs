//! Identity owns who is calling and what they may do: users (created on
//! first sight of their token), organizations and members, invitations,
//! API keys, the audit log's reading and idempotency keys. Every other
//! context asks [`IdentityService::access`] before a use case.

use super::apikey::{self, ApiKey};
use super::invitation::{self, INVITATION_TTL, Invitation, InvitationStatus};
use super::org::{self, Member, Organization};
use super::ports::{ApiKeyRepository, InvitationRepository, OrgRepository, TokenVerifier, UserRepository};
use super::user::{self, ProfileUpdate, User, VerifiedClaims};
use super::{Permission, Principal, Role, authorize, effective_role};
use crate::shared::audit::{AuditEntry, AuditFilter, AuditRepository};
use crate::shared::cache::Ttl;
use crate::shared::clock::Clock;
use crate::shared::error::merge_validation;
use crate::shared::idempotency::IdempotencyStore;
use crate::shared::ids::{ApiKeyId, InvitationId, OrgId, UserId};
use crate::shared::page::{Page, PageRequest};
use crate::shared::secret::Secret;
use crate::{Error, Result};
use serde_json::{Value, json};
use std::sync::Arc;
use time::Duration;

/// A key's `last_used_at` is written at most this often.
const TOUCH_INTERVAL: Duration = Duration::minutes(1);

/// The use cases of identity, over its own ports.
#[derive(Clone)]
pub struct IdentityService {
    pub(crate) users: Arc<dyn UserRepository>,
    pub(crate) orgs: Arc<dyn OrgRepository>,
    pub(crate) invitations: Arc<dyn InvitationRepository>,
    pub(crate) api_keys: Arc<dyn ApiKeyRepository>,
    pub(crate) audit: Arc<dyn AuditRepository>,
    pub(crate) idempotency: Arc<dyn IdempotencyStore>,
    pub(crate) tokens: Arc<dyn TokenVerifier>,
    pub(crate) clock: Arc<dyn Clock>,
    /// Active keys by the hash of their value (see [`crate::shared::cache`]).
    pub(crate) keys: Arc<Ttl<String, ApiKey>>,
}

/// A new organization.
#[derive(Debug, Clone, Default)]
pub struct NewOrganization {
    pub name: String,
    pub slug: Option<String>,
}

/// Changes to an organization; `None` keeps a field.
#[derive(Debug, Clone, Default)]
pub struct OrganizationUpdate {
    pub name: Option<String>,
    pub slug: Option<String>,
}

/// An invitation with its token, which exists only in this response.
pub struct CreatedInvitation {
    pub invitation: Invitation,
    pub token: Secret,
}

/// A key with its plain value, which exists only in this response.
pub struct CreatedApiKey {
    pub key: ApiKey,
    pub plain: Secret,
}

impl IdentityService {
    pub fn now(&self) -> time::OffsetDateTime {
        self.clock.now()
    }

    /// Whether `org` exists (for internal callers, which hold no role).
    pub(crate) async fn organization_exists(&self, org: OrgId) -> Result<bool> {
        Ok(self.orgs.get(org).await?.is_some())
    }

    // ---- authentication -------------------------------------------------

    /// The user behind a session token, created on first sight.
    pub async fn authenticate_session(&self, token: &str) -> Result<(Principal, VerifiedClaims)> {
        let claims = self.tokens.verify(token).await?;
        let user = self.users.upsert_from_claims(&claims, self.now()).await?;
        Ok((Principal::User(user), claims))
    }

    /// The organization key behind `X-Api-Key`.
    pub async fn authenticate_api_key(&self, raw: &str) -> Result<Principal> {
        let unknown = || Error::Unauthenticated("unknown or revoked API key".into());
        if !apikey::looks_like_key(raw) {
            return Err(unknown());
        }
        let hash = apikey::hash_key(raw);
        let now = self.now();
        let key = self
            .keys
            .get_or_load(&hash, now, async { self.api_keys.find_active_by_hash(&hash).await?.ok_or_else(unknown) })
            .await?;
        if key.last_used_at.is_none_or(|t| now - t >= TOUCH_INTERVAL) {
            self.api_keys.touch(key.id, now).await?;
            self.keys.update(&hash, |k| k.last_used_at = Some(now));
        }
        Ok(Principal::ApiKey { id: key.id, org_id: key.org_id, name: key.name, roles: key.roles })
    }

    // ---- access ---------------------------------------------------------

    /// The caller's role in `org`, if it has one.
    pub async fn role_in(&self, principal: &Principal, org: OrgId) -> Result<Option<Role>> {
        match principal {
            Principal::User(u) => self.orgs.role_of(org, u.id).await,
            Principal::ApiKey { org_id, roles, .. } => Ok(if *org_id == org { effective_role(roles) } else { None }),
        }
    }

    /// Checks that the caller may do `permission` in `org`. A caller with no
    /// role there gets `NotFound`, so other organizations stay invisible.
    pub async fn access(&self, principal: &Principal, org: OrgId, permission: Permission) -> Result<Role> {
        authorize(self.role_in(principal, org).await?, permission)
    }

    /// Drops every cached credential (API keys): credentials changed in
    /// another process on the same store, or may have.
    pub fn forget_cached_credentials(&self) {
        self.keys.clear();
    }

    /// The scope idempotency keys live in for this caller.
    pub fn idempotency_scope(principal: &Principal) -> String {
        match principal {
            Principal::User(u) => format!("user:{}", u.id),
            Principal::ApiKey { org_id, .. } => format!("org:{org_id}"),
        }
    }

    /// Starts an idempotent request: proceed, replay the stored answer, or
    /// refuse (in flight, or the key reused for another request).
    ///
    /// # Errors
    /// `Conflict` (`idempotency_in_progress`), `Unprocessable`
    /// (`idempotency_key_reused`), or a store failure.
    pub async fn begin_idempotent(
        &self,
        scope: &str,
        key: &str,
        fingerprint: &str,
    ) -> Result<crate::shared::idempotency::Begin> {
        crate::shared::idempotency::begin(self.idempotency.as_ref(), scope, key, fingerprint, self.now()).await
    }

    /// Stores the answer of an idempotent request, for replays.
    ///
    /// # Errors
    /// A store failure.
    pub async fn complete_idempotent(
        &self,
        scope: &str,
        key: &str,
        response: &crate::shared::idempotency::StoredResponse,
    ) -> Result<()> {
        self.idempotency.complete(scope, key, response).await
    }

    /// Forgets an idempotent request that failed (a 5xx is not stored).
    ///
    /// # Errors
    /// A store failure.
    pub async fn release_idempotent(&self, scope: &str, key: &str) -> Result<()> {
        self.idempotency.release(scope, key).await
    }

    // ---- users ----------------------------------------------------------

    pub async fn me(&self, principal: &Principal) -> Result<User> {
        Ok(principal.user()?.clone())
    }

    pub async fn update_me(&self, principal: &Principal, update: ProfileUpdate) -> Result<User> {
        let before = principal.user()?.clone();
        let mut after = before.clone();
        if let Some(name) = update.name {
            after.name = Some(user::validate_name("name", &name)?);
        }
        if let Some(email) = update.email {
            after.email = Some(user::validate_email("email", &email)?);
        }
        self.save_user(principal, before, after, "user.updated").await
    }

    /// Copies the e-mail address and name from the current token's claims.
    pub async fn sync_profile(&self, principal: &Principal, claims: &VerifiedClaims) -> Result<User> {
        let before = principal.user()?.clone();
        let mut after = before.clone();
        if let Some(email) = &claims.email {
            after.email = Some(user::validate_email("email", email)?);
        }
        if let Some(name) = &claims.name {
            after.name = Some(user::validate_name("name", name)?);
        }
        self.save_user(principal, before, after, "user.profile_synced").await
    }

    async fn save_user(&self, principal: &Principal, before: User, mut after: User, action: &str) -> Result<User> {
        if after == before {
            return Ok(after);
        }
        let now = self.now();
        after.updated_at = now;
        let audit = AuditEntry::new(None, principal.actor(), action, "user", after.id, now)
            .with_change(user_json(&before), user_json(&after));
        self.users.update(&after, &audit).await?;
        Ok(after)
    }

    // ---- organizations --------------------------------------------------

    pub async fn list_organizations(&self, principal: &Principal, page: PageRequest) -> Result<Page<Organization>> {
        match principal {
            Principal::User(u) => self.orgs.list_for_user(u.id, page).await,
            Principal::ApiKey { org_id, .. } => {
                let org = self.orgs.get(*org_id).await?;
                Ok(Page {
                    items: org.into_iter().filter(|o| page.after.is_none_or(|a| o.id.as_uuid() < a)).collect(),
                    next_cursor: None,
                })
            }
        }
    }

    pub async fn create_organization(&self, principal: &Principal, new: NewOrganization) -> Result<Organization> {
        let user = principal.user()?;
        let mut problems = Vec::new();
        let name = user::validate_name("name", &new.name).map_err(|e| problems.push(e)).ok();
        let explicit_slug = match new.slug.as_deref() {
            Some(s) => org::validate_slug(s).map_err(|e| problems.push(e)).ok(),
            None => None,
        };
        let name = match (name, problems.is_empty()) {
            (Some(n), true) => n,
            _ => return Err(merge_validation(problems)),
        };
        let now = self.now();
        let derived = org::slugify(&name);
        // An explicit slug that is taken is the caller's conflict; a derived
        // one gets a random suffix instead.
        let attempts: Vec<String> = match explicit_slug {
            Some(s) => vec![s],
            None => std::iter::once(derived.clone())
                .chain((0..3).map(|_| format!("{derived}-{}", crate::shared::secret::random_base62(6).to_lowercase())))
                .collect(),
        };
        let mut last_err = None;
        for slug in attempts {
            let org = Organization { id: OrgId::new(), name: name.clone(), slug, created_at: now };
            let audit =
                AuditEntry::new(Some(org.id), principal.actor(), "organization.created", "organization", org.id, now)
                    .with_change(Value::Null, org_json(&org));
            match self.orgs.create(&org, user.id, &audit).await {
                Ok(()) => return Ok(org),
                Err(e @ Error::Conflict { .. }) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::conflict("slug is taken")))
    }

    pub async fn get_organization(&self, principal: &Principal, org: OrgId) -> Result<Organization> {
        self.access(principal, org, Permission::Read).await?;
        self.orgs.get(org).await?.ok_or(Error::not_found("organization"))
    }

    pub async fn update_organization(
        &self,
        principal: &Principal,
        org: OrgId,
        update: OrganizationUpdate,
    ) -> Result<Organization> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.orgs.get(org).await?.ok_or(Error::not_found("organization"))?;
        let mut after = before.clone();
        let mut problems = Vec::new();
        if let Some(n) = update.name {
            match user::validate_name("name", &n) {
                Ok(n) => after.name = n,
                Err(e) => problems.push(e),
            }
        }
        if let Some(s) = update.slug {
            match org::validate_slug(&s) {
                Ok(s) => after.slug = s,
                Err(e) => problems.push(e),
            }
        }
        if !problems.is_empty() {
            return Err(merge_validation(problems));
        }
        if after == before {
            return Ok(after);
        }
        let audit =
            AuditEntry::new(Some(org), principal.actor(), "organization.updated", "organization", org, self.now())
                .with_change(org_json(&before), org_json(&after));
        self.orgs.update(&after, &audit).await?;
        Ok(after)
    }

    pub async fn delete_organization(&self, principal: &Principal, org: OrgId) -> Result<()> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.orgs.get(org).await?.ok_or(Error::not_found("organization"))?;
        let audit =
            AuditEntry::new(Some(org), principal.actor(), "organization.deleted", "organization", org, self.now())
                .with_change(org_json(&before), Value::Null);
        self.orgs.delete(org, &audit).await?;
        self.keys.remove_where(|_, k| k.org_id == org);
        Ok(())
    }

    // ---- members --------------------------------------------------------

    pub async fn list_members(&self, principal: &Principal, org: OrgId, page: PageRequest) -> Result<Page<Member>> {
        self.access(principal, org, Permission::Read).await?;
        self.orgs.list_members(org, page).await
    }

    pub async fn update_member_role(
        &self,
        principal: &Principal,
        org: OrgId,
        user: UserId,
        role: Role,
    ) -> Result<Member> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.orgs.get_member(org, user).await?.ok_or(Error::not_found("member"))?;
        if before.role == role {
            return Ok(before);
        }
        let audit = AuditEntry::new(Some(org), principal.actor(), "member.role_updated", "member", user, self.now())
            .with_change(json!({"role": before.role.as_str()}), json!({"role": role.as_str()}));
        self.orgs.set_member_role(org, user, role, &audit).await
    }

    pub async fn remove_member(&self, principal: &Principal, org: OrgId, user: UserId) -> Result<()> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.orgs.get_member(org, user).await?.ok_or(Error::not_found("member"))?;
        let audit = AuditEntry::new(Some(org), principal.actor(), "member.removed", "member", user, self.now())
            .with_change(member_json(&before), Value::Null);
        self.orgs.remove_member(org, user, &audit).await
    }

    // ---- invitations ----------------------------------------------------

    pub async fn create_invitation(
        &self,
        principal: &Principal,
        org: OrgId,
        email: &str,
        role: Role,
    ) -> Result<CreatedInvitation> {
        self.access(principal, org, Permission::Administer).await?;
        let email = user::validate_email("email", email)?;
        let now = self.now();
        let (token, hash) = invitation::new_token();
        let inv = Invitation {
            id: InvitationId::new(),
            org_id: org,
            email,
            role,
            status: InvitationStatus::Pending,
            expires_at: now + INVITATION_TTL,
            created_at: now,
            invited_by: principal.user_id(),
        };
        let audit = AuditEntry::new(Some(org), principal.actor(), "invitation.created", "invitation", inv.id, now)
            .with_change(Value::Null, invitation_json(&inv, now));
        self.invitations.create(&inv, &hash, &audit).await?;
        Ok(CreatedInvitation { invitation: inv, token: Secret::new(token) })
    }

    pub async fn list_invitations(
        &self,
        principal: &Principal,
        org: OrgId,
        page: PageRequest,
    ) -> Result<Page<Invitation>> {
        self.access(principal, org, Permission::Administer).await?;
        self.invitations.list(org, page).await
    }

    pub async fn revoke_invitation(&self, principal: &Principal, org: OrgId, id: InvitationId) -> Result<Invitation> {
        self.access(principal, org, Permission::Administer).await?;
        let now = self.now();
        let audit = AuditEntry::new(Some(org), principal.actor(), "invitation.revoked", "invitation", id, now)
            .with_change(json!({"status": "pending"}), json!({"status": "revoked"}));
        self.invitations.revoke(org, id, &audit).await
    }

    /// Sends invitation `id` again: a new token for its e-mail and role (the
    /// invitee lost the first, or let it expire), the old one revoked
    /// first so that only the new one works. Both are audited.
    pub async fn resend_invitation(
        &self,
        principal: &Principal,
        org: OrgId,
        id: InvitationId,
    ) -> Result<CreatedInvitation> {
        let old = self.revoke_invitation(principal, org, id).await?;
        self.create_invitation(principal, org, &old.email, old.role).await
    }

    /// The invitation of `token`, if the calling user may accept it now
    /// (its e-mail, pending, not expired): the organization and the role
    /// it offers, for a page that asks before accepting.
    pub async fn invitation_offer(&self, principal: &Principal, token: &str) -> Result<(Organization, Role)> {
        let inv = self.acceptable_invitation(principal, token).await?;
        let org = self.orgs.get(inv.org_id).await?.ok_or_else(|| Error::not_found("invitation"))?;
        Ok((org, inv.role))
    }

    /// The invitation of `token`, checked for the calling user now.
    async fn acceptable_invitation(&self, principal: &Principal, token: &str) -> Result<invitation::Invitation> {
        let user = principal.user()?;
        let not_found = || Error::not_found("invitation");
        if !token.starts_with(invitation::TOKEN_PREFIX) || token.len() > 128 {
            return Err(not_found());
        }
        let inv = self.invitations.find_by_token_hash(&invitation::hash_token(token)).await?.ok_or_else(not_found)?;
        inv.check_acceptable(user.email.as_deref(), self.now())?;
        Ok(inv)
    }

    /// Accepts an invitation for the calling user; answers the organization
    /// joined and the role.
    pub async fn accept_invitation(&self, principal: &Principal, token: &str) -> Result<(Organization, Role)> {
        let user = principal.user()?;
        let not_found = || Error::not_found("invitation");
        let inv = self.acceptable_invitation(principal, token).await?;
        let now = self.now();
        let audit =
            AuditEntry::new(Some(inv.org_id), principal.actor(), "invitation.accepted", "invitation", inv.id, now)
                .with_change(
                    json!({"status": "pending"}),
                    json!({"status": "accepted", "user_id": user.id, "role": inv.role.as_str()}),
                );
        self.invitations.accept(&inv, user.id, now, &audit).await?;
        let org = self.orgs.get(inv.org_id).await?.ok_or_else(not_found)?;
        Ok((org, inv.role))
    }

    // ---- API keys -------------------------------------------------------

    pub async fn create_api_key(
        &self,
        principal: &Principal,
        org: OrgId,
        name: &str,
        roles: &[Role],
    ) -> Result<CreatedApiKey> {
        self.access(principal, org, Permission::Administer).await?;
        let mut problems = Vec::new();
        let name = user::validate_name("name", name).map_err(|e| problems.push(e)).ok();
        let roles = apikey::validate_roles(roles).map_err(|e| problems.push(e)).ok();
        let (Some(name), Some(roles)) = (name, roles) else {
            return Err(merge_validation(problems));
        };
        let now = self.now();
        let generated = apikey::generate();
        let key = ApiKey {
            id: ApiKeyId::new(),
            org_id: org,
            name,
            prefix: generated.prefix,
            roles,
            created_at: now,
            last_used_at: None,
            revoked_at: None,
        };
        let audit = AuditEntry::new(Some(org), principal.actor(), "api_key.created", "api_key", key.id, now)
            .with_change(Value::Null, api_key_json(&key));
        self.api_keys.create(&key, &generated.hash, &audit).await?;
        Ok(CreatedApiKey { key, plain: generated.plain })
    }

    pub async fn list_api_keys(&self, principal: &Principal, org: OrgId, page: PageRequest) -> Result<Page<ApiKey>> {
        self.access(principal, org, Permission::Administer).await?;
        self.api_keys.list(org, page).await
    }

    pub async fn revoke_api_key(&self, principal: &Principal, org: OrgId, id: ApiKeyId) -> Result<()> {
        self.access(principal, org, Permission::Administer).await?;
        let now = self.now();
        let audit = AuditEntry::new(Some(org), principal.actor(), "api_key.revoked", "api_key", id, now)
            .with_change(json!({"revoked": false}), json!({"revoked": true}));
        self.api_keys.revoke(org, id, now, &audit).await?;
        self.keys.remove_where(|_, k| k.id == id);
        Ok(())
    }

    // ---- audit log ------------------------------------------------------

    pub async fn list_audit_logs(
        &self,
        principal: &Principal,
        org: OrgId,
        filter: &AuditFilter,
        page: PageRequest,
    ) -> Result<Page<AuditEntry>> {
        self.access(principal, org, Permission::Read).await?;
        self.audit.list(org, filter, page).await
    }
}

fn user_json(u: &User) -> Value {
    json!({"email": u.email, "name": u.name})
}

fn org_json(o: &Organization) -> Value {
    json!({"name": o.name, "slug": o.slug})
}

fn member_json(m: &Member) -> Value {
    json!({"user_id": m.user_id, "email": m.email, "role": m.role.as_str()})
}

fn invitation_json(i: &Invitation, now: time::OffsetDateTime) -> Value {
    json!({"email": i.email, "role": i.role.as_str(), "status": i.status_at(now).as_str()})
}

fn api_key_json(k: &ApiKey) -> Value {
    json!({"name": k.name, "prefix": k.prefix, "roles": k.roles.iter().map(|r| r.as_str()).collect::<Vec<_>>()})
}
