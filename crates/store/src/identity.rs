//! The identity context's store: users, organizations and members, invitations,
//! API keys, the audit log, idempotency records and the health check.

use crate::entities::*;
use crate::{Store, convert, db_err, insert_audit};
use async_trait::async_trait;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect,
};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::identity::Role;
use sluice_domain::identity::apikey::ApiKey;
use sluice_domain::identity::invitation::{Invitation, InvitationStatus};
use sluice_domain::identity::org::{Member, Organization, check_admin_retained};
use sluice_domain::identity::ports::*;
use sluice_domain::identity::user::{User, VerifiedClaims};
use sluice_domain::monitoring::ports::HealthCheck;
use sluice_domain::shared::audit::{AuditEntry, AuditFilter, AuditRepository};
use sluice_domain::shared::idempotency::{IdempotencyRecord, IdempotencyStore, StoredResponse};
use sluice_domain::shared::ids::{ApiKeyId, InvitationId, OrgId, UserId};
use sluice_domain::shared::page::{Page, PageRequest};
use std::collections::HashMap;
use time::OffsetDateTime;
use uuid::Uuid;

#[async_trait]
impl UserRepository for Store {
    async fn upsert_from_claims(&self, claims: &VerifiedClaims, now: OffsetDateTime) -> Result<User> {
        let find = || {
            users::Entity::find()
                .filter(users::Column::Issuer.eq(claims.issuer.as_str()))
                .filter(users::Column::Subject.eq(claims.subject.as_str()))
                .one(&self.db)
        };
        if let Some(m) = find().await.map_err(db_err)? {
            return Ok(convert::user(m));
        }
        let model = users::ActiveModel {
            id: Set(Uuid::now_v7()),
            issuer: Set(claims.issuer.clone()),
            subject: Set(claims.subject.clone()),
            email: Set(claims.email.as_ref().map(|e| e.trim().to_lowercase())),
            name: Set(claims.name.clone()),
            created_at: Set(now),
            updated_at: Set(now),
        };
        let tx = self.write().await?;
        let inserted = users::Entity::insert(model).exec_without_returning(tx.c()).await.map_err(db_err);
        match tx.finish(inserted).await {
            // A concurrent first request created it; either way it exists now.
            Ok(_) | Err(Error::Conflict { .. }) => {}
            Err(e) => return Err(e),
        }
        find()
            .await
            .map_err(db_err)?
            .map(convert::user)
            .ok_or_else(|| Error::Internal(anyhow::anyhow!("user vanished after insert")))
    }

    async fn get(&self, id: UserId) -> Result<Option<User>> {
        Ok(users::Entity::find_by_id(id.as_uuid()).one(&self.db).await.map_err(db_err)?.map(convert::user))
    }

    async fn update(&self, user: &User, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            users::Entity::update_many()
                .col_expr(users::Column::Email, Expr::value(user.email.clone()))
                .col_expr(users::Column::Name, Expr::value(user.name.clone()))
                .col_expr(users::Column::UpdatedAt, Expr::value(user.updated_at))
                .filter(users::Column::Id.eq(user.id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
        })
    }
}

impl Store {
    /// A stored idempotent response, encrypted: it may hold a secret that
    /// is shown once (an API key, an invitation token, a webhook secret).
    fn seal_response(&self, scope: &str, key: &str, body: &[u8]) -> Result<Vec<u8>> {
        Ok(self.cipher.encrypt(body, &format!("idempotency:{scope}:{key}"))?.into_bytes())
    }

    /// The plain response of [`Store::seal_response`]; `None` (replayed as
    /// in flight, so the client retries) when it does not open.
    fn open_response(&self, scope: &str, key: &str, sealed: &[u8]) -> Option<Vec<u8>> {
        let text = std::str::from_utf8(sealed).ok()?;
        self.cipher.decrypt(text, &format!("idempotency:{scope}:{key}")).ok()
    }

