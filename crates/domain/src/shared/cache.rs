//! Short-lived read caches for the hot path of API-key requests (the
//! gateway answers thousands a second): the key behind a hash, an asset's
//! contract, an organization's plan.
//!
//! An entry lives [`FRESH_FOR`] by the service's clock. A change made through
//! this process (a key revoked, an asset edited or deleted, an organization
//! deleted) removes the entries it touches at once; a change made by another
//! `sluice` process on the same store is seen within [`FRESH_FOR`]. Misses are
//! not remembered, so a new key or asset works at once everywhere.

use crate::shared::ids::OrgId;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;
use time::{Duration, OffsetDateTime};

/// How long an entry is served without asking the store again.
pub const FRESH_FOR: Duration = Duration::seconds(1);

/// Entries kept at most per cache; past it stale entries go, then all.
const CAPACITY: usize = 10_000;

pub(crate) struct Ttl<K, V> {
    map: RwLock<HashMap<K, (V, OffsetDateTime)>>,
    /// Moves at every removal: a value loaded while it moved (it may be
    /// what was just removed) is answered but not cached.
    generation: std::sync::atomic::AtomicU64,
}

impl<K, V> Default for Ttl<K, V> {
    fn default() -> Self {
        Self { map: RwLock::new(HashMap::new()), generation: Default::default() }
    }
}

fn fresh(fetched: OffsetDateTime, now: OffsetDateTime) -> bool {
    // A clock set back also makes an entry stale.
    now >= fetched && now - fetched < FRESH_FOR
}

impl<K: Eq + Hash, V: Clone> Ttl<K, V> {
    pub(crate) fn get(&self, k: &K, now: OffsetDateTime) -> Option<V> {
        let map = self.map.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(k).filter(|(_, at)| fresh(*at, now)).map(|(v, _)| v.clone())
    }

    pub(crate) fn put(&self, k: K, v: V, now: OffsetDateTime) {
        let mut map = self.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        Self::insert(&mut map, k, v, now);
    }

    fn insert(map: &mut HashMap<K, (V, OffsetDateTime)>, k: K, v: V, now: OffsetDateTime) {
        if map.len() >= CAPACITY {
            map.retain(|_, (_, at)| fresh(*at, now));
            if map.len() >= CAPACITY {
                map.clear();
            }
        }
        map.insert(k, (v, now));
    }

    /// The fresh cached value, or the one `load` gives (then cached).
    /// The key is cloned only on a miss.
    pub(crate) async fn get_or_load<E, F>(&self, k: &K, now: OffsetDateTime, load: F) -> Result<V, E>
    where
        K: Clone,
        F: std::future::Future<Output = Result<V, E>>,
    {
        use std::sync::atomic::Ordering;
        if let Some(v) = self.get(k, now) {
            return Ok(v);
        }
        let generation = self.generation.load(Ordering::Acquire);
        let v = load.await?;
        let mut map = self.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.generation.load(Ordering::Acquire) == generation {
            Self::insert(&mut map, k.clone(), v.clone(), now);
        }
        Ok(v)
    }

    /// Changes a cached value in place, keeping its age.
    pub(crate) fn update(&self, k: &K, f: impl FnOnce(&mut V)) {
        let mut map = self.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((v, _)) = map.get_mut(k) {
            f(v);
        }
    }

    pub(crate) fn remove_where(&self, mut f: impl FnMut(&K, &V) -> bool) {
        let mut map = self.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        self.generation.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        map.retain(|k, (v, _)| !f(k, v));
    }

    /// Removes every entry.
    pub(crate) fn clear(&self) {
        self.remove_where(|_, _| true);
    }
}

/// Per organization, a count of changes made below a cache that the cache
/// cannot see (discovery and runs catalogue the schemas the catalog's
/// contract cache holds). A cached value remembers the count it was loaded
/// at and is loaded again once the count moved.
#[derive(Default)]
pub(crate) struct Changes {
    map: RwLock<HashMap<OrgId, u64>>,
}

impl Changes {
    /// Records a change in `org`.
    pub(crate) fn touch(&self, org: OrgId) {
        let mut map = self.map.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        *map.entry(org).or_default() += 1;
    }

    /// The changes recorded in `org` so far.
    pub(crate) fn count(&self, org: OrgId) -> u64 {
        let map = self.map.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        map.get(&org).copied().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    #[test]
    fn entries_expire_and_are_removed() {
        let t0 = datetime!(2026-11-21 12:00 UTC);
        let c: Ttl<u32, &str> = Ttl::default();
        c.put(1, "a", t0);
        c.put(2, "b", t0);
        assert_eq!(c.get(&1, t0 + Duration::milliseconds(999)), Some("a"));
        assert_eq!(c.get(&1, t0 + FRESH_FOR), None, "expired");
        assert_eq!(c.get(&1, t0 - Duration::seconds(5)), None, "a clock set back");
        c.update(&1, |v| *v = "A");
        assert_eq!(c.get(&1, t0), Some("A"));
        c.remove_where(|k, _| *k == 1);
        assert_eq!((c.get(&1, t0), c.get(&2, t0)), (None, Some("b")));
    }

    #[tokio::test]
    async fn a_value_loaded_across_a_removal_is_not_cached() {
        let t0 = datetime!(2026-11-21 12:00 UTC);
        let c: Ttl<u32, &str> = Ttl::default();
        let v = c
            .get_or_load(&1, t0, async {
                c.clear();
                Ok::<_, ()>("revoked meanwhile")
            })
            .await;
        assert_eq!(v, Ok("revoked meanwhile"), "answered");
        assert_eq!(c.get(&1, t0), None, "not cached");
        let v = c.get_or_load(&1, t0, async { Ok::<_, ()>("a") }).await;
        assert_eq!((v, c.get(&1, t0)), (Ok("a"), Some("a")));
    }

    #[test]
    fn changes_are_counted_per_organization() {
        let (a, b) = (OrgId::new(), OrgId::new());
        let changes = Changes::default();
        changes.touch(a);
        changes.touch(a);
        assert_eq!((changes.count(a), changes.count(b)), (2, 0));
    }

    #[test]
    fn a_full_cache_drops_stale_entries_first() {
        let t0 = datetime!(2026-11-21 12:00 UTC);
        let c: Ttl<usize, usize> = Ttl::default();
        for i in 0..CAPACITY - 1 {
            c.put(i, i, t0);
        }
        let later = t0 + Duration::seconds(2);
        c.put(CAPACITY, 1, later);
        c.put(CAPACITY + 1, 2, later);
        assert_eq!(c.map.read().unwrap().len(), 2, "the stale ones went");
        assert_eq!(c.get(&CAPACITY, later), Some(1));
    }
}
