//! In-memory implementations of Sluice's ports, for domain and HTTP tests
//! that need no database, plus a fake token verifier and a settable clock.
//! Each adapter keeps its state behind one mutex, so the rules the SQL
//! adapters enforce inside transactions hold here too.

use async_trait::async_trait;
use sluice_domain::identity::Role;
use sluice_domain::identity::apikey::ApiKey;
use sluice_domain::identity::invitation::{Invitation, InvitationStatus};
use sluice_domain::identity::org::{Member, Organization, check_admin_retained};
use sluice_domain::identity::user::{User, VerifiedClaims};
use sluice_domain::ports::*;
use sluice_domain::service::Ports;
use sluice_domain::shared::audit::{AuditEntry, AuditFilter};
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::idempotency::{IdempotencyRecord, StoredResponse};
use sluice_domain::shared::ids::{ApiKeyId, InvitationId, OrgId, UserId};
use sluice_domain::shared::page::{Page, PageRequest};
use sluice_domain::{Error, Result};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use time::OffsetDateTime;
use uuid::Uuid;

#[derive(Default)]
struct State {
    users: Vec<User>,
    orgs: Vec<Organization>,
    /// (org, user) → (role, joined_at)
    members: HashMap<(OrgId, UserId), (Role, OffsetDateTime)>,
    invitations: Vec<(Invitation, String)>,
    keys: Vec<(ApiKey, String)>,
    audit: Vec<AuditEntry>,
    idempotency: HashMap<(String, String), IdempotencyRecord>,
}

/// The metadata store, in memory.
#[derive(Default, Clone)]
pub struct InMemoryStore {
    state: Arc<Mutex<State>>,
}

impl InMemoryStore {
    pub fn new() -> Self {
        Self::default()
    }

