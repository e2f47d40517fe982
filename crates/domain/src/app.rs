//! `Sluice`: the facade an adapter holds. It owns one service per context,
//! wired from the ports the adapters provide, and has no logic of its own:
//! callers reach a use case as `sluice.<context>.<use case>(…)`.

use crate::billing::ports::BillingRepository;
use crate::billing::service::{BillingConfig, BillingService};
use crate::catalog::ports::CatalogRepository;
use crate::catalog::service::CatalogService;
use crate::connect::ports::{
    ConnectionRepository, DiscoveredSchemas, IntegrationRepository, OAuthClient, OAuthStateStore, SecretResolver,
};
use crate::connect::registry::ConnectorRegistry;
use crate::connect::service::ConnectService;
use crate::gateway::service::GatewayService;
use crate::iac::ports::IacRepository;
use crate::iac::service::IacService;
use crate::identity::ports::{ApiKeyRepository, InvitationRepository, OrgRepository, TokenVerifier, UserRepository};
use crate::identity::service::IdentityService;
use crate::monitoring::ports::{
    ActivityRepository, DashboardRepository, DeliveryQueue, HealthCheck, Metrics, NoMetrics, RuleRepository,
    WebhookSender,
};
use crate::monitoring::service::MonitoringService;
use crate::shared::audit::AuditRepository;
use crate::shared::clock::Clock;
use crate::shared::idempotency::IdempotencyStore;
use crate::shared::offload::{Inline, Offload};
use crate::sync::SyncService;
use crate::sync::engine::Engine;
use crate::sync::ports::{CursorRepository, FlowRepository, QueueRepository, RunRepository};
use crate::sync::verification::{VerificationRepository, Verifier};
use std::sync::Arc;

/// The ports the services run on, by context.
#[derive(Clone)]
pub struct Ports {
    // shared
    pub audit: Arc<dyn AuditRepository>,
    pub idempotency: Arc<dyn IdempotencyStore>,
    pub clock: Arc<dyn Clock>,
    // identity
    pub users: Arc<dyn UserRepository>,
    pub orgs: Arc<dyn OrgRepository>,
    pub invitations: Arc<dyn InvitationRepository>,
    pub api_keys: Arc<dyn ApiKeyRepository>,
    pub tokens: Arc<dyn TokenVerifier>,
    // monitoring
    pub activity: Arc<dyn ActivityRepository>,
    pub health: Arc<dyn HealthCheck>,
    pub dashboard: Arc<dyn DashboardRepository>,
    pub rules: Arc<dyn RuleRepository>,
    pub deliveries: Arc<dyn DeliveryQueue>,
    /// Sends notification deliveries.
    pub webhooks: Arc<dyn WebhookSender>,
    // billing
    pub billing: Arc<dyn BillingRepository>,
    // connect
    pub integrations: Arc<dyn IntegrationRepository>,
    pub connections: Arc<dyn ConnectionRepository>,
    pub connectors: Arc<dyn ConnectorRegistry>,
    pub secrets: Arc<dyn SecretResolver>,
    pub schemas: Arc<dyn DiscoveredSchemas>,
    /// OAuth providers; `None` when none is configured.
    pub oauth: Option<Arc<dyn OAuthClient>>,
    pub oauth_states: Option<Arc<dyn OAuthStateStore>>,
    /// Signs OAuth `state` parameters.
    pub oauth_state_key: Vec<u8>,
    // sync
    pub flows: Arc<dyn FlowRepository>,
    pub runs: Arc<dyn RunRepository>,
    pub cursors: Arc<dyn CursorRepository>,
    pub queue: Arc<dyn QueueRepository>,
    pub verifications: Arc<dyn VerificationRepository>,
    pub stream_drops: Arc<dyn crate::sync::ports::StreamDropRepository>,
    // catalog
    pub catalog: Arc<dyn CatalogRepository>,
    // iac
    pub iac: Arc<dyn IacRepository>,
}

