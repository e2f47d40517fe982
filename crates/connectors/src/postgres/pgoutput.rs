//! The messages of PostgreSQL's `pgoutput` logical decoding plugin
//! (protocol version 1), decoded from the bytes
//! `pg_logical_slot_peek_binary_changes` gives: transactions, the tables
//! they touch (a `Relation` before a table's first change and after each
//! change of its columns), and each row's insert, update or delete, in
//! text form. Positions are log sequence numbers (LSN), shown as
//! PostgreSQL shows them (`16/B374D848`).

use std::fmt;

/// A position in the write-ahead log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Lsn(pub u64);

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xffff_ffff)
    }
}

impl std::str::FromStr for Lsn {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("'{s}' is not a PostgreSQL log position (like 16/B374D848)");
        let (hi, lo) = s.trim().split_once('/').ok_or_else(bad)?;
        let part = |p: &str| {
            if p.is_empty() || p.len() > 8 {
                return Err(bad());
            }
            u32::from_str_radix(p, 16).map_err(|_| bad())
        };
        Ok(Lsn((u64::from(part(hi)?) << 32) | u64::from(part(lo)?)))
    }
}

/// One column of a row as the log carries it.
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    Null,
    /// A TOASTed value the change left as it was: not sent.
    Unchanged,
    /// The value in PostgreSQL's text output form.
    Text(String),
}

/// A column of a table as a `Relation` message describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct RelationColumn {
    pub name: String,
    /// Part of the table's replica identity (its primary key, by default).
    pub key: bool,
    pub type_oid: u32,
    pub type_modifier: i32,
}

/// A table as the stream describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct Relation {
    pub id: u32,
    pub namespace: String,
    pub name: String,
    pub columns: Vec<RelationColumn>,
}

/// One message of the stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    Begin {
        final_lsn: Lsn,
        /// Microseconds since 2000-01-01 UTC.
        commit_time: i64,
        xid: u32,
    },
    Commit {
        commit_lsn: Lsn,
        end_lsn: Lsn,
        commit_time: i64,
    },
    Relation(Relation),
    Insert {
        relation: u32,
        new: Vec<Column>,
    },
    Update {
        relation: u32,
        /// The old key (when the key changed) or the old row (`REPLICA
        /// IDENTITY FULL`).
        old: Option<Vec<Column>>,
        new: Vec<Column>,
    },
    Delete {
        relation: u32,
        /// The old key, or the old row (`REPLICA IDENTITY FULL`).
        old: Vec<Column>,
    },
    Truncate {
        relations: Vec<u32>,
    },
    /// A message written with `pg_logical_emit_message`.
    Logical {
        transactional: bool,
        lsn: Lsn,
        prefix: String,
        content: Vec<u8>,
    },
    /// Origins and types: nothing to act on.
    Other(u8),
}

/// Reads a message's fields in order.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(format!("a pgoutput message ends early ({} bytes left, {n} wanted)", self.b.len()));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn i16(&mut self) -> Result<i16, String> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().map_err(|_| "i16")?))
    }

    fn i32(&mut self) -> Result<i32, String> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().map_err(|_| "i32")?))
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| "u32")?))
    }

    fn i64(&mut self) -> Result<i64, String> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().map_err(|_| "i64")?))
    }

    fn lsn(&mut self) -> Result<Lsn, String> {
        Ok(Lsn(self.i64()? as u64))
    }

    /// A zero-terminated string.
    fn string(&mut self) -> Result<String, String> {
        let end = self.b.iter().position(|&c| c == 0).ok_or("a pgoutput string has no end")?;
        let s = std::str::from_utf8(&self.b[..end]).map_err(|_| "a pgoutput string is not UTF-8")?.to_string();
        self.b = &self.b[end + 1..];
        Ok(s)
    }

    fn tuple(&mut self) -> Result<Vec<Column>, String> {
        let n = self.i16()?;
        let mut columns = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(1600));
        for _ in 0..n {
            columns.push(match self.u8()? {
                b'n' => Column::Null,
                b'u' => Column::Unchanged,
                b't' => {
                    let len = usize::try_from(self.i32()?).map_err(|_| "a negative column length")?;
                    let bytes = self.take(len)?;
                    Column::Text(String::from_utf8(bytes.to_vec()).map_err(|_| "a column's text is not UTF-8")?)
                }
                other => {
                    return Err(format!("a column of kind '{}' (binary columns are not asked for)", other as char));
                }
            });
        }
        Ok(columns)
    }
}