    /// Locks the organization's row for the rest of the transaction, so that
    /// checks over its members (the last-Admin rule) cannot interleave. On
    /// SQLite the process-wide write lock already serializes writers.
    pub(crate) async fn lock_org(&self, c: &impl ConnectionTrait, org: OrgId) -> Result<()> {
        if self.backend() == DbBackend::Postgres {
            organizations::Entity::find_by_id(org.as_uuid()).lock_exclusive().one(c).await.map_err(db_err)?;
        }
        Ok(())
    }

    async fn admin_count(&self, c: &impl ConnectionTrait, org: OrgId) -> Result<u64> {
        memberships::Entity::find()
            .filter(memberships::Column::OrgId.eq(org.as_uuid()))
            .filter(memberships::Column::Role.eq(Role::Admin.as_str()))
            .count(c)
            .await
            .map_err(db_err)
    }

    async fn members_from(&self, rows: Vec<memberships::Model>) -> Result<Vec<Member>> {
        let ids: Vec<Uuid> = rows.iter().map(|m| m.user_id).collect();
        let users: HashMap<Uuid, users::Model> =
            crate::all(&self.db, users::Entity::find().filter(users::Column::Id.is_in(ids)), |u| Ok((u.id, u)))
                .await?
                .into_iter()
                .collect();
        rows.into_iter()
            .map(|m| {
                let u = users.get(&m.user_id);
                Ok(Member {
                    org_id: m.org_id.into(),
                    user_id: m.user_id.into(),
                    email: u.and_then(|u| u.email.clone()),
                    name: u.and_then(|u| u.name.clone()),
                    role: convert::role(&m.role)?,
                    joined_at: m.joined_at,
                })
            })
            .collect()
    }

    async fn membership(
        &self,
        c: &impl ConnectionTrait,
        org: OrgId,
        user: UserId,
    ) -> Result<Option<memberships::Model>> {
        memberships::Entity::find()
            .filter(memberships::Column::OrgId.eq(org.as_uuid()))
            .filter(memberships::Column::UserId.eq(user.as_uuid()))
            .one(c)
            .await
            .map_err(db_err)
    }
}

fn slug_conflict(e: Error, slug: &str) -> Error {
    match e {
        Error::Conflict { .. } => Error::conflict(format!("the slug '{slug}' is taken")),
        other => other,
    }
}