    fn s(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every audit entry written so far, oldest first.
    pub fn audit_entries(&self) -> Vec<AuditEntry> {
        self.s().audit.clone()
    }
}

fn page_of<T: Clone>(mut items: Vec<T>, page: PageRequest, id: impl Fn(&T) -> Uuid) -> Page<T> {
    items.sort_by_key(|i| std::cmp::Reverse(id(i)));
    let items: Vec<T> =
        items.into_iter().filter(|i| page.after.is_none_or(|a| id(i) < a)).take(page.limit as usize + 1).collect();
    Page::from_overfetch(items, page.limit, id)
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
                code: sluice_domain::shared::error::code::INVITATION_NOT_PENDING,
                message: "this invitation is no longer pending".into(),
            });
        }
        if s.members.contains_key(&(inv.org_id, user)) {
            return Err(Error::Conflict {
                code: sluice_domain::shared::error::code::ALREADY_MEMBER,
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
                code: sluice_domain::shared::error::code::INVITATION_NOT_PENDING,
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

/// Ports wired to one in-memory store, the fake token verifier, `clock`,
/// the in-memory connectors and fake secrets.
pub fn in_memory_ports(store: &InMemoryStore, clock: Arc<dyn Clock>) -> Ports {
    in_memory_ports_with(store, clock, &MemoryConnectors::new(), FakeSecrets::default())
}

pub fn in_memory_ports_with(
    store: &InMemoryStore,
    clock: Arc<dyn Clock>,
    connectors: &MemoryConnectors,
    secrets: FakeSecrets,
) -> Ports {
    let s = Arc::new(store.clone());
    let catalog = Arc::new(InMemoryCatalog::new(store));
    let catalog_for_iac = catalog.clone();
    let flows = InMemoryFlows::new(store);
    Ports {
        integrations: catalog.clone(),
        connections: catalog.clone(),
        catalog,
        connectors: Arc::new(connectors.clone()),
        secrets: Arc::new(secrets),
        oauth: None,
        oauth_states: None,
        oauth_state_key: vec![7; 32],
        flows: Arc::new(flows.clone()),
        runs: Arc::new(flows.clone()),
        cursors: Arc::new(flows.clone()),
        queue: Arc::new(flows.clone()),
        activity: Arc::new(flows.clone()),
        iac: Arc::new(InMemoryIac { catalog: (*catalog_for_iac).clone(), flows, audit: store.clone() }),
        users: s.clone(),
        orgs: s.clone(),
        invitations: s.clone(),
        api_keys: s.clone(),
        audit: s.clone(),
        idempotency: s.clone(),
        tokens: Arc::new(FakeTokens),
        health: s,
        clock,
    }
}

// ---- integrations, connections, catalog --------------------------------

use sluice_domain::catalog::{AssetVersion, Change, DataAsset};
use sluice_domain::connect::connector::*;
use sluice_domain::connect::integration::{Connection, ConnectionStatus, Integration};
use sluice_domain::shared::ids::{AssetId, ConnectionId, IntegrationId};

#[derive(Default)]
struct CatalogState {
    integrations: Vec<Integration>,
    connections: Vec<Connection>,
    /// name → (version, schema)
    discovered: HashMap<(OrgId, String), (i32, EntitySchema)>,
    /// (org, connection, entity) → name of its discovered asset
    discovered_by_entity: HashMap<(OrgId, ConnectionId, String), String>,
    assets: Vec<DataAsset>,
    versions: Vec<(AssetId, AssetVersion)>,
    /// (org, month) → gateway validations counted
    usage: HashMap<(OrgId, String), i64>,
}

/// Integrations, connections and discovered assets, in memory.
#[derive(Default, Clone)]
pub struct InMemoryCatalog {
    state: Arc<Mutex<CatalogState>>,
    audit: InMemoryStore,
}

impl InMemoryCatalog {
    /// A catalog whose audit entries go to `store`.
    pub fn new(store: &InMemoryStore) -> Self {
        Self { state: Arc::default(), audit: store.clone() }
    }

    fn s(&self) -> MutexGuard<'_, CatalogState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The version of a discovered asset, if catalogued.
    pub fn discovered_version(&self, org: OrgId, name: &str) -> Option<i32> {
        self.s().discovered.get(&(org, name.to_string())).map(|(v, _)| *v)
    }

    fn log(&self, e: &AuditEntry) {
        self.audit.s().audit.push(e.clone());
    }
}

#[async_trait]
impl IntegrationRepository for InMemoryCatalog {
    async fn create(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.integrations.iter().any(|x| x.org_id == i.org_id && x.name == i.name) {
            return Err(Error::conflict("duplicate"));
        }
        s.integrations.push(i.clone());
        self.log(audit);
        Ok(())
    }

    async fn get(&self, org: OrgId, id: IntegrationId) -> Result<Option<Integration>> {
        Ok(self.s().integrations.iter().find(|i| i.org_id == org && i.id == id).cloned())
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Integration>> {
        Ok(self.s().integrations.iter().find(|i| i.org_id == org && i.name == name).cloned())
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Integration>> {
        let items = self.s().integrations.iter().filter(|i| i.org_id == org).cloned().collect();
        Ok(page_of(items, page, |i| i.id.as_uuid()))
    }

    async fn update(&self, i: &Integration, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.integrations.iter().any(|x| x.org_id == i.org_id && x.name == i.name && x.id != i.id) {
            return Err(Error::conflict("duplicate"));
        }
        if let Some(x) = s.integrations.iter_mut().find(|x| x.id == i.id) {
            *x = i.clone();
        }
        self.log(audit);
        Ok(())
    }

    async fn delete(&self, org: OrgId, id: IntegrationId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let users = s.connections.iter().filter(|c| c.integration_id == Some(id)).count();
        if users > 0 {
            return Err(Error::Conflict {
                code: sluice_domain::shared::error::code::IN_USE,
                message: format!("{users} connection(s) use this integration"),
            });
        }
        let before = s.integrations.len();
        s.integrations.retain(|i| !(i.org_id == org && i.id == id));
        if s.integrations.len() == before {
            return Err(Error::not_found("integration"));
        }
        self.log(audit);
        Ok(())
    }
}

#[async_trait]
impl ConnectionRepository for InMemoryCatalog {
    async fn create(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.connections.iter().any(|x| x.org_id == c.org_id && x.name == c.name) {
            return Err(Error::conflict("duplicate"));
        }
        s.connections.push(c.clone());
        self.log(audit);
        Ok(())
    }

    async fn get(&self, org: OrgId, id: ConnectionId) -> Result<Option<Connection>> {
        Ok(self.s().connections.iter().find(|c| c.org_id == org && c.id == id).cloned())
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Connection>> {
        Ok(self.s().connections.iter().find(|c| c.org_id == org && c.name == name).cloned())
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Connection>> {
        let items = self.s().connections.iter().filter(|c| c.org_id == org).cloned().collect();
        Ok(page_of(items, page, |c| c.id.as_uuid()))
    }

    async fn update(&self, c: &Connection, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.connections.iter().any(|x| x.org_id == c.org_id && x.name == c.name && x.id != c.id) {
            return Err(Error::conflict("duplicate"));
        }
        if let Some(x) = s.connections.iter_mut().find(|x| x.id == c.id) {
            *x = c.clone();
        }
        self.log(audit);
        Ok(())
    }

    async fn delete(&self, org: OrgId, id: ConnectionId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let before = s.connections.len();
        s.connections.retain(|c| !(c.org_id == org && c.id == id));
        if s.connections.len() == before {
            return Err(Error::not_found("connection"));
        }
        self.log(audit);
        Ok(())
    }

    async fn record_test(
        &self,
        org: OrgId,
        id: ConnectionId,
        status: ConnectionStatus,
        tested_at: OffsetDateTime,
        error: Option<String>,
    ) -> Result<()> {
        if let Some(c) = self.s().connections.iter_mut().find(|c| c.org_id == org && c.id == id) {
            c.status = status;
            c.last_tested_at = Some(tested_at);
            c.last_error = error;
        }
        Ok(())
    }
}

#[async_trait]
impl CatalogRepository for InMemoryCatalog {
    async fn upsert_discovered(
        &self,
        org: OrgId,
        name: &str,
        connection: ConnectionId,
        schema: &EntitySchema,
        _now: OffsetDateTime,
    ) -> Result<()> {
        let mut s = self.s();
        s.discovered_by_entity.insert((org, connection, schema.name.clone()), name.to_string());
        let entry = s.discovered.entry((org, name.to_string())).or_insert((0, schema.clone()));
        if entry.0 == 0 || entry.1 != *schema {
            entry.0 += 1;
            entry.1 = schema.clone();
        }
        Ok(())
    }

    async fn create_asset(&self, a: &DataAsset, created_by: Option<String>, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.assets.iter().any(|x| x.org_id == a.org_id && x.name == a.name) {
            return Err(Error::conflict("a resource with these values already exists"));
        }
        s.assets.push(a.clone());
        let v = AssetVersion {
            version: a.version,
            fields: a.fields.clone(),
            change: Change::Compatible,
            created_at: a.created_at,
            created_by,
        };
        s.versions.push((a.id, v));
        drop(s);
        self.log(audit);
        Ok(())
    }

    async fn find_discovered(&self, org: OrgId, connection: ConnectionId, entity: &str) -> Result<Option<DataAsset>> {
        let s = self.s();
        let Some(name) = s.discovered_by_entity.get(&(org, connection, entity.to_string())) else { return Ok(None) };
        let Some((version, schema)) = s.discovered.get(&(org, name.clone())) else { return Ok(None) };
        let now = OffsetDateTime::UNIX_EPOCH;
        Ok(Some(DataAsset {
            id: AssetId::new(),
            org_id: org,
            name: name.clone(),
            kind: sluice_domain::catalog::AssetKind::Discovered,
            version: *version,
            fields: schema
                .fields
                .iter()
                .map(|f| sluice_domain::gateway::ContractField {
                    name: f.name.clone(),
                    field_type: f.field_type,
                    required: !f.nullable,
                    tags: vec![],
                    fields: vec![],
                })
                .collect(),
            description: None,
            connection_id: Some(connection),
            entity: Some(entity.to_string()),
            created_at: now,
            updated_at: now,
        }))
    }

    async fn get_asset(&self, org: OrgId, id: AssetId) -> Result<Option<DataAsset>> {
        Ok(self.s().assets.iter().find(|a| a.org_id == org && a.id == id).cloned())
    }

    async fn list_assets(&self, org: OrgId, page: PageRequest) -> Result<Page<DataAsset>> {
        let items = self.s().assets.iter().filter(|a| a.org_id == org).cloned().collect();
        Ok(page_of(items, page, |a| a.id.as_uuid()))
    }

    async fn update_asset(
        &self,
        a: &DataAsset,
        new_version: Option<(Change, Option<String>)>,
        audit: &AuditEntry,
    ) -> Result<()> {
        let mut s = self.s();
        if s.assets.iter().any(|x| x.org_id == a.org_id && x.name == a.name && x.id != a.id) {
            return Err(Error::conflict("a resource with these values already exists"));
        }
        let Some(slot) = s.assets.iter_mut().find(|x| x.org_id == a.org_id && x.id == a.id) else {
            return Err(Error::NotFound { resource: "data asset" });
        };
        *slot = a.clone();
        if let Some((change, created_by)) = new_version {
            let v = AssetVersion {
                version: a.version,
                fields: a.fields.clone(),
                change,
                created_at: a.updated_at,
                created_by,
            };
            s.versions.push((a.id, v));
        }
        drop(s);
        self.log(audit);
        Ok(())
    }

    async fn delete_asset(&self, org: OrgId, id: AssetId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        let before = s.assets.len();
        s.assets.retain(|a| !(a.org_id == org && a.id == id));
        if s.assets.len() == before {
            return Err(Error::NotFound { resource: "data asset" });
        }
        s.versions.retain(|(a, _)| *a != id);
        drop(s);
        self.log(audit);
        Ok(())
    }

    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<bool> {
        let mut s = self.s();
        let n = s.usage.entry((org, month.to_string())).or_insert(0);
        if limit.is_some_and(|l| *n >= l) {
            return Ok(false);
        }
        *n += 1;
        Ok(true)
    }

    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64> {
        Ok(self.s().usage.get(&(org, month.to_string())).copied().unwrap_or(0))
    }

    async fn asset_versions(&self, org: OrgId, id: AssetId) -> Result<Vec<AssetVersion>> {
        let s = self.s();
        if !s.assets.iter().any(|a| a.org_id == org && a.id == id) {
            return Err(Error::NotFound { resource: "data asset" });
        }
        Ok(s.versions.iter().filter(|(a, _)| *a == id).map(|(_, v)| v.clone()).collect())
    }
}

/// Resolves `env:` references from a fixed map, for tests.
#[derive(Default, Clone)]
pub struct FakeSecrets(pub HashMap<String, String>);

#[async_trait]
impl SecretResolver for FakeSecrets {
    async fn resolve(&self, reference: &str) -> ConnectorResult<String> {
        match reference.strip_prefix("env:") {
            Some(name) => {
                self.0.get(name).cloned().ok_or_else(|| ConnectorError::InvalidConfig(format!("env:{name} is not set")))
            }
            None => Ok(reference.to_string()),
        }
    }
}

// ---- an in-memory connector --------------------------------------------

type Tables = HashMap<String, (EntitySchema, Vec<Vec<Value>>)>;

/// A connector type `memory` whose datasets live in this process: each
/// connection names a `dataset`; a `password` credential, when the dataset
/// requires one, must match. Used by HTTP and sync tests.
#[derive(Default, Clone)]
pub struct MemoryConnectors {
    datasets: Arc<Mutex<HashMap<String, Tables>>>,
    passwords: Arc<Mutex<HashMap<String, String>>>,
    /// dataset → (error, how many more opens fail with it)
    faults: Arc<Mutex<HashMap<String, (ConnectorError, u32)>>>,
}

impl MemoryConnectors {
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `rows` in `dataset.entity`.
    pub fn put(&self, dataset: &str, schema: EntitySchema, rows: Vec<Vec<Value>>) {
        let mut d = self.datasets.lock().unwrap_or_else(|p| p.into_inner());
        d.entry(dataset.to_string()).or_default().insert(schema.name.clone(), (schema, rows));
    }

    pub fn rows(&self, dataset: &str, entity: &str) -> Option<Vec<Vec<Value>>> {
        let d = self.datasets.lock().unwrap_or_else(|p| p.into_inner());
        d.get(dataset).and_then(|t| t.get(entity)).map(|(_, r)| r.clone())
    }

    /// Makes `dataset` require `password`.
    pub fn require_password(&self, dataset: &str, password: &str) {
        self.passwords.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into(), password.into());
    }

    /// Makes the next `times` opens of `dataset` fail with `error`.
    pub fn fail_next(&self, dataset: &str, error: ConnectorError, times: u32) {
        self.faults.lock().unwrap_or_else(|p| p.into_inner()).insert(dataset.into(), (error, times));
    }

    fn open(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<MemoryDataset>> {
        let name = c.str("dataset").ok_or_else(|| ConnectorError::InvalidConfig("'dataset' is required".into()))?;
        if let Some((e, n)) = self.faults.lock().unwrap_or_else(|p| p.into_inner()).get_mut(name)
            && *n > 0
        {
            *n -= 1;
            return Err(e.clone());
        }
        if let Some(p) = self.passwords.lock().unwrap_or_else(|p| p.into_inner()).get(name)
            && c.str("password") != Some(p.as_str())
        {
            return Err(ConnectorError::AuthFailed(format!("wrong password for dataset {name}")));
        }
        Ok(Arc::new(MemoryDataset { name: name.to_string(), all: self.datasets.clone() }))
    }
}

pub fn memory_spec() -> ConnectorSpec {
    ConnectorSpec {
        connector_type: "memory",
        title: "In-memory (tests)",
        capabilities: vec![Capability::Source, Capability::Destination, Capability::Both],
        config_fields: vec![
            ConfigField {
                name: "dataset",
                field_type: ConfigFieldType::String,
                required: true,
                credential: false,
                default: None,
                description: "dataset name",
            },
            ConfigField {
                name: "password",
                field_type: ConfigFieldType::String,
                required: false,
                credential: true,
                default: None,
                description: "password",
            },
        ],
        sync_modes: vec!["full_refresh_overwrite", "full_refresh_append", "incremental_append", "incremental_deduped"],
        features: vec!["discover", "preview", "incremental"],
    }
}

#[async_trait]
impl ConnectorRegistry for MemoryConnectors {
    fn specs(&self) -> Vec<ConnectorSpec> {
        vec![memory_spec()]
    }

    async fn source(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Source>> {
        Ok(self.open(c)?)
    }

    async fn destination(&self, c: &ResolvedConfig) -> ConnectorResult<Arc<dyn Destination>> {
        Ok(self.open(c)?)
    }

    async fn check_config(&self, _: &ResolvedConfig) -> Vec<sluice_domain::FieldError> {
        Vec::new()
    }
}

struct MemoryDataset {
    name: String,
    all: Arc<Mutex<HashMap<String, Tables>>>,
}

impl MemoryDataset {
    fn tables(&self) -> MutexGuard<'_, HashMap<String, Tables>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }
}

struct VecReader {
    fields: Arc<Vec<Field>>,
    batches: std::vec::IntoIter<Vec<Vec<Value>>>,
}

#[async_trait]
impl RecordReader for VecReader {
    fn fields(&self) -> Arc<Vec<Field>> {
        self.fields.clone()
    }

    async fn next_batch(&mut self) -> ConnectorResult<Option<RecordBatch>> {
        Ok(self.batches.next().map(|rows| RecordBatch { fields: self.fields.clone(), rows }))
    }
}

#[async_trait]
impl Source for MemoryDataset {
    async fn check(&self) -> ConnectorResult<()> {
        Ok(())
    }

    async fn discover(&self) -> ConnectorResult<Vec<EntitySchema>> {
        let mut v: Vec<EntitySchema> =
            self.tables().get(&self.name).map(|t| t.values().map(|(s, _)| s.clone()).collect()).unwrap_or_default();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(v)
    }

    async fn read(&self, req: ReadRequest) -> ConnectorResult<Box<dyn RecordReader>> {
        let (schema, mut rows) = self
            .tables()
            .get(&self.name)
            .and_then(|t| t.get(&req.entity))
            .cloned()
            .ok_or_else(|| ConnectorError::EntityNotFound(req.entity.clone()))?;
        if let Some(c) = &req.cursor {
            let i = schema
                .index_of(&c.field)
                .ok_or_else(|| ConnectorError::InvalidConfig(format!("no field {}", c.field)))?;
            if let Some(from) = &c.from {
                rows.retain(|r| compare_values(&r[i], from).is_some_and(|o| o != std::cmp::Ordering::Less));
            }
            rows.sort_by(|a, b| compare_values(&a[i], &b[i]).unwrap_or(std::cmp::Ordering::Equal));
        }
        if let Some(l) = req.limit {
            rows.truncate(l as usize);
        }
        let size = req.batch_size.max(1);
        let batches: Vec<Vec<Vec<Value>>> = rows.chunks(size).map(|c| c.to_vec()).collect();
        Ok(Box::new(VecReader { fields: Arc::new(schema.fields), batches: batches.into_iter() }))
    }
}

#[async_trait]
impl Destination for MemoryDataset {
    async fn check(&self) -> ConnectorResult<()> {
        Ok(())
    }

    async fn describe(&self, entity: &str) -> ConnectorResult<Option<EntitySchema>> {
        Ok(self.tables().get(&self.name).and_then(|t| t.get(entity)).map(|(s, _)| s.clone()))
    }

    async fn open(&self, schema: &EntitySchema, mode: WriteMode) -> ConnectorResult<Box<dyn EntityWriter>> {
        let existing = self.describe(&schema.name).await?;
        let mut fields = match (&existing, mode) {
            (Some(e), WriteMode::Append | WriteMode::Upsert) => e.fields.clone(),
            _ => Vec::new(),
        };
        for f in &schema.fields {
            if !fields.iter().any(|x| x.name == f.name) {
                fields.push(f.clone());
            }
        }
        Ok(Box::new(MemoryWriter {
            dataset: self.name.clone(),
            all: self.all.clone(),
            schema: EntitySchema { name: schema.name.clone(), fields },
            mode,
            pending: Vec::new(),
            stats: WriteStats::default(),
        }))
    }
}

struct MemoryWriter {
    dataset: String,
    all: Arc<Mutex<HashMap<String, Tables>>>,
    schema: EntitySchema,
    mode: WriteMode,
    pending: Vec<Vec<Value>>,
    stats: WriteStats,
}

impl MemoryWriter {
    fn commit(&mut self, replace: bool) {
        let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
        let tables = all.entry(self.dataset.clone()).or_default();
        let entry = tables.entry(self.schema.name.clone()).or_insert_with(|| (self.schema.clone(), Vec::new()));
        // Widen existing rows to new columns.
        let width = self.schema.fields.len();
        for r in &mut entry.1 {
            r.resize(width, Value::Null);
        }
        entry.0 = self.schema.clone();
        if replace {
            entry.1.clear();
        }
        let key: Vec<usize> =
            self.schema.fields.iter().enumerate().filter(|(_, f)| f.primary_key).map(|(i, _)| i).collect();
        for row in self.pending.drain(..) {
            if self.mode == WriteMode::Upsert
                && let Some(pos) = entry.1.iter().position(|r| key.iter().all(|k| r[*k] == row[*k]))
            {
                entry.1[pos] = row;
                continue;
            }
            entry.1.push(row);
        }
    }
}

#[async_trait]
impl EntityWriter for MemoryWriter {
    async fn write(&mut self, batch: &RecordBatch) -> ConnectorResult<()> {
        let order: Vec<Option<usize>> =
            self.schema.fields.iter().map(|f| batch.fields.iter().position(|b| b.name == f.name)).collect();
        for r in &batch.rows {
            self.pending.push(order.iter().map(|i| i.map(|i| r[i].clone()).unwrap_or(Value::Null)).collect());
        }
        self.stats.rows_written += batch.len() as u64;
        self.stats.bytes += batch.approx_bytes();
        Ok(())
    }

    async fn checkpoint(&mut self) -> ConnectorResult<WriteStats> {
        if self.mode != WriteMode::Overwrite {
            self.commit(false);
        }
        Ok(self.stats)
    }

    async fn finish(mut self: Box<Self>) -> ConnectorResult<WriteStats> {
        let replace = self.mode == WriteMode::Overwrite;
        self.commit(replace);
        Ok(self.stats)
    }

    async fn abort(self: Box<Self>) {}
}

// ---- flows, runs, cursors ----------------------------------------------

use sluice_domain::shared::ids::{FlowId, RunId};
use sluice_domain::sync::flow::*;

#[derive(Default)]
struct FlowState {
    flows: Vec<Flow>,
    runs: Vec<Run>,
    logs: HashMap<RunId, Vec<RunLog>>,
    cursors: HashMap<(FlowId, String), Cursor>,
    markers: std::collections::HashSet<String>,
    events: Vec<sluice_domain::monitoring::activity::ActivityEvent>,
}

/// Flows, runs and cursors in memory.
#[derive(Default, Clone)]
pub struct InMemoryFlows {
    state: Arc<Mutex<FlowState>>,
    audit: InMemoryStore,
}

impl InMemoryFlows {
    pub fn new(store: &InMemoryStore) -> Self {
        Self { state: Arc::default(), audit: store.clone() }
    }

    fn s(&self) -> MutexGuard<'_, FlowState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl FlowRepository for InMemoryFlows {
    async fn create(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.flows.iter().any(|x| x.org_id == f.org_id && x.name == f.name) {
            return Err(Error::conflict("duplicate"));
        }
        s.flows.push(f.clone());
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn get(&self, org: OrgId, id: FlowId) -> Result<Option<Flow>> {
        Ok(self.s().flows.iter().find(|f| f.org_id == org && f.id == id).cloned())
    }

    async fn find_by_name(&self, org: OrgId, name: &str) -> Result<Option<Flow>> {
        Ok(self.s().flows.iter().find(|f| f.org_id == org && f.name == name).cloned())
    }

    async fn list(&self, org: OrgId, status: Option<FlowStatus>, page: PageRequest) -> Result<Page<Flow>> {
        let items = self
            .s()
            .flows
            .iter()
            .filter(|f| f.org_id == org && status.is_none_or(|st| f.status == st))
            .cloned()
            .collect();
        Ok(page_of(items, page, |f| f.id.as_uuid()))
    }

    async fn all(&self, org: OrgId) -> Result<Vec<Flow>> {
        Ok(self.s().flows.iter().filter(|f| f.org_id == org).cloned().collect())
    }

    async fn update(&self, f: &Flow, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        if s.flows.iter().any(|x| x.org_id == f.org_id && x.name == f.name && x.id != f.id) {
            return Err(Error::conflict("duplicate"));
        }
        if let Some(x) = s.flows.iter_mut().find(|x| x.id == f.id) {
            *x = f.clone();
        }
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }

    async fn delete(&self, org: OrgId, id: FlowId, audit: &AuditEntry) -> Result<()> {
        let mut s = self.s();
        s.flows.retain(|f| !(f.org_id == org && f.id == id));
        s.runs.retain(|r| r.flow_id != id);
        s.cursors.retain(|(f, _), _| *f != id);
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }
}

#[async_trait]
impl RunRepository for InMemoryFlows {
    async fn enqueue(&self, run: &Run) -> Result<()> {
        self.s().runs.push(run.clone());
        Ok(())
    }

    async fn claim(&self, worker: &str, now: OffsetDateTime) -> Result<Option<Run>> {
        let mut s = self.s();
        let busy: Vec<FlowId> = s.runs.iter().filter(|r| r.status == RunStatus::Running).map(|r| r.flow_id).collect();
        let Some(r) = s
            .runs
            .iter_mut()
            .filter(|r| {
                r.status == RunStatus::Queued && !busy.contains(&r.flow_id) && r.not_before.is_none_or(|t| t <= now)
            })
            .min_by_key(|r| r.id)
        else {
            return Ok(None);
        };
        r.status = RunStatus::Running;
        r.claimed_by = Some(worker.to_string());
        r.heartbeat_at = Some(now);
        r.started_at = Some(now);
        Ok(Some(r.clone()))
    }

    async fn heartbeat(&self, fence: Fence, worker: &str, now: OffsetDateTime) -> Result<bool> {
        let mut s = self.s();
        match s
            .runs
            .iter_mut()
            .find(|r| r.fence() == fence && r.claimed_by.as_deref() == Some(worker) && r.status == RunStatus::Running)
        {
            Some(r) => {
                r.heartbeat_at = Some(now);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn holds(&self, fence: Fence) -> Result<bool> {
        Ok(self.s().runs.iter().any(|r| r.fence() == fence && r.status == RunStatus::Running))
    }

    async fn progress(&self, fence: Fence, entities: &[EntityStats]) -> Result<bool> {
        let mut s = self.s();
        match s.runs.iter_mut().find(|r| r.fence() == fence && r.status == RunStatus::Running) {
            Some(r) => {
                r.entities = entities.to_vec();
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn save(&self, run: &Run) -> Result<()> {
        let mut s = self.s();
        if let Some(r) = s.runs.iter_mut().find(|r| {
            r.fence() == run.fence() && matches!(r.status, RunStatus::Queued | RunStatus::Running | RunStatus::Canceled)
        }) {
            // A cancellation recorded meanwhile wins over a worker's outcome.
            let canceled = r.status == RunStatus::Canceled;
            *r = run.clone();
            if canceled {
                r.status = RunStatus::Canceled;
            }
        }
        Ok(())
    }

    async fn get(&self, org: OrgId, id: RunId) -> Result<Option<Run>> {
        Ok(self.s().runs.iter().find(|r| r.org_id == org && r.id == id).cloned())
    }

    async fn status(&self, id: RunId) -> Result<Option<RunStatus>> {
        Ok(self.s().runs.iter().find(|r| r.id == id).map(|r| r.status))
    }

    async fn list_for_flow(
        &self,
        org: OrgId,
        flow: FlowId,
        status: Option<RunStatus>,
        page: PageRequest,
    ) -> Result<Page<Run>> {
        let items = self
            .s()
            .runs
            .iter()
            .filter(|r| r.org_id == org && r.flow_id == flow && status.is_none_or(|st| r.status == st))
            .cloned()
            .collect();
        Ok(page_of(items, page, |r| r.id.as_uuid()))
    }

    async fn running_for_flow(&self, flow: FlowId) -> Result<bool> {
        Ok(self.s().runs.iter().any(|r| r.flow_id == flow && r.status == RunStatus::Running))
    }

    async fn log(&self, run: RunId, fence: Option<Fence>, line: &RunLog) -> Result<()> {
        let mut s = self.s();
        let held = fence.is_none_or(|f| s.runs.iter().any(|r| r.fence() == f && r.status == RunStatus::Running));
        if held {
            s.logs.entry(run).or_default().push(line.clone());
        }
        Ok(())
    }

    async fn logs(&self, run: RunId) -> Result<Vec<RunLog>> {
        Ok(self.s().logs.get(&run).cloned().unwrap_or_default())
    }
}

#[async_trait]
impl CursorRepository for InMemoryFlows {
    async fn list(&self, flow: FlowId) -> Result<Vec<Cursor>> {
        Ok(self.s().cursors.iter().filter(|((f, _), _)| *f == flow).map(|(_, c)| c.clone()).collect())
    }

    async fn get(&self, flow: FlowId, entity: &str) -> Result<Option<Cursor>> {
        Ok(self.s().cursors.get(&(flow, entity.to_string())).cloned())
    }

    async fn set(&self, flow: FlowId, cursor: &Cursor, audit: Option<AuditEntry>) -> Result<()> {
        self.s().cursors.insert((flow, cursor.entity.clone()), cursor.clone());
        if let Some(a) = audit {
            self.audit.s().audit.push(a);
        }
        Ok(())
    }

    async fn advance(&self, flow: FlowId, cursor: &Cursor, fence: Fence) -> Result<bool> {
        let mut s = self.s();
        if !s.runs.iter().any(|r| r.fence() == fence && r.status == RunStatus::Running) {
            return Ok(false);
        }
        s.cursors.insert((flow, cursor.entity.clone()), cursor.clone());
        Ok(true)
    }

    async fn clear(&self, flow: FlowId, entity: &str, audit: &AuditEntry) -> Result<()> {
        self.s().cursors.remove(&(flow, entity.to_string()));
        self.audit.s().audit.push(audit.clone());
        Ok(())
    }
}

#[async_trait]
impl sluice_domain::sync::schedule::QueueRepository for InMemoryFlows {
    async fn due_flows(&self, now: OffsetDateTime) -> Result<Vec<Flow>> {
        Ok(self
            .s()
            .flows
            .iter()
            .filter(|f| f.status == FlowStatus::Active && f.next_run_at.is_some_and(|t| t <= now))
            .cloned()
            .collect())
    }

    async fn queue_once(
        &self,
        marker: &str,
        run: &Run,
        next_run_at: Option<(FlowId, Option<OffsetDateTime>)>,
    ) -> Result<bool> {
        let mut s = self.s();
        if !s.markers.insert(marker.to_string()) {
            return Ok(false);
        }
        s.runs.push(run.clone());
        if let Some((flow, next)) = next_run_at
            && let Some(f) = s.flows.iter_mut().find(|f| f.id == flow)
        {
            f.next_run_at = next;
        }
        Ok(true)
    }

    async fn stale_runs(&self, before: OffsetDateTime) -> Result<Vec<Run>> {
        Ok(self
            .s()
            .runs
            .iter()
            .filter(|r| r.status == RunStatus::Running && r.heartbeat_at.is_some_and(|h| h < before))
            .cloned()
            .collect())
    }

    async fn requeue(&self, fence: Fence, worker: Option<String>) -> Result<bool> {
        let mut s = self.s();
        match s.runs.iter_mut().find(|r| {
            r.fence() == fence && r.status == RunStatus::Running && (worker.is_none() || r.claimed_by == worker)
        }) {
            Some(r) => {
                r.status = RunStatus::Queued;
                r.claimed_by = None;
                r.heartbeat_at = None;
                r.attempt += 1;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    async fn trace(&self, org: OrgId, trace: uuid::Uuid) -> Result<Vec<Run>> {
        let mut runs: Vec<Run> =
            self.s().runs.iter().filter(|r| r.org_id == org && r.trace_id == trace).cloned().collect();
        runs.sort_by_key(|r| (r.started_at.unwrap_or(r.queued_at), r.id));
        Ok(runs)
    }

    async fn find_run(&self, id: RunId) -> Result<Option<Run>> {
        Ok(self.s().runs.iter().find(|r| r.id == id).cloned())
    }

    async fn retry_later(&self, fence: Fence, not_before: OffsetDateTime, error: &str) -> Result<()> {
        if let Some(r) = self.s().runs.iter_mut().find(|r| r.fence() == fence && r.status == RunStatus::Running) {
            r.status = RunStatus::Queued;
            r.claimed_by = None;
            r.heartbeat_at = None;
            r.not_before = Some(not_before);
            r.error = Some(error.to_string());
            r.attempt += 1;
        }
        Ok(())
    }
}

#[async_trait]
impl sluice_domain::monitoring::ports::ActivityRepository for InMemoryFlows {
    async fn record_event(&self, e: &sluice_domain::monitoring::activity::ActivityEvent) -> Result<()> {
        self.s().events.push(e.clone());
        Ok(())
    }

    async fn events(
        &self,
        org: OrgId,
        since: Option<OffsetDateTime>,
        limit: u64,
    ) -> Result<Vec<sluice_domain::monitoring::activity::ActivityEvent>> {
        let mut v: Vec<_> = self
            .s()
            .events
            .iter()
            .filter(|e| e.org_id == org && since.is_none_or(|t| e.created_at >= t))
            .cloned()
            .collect();
        v.reverse();
        v.truncate(limit as usize);
        Ok(v)
    }
}

// ---- infrastructure as code ------------------------------------------------

/// IaC applies over the in-memory catalog and flows: all-or-nothing under
/// both locks, with the same stale-plan rule as the SQL store.
#[derive(Clone)]
pub struct InMemoryIac {
    catalog: InMemoryCatalog,
    flows: InMemoryFlows,
    audit: InMemoryStore,
}

#[async_trait]
impl sluice_domain::iac::IacRepository for InMemoryIac {
    async fn snapshot(&self, org: OrgId) -> Result<sluice_domain::iac::Snapshot> {
        let c = self.catalog.s();
        let f = self.flows.s();
        Ok(sluice_domain::iac::Snapshot {
            integrations: c.integrations.iter().filter(|i| i.org_id == org).cloned().collect(),
            connections: c.connections.iter().filter(|x| x.org_id == org).cloned().collect(),
            flows: f.flows.iter().filter(|x| x.org_id == org).cloned().collect(),
        })
    }

    async fn apply(&self, org: OrgId, writes: &sluice_domain::iac::Writes, audit: &[AuditEntry]) -> Result<()> {
        use sluice_domain::iac::{Write, stale_plan};
        let mut c = self.catalog.s();
        let mut f = self.flows.s();
        // Check everything first, so that a refused apply writes nothing.
        fn ok<T>(
            list: &[T],
            w: &Write<T>,
            org: OrgId,
            key: impl Fn(&T) -> (OrgId, Uuid, &str, OffsetDateTime),
        ) -> bool {
            let (_, id, name, _) = key(w.item());
            match w {
                Write::Create(_) => !list.iter().any(|x| {
                    let (o, _, n, _) = key(x);
                    o == org && n == name
                }),
                Write::Update { planned_against, .. } => list.iter().any(|x| {
                    let (o, i, _, at) = key(x);
                    o == org && i == id && at == *planned_against
                }),
            }
        }
        let fresh = writes
            .integrations
            .iter()
            .all(|w| ok(&c.integrations, w, org, |i| (i.org_id, i.id.as_uuid(), i.name.as_str(), i.updated_at)))
            && writes
                .connections
                .iter()
                .all(|w| ok(&c.connections, w, org, |i| (i.org_id, i.id.as_uuid(), i.name.as_str(), i.updated_at)))
            && writes
                .flows
                .iter()
                .all(|w| ok(&f.flows, w, org, |i| (i.org_id, i.id.as_uuid(), i.name.as_str(), i.updated_at)));
        if !fresh {
            return Err(stale_plan());
        }
        fn put<T: Clone>(list: &mut Vec<T>, w: &Write<T>, same: impl Fn(&T, &T) -> bool) {
            match list.iter().position(|x| same(x, w.item())) {
                Some(i) => list[i] = w.item().clone(),
                None => list.push(w.item().clone()),
            }
        }
        for w in &writes.integrations {
            put(&mut c.integrations, w, |a, b| a.id == b.id);
        }
        for w in &writes.connections {
            put(&mut c.connections, w, |a, b| a.id == b.id);
        }
        for w in &writes.flows {
            put(&mut f.flows, w, |a, b| a.id == b.id);
        }
        drop((c, f));
        self.audit.s().audit.extend(audit.iter().cloned());
        Ok(())
    }
}
