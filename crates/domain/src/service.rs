//! Use cases. `Sluice` holds the ports and implements every operation of the
//! identity and organization slice; each method checks access first, through
//! [`Sluice::access`], the one place role requirements are enforced.

use crate::connect::connector::ConnectorRegistry;
use crate::identity::apikey::{self, ApiKey};
use crate::identity::invitation::{self, INVITATION_TTL, Invitation, InvitationStatus};
use crate::identity::org::{self, Member, Organization, Plan};
use crate::identity::user::{self, ProfileUpdate, User, VerifiedClaims};
use crate::identity::{Permission, Principal, Role, authorize, effective_role};
use crate::ports::{
    ApiKeyRepository, AuditRepository, CatalogRepository, ConnectionRepository, HealthCheck, IdempotencyStore,
    IntegrationRepository, InvitationRepository, OrgRepository, SecretResolver, TokenVerifier, UserRepository,
};
use crate::shared::audit::{AuditEntry, AuditFilter};
use crate::shared::cache::Ttl;
use crate::shared::clock::Clock;
use crate::shared::ids::{ApiKeyId, InvitationId, OrgId, UserId};
use crate::shared::page::{Page, PageRequest};
use crate::shared::secret::Secret;
use crate::{Error, Result};
use serde_json::{Value, json};
use std::sync::Arc;
use time::Duration;

/// The ports the service runs on.
#[derive(Clone)]
pub struct Ports {
    pub users: Arc<dyn UserRepository>,
    pub orgs: Arc<dyn OrgRepository>,
    pub invitations: Arc<dyn InvitationRepository>,
    pub api_keys: Arc<dyn ApiKeyRepository>,
    pub audit: Arc<dyn AuditRepository>,
    pub idempotency: Arc<dyn IdempotencyStore>,
    pub tokens: Arc<dyn TokenVerifier>,
    pub health: Arc<dyn HealthCheck>,
    pub clock: Arc<dyn Clock>,
    pub integrations: Arc<dyn IntegrationRepository>,
    pub connections: Arc<dyn ConnectionRepository>,
    pub catalog: Arc<dyn CatalogRepository>,
    pub connectors: Arc<dyn ConnectorRegistry>,
    pub secrets: Arc<dyn SecretResolver>,
    /// OAuth providers; `None` when none is configured.
    pub oauth: Option<Arc<dyn crate::connect::oauth::OAuthClient>>,
    pub oauth_states: Option<Arc<dyn crate::connect::oauth::OAuthStateStore>>,
    /// Signs OAuth `state` parameters.
    pub oauth_state_key: Vec<u8>,
    pub flows: Arc<dyn crate::sync::flow::FlowRepository>,
    pub runs: Arc<dyn crate::sync::flow::RunRepository>,
    pub cursors: Arc<dyn crate::sync::flow::CursorRepository>,
    pub queue: Arc<dyn crate::sync::schedule::QueueRepository>,
    pub activity: Arc<dyn crate::monitoring::ports::ActivityRepository>,
    pub iac: Arc<dyn crate::iac::IacRepository>,
}

/// A key's `last_used_at` is written at most this often.
const TOUCH_INTERVAL: Duration = Duration::minutes(1);

#[derive(Clone)]
pub struct Sluice {
    pub(crate) ports: Ports,
    pub(crate) cache: Arc<Caches>,
    /// How long a worker holds a run without renewing its heartbeat.
    pub(crate) lease: time::Duration,
    /// Where [`Sluice::off_thread`] runs CPU-bound work.
    pub(crate) offload: Arc<dyn crate::ports::Offload>,
}

/// Reads the API-key path repeats on every request (see [`crate::shared::cache`]).
#[derive(Default)]
pub(crate) struct Caches {
    /// Active keys by the hash of their value.
    pub keys: Ttl<String, ApiKey>,
    pub assets: Ttl<(OrgId, crate::shared::ids::AssetId), Arc<crate::catalog::DataAsset>>,
    pub plans: Ttl<OrgId, Plan>,
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

impl Sluice {
    pub fn new(ports: Ports) -> Self {
        Self {
            ports,
            cache: Arc::default(),
            lease: crate::sync::schedule::LEASE,
            offload: Arc::new(crate::ports::Inline),
        }
    }

