//! The billing context's store: organizations' subscriptions (plan,
//! status, period end, payment-provider customer), the provider's events
//! already processed, and the meter of gateway validations (see meter.rs).

use crate::entities::{billing_events, organizations};
use crate::{Store, db_err};
use async_trait::async_trait;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use sluice_domain::billing::plan::{Metered, Plan, Subscription, SubscriptionStatus};
use sluice_domain::billing::ports::{Audit, BillingRepository, Update};
use sluice_domain::shared::ids::OrgId;
use sluice_domain::{Error, Result};

fn subscription_from(m: organizations::Model) -> Result<Subscription> {
    Ok(Subscription {
        plan: Plan::parse(&m.plan).map_err(|e| crate::convert::corrupt("plan", e))?,
        status: SubscriptionStatus::parse(&m.billing_status)
            .ok_or_else(|| crate::convert::corrupt("billing status", &m.billing_status))?,
        current_period_end: m.current_period_end,
        customer_id: m.customer_id,
    })
}

#[async_trait]
impl BillingRepository for Store {
    async fn subscription(&self, org: OrgId) -> Result<Option<Subscription>> {
        crate::first(&self.db, organizations::Entity::find_by_id(org.as_uuid()), subscription_from).await
    }

    async fn org_of_customer(&self, customer: &str) -> Result<Option<OrgId>> {
        crate::first(
            &self.db,
            organizations::Entity::find().filter(organizations::Column::CustomerId.eq(customer)),
            |m| Ok(OrgId::from(m.id)),
        )
        .await
    }

    async fn set_customer(&self, org: OrgId, customer: &str) -> Result<String> {
        written!(self, |tx| {
            organizations::Entity::update_many()
                .col_expr(organizations::Column::CustomerId, Expr::value(customer))
                .filter(organizations::Column::Id.eq(org.as_uuid()))
                .filter(organizations::Column::CustomerId.is_null())
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            let row = organizations::Entity::find_by_id(org.as_uuid()).one(tx.c()).await.map_err(db_err)?;
            row.and_then(|m| m.customer_id).ok_or(Error::not_found("organization"))
        })
    }

    async fn apply_event<'a>(
        &self,
        event_id: &str,
        event_type: &str,
        org: OrgId,
        update: Update<'a>,
        audit: Audit<'a>,
    ) -> Result<bool> {
        let tx = self.write().await?;
        // The event's id first: a second delivery of it (or one racing this
        // one) stops here on the key, changing nothing.
        let recorded = billing_events::Entity::insert(billing_events::ActiveModel {
            id: Set(event_id.to_string()),
            event_type: Set(event_type.to_string()),
            org_id: Set(Some(org.as_uuid())),
            received_at: Set(time::OffsetDateTime::now_utc()),
        })
        .exec_without_returning(tx.c())
        .await
        .map_err(db_err);
        match recorded {
            Err(Error::Conflict { .. }) => return tx.finish(Ok(false)).await,
            Err(e) => return tx.finish(Err(e)).await,
            Ok(_) => {}
        }
        let r = async {
            self.lock_org(tx.c(), org).await?;
            let row = organizations::Entity::find_by_id(org.as_uuid()).one(tx.c()).await.map_err(db_err)?;
            let before = subscription_from(row.ok_or(Error::not_found("organization"))?)?;
            let after = update(before.clone());
            organizations::Entity::update_many()
                .col_expr(organizations::Column::Plan, Expr::value(after.plan.as_str()))
                .col_expr(organizations::Column::BillingStatus, Expr::value(after.status.as_str()))
                .col_expr(organizations::Column::CurrentPeriodEnd, Expr::value(after.current_period_end))
                .col_expr(organizations::Column::CustomerId, Expr::value(after.customer_id.clone()))
                .filter(organizations::Column::Id.eq(org.as_uuid()))
                .exec(tx.c())
                .await
                .map_err(db_err)?;
            crate::insert_audit(tx.c(), &audit(&before, &after)).await?;
            Ok(true)
        }
        .await;
        tx.finish(r).await
    }

    async fn consume_validation(&self, org: OrgId, month: &str, limit: Option<i64>) -> Result<Metered> {
        // Group commit: see meter.rs.
        self.meter.consume(self, org, month, limit).await
    }

    async fn validations_used(&self, org: OrgId, month: &str) -> Result<i64> {
        crate::meter::used(&self.db, org, month).await
    }
}