/// Decodes one message.
///
/// # Errors
/// A message that ends early, or of a form protocol version 1 does not have.
pub fn decode(bytes: &[u8]) -> Result<Message, String> {
    let mut c = Cursor { b: bytes };
    let tag = c.u8()?;
    Ok(match tag {
        b'B' => Message::Begin { final_lsn: c.lsn()?, commit_time: c.i64()?, xid: c.u32()? },
        b'C' => {
            let _flags = c.u8()?;
            Message::Commit { commit_lsn: c.lsn()?, end_lsn: c.lsn()?, commit_time: c.i64()? }
        }
        b'R' => {
            let id = c.u32()?;
            let namespace = c.string()?;
            let name = c.string()?;
            let _replica_identity = c.u8()?;
            let n = c.i16()?;
            let mut columns = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(1600));
            for _ in 0..n {
                let flags = c.u8()?;
                columns.push(RelationColumn {
                    key: flags & 1 == 1,
                    name: c.string()?,
                    type_oid: c.u32()?,
                    type_modifier: c.i32()?,
                });
            }
            Message::Relation(Relation { id, namespace, name, columns })
        }
        b'I' => {
            let relation = c.u32()?;
            expect(c.u8()?, b'N')?;
            Message::Insert { relation, new: c.tuple()? }
        }
        b'U' => {
            let relation = c.u32()?;
            let mut old = None;
            let mut kind = c.u8()?;
            if kind == b'K' || kind == b'O' {
                old = Some(c.tuple()?);
                kind = c.u8()?;
            }
            expect(kind, b'N')?;
            Message::Update { relation, old, new: c.tuple()? }
        }
        b'D' => {
            let relation = c.u32()?;
            let kind = c.u8()?;
            if kind != b'K' && kind != b'O' {
                return Err(format!("a delete with a tuple of kind '{}'", kind as char));
            }
            Message::Delete { relation, old: c.tuple()? }
        }
        b'T' => {
            let n = c.i32()?;
            let _options = c.u8()?;
            let mut relations = Vec::with_capacity(usize::try_from(n).unwrap_or(0).min(1024));
            for _ in 0..n {
                relations.push(c.u32()?);
            }
            Message::Truncate { relations }
        }
        b'M' => {
            let transactional = c.u8()? & 1 == 1;
            let lsn = c.lsn()?;
            let prefix = c.string()?;
            let len = usize::try_from(c.i32()?).map_err(|_| "a negative message length")?;
            Message::Logical { transactional, lsn, prefix, content: c.take(len)?.to_vec() }
        }
        b'O' | b'Y' => Message::Other(tag),
        other => return Err(format!("a pgoutput message of kind '{}'", other as char)),
    })
}

fn expect(got: u8, want: u8) -> Result<(), String> {
    if got == want { Ok(()) } else { Err(format!("'{}' where '{}' was expected", got as char, want as char)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tuple(out: &mut Vec<u8>, cols: &[Option<&str>]) {
        out.extend((cols.len() as i16).to_be_bytes());
        for c in cols {
            match c {
                None => out.push(b'n'),
                Some("~") => out.push(b'u'),
                Some(s) => {
                    out.push(b't');
                    out.extend((s.len() as i32).to_be_bytes());
                    out.extend(s.as_bytes());
                }
            }
        }
    }

    #[test]
    fn positions_read_and_print_as_postgresql_shows_them() {
        let l: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(l.0, 0x16_B374_D848);
        assert_eq!(l.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn(0));
        for bad in ["", "16", "x/1", "1/123456789", "/1", "-1/0"] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad}");
        }
        assert!(Lsn(1) < Lsn(0x1_0000_0000));
    }

    #[test]
    fn messages_decode() {
        let mut b = vec![b'B'];
        b.extend(0x10u64.to_be_bytes());
        b.extend(5i64.to_be_bytes());
        b.extend(7u32.to_be_bytes());
        assert_eq!(decode(&b).unwrap(), Message::Begin { final_lsn: Lsn(16), commit_time: 5, xid: 7 });

        let mut r = vec![b'R'];
        r.extend(42u32.to_be_bytes());
        r.extend(b"public\0people\0d");
        r.extend(2i16.to_be_bytes());
        r.push(1);
        r.extend(b"id\0");
        r.extend(20u32.to_be_bytes());
        r.extend((-1i32).to_be_bytes());
        r.push(0);
        r.extend(b"bio\0");
        r.extend(25u32.to_be_bytes());
        r.extend((-1i32).to_be_bytes());
        let Message::Relation(rel) = decode(&r).unwrap() else { panic!() };
        assert_eq!((rel.id, rel.namespace.as_str(), rel.name.as_str()), (42, "public", "people"));
        assert!(rel.columns[0].key && !rel.columns[1].key);
        assert_eq!(rel.columns[1].type_oid, 25);

        let mut u = vec![b'U'];
        u.extend(42u32.to_be_bytes());
        u.push(b'N');
        tuple(&mut u, &[Some("1"), Some("~")]);
        assert_eq!(
            decode(&u).unwrap(),
            Message::Update { relation: 42, old: None, new: vec![Column::Text("1".into()), Column::Unchanged] }
        );
        let mut d = vec![b'D'];
        d.extend(42u32.to_be_bytes());
        d.push(b'K');
        tuple(&mut d, &[Some("1"), None]);
        assert_eq!(
            decode(&d).unwrap(),
            Message::Delete { relation: 42, old: vec![Column::Text("1".into()), Column::Null] }
        );
    }

    #[test]
    fn short_or_strange_messages_are_errors_not_panics() {
        let mut u = vec![b'U'];
        u.extend(42u32.to_be_bytes());
        u.push(b'N');
        tuple(&mut u, &[Some("hello")]);
        for cut in 0..u.len() {
            assert!(decode(&u[..cut]).is_err(), "cut at {cut}");
        }
        assert!(decode(b"Z").is_err());
        let mut huge = vec![b'I'];
        huge.extend(1u32.to_be_bytes());
        huge.push(b'N');
        huge.extend(1i16.to_be_bytes());
        huge.push(b't');
        huge.extend(i32::MAX.to_be_bytes());
        assert!(decode(&huge).is_err());
    }
}