    /// Runs [`Sluice::off_thread`]'s work (the gateway's extraction and
    /// parse of large payloads) on `offload` (by default on the calling
    /// task).
    pub fn with_offload(mut self, offload: Arc<dyn crate::ports::Offload>) -> Self {
        self.offload = offload;
        self
    }

    /// Runs CPU-bound `work` on the offload pool (bounded in the service)
    /// and hands back its result: for the gateway's extraction of a large
    /// payload, and for adapters with such work of their own (the HTTP
    /// layer's parse of a large gateway body), so that all of it shares
    /// one bound.
    ///
    /// # Errors
    /// Internal, when the work did not finish (it panicked).
    pub async fn off_thread<T: Send + 'static>(&self, work: impl FnOnce() -> T + Send + 'static) -> Result<T> {
        let slot = Arc::new(std::sync::Mutex::new(None));
        let out = slot.clone();
        self.offload
            .run(Box::new(move || {
                let r = work();
                *out.lock().unwrap_or_else(|p| p.into_inner()) = Some(r);
            }))
            .await;
        let done = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        done.ok_or_else(|| Error::Internal(anyhow::anyhow!("offloaded work did not finish")))
    }

    /// Sets how long a run's lease lasts without a heartbeat (default
    /// [`crate::sync::schedule::LEASE`]).
    pub fn with_lease(mut self, lease: std::time::Duration) -> Self {
        self.lease = time::Duration::try_from(lease).unwrap_or(crate::sync::schedule::LEASE);
        self
    }

    /// How long a run's lease lasts: workers renew it several times within.
    pub fn lease(&self) -> std::time::Duration {
        std::time::Duration::try_from(self.lease).unwrap_or(std::time::Duration::from_secs(60))
    }

    pub fn now(&self) -> time::OffsetDateTime {
        self.ports.clock.now()
    }

    // ---- authentication -------------------------------------------------

    /// The user behind a session token, created on first sight.
    pub async fn authenticate_session(&self, token: &str) -> Result<(Principal, VerifiedClaims)> {
        let claims = self.ports.tokens.verify(token).await?;
        let user = self.ports.users.upsert_from_claims(&claims, self.now()).await?;
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
            .cache
            .keys
            .get_or_load(&hash, now, async {
                self.ports.api_keys.find_active_by_hash(&hash).await?.ok_or_else(unknown)
            })
            .await?;
        if key.last_used_at.is_none_or(|t| now - t >= TOUCH_INTERVAL) {
            self.ports.api_keys.touch(key.id, now).await?;
            self.cache.keys.update(&hash, |k| k.last_used_at = Some(now));
        }
        Ok(Principal::ApiKey { id: key.id, org_id: key.org_id, name: key.name, roles: key.roles })
    }

    // ---- access ---------------------------------------------------------

    /// The caller's role in `org`, if it has one.
    pub async fn role_in(&self, principal: &Principal, org: OrgId) -> Result<Option<Role>> {
        match principal {
            Principal::User(u) => self.ports.orgs.role_of(org, u.id).await,
            Principal::ApiKey { org_id, roles, .. } => Ok(if *org_id == org { effective_role(roles) } else { None }),
        }
    }

    /// Checks that the caller may do `permission` in `org`. A caller with no
    /// role there gets `NotFound`, so other organizations stay invisible.
    pub async fn access(&self, principal: &Principal, org: OrgId, permission: Permission) -> Result<Role> {
        authorize(self.role_in(principal, org).await?, permission)
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
        crate::shared::idempotency::begin(self.ports.idempotency.as_ref(), scope, key, fingerprint, self.now()).await
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
        self.ports.idempotency.complete(scope, key, response).await
    }

