//! Verification by checksums where the rows lie. When both sides are of
//! one engine and hold the compared columns in equal types, each sums a
//! hash of its rows per key range inside its database
//! ([`Source::digests`]); only the ranges whose sums or counts differ are
//! read and merged as a whole verification would be. Equal sums stand for
//! equal rows: a row's hash covers the text of every compared column, so
//! two sides agree only where each value does (each row's 64-bit hash,
//! mixed whole, summed: a difference hides only where the hashes of
//! different rows cancel, about one chance in 2^64).

use super::compare::{Ordered, Plan, Tally, merge_into, origins, read_ordered};
use crate::connect::connector::{Digest, DigestRequest, Field, FieldType, KeyRange, Source};
use crate::shared::record::Value;
use crate::sync::flow::Mapping;
use crate::sync::mode::DELETED_AT;
use crate::sync::transform::Step;
use std::collections::BTreeMap;

/// Buckets the key span is cut into (about a thousand rows each for a
/// million rows with dense keys).
pub const BUCKETS: i64 = 1024;

/// The columns each side hashes, in one order: the source's names and the
/// destination's. `None` when digests cannot stand in for reading: the
/// transform computes or filters, the key is not one integer on both
/// sides, or a column's type differs between the sides (or is unknown).
pub fn digestible(m: &Mapping, plan: &Plan, source: &[Field], dest: &[Field]) -> Option<(Vec<String>, Vec<String>)> {
    if m.transform.iter().any(|s| matches!(s, Step::Filter { .. })) {
        return None;
    }
    let integer = |k: &[Field]| matches!(k, [f] if f.field_type == FieldType::Integer);
    if !integer(&plan.source_key) || !integer(&plan.dest_key) {
        return None;
    }
    let from = origins(&m.transform, source);
    let mut sides = (Vec::new(), Vec::new());
    for (i, name) in plan.fields.iter().enumerate() {
        let origin = from.iter().find(|(n, _)| n == name).and_then(|(_, o)| o.as_ref())?;
        let s = source.iter().find(|f| &f.name == origin)?;
        let d = dest.get((*plan.dest_index.get(i)?)?)?;
        if base_type(s)? != base_type(d)? {
            return None;
        }
        sides.0.push(s.name.clone());
        sides.1.push(d.name.clone());
    }
    Some(sides)
}

