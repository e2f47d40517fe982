//! Metering of gateway validations with group commit.
//!
//! Every validation must be counted, durably and exactly, before it is
//! answered, and the count must never pass the plan's limit, also with many
//! `sluice` processes on one PostgreSQL store. One transaction per validation
//! does that but caps the gateway at the database's commit rate. Here the
//! requests that arrive while commits are under way wait together and are
//! counted by the next transaction: one transaction per batch. A request is
//! answered only after the transaction that counted it committed. Under no
//! load a batch is one ask, so nothing waits for a timer.
//!
//! On PostgreSQL up to [`PG_LANES`] batches are in flight at once, so their
//! commits overlap (the server flushes them together). A lane starts at once
//! when no other is busy, else only when [`LANE_SHARE`] asks are waiting:
//! under load, fewer and larger transactions, since each costs CPU on both
//! sides. A month's count is the
//! sum of one row per lane (`shard`): a batch without a limit adds to its
//! lane's rows in one statement, its own transaction (one round trip, not
//! `BEGIN`, upsert, `COMMIT`), and waits for no other lane. A batch with a limit locks every
//! row of the organization's month (shard 0 first, then all), grants the asks
//! in arrival order while the sum stays within the limit, and adds the grants
//! to shard 0. Groups are taken in (organization, month) order in every
//! transaction, so two never wait on each other in a cycle. SQLite has one
//! writer, so there it is one lane.

use crate::entities::validation_counts as vc;
use crate::{Store, db_err};
use sea_orm::sea_query::{Alias, Expr, ExprTrait, OnConflict};
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, DbBackend, EntityTrait, QueryFilter, QuerySelect};
use sluice_domain::Error;
use sluice_domain::Result;
use sluice_domain::billing::plan::Metered;
use sluice_domain::shared::ids::OrgId;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;

/// The most asks one transaction counts.
const MAX_BATCH: usize = 4096;

/// Batches in flight at once on PostgreSQL.
pub(crate) const PG_LANES: i16 = 4;

/// Asks that must be waiting before a second (third, …) lane starts a batch.
const LANE_SHARE: usize = 8;

pub(crate) struct Ask {
    pub org: OrgId,
    pub month: String,
    pub limit: Option<i64>,
    pub reply: oneshot::Sender<Result<Metered>>,
}

/// The handle requests send their asks to; the counting task runs on the
/// runtime that made the first ask and is started again if that runtime
/// went away.
#[derive(Default)]
pub(crate) struct Meter {
    tx: std::sync::Mutex<Option<mpsc::UnboundedSender<Ask>>>,
}

impl Meter {
    pub(crate) async fn consume(&self, store: &Store, org: OrgId, month: &str, limit: Option<i64>) -> Result<Metered> {
        let (reply, answer) = oneshot::channel();
        let mut ask = Ask { org, month: month.to_string(), limit, reply };
        // Two tries: the first may meet a task whose runtime has ended.
        for _ in 0..2 {
            let sender = {
                let mut slot = self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                match slot.as_ref() {
                    Some(s) if !s.is_closed() => s.clone(),
                    _ => {
                        let (tx, rx) = mpsc::unbounded_channel();
                        // The task's copy of the store has a meter of its own, so
                        // the task ends with the last handle to this one.
                        let mut own = store.clone();
                        own.meter = Arc::default();
                        tokio::spawn(run(own, rx));
                        *slot = Some(tx.clone());
                        tx
                    }
                }
            };
            match sender.send(ask) {
                Ok(()) => {
                    return answer
                        .await
                        .map_err(|_| Error::Internal(anyhow::anyhow!("the validation meter stopped")))?;
                }
                Err(mpsc::error::SendError(back)) => ask = back,
            }
        }
        Err(Error::Internal(anyhow::anyhow!("the validation meter could not be started")))
    }
}

/// The month's count: the sum of its rows.
pub(crate) async fn used(db: &impl ConnectionTrait, org: OrgId, month: &str) -> Result<i64> {
    total(db, month_rows(org.as_uuid(), month)).await
}

/// The rows of one organization's month, one per lane that counted in it.
fn month_rows(org: uuid::Uuid, month: &str) -> sea_orm::Select<vc::Entity> {
    vc::Entity::find().filter(vc::Column::OrgId.eq(org)).filter(vc::Column::Month.eq(month))
}

async fn total(c: &impl ConnectionTrait, rows: sea_orm::Select<vc::Entity>) -> Result<i64> {
    Ok(rows.all(c).await.map_err(db_err)?.iter().map(|m| m.count).sum())
}

