//! A place in a source's change log, typed: the text the source writes it
//! as (what a destination stores and `GET …/state` shows) and its order,
//! which the source's connector reads from that text once, where it hands
//! the position over ([`super::changes::ChangeSource::position`] for a
//! stored one, and every position a stream or a snapshot gives). The engine
//! compares positions as values from then on, never parsing one again.

use std::cmp::Ordering;
use std::fmt;
use std::sync::Arc;

/// How a source's positions are ordered.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Order {
    /// An offset into one log read front to back (a PostgreSQL LSN): a
    /// position holds every change before it. A transaction's begin names
    /// where its commit is written, which a position holds only once past
    /// it.
    Offset(u64),
    /// Per origin of transactions (a MariaDB GTID domain; a memory log is
    /// one origin), the sequence number of the last transaction held, in
    /// origin order, each origin once; an origin missing holds none. A
    /// transaction's begin names that transaction, which a position holds
    /// once its number in the origin reaches it. Two such positions may be
    /// unordered (each holds a transaction the other does not).
    Sequences(Arc<[(u64, u64)]>),
}

/// A position of a source's change log.
#[derive(Debug, Clone)]
pub struct Position {
    text: Arc<str>,
    order: Order,
}

impl Position {
    /// A position its connector read: `text` as the source writes it, and
    /// the order it has there. A [`Order::Sequences`] is put in origin
    /// order here.
    pub fn new(text: impl Into<Arc<str>>, order: Order) -> Position {
        let order = match order {
            Order::Sequences(s) if !s.windows(2).all(|w| w[0].0 < w[1].0) => {
                let mut v = s.to_vec();
                v.sort_unstable();
                v.dedup_by(|b, a| {
                    let same = a.0 == b.0;
                    if same {
                        a.1 = a.1.max(b.1);
                    }
                    same
                });
                Order::Sequences(v.into())
            }
            o => o,
        };
        Position { text: text.into(), order }
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    pub fn order(&self) -> &Order {
        &self.order
    }

    /// The offset of an [`Order::Offset`] position.
    pub fn offset(&self) -> Option<u64> {
        match self.order {
            Order::Offset(n) => Some(n),
            Order::Sequences(_) => None,
        }
    }

    /// How this position compares with `other` (`None`: neither holds all
    /// the other does, or they are of different forms).
    pub fn compare(&self, other: &Position) -> Option<Ordering> {
        match (&self.order, &other.order) {
            (Order::Offset(a), Order::Offset(b)) => Some(a.cmp(b)),
            (Order::Sequences(a), Order::Sequences(b)) => {
                let (mut more, mut less) = (false, false);
                merge(a, b, |x, y| match x.cmp(&y) {
                    Ordering::Greater => more = true,
                    Ordering::Less => less = true,
                    Ordering::Equal => {}
                });
                match (more, less) {
                    (false, false) => Some(Ordering::Equal),
                    (true, false) => Some(Ordering::Greater),
                    (false, true) => Some(Ordering::Less),
                    (true, true) => None,
                }
            }
            _ => None,
        }
    }

    /// Whether this position holds everything `other` holds, and more.
    pub fn after(&self, other: &Position) -> bool {
        self.compare(other) == Some(Ordering::Greater)
    }

    /// Whether an entity at this position holds the transaction whose
    /// begin is at `begin` (see [`Order`]).
    pub fn holds(&self, begin: &Position) -> bool {
        match (&self.order, &begin.order) {
            (Order::Offset(held), Order::Offset(b)) => held > b,
            (Order::Sequences(_), Order::Sequences(_)) => {
                matches!(self.compare(begin), Some(Ordering::Greater | Ordering::Equal))
            }
            _ => false,
        }
    }
}

/// Calls `f` with each origin's numbers in `a` and `b` (0 where missing),
/// both in origin order.
fn merge(a: &[(u64, u64)], b: &[(u64, u64)], mut f: impl FnMut(u64, u64)) {
    let (mut i, mut j) = (0, 0);
    loop {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                f(x.1, y.1);
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                f(x.1, 0);
                i += 1;
            }
            (Some(x), None) => {
                f(x.1, 0);
                i += 1;
            }
            (_, Some(y)) => {
                f(0, y.1);
                j += 1;
            }
            (None, None) => return,
        }
    }
}

/// Two positions are equal when they hold the same (`0/16B3748` and
/// `0/016B3748` are one LSN).
impl PartialEq for Position {
    fn eq(&self, other: &Position) -> bool {
        self.compare(other) == Some(Ordering::Equal)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lsn(n: u64) -> Position {
        Position::new(format!("0/{n:X}"), Order::Offset(n))
    }

    fn seq(s: &[(u64, u64)]) -> Position {
        let text = s.iter().map(|(d, n)| format!("{d}-1-{n}")).collect::<Vec<_>>().join(",");
        Position::new(text, Order::Sequences(s.into()))
    }

    #[test]
    fn offsets_are_ordered_and_a_begin_is_held_only_once_past() {
        assert!(lsn(2).after(&lsn(1)));
        assert!(!lsn(1).after(&lsn(1)));
        assert!(lsn(2).holds(&lsn(1)));
        assert!(!lsn(1).holds(&lsn(1)), "a commit written at 1 is held past it");
        assert_eq!(lsn(7), Position::new("0/007", Order::Offset(7)));
        assert_eq!(lsn(7).to_string(), "0/7");
    }

    #[test]
    fn sequences_are_ordered_per_origin_and_may_be_unordered() {
        assert!(seq(&[(0, 5)]).after(&seq(&[(0, 4)])));
        assert!(seq(&[(0, 5)]).holds(&seq(&[(0, 5)])), "a position holds the transaction it names");
        assert!(!seq(&[(0, 4)]).holds(&seq(&[(0, 5)])));
        // A missing origin holds nothing of it.
        assert!(seq(&[(0, 5), (1, 1)]).after(&seq(&[(0, 5)])));
        assert!(seq(&[(0, 5)]).holds(&seq(&[(1, 0)])));
        // Each holds one the other does not.
        let (a, b) = (seq(&[(0, 5), (1, 1)]), seq(&[(0, 4), (1, 2)]));
        assert_eq!(a.compare(&b), None);
        assert!(!a.after(&b) && !b.after(&a));
        // Origins given out of order are put in order, each once.
        assert_eq!(seq(&[(1, 2), (0, 4)]).order(), seq(&[(0, 4), (1, 2)]).order());
        assert_eq!(Position::new("x", Order::Sequences(vec![(3, 1), (3, 4)].into())).order(), seq(&[(3, 4)]).order());
    }

    #[test]
    fn positions_of_different_forms_never_compare() {
        assert_eq!(lsn(1).compare(&seq(&[(0, 1)])), None);
        assert!(!lsn(1).after(&seq(&[(0, 1)])));
        assert!(!lsn(1).holds(&seq(&[(0, 1)])));
    }
}