/// A column's engine and type without its modifiers (`postgres:numeric`
/// for `postgres:numeric(12,2)`): values of one base type print alike.
fn base_type(f: &Field) -> Option<String> {
    let native = f.native_type.as_deref()?.to_ascii_lowercase();
    let mut out = String::with_capacity(native.len());
    let mut depth = 0usize;
    for c in native.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    Some(out.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// Compares the mapping's sides by digests, merging only the ranges that
/// differ into `tally`. `false` (nothing done) when a side cannot compute
/// digests or both are empty: the caller then merges everything.
pub async fn compare_by_digests(
    m: &Mapping,
    plan: &Plan,
    columns: (Vec<String>, Vec<String>),
    source: &dyn Source,
    dest: &dyn Source,
    tally: &mut Tally,
) -> Result<bool, String> {
    let (skey, dkey) = (&plan.source_key[0].name, &plan.dest_key[0].name);
    // A side that cannot tell its span (or fails to) is read instead: the
    // read says what is wrong, if anything is.
    let (Ok(s), Ok(d)) =
        futures_util::future::join(source.key_span(&m.source_entity, skey), dest.key_span(m.destination(), dkey)).await
    else {
        return Ok(false);
    };
    let (lo, hi) = match (s, d) {
        (None, None) => return Ok(false),
        (Some(a), None) | (None, Some(a)) => a,
        (Some(a), Some(b)) => (a.0.min(b.0), a.1.max(b.1)),
    };
    let Some(span) = hi.checked_sub(lo).filter(|s| *s >= 0) else { return Ok(false) };
    let width = span / BUCKETS + 1;
    let request = |entity: &str, key: &str, columns: Vec<String>, unless: Option<String>| DigestRequest {
        entity: entity.to_string(),
        key: key.to_string(),
        columns,
        unless,
        lo,
        hi,
        width,
    };
    let unless = plan.deleted_at.map(|_| DELETED_AT.to_string());
    let sreq = request(&m.source_entity, skey, columns.0, None);
    let dreq = request(m.destination(), dkey, columns.1, unless);
    // A side that cannot sum (an error included: a function the server
    // lacks, a type it cannot print) is read instead.
    let (sd, dd) = futures_util::future::join(source.digests(&sreq), dest.digests(&dreq)).await;
    let (Ok(Some(sd)), Ok(Some(dd))) = (&sd, &dd) else {
        if let Some(e) = sd.as_ref().err().or(dd.as_ref().err()) {
            tracing::warn!(entity = %m.source_entity, error = %e, "comparing by reading: no checksums");
        }
        return Ok(false);
    };
    let ranges = differing(sd, dd, tally);
    for (after, upto) in reads(lo, hi, width, &ranges) {
        let range = |key: &Field| KeyRange {
            fields: vec![key.clone()],
            after: after.map(|a| vec![Value::Int(a)]),
            upto: upto.map(|u| vec![Value::Int(u)]),
        };
        let mut s = Ordered::new(read_ordered(source, &m.source_entity, &range(&plan.source_key[0])).await?);
        let mut d = Ordered::new(read_ordered(dest, m.destination(), &range(&plan.dest_key[0])).await?);
        merge_into(plan, &m.transform, &mut s, &mut d, tally).await?;
    }
    Ok(true)
}

/// The key ranges to read, in key order, as (after, up to and including):
/// the keys below the span and above it (written since the span was
/// read), and each run of differing buckets.
fn reads(lo: i64, hi: i64, width: i64, runs: &[(i64, i64)]) -> Vec<(Option<i64>, Option<i64>)> {
    let mut reads: Vec<(Option<i64>, Option<i64>)> = Vec::new();
    if let Some(below) = lo.checked_sub(1) {
        reads.push((None, Some(below)));
    }
    // In i128: the end of a bucket past the span's would not fit (its last
    // key is `hi` at most).
    let at = |bucket: i64| i128::from(lo) + i128::from(bucket) * i128::from(width);
    for (first, last) in runs {
        let start = i64::try_from(at(*first)).unwrap_or(i64::MAX);
        let end = i64::try_from((at(*last) + i128::from(width) - 1).min(i128::from(hi))).unwrap_or(hi);
        reads.push((start.checked_sub(1), Some(end)));
    }
    if hi < i64::MAX {
        reads.push((Some(hi), None));
    }
    reads
}

/// Counts the rows of the buckets whose digests agree into `tally`, and
/// returns the others as runs of consecutive buckets (first, last).
fn differing(source: &[Digest], dest: &[Digest], tally: &mut Tally) -> Vec<(i64, i64)> {
    let mut buckets: BTreeMap<i64, (Option<Digest>, Option<Digest>)> = BTreeMap::new();
    for d in source {
        buckets.entry(d.bucket).or_default().0 = Some(*d);
    }
    for d in dest {
        buckets.entry(d.bucket).or_default().1 = Some(*d);
    }
    let mut runs: Vec<(i64, i64)> = Vec::new();
    for (b, sides) in buckets {
        match sides {
            (Some(s), Some(d)) if s.rows == d.rows && s.sum == d.sum => {
                tally.check.source_rows += s.rows;
                tally.check.destination_rows += d.rows;
                tally.check.summed_rows += s.rows;
            }
            _ => match runs.last_mut() {
                Some(run) if run.1 + 1 == b => run.1 = b,
                _ => runs.push((b, b)),
            },
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(bucket: i64, rows: u64, sum: i128) -> Digest {
        Digest { bucket, rows, sum }
    }

    #[test]
    fn equal_buckets_are_counted_and_the_others_read_in_runs() {
        let mut tally = Tally::default();
        let source = [digest(0, 10, 5), digest(1, 10, 6), digest(2, 10, 7), digest(3, 10, 8), digest(5, 1, 1)];
        let dest = [digest(0, 10, 5), digest(1, 10, 9), digest(2, 9, 7), digest(3, 10, 8), digest(4, 2, 2)];
        assert_eq!(differing(&source, &dest, &mut tally), [(1, 2), (4, 5)]);
        assert_eq!((tally.check.source_rows, tally.check.destination_rows), (20, 20));
    }

    #[test]
    fn the_reads_cover_every_key_outside_the_equal_buckets() {
        // Buckets of 10 from 1 to 95: 1..=10, 11..=20, ..., 91..=95.
        assert_eq!(
            reads(1, 95, 10, &[(1, 2), (9, 9)]),
            [(None, Some(0)), (Some(10), Some(30)), (Some(90), Some(95)), (Some(95), None)]
        );
        // The extremes: nothing lies below i64::MIN or above i64::MAX, and
        // the last bucket ends at i64::MAX itself.
        let (lo, hi) = (i64::MIN, i64::MAX - 1);
        let width = 1i64 << 62;
        assert_eq!(reads(lo, hi, width, &[(0, 0)]), [(None, Some(lo + width - 1)), (Some(hi), None)]);
        let (lo, hi) = (i64::MAX - 25, i64::MAX);
        assert_eq!(reads(lo, hi, 10, &[(2, 2)]), [(None, Some(lo - 1)), (Some(lo + 19), Some(i64::MAX))]);
    }

    #[test]
    fn a_base_type_drops_its_modifiers() {
        let f = |n: &str| Field { native_type: Some(n.into()), ..Field::new("x", FieldType::String) };
        assert_eq!(base_type(&f("postgres:numeric(12,2)")), Some("postgres:numeric".into()));
        assert_eq!(
            base_type(&f("postgres:timestamp(3) with time zone")),
            base_type(&f("postgres:timestamp with time zone"))
        );
        assert_ne!(base_type(&f("postgres:jsonb")), base_type(&f("postgres:json")));
        assert_eq!(base_type(&Field::new("x", FieldType::String)), None);
    }
}
