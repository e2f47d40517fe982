//! A verification's repair: a run of the flow, fenced like every run, that
//! syncs again exactly the keys the verification found differing. Each
//! key's source row (through the mapping's transform) is upserted; a key
//! the source no longer has (or its filter drops) is deleted, or marked
//! deleted in a `soft` mirror. One destination transaction an entity,
//! committed while the run's attempt holds it. Its end queues a new
//! verification of what it repaired (see `verification.rs`).

use super::Engine;
use super::outcome::{EntityOutcome, Failure};
use super::queue::attempt_of;
use crate::connect::connector::{Destination, Field, FieldType, RecordBatch, Source, Value, WriteMode};
use crate::sync::flow::{EntityStats, EntityStatus, Flow, LogLevel, Mapping, Run};
use crate::sync::mode::{DELETED_AT, DeleteMode, SyncMode};
use crate::sync::transform;
use crate::sync::verification::{EntityCheck, Plan, Verification, key_text, rows_of};
use std::collections::HashSet;
use std::sync::Arc;

/// Keys read and written at once.
const REPAIR_BATCH: usize = 500;

impl Engine {
    /// Executes a repair run: every entity of `v` with differing keys.
    pub(super) async fn repair(&self, run: &mut Run, flow: &Flow, v: &Verification) -> Result<EntityOutcome, Failure> {
        let source = self.connect.open_source(flow.org_id, flow.source_connection_id).await?.io;
        let dest = self.connect.open_destination(flow.org_id, flow.destination_connection_id).await?.io;
        let message = format!("repair run of verification {}: the keys it found differing are synced again", v.id);
        self.log(run, LogLevel::Info, None, message).await;
        if run.attempt > 1 {
            self.end_earlier_sessions(run, &dest).await?;
        }
        run.entities.clear();
        for e in v.entities.iter().filter(|e| !e.repair_keys.is_empty()) {
            let Some(m) = flow.config.mappings.iter().find(|m| {
                m.source_entity == e.entity && (e.destination.is_empty() || m.destination() == e.destination)
            }) else {
                continue;
            };
            let started = std::time::Instant::now();
            let mut stats = EntityStats { entity: e.entity.clone(), ..Default::default() };
            match self.repair_entity(run, m, e, source.as_ref(), &dest).await {
                Ok((upserted, deleted)) => {
                    stats.status = EntityStatus::Succeeded;
                    stats.rows_read = upserted;
                    stats.rows_written = upserted + deleted;
                    let done = format!("repaired: {upserted} rows written again, {deleted} removed");
                    self.log(run, LogLevel::Info, Some(&e.entity), done).await;
                }
                Err(f) if f.lost => return Err(f),
                Err(f) => {
                    stats.status = EntityStatus::Failed;
                    self.log(run, LogLevel::Error, Some(&e.entity), f.message.clone()).await;
                    stats.error = Some(f.message);
                }
            }
            stats.duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
            run.entities.push(stats);
        }
        Ok(EntityOutcome::Done)
    }

    /// Syncs `e`'s differing keys of `m` again; answers the rows upserted
    /// and the keys removed.
    async fn repair_entity(
        &self,
        run: &Run,
        m: &Mapping,
        e: &EntityCheck,
        source: &dyn Source,
        dest: &Arc<dyn Destination>,
    ) -> Result<(u64, u64), Failure> {
        let source_fields = source.entity_fields(&m.source_entity).await?;
        let schema = if m.sync_mode.cdc() {
            super::capture::capture_schema(m, &source_fields)?
        } else {
            super::entity::destination_schema(m, &source_fields)?
        };
        let existing = dest
            .describe(m.destination())
            .await?
            .ok_or_else(|| format!("the destination has no '{}' any more", m.destination()))?;
        let plan = Plan::new(m, &source_fields, &existing.fields)?;
        let soft = m.sync_mode == SyncMode::CdcDeduped && m.delete_mode == Some(DeleteMode::Soft);
        let keys: Vec<Vec<Value>> = e
            .repair_keys
            .iter()
            .filter_map(|k| k.as_array())
            .map(|k| {
                k.iter()
                    .zip(&plan.source_key)
                    .map(|(j, f)| match (f.field_type, j.as_str()) {
                        // Bytes are kept as base64.
                        (FieldType::Binary, Some(b64)) => {
                            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, b64)
                                .map_or(Value::Null, Value::Bytes)
                        }
                        _ => transform::cast(transform::from_json(j), f.field_type),
                    })
                    .collect()
            })
            .collect();
        let fields = Arc::new(schema.fields.clone());
        let dest_key: Vec<Field> = plan.dest_key.clone();
        let mut writer = dest.open_for(&schema, WriteMode::Upsert, Some(&attempt_of(run))).await?;
        let (mut upserted, mut deleted) = (0u64, 0u64);
        let outcome = async {
            // The source's rows of every key (at most the keys read again
            // by a verification), read as the verification reads them.
            let (read_fields, found) = rows_of(source, &m.source_entity, &plan.source_key, &keys).await?;
            for part in keys.chunks(REPAIR_BATCH) {
                let rows: Vec<Vec<Value>> =
                    part.iter().filter_map(|k| found.get(&key_text(k))).flatten().cloned().collect();
                let mut out = transform::apply(&m.transform, RecordBatch { fields: read_fields.clone(), rows }).rows;
                let present: HashSet<String> = out.iter().map(|r| key_text(&plan.out_key(r))).collect();
                if soft {
                    for r in &mut out {
                        r.push(Value::Null);
                    }
                }
                if !out.is_empty() {
                    upserted += out.len() as u64;
                    writer.write(&RecordBatch { fields: fields.clone(), rows: out }).await?;
                }
                let gone: Vec<Vec<Value>> = part.iter().filter(|k| !present.contains(&key_text(k))).cloned().collect();
                if gone.is_empty() {
                    continue;
                }
                deleted += gone.len() as u64;
                if soft {
                    let mut with_time = dest_key.clone();
                    with_time.push(Field::new(DELETED_AT, FieldType::Timestamp));
                    let now = Value::Timestamp(self.clock.now());
                    let rows = gone.into_iter().map(|mut k| {
                        k.push(now.clone());
                        k
                    });
                    writer.update(&RecordBatch { fields: Arc::new(with_time), rows: rows.collect() }).await?;
                } else {
                    writer.delete(&RecordBatch { fields: Arc::new(dest_key.clone()), rows: gone }).await?;
                }
            }
            self.hold(run).await
        }
        .await;
        match outcome {
            Ok(()) => {
                writer.finish().await?;
                Ok((upserted, deleted))
            }
            Err(f) => {
                writer.abort().await;
                Err(f)
            }
        }
    }
}