#[async_trait]
impl OrgRepository for Store {
    async fn create(&self, org: &Organization, admin: UserId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            organizations::Entity::insert(organizations::ActiveModel {
                id: Set(org.id.as_uuid()),
                name: Set(org.name.clone()),
                slug: Set(org.slug.clone()),
                // A new organization starts on the free plan; billing changes it.
                plan: Set(sluice_domain::billing::plan::Plan::Free.as_str().to_string()),
                billing_status: Set(sluice_domain::billing::plan::SubscriptionStatus::Active.as_str().to_string()),
                current_period_end: Set(None),
                customer_id: Set(None),
                created_at: Set(org.created_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(|e| slug_conflict(db_err(e), &org.slug))?;
            memberships::Entity::insert(memberships::ActiveModel {
                id: Set(Uuid::now_v7()),
                org_id: Set(org.id.as_uuid()),
                user_id: Set(admin.as_uuid()),
                role: Set(Role::Admin.as_str().to_string()),
                joined_at: Set(org.created_at),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
        })
    }

    async fn get(&self, id: OrgId) -> Result<Option<Organization>> {
        crate::first(&self.db, organizations::Entity::find_by_id(id.as_uuid()), convert::org).await
    }

    async fn list_for_user(&self, user: UserId, page: PageRequest) -> Result<Page<Organization>> {
        let org_ids: Vec<Uuid> = memberships::Entity::find()
            .select_only()
            .column(memberships::Column::OrgId)
            .filter(memberships::Column::UserId.eq(user.as_uuid()))
            .into_tuple()
            .all(&self.db)
            .await
            .map_err(db_err)?;
        let q = organizations::Entity::find().filter(organizations::Column::Id.is_in(org_ids));
        crate::keyset_page(&self.db, q, organizations::Column::Id, page, convert::org, |o| o.id.as_uuid()).await
    }

    async fn update(&self, org: &Organization, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            organizations::Entity::update_many()
                .col_expr(organizations::Column::Name, Expr::value(org.name.clone()))
                .col_expr(organizations::Column::Slug, Expr::value(org.slug.clone()))
                .filter(organizations::Column::Id.eq(org.id.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(|e| slug_conflict(db_err(e), &org.slug))?;
        })
    }

    async fn delete(&self, id: OrgId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let res = organizations::Entity::delete_by_id(id.as_uuid()).exec(tx.c()).await.map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::not_found("organization"));
            }
            tx.queues(crate::wake::Work::Credentials).await?;
        })
    }

    async fn role_of(&self, org: OrgId, user: UserId) -> Result<Option<Role>> {
        self.membership(&self.db, org, user).await?.map(|m| convert::role(&m.role)).transpose()
    }

    async fn list_members(&self, org: OrgId, page: PageRequest) -> Result<Page<Member>> {
        let q = memberships::Entity::find().filter(memberships::Column::OrgId.eq(org.as_uuid()));
        let rows = crate::keyset(&self.db, q, memberships::Column::UserId, page).await?;
        let members = self.members_from(rows).await?;
        Ok(Page::from_overfetch(members, page.limit, |m| m.user_id.as_uuid()))
    }

    async fn get_member(&self, org: OrgId, user: UserId) -> Result<Option<Member>> {
        let Some(row) = self.membership(&self.db, org, user).await? else { return Ok(None) };
        Ok(self.members_from(vec![row]).await?.pop())
    }

    async fn set_member_role(&self, org: OrgId, user: UserId, role: Role, audit: &AuditEntry) -> Result<Member> {
        written!(self, |tx| {
            self.lock_org(tx.c(), org).await?;
            let m = self.membership(tx.c(), org, user).await?.ok_or(Error::not_found("member"))?;
            check_admin_retained(self.admin_count(tx.c(), org).await?, convert::role(&m.role)?, Some(role))?;
            memberships::Entity::update_many()
                .col_expr(memberships::Column::Role, Expr::value(role.as_str()))
                .filter(memberships::Column::Id.eq(m.id))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            tx.queues(crate::wake::Work::Credentials).await?;
            insert_audit(tx.c(), audit).await
        })?;
        self.get_member(org, user).await?.ok_or(Error::not_found("member"))
    }

    async fn remove_member(&self, org: OrgId, user: UserId, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            self.lock_org(tx.c(), org).await?;
            let m = self.membership(tx.c(), org, user).await?.ok_or(Error::not_found("member"))?;
            check_admin_retained(self.admin_count(tx.c(), org).await?, convert::role(&m.role)?, None)?;
            memberships::Entity::delete_by_id(m.id).exec(tx.c()).await.map_err(db_err)?;
            tx.queues(crate::wake::Work::Credentials).await?;
        })
    }
}

#[async_trait]
impl InvitationRepository for Store {
    async fn create(&self, inv: &Invitation, token_hash: &str, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            invitations::Entity::insert(invitations::ActiveModel {
                id: Set(inv.id.as_uuid()),
                org_id: Set(inv.org_id.as_uuid()),
                email: Set(inv.email.clone()),
                role: Set(inv.role.as_str().to_string()),
                status: Set(inv.status.as_str().to_string()),
                token_hash: Set(token_hash.to_string()),
                expires_at: Set(inv.expires_at),
                created_at: Set(inv.created_at),
                invited_by: Set(inv.invited_by.map(|u| u.as_uuid())),
                accepted_by: Set(None),
                accepted_at: Set(None),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
        })
    }