    /// Forgets an idempotent request that failed (a 5xx is not stored).
    ///
    /// # Errors
    /// A store failure.
    pub async fn release_idempotent(&self, scope: &str, key: &str) -> Result<()> {
        self.ports.idempotency.release(scope, key).await
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
        self.ports.users.update(&after, &audit).await?;
        Ok(after)
    }

    // ---- organizations --------------------------------------------------

    pub async fn list_organizations(&self, principal: &Principal, page: PageRequest) -> Result<Page<Organization>> {
        match principal {
            Principal::User(u) => self.ports.orgs.list_for_user(u.id, page).await,
            Principal::ApiKey { org_id, .. } => {
                let org = self.ports.orgs.get(*org_id).await?;
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
            let org = Organization { id: OrgId::new(), name: name.clone(), slug, plan: Plan::Free, created_at: now };
            let audit =
                AuditEntry::new(Some(org.id), principal.actor(), "organization.created", "organization", org.id, now)
                    .with_change(Value::Null, org_json(&org));
            match self.ports.orgs.create(&org, user.id, &audit).await {
                Ok(()) => return Ok(org),
                Err(e @ Error::Conflict { .. }) => last_err = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_err.unwrap_or_else(|| Error::conflict("slug is taken")))
    }

    pub async fn get_organization(&self, principal: &Principal, org: OrgId) -> Result<Organization> {
        self.access(principal, org, Permission::Read).await?;
        self.ports.orgs.get(org).await?.ok_or(Error::not_found("organization"))
    }

    pub async fn update_organization(
        &self,
        principal: &Principal,
        org: OrgId,
        update: OrganizationUpdate,
    ) -> Result<Organization> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.ports.orgs.get(org).await?.ok_or(Error::not_found("organization"))?;
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
        self.ports.orgs.update(&after, &audit).await?;
        Ok(after)
    }

    pub async fn delete_organization(&self, principal: &Principal, org: OrgId) -> Result<()> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.ports.orgs.get(org).await?.ok_or(Error::not_found("organization"))?;
        let audit =
            AuditEntry::new(Some(org), principal.actor(), "organization.deleted", "organization", org, self.now())
                .with_change(org_json(&before), Value::Null);
        self.ports.orgs.delete(org, &audit).await?;
        self.cache.keys.remove_where(|_, k| k.org_id == org);
        self.forget_assets(org);
        self.cache.plans.remove_where(|o, _| *o == org);
        Ok(())
    }

    // ---- members --------------------------------------------------------

    pub async fn list_members(&self, principal: &Principal, org: OrgId, page: PageRequest) -> Result<Page<Member>> {
        self.access(principal, org, Permission::Read).await?;
        self.ports.orgs.list_members(org, page).await
    }

