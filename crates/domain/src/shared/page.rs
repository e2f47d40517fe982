//! Keyset pagination: `{data, next_cursor}`, newest first. Ids are
//! time-ordered (UUID v7), so the cursor is the last id returned.

use crate::{Error, Result};
use uuid::Uuid;

pub const DEFAULT_LIMIT: u64 = 50;
pub const MAX_LIMIT: u64 = 200;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    pub limit: u64,
    /// Return items strictly older than this id.
    pub after: Option<Uuid>,
}

impl Default for PageRequest {
    fn default() -> Self {
        Self { limit: DEFAULT_LIMIT, after: None }
    }
}

impl PageRequest {
    /// From the query's `limit` and `cursor`, checked against the contract.
    pub fn parse(limit: Option<i64>, cursor: Option<&str>) -> Result<Self> {
        let limit = match limit {
            None => DEFAULT_LIMIT,
            Some(l) if (1..=MAX_LIMIT as i64).contains(&l) => l as u64,
            Some(_) => return Err(Error::invalid("limit", format!("must be between 1 and {MAX_LIMIT}"))),
        };
        let after = match cursor {
            None | Some("") => None,
            Some(c) => {
                Some(Uuid::parse_str(c).map_err(|_| Error::invalid("cursor", "is not a cursor this API issued"))?)
            }
        };
        Ok(Self { limit, after })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// Builds a page from up to `limit + 1` items in order: the extra item,
    /// if present, only tells that another page exists.
    pub fn from_overfetch(mut items: Vec<T>, limit: u64, id_of: impl Fn(&T) -> Uuid) -> Self {
        let more = items.len() as u64 > limit;
        items.truncate(limit as usize);
        let next_cursor = if more { items.last().map(|i| id_of(i).to_string()) } else { None };
        Page { items, next_cursor }
    }

    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page { items: self.items.into_iter().map(f).collect(), next_cursor: self.next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_outside_1_to_200_are_rejected() {
        assert_eq!(PageRequest::parse(None, None).unwrap().limit, 50);
        assert_eq!(PageRequest::parse(Some(200), None).unwrap().limit, 200);
        assert!(PageRequest::parse(Some(0), None).is_err());
        assert!(PageRequest::parse(Some(201), None).is_err());
        assert!(PageRequest::parse(None, Some("garbage")).is_err());
    }

    #[test]
    fn overfetch_sets_the_cursor_only_when_more_exist() {
        let ids: Vec<Uuid> = (0..3).map(|_| Uuid::now_v7()).collect();
        let p = Page::from_overfetch(ids.clone(), 2, |u| *u);
        assert_eq!(p.items.len(), 2);
        assert_eq!(p.next_cursor, Some(ids[1].to_string()));
        let p = Page::from_overfetch(ids[..2].to_vec(), 2, |u| *u);
        assert_eq!(p.next_cursor, None);
    }
}