    async fn find_by_token_hash(&self, token_hash: &str) -> Result<Option<Invitation>> {
        crate::first(
            &self.db,
            invitations::Entity::find().filter(invitations::Column::TokenHash.eq(token_hash)),
            convert::invitation,
        )
        .await
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<Invitation>> {
        let q = invitations::Entity::find().filter(invitations::Column::OrgId.eq(org.as_uuid()));
        crate::keyset_page(&self.db, q, invitations::Column::Id, page, convert::invitation, |i| i.id.as_uuid()).await
    }

    async fn accept(&self, inv: &Invitation, user: UserId, now: OffsetDateTime, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let res = invitations::Entity::update_many()
                .col_expr(invitations::Column::Status, Expr::value(InvitationStatus::Accepted.as_str()))
                .col_expr(invitations::Column::AcceptedBy, Expr::value(user.as_uuid()))
                .col_expr(invitations::Column::AcceptedAt, Expr::value(now))
                .filter(invitations::Column::Id.eq(inv.id.as_uuid()))
                .filter(invitations::Column::Status.eq(InvitationStatus::Pending.as_str()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::Conflict {
                    code: sluice_domain::shared::error::Code::InvitationNotPending,
                    message: "this invitation is no longer pending".into(),
                });
            }
            if self.membership(tx.c(), inv.org_id, user).await?.is_some() {
                return Err(Error::Conflict {
                    code: sluice_domain::shared::error::Code::AlreadyMember,
                    message: "you are already a member of this organization".into(),
                });
            }
            memberships::Entity::insert(memberships::ActiveModel {
                id: Set(Uuid::now_v7()),
                org_id: Set(inv.org_id.as_uuid()),
                user_id: Set(user.as_uuid()),
                role: Set(inv.role.as_str().to_string()),
                joined_at: Set(now),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
        })
    }

    async fn revoke(&self, org: OrgId, id: InvitationId, audit: &AuditEntry) -> Result<Invitation> {
        written!(self, |tx| {
            let m = invitations::Entity::find_by_id(id.as_uuid())
                .filter(invitations::Column::OrgId.eq(org.as_uuid()))
                .one(tx.c())
                .await
                .map_err(db_err)?
                .ok_or(Error::not_found("invitation"))?;
            if m.status != InvitationStatus::Pending.as_str() {
                return Err(Error::Conflict {
                    code: sluice_domain::shared::error::Code::InvitationNotPending,
                    message: format!("this invitation is {}", m.status),
                });
            }
            invitations::Entity::update_many()
                .col_expr(invitations::Column::Status, Expr::value(InvitationStatus::Revoked.as_str()))
                .filter(invitations::Column::Id.eq(m.id))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            insert_audit(tx.c(), audit).await?;
            let mut inv = convert::invitation(m)?;
            inv.status = InvitationStatus::Revoked;
            Ok(inv)
        })
    }
}

#[async_trait]
impl ApiKeyRepository for Store {
    async fn create(&self, key: &ApiKey, hash: &str, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            api_keys::Entity::insert(api_keys::ActiveModel {
                id: Set(key.id.as_uuid()),
                org_id: Set(key.org_id.as_uuid()),
                name: Set(key.name.clone()),
                prefix: Set(key.prefix.clone()),
                key_hash: Set(hash.to_string()),
                roles: Set(convert::roles_to_string(&key.roles)),
                created_at: Set(key.created_at),
                last_used_at: Set(None),
                revoked_at: Set(None),
            })
            .exec_without_returning(tx.c())
            .await
            .map_err(db_err)?;
        })
    }

    async fn list(&self, org: OrgId, page: PageRequest) -> Result<Page<ApiKey>> {
        let q = api_keys::Entity::find()
            .filter(api_keys::Column::OrgId.eq(org.as_uuid()))
            .filter(api_keys::Column::RevokedAt.is_null());
        crate::keyset_page(&self.db, q, api_keys::Column::Id, page, convert::api_key, |k| k.id.as_uuid()).await
    }

    async fn revoke(&self, org: OrgId, id: ApiKeyId, now: OffsetDateTime, audit: &AuditEntry) -> Result<()> {
        audited!(self, audit, |tx| {
            let res = api_keys::Entity::update_many()
                .col_expr(api_keys::Column::RevokedAt, Expr::value(now))
                .filter(api_keys::Column::Id.eq(id.as_uuid()))
                .filter(api_keys::Column::OrgId.eq(org.as_uuid()))
                .filter(api_keys::Column::RevokedAt.is_null())
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            if res.rows_affected == 0 {
                return Err(Error::not_found("api key"));
            }
            tx.queues(crate::wake::Work::Credentials).await?;
        })
    }

    async fn find_active_by_hash(&self, hash: &str) -> Result<Option<ApiKey>> {
        crate::first(
            &self.db,
            api_keys::Entity::find()
                .filter(api_keys::Column::KeyHash.eq(hash))
                .filter(api_keys::Column::RevokedAt.is_null()),
            convert::api_key,
        )
        .await
    }

    async fn touch(&self, id: ApiKeyId, now: OffsetDateTime) -> Result<()> {
        written!(self, |tx| {
            api_keys::Entity::update_many()
                .col_expr(api_keys::Column::LastUsedAt, Expr::value(now))
                .filter(api_keys::Column::Id.eq(id.as_uuid()))
                .exec(tx.c())
                .await
                .map(|_| ())
                .map_err(db_err)
        })
    }
}