/// Every context's use cases, wired (see `docs/architecture.md`).
#[derive(Clone)]
pub struct Sluice {
    pub identity: IdentityService,
    pub monitoring: MonitoringService,
    pub billing: BillingService,
    pub connect: ConnectService,
    pub sync: SyncService,
    /// What workers call: runs claimed, executed and recovered.
    pub engine: Engine,
    /// What workers call: verifications claimed and executed.
    pub verifier: Verifier,
    pub catalog: CatalogService,
    pub gateway: GatewayService,
    pub iac: IacService,
}

/// How the services run, beyond their ports.
#[derive(Clone)]
pub struct Options {
    /// How long a worker holds a run without renewing its heartbeat.
    pub lease: std::time::Duration,
    /// Where the gateway's CPU-bound work (the extraction and parse of
    /// large payloads) runs; by default on the calling task.
    pub offload: Arc<dyn Offload>,
    /// The payment provider; by default none (the billing endpoints
    /// answer 503 and the free plan applies).
    pub billing: BillingConfig,
    /// The operator's counters; by default none.
    pub metrics: Arc<dyn Metrics>,
    /// How many of a run's entities sync at once (at least 1; a
    /// destination may allow fewer).
    pub entity_concurrency: usize,
    /// Into how many key ranges, read at once, a full refresh of a large
    /// table may be split (1: one read; sources that cannot split ignore
    /// it).
    pub read_ranges: usize,
    /// The secret references the operator granted to organizations; by
    /// default none.
    pub secret_policy: crate::connect::secret_policy::SecretPolicy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            lease: std::time::Duration::try_from(crate::sync::engine::queue::LEASE)
                .unwrap_or(std::time::Duration::from_secs(60)),
            offload: Arc::new(Inline),
            billing: BillingConfig::default(),
            metrics: Arc::new(NoMetrics),
            entity_concurrency: crate::sync::engine::run::DEFAULT_ENTITY_CONCURRENCY,
            read_ranges: crate::sync::engine::entity::DEFAULT_READ_RANGES,
            secret_policy: Default::default(),
        }
    }
}

impl Sluice {
    /// The services with the default [`Options`].
    pub fn new(p: Ports) -> Self {
        Self::with_options(p, Options::default())
    }

    /// Wires the services, each with its own ports and the services of the
    /// contexts below it.
    pub fn with_options(p: Ports, options: Options) -> Self {
        let clock = p.clock.clone();
        let changes = Arc::default();
        let identity = IdentityService {
            users: p.users,
            orgs: p.orgs,
            invitations: p.invitations,
            api_keys: p.api_keys,
            audit: p.audit.clone(),
            idempotency: p.idempotency,
            tokens: p.tokens,
            clock: clock.clone(),
            keys: Arc::default(),
        };
        let monitoring = MonitoringService {
            identity: identity.clone(),
            activity: p.activity,
            health: p.health,
            dashboard: p.dashboard,
            metrics: options.metrics,
            clock: clock.clone(),
            rules: p.rules,
            flows: Arc::new(FlowsOf(p.flows.clone())),
            deliveries: p.deliveries,
            sender: p.webhooks,
        };
        let billing = BillingService {
            identity: identity.clone(),
            monitoring: monitoring.clone(),
            billing: p.billing,
            clock: clock.clone(),
            plans: Arc::default(),
            config: options.billing,
        };
        let connect = ConnectService {
            identity: identity.clone(),
            monitoring: monitoring.clone(),
            integrations: p.integrations,
            connections: p.connections,
            connectors: p.connectors,
            secrets: p.secrets,
            secret_policy: Arc::new(options.secret_policy),
            schemas: p.schemas,
            oauth: p.oauth,
            oauth_states: p.oauth_states,
            oauth_state_key: p.oauth_state_key,
            clock: clock.clone(),
            changes: Arc::clone(&changes),
        };
        let lease = time::Duration::try_from(options.lease).unwrap_or(crate::sync::engine::queue::LEASE);
        let verifier = Verifier {
            monitoring: monitoring.clone(),
            connect: connect.clone(),
            flows: p.flows.clone(),
            verifications: p.verifications.clone(),
            clock: clock.clone(),
            lease,
        };
        let engine = Engine {
            monitoring: monitoring.clone(),
            connect: connect.clone(),
            flows: p.flows.clone(),
            runs: p.runs.clone(),
            cursors: p.cursors.clone(),
            queue: p.queue.clone(),
            verifications: p.verifications.clone(),
            drops: p.stream_drops.clone(),
            verifier: verifier.clone(),
            clock: clock.clone(),
            lease,
            stopping: Arc::default(),
            entity_concurrency: options.entity_concurrency.max(1),
            read_ranges: options.read_ranges.max(1),
        };
        let sync = SyncService {
            identity: identity.clone(),
            connect: connect.clone(),
            flows: p.flows,
            runs: p.runs,
            cursors: p.cursors,
            queue: p.queue,
            verifications: p.verifications,
            drops: p.stream_drops,
            audit: p.audit,
            clock: clock.clone(),
            engine: engine.clone(),
        };
        let catalog = CatalogService {
            identity: identity.clone(),
            sync: sync.clone(),
            catalog: p.catalog,
            clock: clock.clone(),
            assets: Arc::default(),
            changes,
        };
        let gateway = GatewayService {
            identity: identity.clone(),
            monitoring: monitoring.clone(),
            billing: billing.clone(),
            catalog: catalog.clone(),
            clock: clock.clone(),
            offload: options.offload,
        };
        let iac = IacService {
            identity: identity.clone(),
            connect: connect.clone(),
            sync: sync.clone(),
            catalog: catalog.clone(),
            iac: p.iac,
            clock,
        };
        Sluice { identity, monitoring, billing, connect, sync, engine, verifier, catalog, gateway, iac }
    }
}

