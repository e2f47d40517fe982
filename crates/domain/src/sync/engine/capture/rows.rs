//! How a change, or a copied row, becomes the row the destination takes:
//! put in the source's field order, through the mapping's transform, with
//! the columns change capture adds.

use super::*;

impl Entity<'_> {
    /// The change's row in the source's field order, transformed, with the
    /// capture columns.
    /// `None` when the mapping's filter drops the row.
    pub(super) fn row(&self, c: &Change, begin: &Begin) -> Option<Vec<Value>> {
        self.row_with(&self.m.transform, &self.order, c, begin)
    }

    /// [`Entity::row`] of a change whose fields come in `order` (see
    /// [`order_of`]), through `steps`.
    pub(super) fn row_with(
        &self,
        steps: &[transform::Step],
        order: &[Option<usize>],
        c: &Change,
        begin: &Begin,
    ) -> Option<Vec<Value>> {
        let mut row = vec![Value::Null; self.source_fields.len()];
        for (i, v) in c.values.iter().enumerate() {
            if let Some(Some(at)) = order.get(i) {
                row[*at] = v.clone();
            }
        }
        let batch = RecordBatch { fields: self.source_fields.clone(), rows: vec![row] };
        let mut row = transform::apply(steps, batch).rows.pop()?;
        if self.m.sync_mode == SyncMode::CdcAppend {
            row.push(Value::String(c.op.as_str().into()));
            row.push(Value::String(begin.0.as_str().to_string()));
            row.push(begin.1.map_or(Value::Null, Value::Timestamp));
        } else if self.m.delete_mode == Some(DeleteMode::Soft) {
            row.push(Value::Null);
        }
        Some(row)
    }

    /// A copy's rows (fields in `order`) as the destination takes them:
    /// inserts, transformed, the filter's drops left out.
    pub(super) fn copied_rows(&self, order: &[Option<usize>], rows: Vec<Vec<Value>>, begin: &Begin) -> Vec<Vec<Value>> {
        let entity = &self.m.source_entity;
        rows.into_iter()
            .filter_map(|values| {
                let c = Change { entity: entity.clone(), op: ChangeOp::Insert, values, unchanged: Vec::new() };
                self.row_with(&self.m.transform, order, &c, begin)
            })
            .collect()
    }

    /// A mirror's row for a change its filter drops: every step but the
    /// filters, for the key to delete (or keep, see [`Entity::apply`]).
    pub(super) fn unfiltered_row(&self, c: &Change, begin: &Begin) -> Vec<Value> {
        let steps: Vec<transform::Step> =
            self.m.transform.iter().filter(|s| !matches!(s, transform::Step::Filter { .. })).cloned().collect();
        self.row_with(&steps, &self.order, c, begin).unwrap_or_default()
    }
}