    pub async fn update_member_role(
        &self,
        principal: &Principal,
        org: OrgId,
        user: UserId,
        role: Role,
    ) -> Result<Member> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.ports.orgs.get_member(org, user).await?.ok_or(Error::not_found("member"))?;
        if before.role == role {
            return Ok(before);
        }
        let audit = AuditEntry::new(Some(org), principal.actor(), "member.role_updated", "member", user, self.now())
            .with_change(json!({"role": before.role.as_str()}), json!({"role": role.as_str()}));
        self.ports.orgs.set_member_role(org, user, role, &audit).await
    }

    pub async fn remove_member(&self, principal: &Principal, org: OrgId, user: UserId) -> Result<()> {
        self.access(principal, org, Permission::Administer).await?;
        let before = self.ports.orgs.get_member(org, user).await?.ok_or(Error::not_found("member"))?;
        let audit = AuditEntry::new(Some(org), principal.actor(), "member.removed", "member", user, self.now())
            .with_change(member_json(&before), Value::Null);
        self.ports.orgs.remove_member(org, user, &audit).await
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
        self.ports.invitations.create(&inv, &hash, &audit).await?;
        Ok(CreatedInvitation { invitation: inv, token: Secret::new(token) })
    }

    pub async fn list_invitations(
        &self,
        principal: &Principal,
        org: OrgId,
        page: PageRequest,
    ) -> Result<Page<Invitation>> {
        self.access(principal, org, Permission::Administer).await?;
        self.ports.invitations.list(org, page).await
    }

    pub async fn revoke_invitation(&self, principal: &Principal, org: OrgId, id: InvitationId) -> Result<Invitation> {
        self.access(principal, org, Permission::Administer).await?;
        let now = self.now();
        let audit = AuditEntry::new(Some(org), principal.actor(), "invitation.revoked", "invitation", id, now)
            .with_change(json!({"status": "pending"}), json!({"status": "revoked"}));
        self.ports.invitations.revoke(org, id, &audit).await
    }

    /// Accepts an invitation for the calling user; answers the organization
    /// joined and the role.
    pub async fn accept_invitation(&self, principal: &Principal, token: &str) -> Result<(Organization, Role)> {
        let user = principal.user()?;
        let not_found = || Error::not_found("invitation");
        if !token.starts_with(invitation::TOKEN_PREFIX) || token.len() > 128 {
            return Err(not_found());
        }
        let inv =
            self.ports.invitations.find_by_token_hash(&invitation::hash_token(token)).await?.ok_or_else(not_found)?;
        let now = self.now();
        inv.check_acceptable(user.email.as_deref(), now)?;
        let audit =
            AuditEntry::new(Some(inv.org_id), principal.actor(), "invitation.accepted", "invitation", inv.id, now)
                .with_change(
                    json!({"status": "pending"}),
                    json!({"status": "accepted", "user_id": user.id, "role": inv.role.as_str()}),
                );
        self.ports.invitations.accept(&inv, user.id, now, &audit).await?;
        let org = self.ports.orgs.get(inv.org_id).await?.ok_or_else(not_found)?;
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
        self.ports.api_keys.create(&key, &generated.hash, &audit).await?;
        Ok(CreatedApiKey { key, plain: generated.plain })
    }

    pub async fn list_api_keys(&self, principal: &Principal, org: OrgId, page: PageRequest) -> Result<Page<ApiKey>> {
        self.access(principal, org, Permission::Administer).await?;
        self.ports.api_keys.list(org, page).await
    }

    pub async fn revoke_api_key(&self, principal: &Principal, org: OrgId, id: ApiKeyId) -> Result<()> {
        self.access(principal, org, Permission::Administer).await?;
        let now = self.now();
        let audit = AuditEntry::new(Some(org), principal.actor(), "api_key.revoked", "api_key", id, now)
            .with_change(json!({"revoked": false}), json!({"revoked": true}));
        self.ports.api_keys.revoke(org, id, now, &audit).await?;
        self.cache.keys.remove_where(|_, k| k.id == id);
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
        self.ports.audit.list(org, filter, page).await
    }

    pub async fn health(&self) -> Result<()> {
        self.ports.health.ping().await
    }
}

/// Several field errors as one validation error.
pub(crate) fn merge_validation(errors: Vec<Error>) -> Error {
    let mut fields = Vec::new();
    for e in errors {
        match e {
            Error::Validation(f) => fields.extend(f),
            other => return other,
        }
    }
    Error::Validation(fields)
}

fn user_json(u: &User) -> Value {
    json!({"email": u.email, "name": u.name})
}

