//! Metering of gateway validations with group commit.
//!
//! Every validation must be counted, durably and exactly, before it is
//! answered, and the count must never pass the plan's limit, also with many
//! `sluice` processes on one PostgreSQL store. One transaction per validation
//! does that but caps the gateway at the database's commit rate. Here the
//! requests that arrive while a commit is under way wait together and are
//! counted by the next one: one transaction per batch, which locks each
//! (organization, month) row, grants the asks in arrival order while the
//! limit allows, and writes the new count. A request is answered only after
//! the transaction that counted it committed. Under no load a batch is one
//! ask, so nothing waits for a timer.

use crate::entities::validation_usage;
use crate::{Store, db_err};
use sea_orm::sea_query::{Expr, ExprTrait, OnConflict};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, QueryFilter};
use sluice_domain::ids::OrgId;
use sluice_domain::{Error, Result};
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

/// The most asks one transaction counts.
const MAX_BATCH: usize = 4096;

pub(crate) struct Ask {
    pub org: OrgId,
    pub month: String,
    pub limit: Option<i64>,
    pub reply: oneshot::Sender<Result<bool>>,
}

/// The handle requests send their asks to; the counting task runs on the
/// runtime that made the first ask and is started again if that runtime
/// went away.
#[derive(Default)]
pub(crate) struct Meter {
    tx: std::sync::Mutex<Option<mpsc::UnboundedSender<Ask>>>,
}

impl Meter {
    pub(crate) async fn consume(&self, store: &Store, org: OrgId, month: &str, limit: Option<i64>) -> Result<bool> {
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

async fn run(store: Store, mut rx: mpsc::UnboundedReceiver<Ask>) {
    let mut batch = Vec::new();
    while rx.recv_many(&mut batch, MAX_BATCH).await > 0 {
        count(&store, std::mem::take(&mut batch)).await;
    }
}

/// Counts one batch in one transaction and answers every ask in it.
async fn count(store: &Store, batch: Vec<Ask>) {
    // Rows are locked in key order, so two processes never deadlock.
    let mut groups: BTreeMap<(uuid::Uuid, String), Vec<Ask>> = BTreeMap::new();
    for a in batch {
        groups.entry((a.org.as_uuid(), a.month.clone())).or_default().push(a);
    }
    match decide(store, &groups).await {
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

/// Grants each group's asks in order while its limit allows; one
/// transaction, so the batch is counted whole or not at all.
async fn decide(store: &Store, groups: &BTreeMap<(uuid::Uuid, String), Vec<Ask>>) -> Result<Vec<Vec<bool>>> {
    let tx = store.write().await?;
    let r = async {
        let mut out = Vec::with_capacity(groups.len());
        for ((org, month), asks) in groups {
            let row = |count: i64| validation_usage::ActiveModel {
                org_id: Set(*org),
                month: Set(month.clone()),
                count: Set(count),
            };
            let current = Expr::col((validation_usage::Entity, validation_usage::Column::Count));
            if asks.iter().all(|a| a.limit.is_none()) {
                // No limit: one statement adds the batch.
                let n = asks.len() as i64;
                validation_usage::Entity::insert(row(n))
                    .on_conflict(
                        OnConflict::columns([validation_usage::Column::OrgId, validation_usage::Column::Month])
                            .value(validation_usage::Column::Count, current.add(n))
                            .to_owned(),
                    )
                    .exec_without_returning(tx.c())
                    .await
                    .map_err(db_err)?;
                out.push(vec![true; asks.len()]);
                continue;
            }
            // The no-op upsert locks the row (on SQLite it takes the write
            // lock) and answers the count the grants start from.
            let before = validation_usage::Entity::insert(row(0))
                .on_conflict(
                    OnConflict::columns([validation_usage::Column::OrgId, validation_usage::Column::Month])
                        .value(validation_usage::Column::Count, current)
                        .to_owned(),
                )
                .exec_with_returning(tx.c())
                .await
                .map_err(db_err)?
                .count;
            let mut count = before;
            let grants = asks
                .iter()
                .map(|a| {
                    let granted = a.limit.is_none_or(|l| count < l);
                    count += i64::from(granted);
                    granted
                })
                .collect();
            if count != before {
                validation_usage::Entity::update_many()
                    .col_expr(validation_usage::Column::Count, count.into())
                    .filter(validation_usage::Column::OrgId.eq(*org))
                    .filter(validation_usage::Column::Month.eq(month.as_str()))
                    .exec(tx.c())
                    .await
                    .map_err(db_err)?;
            }
            out.push(grants);
        }
        Ok(out)
    }
    .await;
    tx.finish(r).await
}
