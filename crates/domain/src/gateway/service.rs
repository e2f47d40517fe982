//! The gateway's use case: one payload of LLM output checked against a
//! data asset's contract, metered against the plan's monthly quota, with
//! a `schema.drift` activity event when it fails the contract. The
//! pipeline itself is pure (see [`crate::gateway`]).

use super::{Outcome, Repair, RepairKind, check};
use crate::billing::service::BillingService;
use crate::catalog::service::CatalogService;
use crate::identity::service::IdentityService;
use crate::identity::{Permission, Principal};
use crate::monitoring::activity::ActivityEvent;
use crate::monitoring::service::MonitoringService;
use crate::shared::clock::Clock;
use crate::shared::ids::{AssetId, OrgId};
use crate::shared::offload::Offload;
use crate::{Error, Result};
use serde_json::json;
use std::sync::Arc;

/// Payloads up to this size are extracted on the calling task (tens of
/// microseconds); larger ones on the offload pool.
pub const INLINE_PAYLOAD: usize = 32 * 1024;

/// What the gateway made of one payload.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayResult {
    /// No JSON object could be found in the payload.
    NoJson,
    Checked(Outcome),
    /// A valid result that needed a repair of a kind the request rejects.
    Rejected {
        repairs: Vec<Repair>,
    },
}

/// The use cases of the gateway.
#[derive(Clone)]
pub struct GatewayService {
    pub(crate) identity: IdentityService,
    pub(crate) monitoring: MonitoringService,
    pub(crate) billing: BillingService,
    pub(crate) catalog: CatalogService,
    pub(crate) clock: Arc<dyn Clock>,
    /// Where [`GatewayService::off_thread`] runs CPU-bound work.
    pub(crate) offload: Arc<dyn Offload>,
}

impl GatewayService {
    /// Runs the gateway pipeline on `raw` against the contract of `asset`.
    /// Only an organization API key may call it; the organization is the
    /// key's.
    pub async fn validate(&self, p: &Principal, asset: AssetId, raw: &str) -> Result<GatewayResult> {
        self.validate_rejecting(p, asset, raw, &[]).await
    }

    /// [`GatewayService::validate`], refusing a valid result that needed a
    /// repair of a kind in `reject` ([`GatewayResult::Rejected`]).
    pub async fn validate_rejecting(
        &self,
        p: &Principal,
        asset: AssetId,
        raw: &str,
        reject: &[RepairKind],
    ) -> Result<GatewayResult> {
        let Principal::ApiKey { org_id, .. } = p else {
            return Err(Error::Unauthenticated("the gateway takes an organization API key (X-Api-Key)".into()));
        };
        self.validate_in(p, *org_id, asset, raw, reject).await
    }

    /// The same pipeline for any member of `org` (the console's
    /// playground): it reads the organization's contract and counts
    /// against its monthly quota like a call with its API key.
    pub async fn validate_in(
        &self,
        p: &Principal,
        org: OrgId,
        asset: AssetId,
        raw: &str,
        reject: &[RepairKind],
    ) -> Result<GatewayResult> {
        self.identity.access(p, org, Permission::Read).await?;
        let asset = self.catalog.contract(org, asset).await?;
        if let Err(e) = self.billing.consume_validation(org).await {
            if e.kind() == crate::ErrorKind::Exhausted {
                self.monitoring.metrics().gateway_validation("quota_exceeded");
            }
            return Err(e);
        }
        // Linear, but a payload of megabytes still takes milliseconds: off
        // the request threads.
        let outcome = if raw.len() <= INLINE_PAYLOAD {
            check(raw, &asset.fields)
        } else {
            let (asset, raw) = (asset.clone(), raw.to_string());
            self.off_thread(move || check(&raw, &asset.fields)).await?
        };
        let result = match outcome {
            None => GatewayResult::NoJson,
            Some(Outcome::Valid { repairs, .. }) if repairs.iter().any(|r| reject.contains(&r.kind)) => {
                GatewayResult::Rejected { repairs }
            }
            Some(o) => GatewayResult::Checked(o),
        };
        self.monitoring.metrics().gateway_validation(match &result {
            GatewayResult::NoJson => "no_json",
            GatewayResult::Checked(Outcome::Valid { .. }) => "valid",
            GatewayResult::Checked(Outcome::Invalid { .. }) => "invalid",
            GatewayResult::Rejected { .. } => "repair_rejected",
        });
        if let GatewayResult::Checked(Outcome::Invalid { missing_fields, type_mismatches, .. }) = &result {
            let n = missing_fields.len() + type_mismatches.len();
            self.monitoring
                .record(&ActivityEvent {
                    id: uuid::Uuid::now_v7(),
                    org_id: org,
                    event_type: crate::monitoring::activity::EventType::SchemaDrift,
                    severity: "warning".into(),
                    message: format!(
                        "LLM output drifted from data asset '{}' v{} ({n} problem{})",
                        asset.name,
                        asset.version,
                        if n == 1 { "" } else { "s" }
                    ),
                    data: json!({
                        "asset_id": asset.id,
                        "asset_name": asset.name,
                        "asset_version": asset.version,
                        "missing_fields": missing_fields,
                        "type_mismatches": type_mismatches,
                    }),
                    created_at: self.clock.now(),
                })
                .await?;
        }
        Ok(result)
    }

    /// Runs CPU-bound `work` on the offload pool (bounded in the service)
    /// and hands back its result: for the extraction of a large payload,
    /// and for adapters with such work of their own (the HTTP layer's parse
    /// of a large gateway body), so that all of it shares one bound.
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
}
