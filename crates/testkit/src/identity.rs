//! Identity in memory: users, organizations, invitations, API keys, the
//! audit log, idempotency records; a fake token verifier and a manual clock.

use super::*;

#[derive(Default)]
pub(crate) struct State {
    pub(crate) users: Vec<User>,
    pub(crate) orgs: Vec<Organization>,
    /// (org, user) → (role, joined_at)
    pub(crate) members: HashMap<(OrgId, UserId), (Role, OffsetDateTime)>,
    pub(crate) invitations: Vec<(Invitation, String)>,
    pub(crate) keys: Vec<(ApiKey, String)>,
    pub(crate) audit: Vec<AuditEntry>,
    pub(crate) idempotency: HashMap<(String, String), IdempotencyRecord>,
}

/// The metadata store, in memory.
#[derive(Default, Clone)]
pub struct InMemoryStore {
    pub(crate) state: Arc<Mutex<State>>,
}

impl InMemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn s(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every audit entry written so far, oldest first.
    pub fn audit_entries(&self) -> Vec<AuditEntry> {
        self.s().audit.clone()
    }
}

fn member_of(s: &State, org: OrgId, user: UserId) -> Option<Member> {
    let (role, joined_at) = *s.members.get(&(org, user))?;
    let u = s.users.iter().find(|u| u.id == user);
    Some(Member {
        org_id: org,
        user_id: user,
        email: u.and_then(|u| u.email.clone()),
        name: u.and_then(|u| u.name.clone()),
        role,
        joined_at,
    })
}

fn admin_count(s: &State, org: OrgId) -> u64 {
    s.members.iter().filter(|((o, _), (r, _))| *o == org && *r == Role::Admin).count() as u64
}

#[async_trait]
impl UserRepository for InMemoryStore {
    async fn upsert_from_claims(&self, c: &VerifiedClaims, now: OffsetDateTime) -> Result<User> {
        let mut s = self.s();
        if let Some(u) = s.users.iter().find(|u| u.issuer == c.issuer && u.subject == c.subject) {
            return Ok(u.clone());
        }
        let u = User {
            id: UserId::new(),
            issuer: c.issuer.clone(),
            subject: c.subject.clone(),
            email: c.email.as_ref().map(|e| e.trim().to_lowercase()),
            name: c.name.clone(),
            created_at: now,
            updated_at: now,
        };
        s.users.push(u.clone());
        Ok(u)
    }

    async fn get(&self, id: UserId) -> Result<Option<User>> {
        Ok(self.s().users.iter().find(|u| u.id == id).cloned())
    }

    async fn update(&self, user: &User, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let u = s.users.iter_mut().find(|u| u.id == user.id).ok_or(Error::not_found("user"))?;
        *u = user.clone();
        s.audit.push(audit.clone());
        Ok(())
    }
}

#[async_trait]
impl OrgRepository for InMemoryStore {
    async fn create(&self, org: &Organization, admin: UserId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.orgs.iter().any(|o| o.slug == org.slug) {
            return Err(Error::conflict(format!("the slug '{}' is taken", org.slug)));
        }
        s.orgs.push(org.clone());
        s.members.insert((org.id, admin), (Role::Admin, org.created_at));
        s.audit.push(audit.clone());
        Ok(())
    }

    async fn get(&self, id: OrgId) -> Result<Option<Organization>> {
        Ok(self.s().orgs.iter().find(|o| o.id == id).cloned())
    }

    async fn list_for_user(&self, user: UserId, page: PageRequest) -> Result<Page<Organization>> {
        let s = self.s();
        let orgs = s.orgs.iter().filter(|o| s.members.contains_key(&(o.id, user))).cloned().collect();
        Ok(page_of(orgs, page, |o| o.id.as_uuid()))
    }

    async fn update(&self, org: &Organization, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.orgs.iter().any(|o| o.slug == org.slug && o.id != org.id) {
            return Err(Error::conflict(format!("the slug '{}' is taken", org.slug)));
        }
        let o = s.orgs.iter_mut().find(|o| o.id == org.id).ok_or(Error::not_found("organization"))?;
        *o = org.clone();
        s.audit.push(audit.clone());
        Ok(())
    }