async fn run(store: Store, mut rx: mpsc::UnboundedReceiver<Ask>) {
    let lanes = if store.backend() == DbBackend::Postgres { PG_LANES } else { 1 };
    let mut free: Vec<i16> = (0..lanes).rev().collect();
    let mut busy = JoinSet::new();
    let mut lane_of = HashMap::new();
    let mut pending: Vec<Ask> = Vec::new();
    let mut open = true;
    loop {
        // A free lane takes what has arrived: at once when no lane is busy,
        // else once a lane's share has gathered (a lane finishing lets the
        // rest go), so that busy moments make fewer, larger batches.
        while !pending.is_empty() && !free.is_empty() && (busy.is_empty() || pending.len() >= LANE_SHARE) {
            let lane = free.pop().expect("a free lane");
            let asks: Vec<Ask> = pending.drain(..pending.len().min(MAX_BATCH)).collect();
            let s = store.clone();
            let id = busy.spawn(async move { count(&s, asks, lane).await }).id();
            lane_of.insert(id, lane);
        }
        if !open && busy.is_empty() {
            break;
        }
        tokio::select! {
            n = rx.recv_many(&mut pending, MAX_BATCH), if open => {
                if n == 0 {
                    open = false;
                }
            }
            Some(done) = busy.join_next_with_id(), if !busy.is_empty() => {
                let id = match done {
                    Ok((id, ())) => id,
                    // A batch that panicked dropped its replies: its callers
                    // get an error, and the lane serves again.
                    Err(e) => e.id(),
                };
                free.extend(lane_of.remove(&id));
            }
        }
    }
}

/// Counts one batch in one transaction and answers every ask in it.
async fn count(store: &Store, batch: Vec<Ask>, lane: i16) {
    let mut groups: BTreeMap<(uuid::Uuid, String), Vec<Ask>> = BTreeMap::new();
    for a in batch {
        groups.entry((a.org.as_uuid(), a.month.clone())).or_default().push(a);
    }
    match decide(store, &groups, lane).await {
        Ok(grants) => {
            for (asks, grants) in groups.into_values().zip(grants) {
                for (a, granted) in asks.into_iter().zip(grants) {
                    let _ = a.reply.send(Ok(granted));
                }
            }
        }
        Err(e) => {
            let why = e.to_string();
            for a in groups.into_values().flatten() {
                let _ = a.reply.send(Err(Error::Internal(anyhow::anyhow!("counting a validation: {why}"))));
            }
        }
    }
}

/// Adds each `(organization, month, lane, n)` to its row, in one statement.
async fn add<'a>(
    c: &impl ConnectionTrait,
    rows: impl IntoIterator<Item = (uuid::Uuid, &'a str, i16, i64)>,
) -> Result<()> {
    vc::Entity::insert_many(rows.into_iter().map(|(org, month, lane, n)| vc::ActiveModel {
        org_id: Set(org),
        month: Set(month.to_string()),
        shard: Set(lane),
        count: Set(n),
    }))
    .on_conflict(
        OnConflict::columns([vc::Column::OrgId, vc::Column::Month, vc::Column::Shard])
            .value(
                vc::Column::Count,
                Expr::col((vc::Entity, vc::Column::Count)).add(Expr::col((Alias::new("excluded"), vc::Column::Count))),
            )
            .to_owned(),
    )
    .exec_without_returning(c)
    .await
    .map_err(db_err)?;
    Ok(())
}

/// Grants each group's asks in order while its limit allows; one
/// transaction, so the batch is counted whole or not at all.
async fn decide(
    store: &Store,
    groups: &BTreeMap<(uuid::Uuid, String), Vec<Ask>>,
    lane: i16,
) -> Result<Vec<Vec<Metered>>> {
    if groups.values().flatten().all(|a| a.limit.is_none()) {
        // No limit anywhere: one statement, its own transaction, adds every
        // group's asks to this lane's rows; one round trip instead of three.
        let _guard = store.lock_writes().await;
        add(
            store.connection(),
            groups.iter().map(|((org, month), asks)| (*org, month.as_str(), lane, asks.len() as i64)),
        )
        .await?;
        return Ok(groups.values().map(|asks| vec![Metered::Counted { used: None }; asks.len()]).collect());
    }
    let tx = store.write().await?;
    let r = async {
        let mut out = Vec::with_capacity(groups.len());
        for ((org, month), asks) in groups {
            if asks.iter().all(|a| a.limit.is_none()) {
                // No limit: one statement adds the batch to this lane's row.
                add(tx.c(), [(*org, month.as_str(), lane, asks.len() as i64)]).await?;
                out.push(vec![Metered::Counted { used: None }; asks.len()]);
                continue;
            }
            // Adding nothing makes sure shard 0 exists and locks it (on
            // SQLite it takes the write lock); then every row of the month.
            add(tx.c(), [(*org, month.as_str(), 0, 0)]).await?;
            let mut rows = month_rows(*org, month);
            if store.backend() == DbBackend::Postgres {
                rows = rows.lock_exclusive();
            }
            let before = total(tx.c(), rows).await?;
            let mut count = before;
            let grants = asks
                .iter()
                .map(|a| {
                    if a.limit.is_some_and(|l| count >= l) {
                        return Metered::Refused;
                    }
                    count += 1;
                    Metered::Counted { used: Some(count) }
                })
                .collect();
            if count != before {
                add(tx.c(), [(*org, month.as_str(), 0, count - before)]).await?;
            }
            out.push(grants);
        }
        Ok(out)
    }
    .await;
    tx.finish(r).await
}
