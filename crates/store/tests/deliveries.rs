//! The notification outbox on a real PostgreSQL metadata store: events
//! queue a delivery per matching rule in their transaction, two stores
//! (two processes) claiming at once never get one delivery both, a claim
//! that ran out is taken over, and only the holder records an attempt.

use sluice_domain::monitoring::activity::ActivityEvent;
use sluice_domain::monitoring::delivery::{AttemptResult, after_attempt};
use sluice_domain::monitoring::ports::{ActivityRepository, DeliveryQueue, RuleRepository};
use sluice_domain::monitoring::rule::{Channel, ChannelKind, NotificationRule, new_secret};
use sluice_domain::shared::audit::{Actor, AuditEntry};
use sluice_domain::shared::ids::RuleId;
use sluice_domain::shared::page::PageRequest;
use sluice_store::Store;
use std::collections::HashSet;
use std::sync::Arc;
use time::{Duration, OffsetDateTime};

mod common;
use common::fresh;

#[tokio::test]
async fn two_stores_claim_each_delivery_once_and_only_the_holder_records() {
    let Some((_db, url)) = fresh("sluice_outbox").await else { return };
    let key = [9u8; 32];
    let a = Arc::new(Store::connect(&url, &key).await.unwrap());
    let b = Arc::new(Store::connect(&url, &key).await.unwrap());
    let now = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap();
    let org = common::new_org(&a, now).await;
    let rule = NotificationRule {
        id: RuleId::new(),
        org_id: org.id,
        name: "r".into(),
        event: "run.failed".into(),
        flow_id: None,
        channel: Channel {
            kind: ChannelKind::Webhook,
            url: "https://hooks.example/in".into(),
            secret: Some(new_secret()),
        },
        enabled: true,
        created_at: now,
        updated_at: now,
    };
    let audit = AuditEntry::new(Some(org.id), Actor::system(), "rule.created", "rule", rule.id, now);
    RuleRepository::create(a.as_ref(), &rule, &audit).await.unwrap();
    assert_eq!(
        RuleRepository::get(b.as_ref(), org.id, rule.id).await.unwrap().unwrap(),
        rule,
        "the secret round-trips"
    );
    for i in 0..30 {
        let kind = if i % 3 == 0 { "run.succeeded" } else { "run.failed" };
        let e = ActivityEvent {
            id: uuid::Uuid::now_v7(),
            org_id: org.id,
            event_type: sluice_domain::monitoring::activity::EventType::parse(kind),
            severity: "error".into(),
            message: format!("event {i}"),
            data: serde_json::json!({}),
            created_at: now,
        };
        a.record_event(&e).await.unwrap();
    }
    let later = now + Duration::seconds(1);
    let (x, y) = tokio::join!(
        a.claim("a", later, later + Duration::seconds(60), 15),
        b.claim("b", later, later + Duration::seconds(60), 15)
    );
    let (x, y) = (x.unwrap(), y.unwrap());
    let ids: HashSet<_> = x.iter().chain(&y).map(|o| o.delivery.id).collect();
    assert_eq!(ids.len(), x.len() + y.len(), "no delivery was claimed twice");
    assert_eq!(ids.len(), 20, "one per run.failed event, all due");
    assert!(
        x.iter()
            .all(|o| o.url == rule.channel.url && o.secret == rule.channel.secret && o.message_id.starts_with("msg_"))
    );
    assert!(a.claim("c", later, later + Duration::seconds(60), 50).await.unwrap().is_empty(), "all are held");

    // Only the holder records; a claim that ran out goes to another worker.
    let first = &x[0];
    let done = after_attempt(
        first.delivery.clone(),
        &AttemptResult::Failed { code: Some(500), error: "HTTP 500".into() },
        later,
    );
    assert!(!b.finish(&done, "b").await.unwrap(), "b does not hold it");
    assert!(a.finish(&done, "a").await.unwrap());
    let expired = later + Duration::seconds(61);
    let retaken = b.claim("b", expired + Duration::seconds(10), expired + Duration::seconds(70), 50).await.unwrap();
    assert_eq!(retaken.len(), 20, "the failed one is due again after its backoff, the others' claims ran out");
    let listed =
        RuleRepository::deliveries(a.as_ref(), org.id, rule.id, PageRequest { limit: 50, after: None }).await.unwrap();
    let again = listed.items.iter().find(|d| d.id == first.delivery.id).unwrap();
    assert_eq!((again.attempts, again.response_code), (1, Some(500)));
}
