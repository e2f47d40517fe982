//! Conversions between sea-orm models and domain entities.

use crate::entities::*;
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::identity::Role;
use sluice_domain::identity::apikey::ApiKey;
use sluice_domain::identity::invitation::{Invitation, InvitationStatus};
use sluice_domain::identity::org::Organization;
use sluice_domain::identity::user::User;
use sluice_domain::shared::audit::{Actor, ActorKind, AuditEntry};
use sluice_domain::shared::idempotency::{IdempotencyRecord, StoredResponse};

pub(crate) fn corrupt(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Internal(anyhow::anyhow!("stored {what} is invalid: {e}"))
}

pub fn role(s: &str) -> Result<Role> {
    s.parse().map_err(|e| corrupt("role", e))
}

pub fn roles_to_string(roles: &[Role]) -> String {
    roles.iter().map(|r| r.as_str()).collect::<Vec<_>>().join(",")
}

pub fn user(m: users::Model) -> User {
    User {
        id: m.id.into(),
        issuer: m.issuer,
        subject: m.subject,
        email: m.email,
        name: m.name,
        created_at: m.created_at,
        updated_at: m.updated_at,
    }
}

pub fn org(m: organizations::Model) -> Result<Organization> {
    Ok(Organization { id: m.id.into(), name: m.name, slug: m.slug, created_at: m.created_at })
}

pub fn invitation(m: invitations::Model) -> Result<Invitation> {
    Ok(Invitation {
        id: m.id.into(),
        org_id: m.org_id.into(),
        email: m.email,
        role: role(&m.role)?,
        status: InvitationStatus::parse(&m.status)?,
        expires_at: m.expires_at,
        created_at: m.created_at,
        invited_by: m.invited_by.map(Into::into),
    })
}

pub fn api_key(m: api_keys::Model) -> Result<ApiKey> {
    let roles = m.roles.split(',').filter(|s| !s.is_empty()).map(role).collect::<Result<Vec<_>>>()?;
    Ok(ApiKey {
        id: m.id.into(),
        org_id: m.org_id.into(),
        name: m.name,
        prefix: m.prefix,
        roles,
        created_at: m.created_at,
        last_used_at: m.last_used_at,
        revoked_at: m.revoked_at,
    })
}

pub fn audit(m: audit_logs::Model) -> Result<AuditEntry> {
    Ok(AuditEntry {
        id: m.id.into(),
        org_id: m.org_id.map(Into::into),
        actor: Actor {
            kind: m.actor_type.parse::<ActorKind>().map_err(|e| corrupt("actor type", e))?,
            id: m.actor_id,
            name: m.actor_name,
        },
        action: m.action,
        resource_type: m.resource_type,
        resource_id: m.resource_id,
        details: m.details,
        created_at: m.created_at,
    })
}

pub fn audit_model(e: &AuditEntry) -> audit_logs::ActiveModel {
    use sea_orm::ActiveValue::Set;
    audit_logs::ActiveModel {
        id: Set(e.id.as_uuid()),
        org_id: Set(e.org_id.map(|o| o.as_uuid())),
        actor_type: Set(e.actor.kind.as_str().to_string()),
        actor_id: Set(e.actor.id.clone()),
        actor_name: Set(e.actor.name.clone()),
        action: Set(e.action.clone()),
        resource_type: Set(e.resource_type.clone()),
        resource_id: Set(e.resource_id.clone()),
        details: Set(e.details.clone()),
        created_at: Set(e.created_at),
    }
}

pub fn idempotency(m: idempotency_keys::Model) -> IdempotencyRecord {
    IdempotencyRecord {
        scope: m.scope,
        key: m.key,
        fingerprint: m.fingerprint,
        response: match (m.status, m.body) {
            (Some(status), Some(body)) => {
                Some(StoredResponse { status: status as u16, body, content_type: m.content_type, location: m.location })
            }
            _ => None,
        },
        created_at: m.created_at,
    }
}
