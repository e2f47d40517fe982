//! In-memory implementations of Sluice's ports, for domain and HTTP tests
//! that need no database, plus a fake token verifier and a settable clock.
//! Each adapter keeps its state behind one mutex, so the rules the SQL
//! adapters enforce inside transactions hold here too.

use async_trait::async_trait;
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::app::Ports;
use sluice_domain::identity::Role;
use sluice_domain::identity::apikey::ApiKey;
use sluice_domain::identity::invitation::{Invitation, InvitationStatus};
use sluice_domain::identity::org::{Member, Organization, check_admin_retained};
use sluice_domain::identity::ports::*;
use sluice_domain::identity::user::{User, VerifiedClaims};
use sluice_domain::monitoring::ports::HealthCheck;
use sluice_domain::shared::audit::{AuditEntry, AuditFilter, AuditRepository};
use sluice_domain::shared::clock::Clock;
use sluice_domain::shared::idempotency::{IdempotencyRecord, IdempotencyStore, StoredResponse};
use sluice_domain::shared::ids::{ApiKeyId, InvitationId, OrgId, UserId};
use sluice_domain::shared::page::{Page, PageRequest};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use time::OffsetDateTime;
use uuid::Uuid;

fn page_of<T: Clone>(mut items: Vec<T>, page: PageRequest, id: impl Fn(&T) -> Uuid) -> Page<T> {
    items.sort_by_key(|i| std::cmp::Reverse(id(i)));
    let items: Vec<T> =
        items.into_iter().filter(|i| page.after.is_none_or(|a| id(i) < a)).take(page.limit as usize + 1).collect();
    Page::from_overfetch(items, page.limit, id)
}

mod billing;
mod changes;
mod connect;
mod connector;
mod iac;
mod identity;
mod monitoring;
pub mod services;
mod sync;

pub use billing::*;
pub use changes::{MEMORY_LOG, Op, memory_log_spec};
pub use connect::*;
pub use connector::*;
pub use iac::*;
pub use identity::*;
pub use monitoring::*;
pub use sync::*;

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
    let catalog = InMemoryCatalog::new(store);
    in_memory_ports_sharing(store, clock, connectors, secrets, &catalog, &InMemoryFlows::new(store))
}

/// [`in_memory_ports_with`] over a catalog and flows of the caller's: two
/// sets of ports over the same ones are two processes sharing a store.
pub fn in_memory_ports_sharing(
    store: &InMemoryStore,
    clock: Arc<dyn Clock>,
    connectors: &MemoryConnectors,
    secrets: FakeSecrets,
    catalog: &InMemoryCatalog,
    flows: &InMemoryFlows,
) -> Ports {
    let s = Arc::new(store.clone());
    let catalog = Arc::new(catalog.clone());
    let catalog_for_iac = catalog.clone();
    let flows = flows.clone();
    Ports {
        integrations: catalog.clone(),
        connections: catalog.clone(),
        schemas: catalog.clone(),
        catalog,
        billing: Arc::new(InMemoryBilling::new(store)),
        connectors: Arc::new(connectors.clone()),
        secrets: Arc::new(secrets),
        oauth: None,
        oauth_states: None,
        oauth_state_key: vec![7; 32],
        flows: Arc::new(flows.clone()),
        runs: Arc::new(flows.clone()),
        cursors: Arc::new(flows.clone()),
        queue: Arc::new(flows.clone()),
        verifications: Arc::new(flows.clone()),
        stream_drops: Arc::new(flows.clone()),
        activity: Arc::new(flows.clone()),
        rules: Arc::new(flows.clone()),
        deliveries: Arc::new(flows.clone()),
        webhooks: Arc::new(RecordingSender::default()),
        dashboard: Arc::new(InMemoryDashboard { flows: flows.clone(), catalog: (*catalog_for_iac).clone() }),
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