#[async_trait]
impl AuditRepository for Store {
    async fn append(&self, entry: &AuditEntry) -> Result<()> {
        let tx = self.write().await?;
        let r = insert_audit(tx.c(), entry).await;
        tx.finish(r).await
    }

    async fn list(&self, org: OrgId, f: &AuditFilter, page: PageRequest) -> Result<Page<AuditEntry>> {
        use audit_logs::Column as C;
        let mut q = audit_logs::Entity::find().filter(C::OrgId.eq(org.as_uuid()));
        if let Some(v) = &f.action {
            // The action, or those below it (see `action_matches`): a LIKE
            // on the action's start with a dot, its `_`, `%` and `\\`
            // escaped (actions hold `_`).
            let mut below = String::new();
            for c in v.trim_end_matches('.').chars() {
                if matches!(c, '\\' | '%' | '_') {
                    below.push('\\');
                }
                below.push(c);
            }
            below.push_str(".%");
            q = q.filter(
                sea_orm::Condition::any()
                    .add(C::Action.eq(v.as_str()))
                    .add(C::Action.like(sea_orm::sea_query::LikeExpr::new(below).escape('\\'))),
            );
        }
        if let Some(v) = &f.resource_type {
            q = q.filter(C::ResourceType.eq(v.as_str()));
        }
        if let Some(v) = &f.resource_id {
            q = q.filter(C::ResourceId.eq(v.as_str()));
        }
        if let Some(v) = &f.actor_id {
            q = q.filter(C::ActorId.eq(v.as_str()));
        }
        if let Some(v) = &f.entity {
            let expr = match self.backend() {
                DbBackend::Postgres => "details->>'entity' = $1",
                _ => "json_extract(details, '$.entity') = ?",
            };
            q = q.filter(Expr::cust_with_values(expr, [v.clone()]));
        }
        if let Some(v) = f.since {
            q = q.filter(C::CreatedAt.gte(v.to_offset(time::UtcOffset::UTC)));
        }
        if let Some(v) = f.until {
            q = q.filter(C::CreatedAt.lt(v.to_offset(time::UtcOffset::UTC)));
        }
        crate::keyset_page(&self.db, q, C::Id, page, convert::audit, |e| e.id.as_uuid()).await
    }
}