    async fn delete(&self, id: OrgId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let before = s.orgs.len();
        s.orgs.retain(|o| o.id != id);
        if s.orgs.len() == before {
            return Err(Error::not_found("organization"));
        }
        s.members.retain(|(o, _), _| *o != id);
        s.invitations.retain(|(i, _)| i.org_id != id);
        s.keys.retain(|(k, _)| k.org_id != id);
        s.audit.push(audit.clone());
        Ok(())
    }

    async fn role_of(&self, org: OrgId, user: UserId) -> Result<Option<Role>> {
        Ok(self.s().members.get(&(org, user)).map(|(r, _)| *r))
    }

    async fn list_members(&self, org: OrgId, page: PageRequest) -> Result<Page<Member>> {
        let s = self.s();
        let members = s.members.keys().filter(|(o, _)| *o == org).filter_map(|(o, u)| member_of(&s, *o, *u)).collect();
        Ok(page_of(members, page, |m| m.user_id.as_uuid()))
    }

    async fn get_member(&self, org: OrgId, user: UserId) -> Result<Option<Member>> {
        Ok(member_of(&self.s(), org, user))
    }

    async fn set_member_role(&self, org: OrgId, user: UserId, role: Role, audit: &AuditEntry) -> Result<Member> {
        let mut s = self.s();
        let current = s.members.get(&(org, user)).map(|(r, _)| *r).ok_or(Error::not_found("member"))?;
        check_admin_retained(admin_count(&s, org), current, Some(role))?;
        if let Some(m) = s.members.get_mut(&(org, user)) {
            m.0 = role;
        }
        s.audit.push(audit.clone());
        member_of(&s, org, user).ok_or(Error::not_found("member"))
    }

    async fn remove_member(&self, org: OrgId, user: UserId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let current = s.members.get(&(org, user)).map(|(r, _)| *r).ok_or(Error::not_found("member"))?;
        check_admin_retained(admin_count(&s, org), current, None)?;
        s.members.remove(&(org, user));
        s.audit.push(audit.clone());
        Ok(())
    }
}

#[async_trait]
impl InvitationRepository for InMemoryStore {
    async fn create(&self, inv: &Invitation, token_hash: &str, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        s.invitations.push((inv.clone(), token_hash.to_string()));
        s.audit.push(audit.clone());
        Ok(())
    }