fn org_json(o: &Organization) -> Value {
    json!({"name": o.name, "slug": o.slug, "plan": o.plan.as_str()})
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ports::*;
    use crate::shared::clock::Clock;
    use time::OffsetDateTime;
    use time::macros::datetime;

    struct Fixed(OffsetDateTime);
    impl Clock for Fixed {
        fn now(&self) -> OffsetDateTime {
            self.0
        }
    }

    const NOW: OffsetDateTime = datetime!(2026-06-01 12:00 UTC);

    /// Ports whose mocks panic on any call not expected by the test.
    fn ports(api_keys: MockApiKeyRepository, orgs: MockOrgRepository) -> Ports {
        Ports {
            users: Arc::new(MockUserRepository::new()),
            orgs: Arc::new(orgs),
            invitations: Arc::new(MockInvitationRepository::new()),
            api_keys: Arc::new(api_keys),
            audit: Arc::new(MockAuditRepository::new()),
            idempotency: Arc::new(MockIdempotencyStore::new()),
            tokens: Arc::new(MockTokenVerifier::new()),
            health: Arc::new(MockHealthCheck::new()),
            clock: Arc::new(Fixed(NOW)),
            integrations: Arc::new(MockIntegrationRepository::new()),
            connections: Arc::new(MockConnectionRepository::new()),
            catalog: Arc::new(MockCatalogRepository::new()),
            connectors: Arc::new(crate::connect::connector::MockConnectorRegistry::new()),
            secrets: Arc::new(MockSecretResolver::new()),
            oauth: None,
            oauth_states: None,
            oauth_state_key: vec![0; 32],
            flows: Arc::new(crate::sync::flow::MockFlowRepository::new()),
            runs: Arc::new(crate::sync::flow::MockRunRepository::new()),
            cursors: Arc::new(crate::sync::flow::MockCursorRepository::new()),
            queue: Arc::new(crate::sync::schedule::MockQueueRepository::new()),
            activity: Arc::new(crate::monitoring::ports::MockActivityRepository::new()),
            iac: Arc::new(crate::iac::MockIacRepository::new()),
        }
    }

    fn key(last_used_at: Option<OffsetDateTime>) -> ApiKey {
        ApiKey {
            id: ApiKeyId::new(),
            org_id: OrgId::new(),
            name: "ci".into(),
            prefix: "slk_abcd".into(),
            roles: vec![Role::Editor],
            created_at: NOW - Duration::days(1),
            last_used_at,
            revoked_at: None,
        }
    }

    #[tokio::test]
    async fn an_apply_planned_against_a_stale_organization_plans_again() {
        let mut iac = crate::iac::MockIacRepository::new();
        iac.expect_snapshot().times(3).returning(|_| Ok(crate::iac::Snapshot::default()));
        let mut calls = 0;
        iac.expect_apply().times(2).returning(move |_, writes, audit| {
            calls += 1;
            assert_eq!(writes.integrations.len(), 1);
            assert_eq!(
                audit.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
                ["integration.created", "iac.applied"]
            );
            if calls == 1 { Err(crate::iac::stale_plan()) } else { Ok(()) }
        });
        let mut connectors = crate::connect::connector::MockConnectorRegistry::new();
        connectors.expect_specs().returning(Vec::new);
        let mut p = ports(MockApiKeyRepository::new(), MockOrgRepository::new());
        p.iac = Arc::new(iac);
        p.connectors = Arc::new(connectors);
        p.oauth = None;
        let sluice = Sluice::new(p);
        let k = key(None);
        let principal = Principal::ApiKey { id: k.id, org_id: k.org_id, name: k.name, roles: vec![Role::Editor] };
        // An OAuth-less registry knows no types: the plan must fail validation
        // before any write, and nothing is applied.
        let err = sluice
            .apply_iac(&principal, k.org_id, "version: 1\nintegrations: [{name: gh, type: github}]", false)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Validation);
        let mut connectors = crate::connect::connector::MockConnectorRegistry::new();
        connectors.expect_specs().returning(Vec::new);
        let mut oauth = crate::connect::oauth::MockOAuthClient::new();
        oauth.expect_providers().returning(|| vec!["github".to_string()]);
        let mut p = sluice.ports.clone();
        p.connectors = Arc::new(connectors);
        p.oauth = Some(Arc::new(oauth));
        let sluice = Sluice::new(p);
        let out = sluice
            .apply_iac(&principal, k.org_id, "version: 1\nintegrations: [{name: gh, type: github}]", false)
            .await
            .unwrap();
        assert!(out.apply_id.is_some());
        assert_eq!(out.plan.count(crate::iac::Action::Created), 1);
    }

    #[tokio::test]
    async fn malformed_keys_are_refused_without_a_lookup() {
        let sluice = Sluice::new(ports(MockApiKeyRepository::new(), MockOrgRepository::new()));
        let err = sluice.authenticate_api_key("slk_short").await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Unauthenticated);
    }

    #[tokio::test]
    async fn a_key_records_its_use_at_most_once_a_minute() {
        for (last_used, touches) in
            [(None, 1), (Some(NOW - Duration::seconds(30)), 0), (Some(NOW - Duration::minutes(2)), 1)]
        {
            let k = key(last_used);
            let mut repo = MockApiKeyRepository::new();
            let found = k.clone();
            repo.expect_find_active_by_hash().times(1).returning(move |_| Ok(Some(found.clone())));
            repo.expect_touch().times(touches).returning(|_, _| Ok(()));
            let sluice = Sluice::new(ports(repo, MockOrgRepository::new()));
            let raw = format!("slk_{}", "a".repeat(40));
            match sluice.authenticate_api_key(&raw).await.unwrap() {
                Principal::ApiKey { org_id, roles, .. } => {
                    assert_eq!(org_id, k.org_id);
                    assert_eq!(roles, vec![Role::Editor]);
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[tokio::test]
    async fn a_key_is_refused_in_another_organization_without_touching_the_store() {
        let sluice = Sluice::new(ports(MockApiKeyRepository::new(), MockOrgRepository::new()));
        let k = key(None);
        let principal = Principal::ApiKey { id: k.id, org_id: k.org_id, name: k.name, roles: k.roles };
        let err = sluice.get_organization(&principal, OrgId::new()).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
        let err = sluice.list_members(&principal, OrgId::new(), PageRequest::default()).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn a_viewer_cannot_change_roles_and_the_store_is_not_asked_to() {
        let mut orgs = MockOrgRepository::new();
        orgs.expect_role_of().returning(|_, _| Ok(Some(Role::Viewer)));
        orgs.expect_set_member_role().never();
        let sluice = Sluice::new(ports(MockApiKeyRepository::new(), orgs));
        let user = User {
            id: UserId::new(),
            issuer: "i".into(),
            subject: "s".into(),
            email: None,
            name: None,
            created_at: NOW,
            updated_at: NOW,
        };
        let err = sluice.update_member_role(&Principal::User(user), OrgId::new(), UserId::new(), Role::Admin).await;
        assert_eq!(err.unwrap_err().kind(), crate::ErrorKind::Forbidden);
    }

    #[tokio::test]
    async fn a_role_change_is_audited_with_before_and_after() {
        let org = OrgId::new();
        let target = UserId::new();
        let mut orgs = MockOrgRepository::new();
        orgs.expect_role_of().returning(|_, _| Ok(Some(Role::Admin)));
        orgs.expect_get_member().returning(move |o, u| {
            Ok(Some(Member { org_id: o, user_id: u, email: None, name: None, role: Role::Viewer, joined_at: NOW }))
        });
        orgs.expect_set_member_role()
            .withf(move |o, u, r, audit| {
                *o == org
                    && *u == target
                    && *r == Role::Editor
                    && audit.action == "member.role_updated"
                    && audit.details == json!({"before": {"role": "Viewer"}, "after": {"role": "Editor"}})
                    && audit.created_at == NOW
            })
            .times(1)
            .returning(move |o, u, r, _| {
                Ok(Member { org_id: o, user_id: u, email: None, name: None, role: r, joined_at: NOW })
            });
        let sluice = Sluice::new(ports(MockApiKeyRepository::new(), orgs));
        let admin =
            Principal::ApiKey { id: ApiKeyId::new(), org_id: org, name: "ops".into(), roles: vec![Role::Admin] };
        let m = sluice.update_member_role(&admin, org, target, Role::Editor).await.unwrap();
        assert_eq!(m.role, Role::Editor);
    }
}