/// Monitoring's view of the flows (sync's repository, above it).
struct FlowsOf(Arc<dyn FlowRepository>);

#[async_trait::async_trait]
impl crate::monitoring::ports::FlowDirectory for FlowsOf {
    async fn flow_exists(
        &self,
        org: crate::shared::ids::OrgId,
        flow: crate::shared::ids::FlowId,
    ) -> crate::Result<bool> {
        Ok(self.0.get(org, flow).await?.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identity::apikey::ApiKey;
    use crate::identity::org::Member;
    use crate::identity::ports::*;
    use crate::identity::user::User;
    use crate::identity::{Principal, Role};
    use crate::shared::clock::Clock;
    use crate::shared::ids::{ApiKeyId, OrgId, UserId};
    use crate::shared::page::PageRequest;
    use serde_json::json;
    use time::Duration;
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
            billing: Arc::new(crate::billing::ports::MockBillingRepository::new()),
            schemas: Arc::new(crate::connect::ports::MockDiscoveredSchemas::new()),
            dashboard: Arc::new(crate::monitoring::ports::MockDashboardRepository::new()),
            rules: Arc::new(crate::monitoring::ports::MockRuleRepository::new()),
            deliveries: Arc::new(crate::monitoring::ports::MockDeliveryQueue::new()),
            webhooks: Arc::new(crate::monitoring::ports::MockWebhookSender::new()),
            users: Arc::new(MockUserRepository::new()),
            orgs: Arc::new(orgs),
            invitations: Arc::new(MockInvitationRepository::new()),
            api_keys: Arc::new(api_keys),
            audit: Arc::new(crate::shared::audit::MockAuditRepository::new()),
            idempotency: Arc::new(crate::shared::idempotency::MockIdempotencyStore::new()),
            tokens: Arc::new(MockTokenVerifier::new()),
            health: Arc::new(crate::monitoring::ports::MockHealthCheck::new()),
            clock: Arc::new(Fixed(NOW)),
            integrations: Arc::new(crate::connect::ports::MockIntegrationRepository::new()),
            connections: Arc::new(crate::connect::ports::MockConnectionRepository::new()),
            catalog: Arc::new(crate::catalog::ports::MockCatalogRepository::new()),
            connectors: Arc::new(crate::connect::registry::MockConnectorRegistry::new()),
            secrets: Arc::new(crate::connect::ports::MockSecretResolver::new()),
            oauth: None,
            oauth_states: None,
            oauth_state_key: vec![0; 32],
            flows: Arc::new(crate::sync::ports::MockFlowRepository::new()),
            runs: Arc::new(crate::sync::ports::MockRunRepository::new()),
            cursors: Arc::new(crate::sync::ports::MockCursorRepository::new()),
            queue: Arc::new(crate::sync::ports::MockQueueRepository::new()),
            verifications: Arc::new(crate::sync::verification::MockVerificationRepository::new()),
            stream_drops: Arc::new(crate::sync::ports::MockStreamDropRepository::new()),
            activity: Arc::new(crate::monitoring::ports::MockActivityRepository::new()),
            iac: Arc::new(crate::iac::ports::MockIacRepository::new()),
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
        let mut iac = crate::iac::ports::MockIacRepository::new();
        iac.expect_snapshot().times(3).returning(|_| Ok(crate::iac::Snapshot::default()));
        let mut calls = 0;
        iac.expect_apply().times(2).returning(move |_, writes, audit| {
            calls += 1;
            assert_eq!(writes.integrations.len(), 1);
            assert_eq!(
                audit.iter().map(|a| a.action.as_str()).collect::<Vec<_>>(),
                ["integration.created", "iac.applied"]
            );
            if calls == 1 { Err(crate::iac::ports::stale_plan()) } else { Ok(()) }
        });
        let mut connectors = crate::connect::registry::MockConnectorRegistry::new();
        connectors.expect_specs().returning(Vec::new);
        let mut p = ports(MockApiKeyRepository::new(), MockOrgRepository::new());
        let iac: Arc<dyn IacRepository> = Arc::new(iac);
        p.iac = iac.clone();
        p.connectors = Arc::new(connectors);
        p.oauth = None;
        let sluice = Sluice::new(p);
        let k = key(None);
        let principal = Principal::ApiKey { id: k.id, org_id: k.org_id, name: k.name, roles: vec![Role::Editor] };
        // An OAuth-less registry knows no types: the plan must fail validation
        // before any write, and nothing is applied.
        let err = sluice
            .iac
            .apply_iac(&principal, k.org_id, "version: 1\nintegrations: [{name: gh, type: github}]", false)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Validation);
        let mut connectors = crate::connect::registry::MockConnectorRegistry::new();
        connectors.expect_specs().returning(Vec::new);
        let mut oauth = crate::connect::ports::MockOAuthClient::new();
        oauth.expect_providers().returning(|| vec!["github".to_string()]);
        let mut p = ports(MockApiKeyRepository::new(), MockOrgRepository::new());
        p.iac = iac;
        p.connectors = Arc::new(connectors);
        p.oauth = Some(Arc::new(oauth));
        let sluice = Sluice::new(p);
        let out = sluice
            .iac
            .apply_iac(&principal, k.org_id, "version: 1\nintegrations: [{name: gh, type: github}]", false)
            .await
            .unwrap();
        assert!(out.apply_id.is_some());
        assert_eq!(out.plan.count(crate::iac::Action::Created), 1);
    }

    #[tokio::test]
    async fn malformed_keys_are_refused_without_a_lookup() {
        let sluice = Sluice::new(ports(MockApiKeyRepository::new(), MockOrgRepository::new()));
        let err = sluice.identity.authenticate_api_key("slk_short").await.unwrap_err();
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
            match sluice.identity.authenticate_api_key(&raw).await.unwrap() {
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
        let err = sluice.identity.get_organization(&principal, OrgId::new()).await.unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotFound);
        let err = sluice.identity.list_members(&principal, OrgId::new(), PageRequest::default()).await.unwrap_err();
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
        let err =
            sluice.identity.update_member_role(&Principal::User(user), OrgId::new(), UserId::new(), Role::Admin).await;
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
        let m = sluice.identity.update_member_role(&admin, org, target, Role::Editor).await.unwrap();
        assert_eq!(m.role, Role::Editor);
    }
}