    async fn find_by_token_hash(&self, token_hash: &str) -> Result<Option<Invitation>> {
        Ok(self.s().invitations.iter().find(|(_, h)| h == token_hash).map(|(i, _)| i.clone()))
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Invitation>> {
        let items = self.s().invitations.iter().filter(|(i, _)| i.org_id == org).map(|(i, _)| i.clone()).collect();
        Ok(page_of(items, page, |i| i.id.as_uuid()))
    }

    async fn accept(&self, inv: &Invitation, user: UserId, now: OffsetDateTime, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let pending = s.invitations.iter().any(|(i, _)| i.id == inv.id && i.status == InvitationStatus::Pending);
        if !pending {
            return Err(Error::Conflict {
                code: sluice_domain::shared::error::Code::InvitationNotPending,
                message: "this invitation is no longer pending".into(),
            });
        }
        if s.members.contains_key(&(inv.org_id, user)) {
            return Err(Error::Conflict {
                code: sluice_domain::shared::error::Code::AlreadyMember,
                message: "you are already a member of this organization".into(),
            });
        }
        if let Some((i, _)) = s.invitations.iter_mut().find(|(i, _)| i.id == inv.id) {
            i.status = InvitationStatus::Accepted;
        }
        s.members.insert((inv.org_id, user), (inv.role, now));
        s.audit.push(audit.clone());
        Ok(())
    }

    async fn revoke(&self, org: OrgId, id: InvitationId, audit: &AuditEntry) -> Result<Invitation> {
        let mut s = self.s();
        let (i, _) = s
            .invitations
            .iter_mut()
            .find(|(i, _)| i.id == id && i.org_id == org)
            .ok_or(Error::not_found("invitation"))?;
        if i.status != InvitationStatus::Pending {
            return Err(Error::Conflict {
                code: sluice_domain::shared::error::Code::InvitationNotPending,
                message: format!("this invitation is {}", i.status.as_str()),
            });
        }
        i.status = InvitationStatus::Revoked;
        let out = i.clone();
        s.audit.push(audit.clone());
        Ok(out)
    }
}

#[async_trait]
impl ApiKeyRepository for InMemoryStore {
    async fn create(&self, key: &ApiKey, hash: &str, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        s.keys.push((key.clone(), hash.to_string()));
        s.audit.push(audit.clone());
        Ok(())
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<ApiKey>> {
        let items = self
            .s()
            .keys
            .iter()
            .filter(|(k, _)| k.org_id == org && k.revoked_at.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        Ok(page_of(items, page, |k| k.id.as_uuid()))
    }

    async fn revoke(&self, org: OrgId, id: ApiKeyId, now: OffsetDateTime, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let (k, _) = s
            .keys
            .iter_mut()
            .find(|(k, _)| k.id == id && k.org_id == org && k.revoked_at.is_none())
            .ok_or(Error::not_found("api key"))?;
        k.revoked_at = Some(now);
        s.audit.push(audit.clone());
        Ok(())
    }

    async fn find_active_by_hash(&self, hash: &str) -> Result<Option<ApiKey>> {
        Ok(self.s().keys.iter().find(|(k, h)| h == hash && k.revoked_at.is_none()).map(|(k, _)| k.clone()))
    }

    async fn touch(&self, id: ApiKeyId, now: OffsetDateTime) -> Result<()> {
        if let Some((k, _)) = self.s().keys.iter_mut().find(|(k, _)| k.id == id) {
            k.last_used_at = Some(now);
        }
        Ok(())
    }
}

#[async_trait]
impl AuditRepository for InMemoryStore {
    async fn append(&self, entry: &AuditEntry) -> Result<()> {
        self.s().audit.push(entry.clone());
        Ok(())
    }

    async fn list(&self, org: OrgId, filter: &AuditFilter, page: PageRequest) -> Result<Page<AuditEntry>> {
        let items = self.s().audit.iter().filter(|e| e.org_id == Some(org) && filter.matches(e)).cloned().collect();
        Ok(page_of(items, page, |e| e.id.as_uuid()))
    }
}

#[async_trait]
impl IdempotencyStore for InMemoryStore {
    async fn try_insert(&self, record: &IdempotencyRecord) -> Result<Option<IdempotencyRecord>> {
        let mut s = self.s();
        let k = (record.scope.clone(), record.key.clone());
        if let Some(existing) = s.idempotency.get(&k) {
            return Ok(Some(existing.clone()));
        }
        s.idempotency.insert(k, record.clone());
        Ok(None)
    }

    async fn take_over(&self, old: &IdempotencyRecord, new: &IdempotencyRecord) -> Result<bool> {
        let mut s = self.s();
        match s.idempotency.get_mut(&(old.scope.clone(), old.key.clone())) {
            Some(r) if r.created_at == old.created_at => {
                *r = new.clone();
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn complete(&self, scope: &str, key: &str, response: &StoredResponse) -> Result<()> {
        if let Some(r) = self.s().idempotency.get_mut(&(scope.to_string(), key.to_string())) {
            r.response = Some(response.clone());
        }
        Ok(())
    }

    async fn release(&self, scope: &str, key: &str) -> Result<()> {
        self.s().idempotency.remove(&(scope.to_string(), key.to_string()));
        Ok(())
    }
}

#[async_trait]
impl HealthCheck for InMemoryStore {
    async fn ping(&self) -> Result<()> {
        Ok(())
    }
}

/// A token verifier for tests: a token `user:<subject>:<email>` is valid,
/// anything else is not.
#[derive(Default, Clone)]
pub struct FakeTokens;

impl FakeTokens {
    pub fn token(subject: &str, email: &str) -> String {
        format!("user:{subject}:{email}")
    }
}

#[async_trait]
impl TokenVerifier for FakeTokens {
    async fn verify(&self, token: &str) -> Result<VerifiedClaims> {
        let mut parts = token.splitn(3, ':');
        match (parts.next(), parts.next(), parts.next()) {
            (Some("user"), Some(sub), Some(email)) if !sub.is_empty() => Ok(VerifiedClaims {
                issuer: "test".into(),
                subject: sub.into(),
                email: (!email.is_empty()).then(|| email.to_string()),
                name: Some(sub.to_string()),
            }),
            _ => Err(Error::Unauthenticated("invalid session token: not a test token".into())),
        }
    }
}

/// A clock that stands still until moved.
#[derive(Clone)]
pub struct ManualClock(Arc<Mutex<OffsetDateTime>>);

impl ManualClock {
    pub fn new(at: OffsetDateTime) -> Self {
        Self(Arc::new(Mutex::new(at)))
    }
    pub fn advance(&self, by: time::Duration) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