#[async_trait]
impl IdempotencyStore for Store {
    async fn try_insert(&self, record: &IdempotencyRecord) -> Result<Option<IdempotencyRecord>> {
        let tx = self.write().await?;
        let inserted = idempotency_keys::Entity::insert(idempotency_keys::ActiveModel {
            scope: Set(record.scope.clone()),
            key: Set(record.key.clone()),
            fingerprint: Set(record.fingerprint.clone()),
            status: Set(None),
            body: Set(None),
            content_type: Set(None),
            location: Set(None),
            created_at: Set(record.created_at),
        })
        .exec_without_returning(tx.c())
        .await
        .map(|_| ())
        .map_err(db_err);
        match tx.finish(inserted).await {
            Ok(()) => Ok(None),
            Err(Error::Conflict { .. }) => {
                let existing = idempotency_keys::Entity::find_by_id((record.scope.clone(), record.key.clone()))
                    .one(&self.db)
                    .await
                    .map_err(db_err)?;
                let existing = existing.map(|mut m| {
                    // Stored responses are sealed (they may hold a secret shown once).
                    m.body = m.body.and_then(|b| self.open_response(&m.scope, &m.key, &b));
                    m
                });
                Ok(Some(existing.map(convert::idempotency).ok_or_else(|| {
                    // Released between our insert and our read: report it as
                    // in flight; the client's retry will find the key free.
                    sluice_domain::shared::idempotency::in_progress()
                })?))
            }
            Err(e) => Err(e),
        }
    }

    async fn take_over(&self, old: &IdempotencyRecord, new: &IdempotencyRecord) -> Result<bool> {
        written!(self, |tx| {
            idempotency_keys::Entity::update_many()
                .col_expr(idempotency_keys::Column::Fingerprint, Expr::value(new.fingerprint.clone()))
                .col_expr(idempotency_keys::Column::CreatedAt, Expr::value(new.created_at))
                .col_expr(idempotency_keys::Column::Status, Expr::value(Option::<i32>::None))
                .col_expr(idempotency_keys::Column::Body, Expr::value(Option::<Vec<u8>>::None))
                .col_expr(idempotency_keys::Column::ContentType, Expr::value(Option::<String>::None))
                .col_expr(idempotency_keys::Column::Location, Expr::value(Option::<String>::None))
                .filter(idempotency_keys::Column::Scope.eq(old.scope.as_str()))
                .filter(idempotency_keys::Column::Key.eq(old.key.as_str()))
                .filter(idempotency_keys::Column::CreatedAt.eq(old.created_at))
                .exec(tx.c())
                .await
                .map(|r| r.rows_affected == 1)
                .map_err(db_err)
        })
    }

    async fn complete(&self, scope: &str, key: &str, response: &StoredResponse) -> Result<()> {
        written!(self, |tx| {
            idempotency_keys::Entity::update_many()
                .col_expr(idempotency_keys::Column::Status, Expr::value(Some(response.status as i32)))
                .col_expr(
                    idempotency_keys::Column::Body,
                    Expr::value(Some(self.seal_response(scope, key, &response.body)?)),
                )
                .col_expr(idempotency_keys::Column::ContentType, Expr::value(response.content_type.clone()))
                .col_expr(idempotency_keys::Column::Location, Expr::value(response.location.clone()))
                .filter(idempotency_keys::Column::Scope.eq(scope))
                .filter(idempotency_keys::Column::Key.eq(key))
                .exec(tx.c())
                .await
                .map(|_| ())
                .map_err(db_err)
        })
    }

    async fn release(&self, scope: &str, key: &str) -> Result<()> {
        written!(self, |tx| {
            idempotency_keys::Entity::delete_many()
                .filter(idempotency_keys::Column::Scope.eq(scope))
                .filter(idempotency_keys::Column::Key.eq(key))
                .exec(tx.c())
                .await
                .map(|_| ())
                .map_err(db_err)
        })
    }
}

#[async_trait]
impl HealthCheck for Store {
    async fn ping(&self) -> Result<()> {
        self.db.ping().await.map_err(db_err)
    }
}
