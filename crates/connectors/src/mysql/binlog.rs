//! MariaDB's binary log as a replica reads it: GTID positions, the events
//! a binlog dump sends (format description, GTID, table map, row events,
//! XID, query), and column values decoded from row images into the values
//! a copy of the same table reads.
//!
//! References: MariaDB's "Replication protocol" pages (binlog event
//! header, `GTID_EVENT`, `TABLE_MAP_EVENT`, rows events v1 and v2) and
//! MySQL's `libbinlogevents` for the value formats (`DATETIME2`, `TIME2`,
//! `TIMESTAMP2`, `NEWDECIMAL`).

use crate::common::text_value;
use sluice_domain::connect::connector::{FieldType, Value};
use std::collections::BTreeMap;
use std::fmt;

// Event types.
pub(super) const QUERY: u8 = 0x02;
pub(super) const ROTATE: u8 = 0x04;
pub(super) const FORMAT_DESCRIPTION: u8 = 0x0f;
pub(super) const XID: u8 = 0x10;
pub(super) const TABLE_MAP: u8 = 0x13;
pub(super) const WRITE_ROWS_V1: u8 = 0x17;
pub(super) const UPDATE_ROWS_V1: u8 = 0x18;
pub(super) const DELETE_ROWS_V1: u8 = 0x19;
pub(super) const INCIDENT: u8 = 0x1a;
pub(super) const XA_PREPARE: u8 = 0x26;
pub(super) const WRITE_ROWS_V2: u8 = 0x1e;
pub(super) const UPDATE_ROWS_V2: u8 = 0x1f;
pub(super) const DELETE_ROWS_V2: u8 = 0x20;
pub(super) const MARIADB_GTID: u8 = 0xa2;
pub(super) const MARIADB_START_ENCRYPTION: u8 = 0xa4;
pub(super) const MARIADB_WRITE_ROWS_COMPRESSED: u8 = 0xa6;
pub(super) const MARIADB_DELETE_ROWS_COMPRESSED_V1: u8 = 0xab;

/// The event header's length (binlog format 4).
pub(super) const HEADER: usize = 19;

/// Bytes read from the front of a slice; each read fails on a short one.
pub(super) struct Reader<'a>(pub &'a [u8]);

type R<T> = Result<T, String>;

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> R<&'a [u8]> {
        if self.0.len() < n {
            return Err(format!("an event ends {} bytes short", n - self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn le(&mut self, n: usize) -> R<u64> {
        Ok(self.take(n)?.iter().rev().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
    }

    fn be(&mut self, n: usize) -> R<u64> {
        Ok(self.take(n)?.iter().fold(0u64, |a, b| (a << 8) | u64::from(*b)))
    }

    pub fn u8(&mut self) -> R<u8> {
        Ok(self.take(1)?[0])
    }

    pub fn u16(&mut self) -> R<u16> {
        Ok(self.le(2)? as u16)
    }

    pub fn u32(&mut self) -> R<u32> {
        Ok(self.le(4)? as u32)
    }

    pub fn u48(&mut self) -> R<u64> {
        self.le(6)
    }

    pub fn u64(&mut self) -> R<u64> {
        self.le(8)
    }

    /// A length-encoded integer.
    pub fn lenenc(&mut self) -> R<u64> {
        match self.u8()? {
            n @ 0..=0xfa => Ok(u64::from(n)),
            0xfc => self.le(2),
            0xfd => self.le(3),
            0xfe => self.le(8),
            n => Err(format!("a length-encoded integer that begins {n:#x}")),
        }
    }

    fn lenenc_bytes(&mut self) -> R<&'a [u8]> {
        let n = self.lenenc()?;
        self.take(usize::try_from(n).map_err(|_| "a length past memory")?)
    }
}

/// A MariaDB GTID: the transaction `seq` of replication domain `domain`,
/// first written by server `server`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Gtid {
    pub domain: u32,
    pub server: u32,
    pub seq: u64,
}

/// A MariaDB GTID position (`0-1-42,1-2-7`): per replication domain, the
/// last transaction applied. Domains are independent streams: a
/// transaction comes after a position when its sequence number is higher
/// than the position's in its domain (a domain the position lacks is at 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct GtidPos(BTreeMap<u32, (u32, u64)>);

/// At most this many domains in a position a user sets.
const MAX_DOMAINS: usize = 256;

impl GtidPos {
    pub fn parse(s: &str) -> R<Self> {
        let s = s.trim();
        let mut out = BTreeMap::new();
        if s.is_empty() {
            return Ok(GtidPos(out));
        }
        for part in s.split(',') {
            let bad = || format!("'{part}' is not a MariaDB GTID (domain-server-sequence, as 0-1-42)");
            let mut it = part.trim().split('-');
            let (Some(d), Some(sv), Some(n), None) = (it.next(), it.next(), it.next(), it.next()) else {
                return Err(bad());
            };
            let (d, sv, n) = (
                d.parse::<u32>().map_err(|_| bad())?,
                sv.parse::<u32>().map_err(|_| bad())?,
                n.parse::<u64>().map_err(|_| bad())?,
            );
            if out.insert(d, (sv, n)).is_some() {
                return Err(format!("domain {d} appears twice in the GTID position '{s}'"));
            }
            if out.len() > MAX_DOMAINS {
                return Err(format!("a GTID position of more than {MAX_DOMAINS} domains"));
            }
        }
        Ok(GtidPos(out))
    }

    /// Each domain and its sequence number.
    pub fn domains(&self) -> impl Iterator<Item = (u32, u64)> + '_ {
        self.0.iter().map(|(d, (_, n))| (*d, *n))
    }

    pub fn seq(&self, domain: u32) -> u64 {
        self.0.get(&domain).map_or(0, |(_, n)| *n)
    }

    /// Whether this position holds a transaction `other` does not.
    pub fn after(&self, other: &GtidPos) -> bool {
        self.0.iter().any(|(d, (_, n))| *n > other.seq(*d))
    }

    /// Whether a transaction with this GTID comes after the position.
    pub fn precedes(&self, g: &Gtid) -> bool {
        g.seq > self.seq(g.domain)
    }

    pub fn advance(&mut self, g: &Gtid) {
        if self.precedes(g) {
            self.0.insert(g.domain, (g.server, g.seq));
        }
    }

    /// Per domain, the earlier of the two.
    pub fn min(&self, other: &GtidPos) -> GtidPos {
        let mut out = BTreeMap::new();
        for (d, (s, n)) in &self.0 {
            match other.0.get(d) {
                Some((s2, n2)) if n2 < n => out.insert(*d, (*s2, *n2)),
                Some(_) => out.insert(*d, (*s, *n)),
                None => None,
            };
        }
        GtidPos(out)
    }

    /// What a replica sends as `@slave_connect_state` (domains at 0 left
    /// out: the dump reads them from the binlog's start).
    pub fn connect_state(&self) -> String {
        let parts: Vec<String> =
            self.0.iter().filter(|(_, (_, n))| *n > 0).map(|(d, (s, n))| format!("{d}-{s}-{n}")).collect();
        parts.join(",")
    }
}

impl fmt::Display for GtidPos {
    /// `0-1-42,1-2-7`; an empty position (a server that logged no
    /// transaction yet) is `0-0-0`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("0-0-0");
        }
        let parts: Vec<String> = self.0.iter().map(|(d, (s, n))| format!("{d}-{s}-{n}")).collect();
        f.write_str(&parts.join(","))
    }
}

/// An event's header.
#[derive(Debug, Clone, Copy)]
pub(super) struct Header {
    pub timestamp: u32,
    pub kind: u8,
    pub server: u32,
    /// Where the next event starts in the binlog file.
    pub next: u32,
}

/// Splits an event into its header and body (its checksum cut off when the
/// log has them, and checked).
pub(super) fn split(event: &[u8], checksum: bool) -> R<(Header, &[u8])> {
    let mut r = Reader(event);
    let header = Header { timestamp: r.u32()?, kind: r.u8()?, server: r.u32()?, next: 0 };
    let size = r.u32()? as usize;
    let next = r.u32()?;
    let _flags = r.u16()?;
    if size != event.len() {
        return Err(format!("an event of {} bytes says it has {size}", event.len()));
    }
    let header = Header { next, ..header };
    // A format description event says itself whether the log has
    // checksums (its body ends with the algorithm and a checksum).
    let body = if checksum && header.kind != FORMAT_DESCRIPTION {
        if event.len() < HEADER + 4 {
            return Err("an event shorter than its checksum".into());
        }
        let (data, sum) = event.split_at(event.len() - 4);
        let want = u32::from_le_bytes([sum[0], sum[1], sum[2], sum[3]]);
        if crc32fast::hash(data) != want {
            return Err(format!("an event of type {:#x} fails its checksum", header.kind));
        }
        &data[HEADER..]
    } else {
        &event[HEADER..]
    };
    Ok((header, body))
}

/// Whether a format description event (its body) says the events after it
/// end with a CRC32 checksum.
pub(super) fn format_has_checksum(body: &[u8]) -> R<bool> {
    // version (2), server version (50), created (4), header length (1),
    // the post-header lengths, then (since 5.6.1) the checksum algorithm
    // and the event's own checksum.
    if body.len() < 2 + 50 + 4 + 1 + 5 {
        return Err("a format description event too short".into());
    }
    Ok(body[body.len() - 5] == 1)
}

/// A `GTID_EVENT`'s body: the GTID (the server from the header) and
/// whether the transaction is one event of its own (DDL), with no XID
/// or `COMMIT` after it.
pub(super) fn gtid_event(header: &Header, body: &[u8]) -> R<(Gtid, bool)> {
    let mut r = Reader(body);
    let seq = r.u64()?;
    let domain = r.u32()?;
    let flags = r.u8()?;
    Ok((Gtid { domain, server: header.server, seq }, flags & 1 != 0))
}

/// A `QUERY_EVENT`'s database and statement.
pub(super) fn query_event(body: &[u8]) -> R<(String, String)> {
    let mut r = Reader(body);
    let _thread = r.u32()?;
    let _exec = r.u32()?;
    let db_len = r.u8()? as usize;
    let _error = r.u16()?;
    let vars = r.u16()? as usize;
    r.take(vars)?;
    let db = String::from_utf8_lossy(r.take(db_len)?).into_owned();
    r.u8()?;
    Ok((db, String::from_utf8_lossy(r.0).into_owned()))
}

/// A `ROTATE_EVENT`'s next file.
pub(super) fn rotate_event(body: &[u8]) -> R<String> {
    let mut r = Reader(body);
    let _position = r.u64()?;
    Ok(String::from_utf8_lossy(r.0).into_owned())
}

/// A table map: the table an id names in the row events after it, and its
/// columns' types as the log writes them.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct TableMap {
    pub id: u64,
    pub database: String,
    pub table: String,
    pub types: Vec<u8>,
    pub meta: Vec<u16>,
    /// The columns' names, where the server logs them
    /// (`binlog_row_metadata = FULL`).
    pub names: Option<Vec<String>>,
}

/// The database and table a table map names (read before the rest, so
/// that a map of a table nobody follows is skipped even where the rest
/// would not parse).
pub(super) fn table_map_name(body: &[u8]) -> R<(String, String)> {
    let mut r = Reader(body);
    r.u48()?;
    r.u16()?;
    let db_len = r.u8()? as usize;
    let database = String::from_utf8_lossy(r.take(db_len)?).into_owned();
    r.u8()?;
    let t_len = r.u8()? as usize;
    Ok((database, String::from_utf8_lossy(r.take(t_len)?).into_owned()))
}

pub(super) fn table_map(body: &[u8]) -> R<TableMap> {
    let mut r = Reader(body);
    let id = r.u48()?;
    let _flags = r.u16()?;
    let db_len = r.u8()? as usize;
    let database = String::from_utf8_lossy(r.take(db_len)?).into_owned();
    r.u8()?;
    let t_len = r.u8()? as usize;
    let table = String::from_utf8_lossy(r.take(t_len)?).into_owned();
    r.u8()?;
    let n = r.lenenc()? as usize;
    let types = r.take(n)?.to_vec();
    let mut m = Reader(r.lenenc_bytes()?);
    let mut meta = Vec::with_capacity(n);
    for &t in &types {
        meta.push(match t {
            // float, double, blob, geometry, json, timestamp2/datetime2/time2: one byte.
            4 | 5 | 252 | 255 | 245 | 17 | 18 | 19 => u16::from(m.u8()?),
            // varchar, bit: two bytes, little-endian.
            15 | 16 => m.u16()?,
            // string, enum, set, newdecimal: two bytes, the first first.
            254 | 247 | 248 | 246 | 253 => {
                let a = m.u8()?;
                let b = m.u8()?;
                (u16::from(a) << 8) | u16::from(b)
            }
            _ => 0,
        });
    }
    r.take(n.div_ceil(8))?;
    // The optional metadata (MySQL 8, MariaDB 10.5): type, length, value;
    // of it, the column names (type 4: a length-encoded string each).
    let mut names = None;
    while !r.0.is_empty() {
        let Ok(kind) = r.u8() else { break };
        let Ok(value) = r.lenenc_bytes() else { break };
        if kind == 4 {
            let mut v = Reader(value);
            names = (0..n)
                .map(|_| v.lenenc_bytes().map(|b| String::from_utf8_lossy(b).into_owned()))
                .collect::<R<Vec<_>>>()
                .ok();
        }
    }
    Ok(TableMap { id, database, table, types, meta, names })
}

/// What a rows event does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RowsKind {
    Write,
    Update,
    Delete,
}

pub(super) fn rows_kind(kind: u8) -> Option<RowsKind> {
    match kind {
        WRITE_ROWS_V1 | WRITE_ROWS_V2 => Some(RowsKind::Write),
        UPDATE_ROWS_V1 | UPDATE_ROWS_V2 => Some(RowsKind::Update),
        DELETE_ROWS_V1 | DELETE_ROWS_V2 => Some(RowsKind::Delete),
        _ => None,
    }
}

/// One column of a table as the decoder reads it: the type its values take
/// and what the log does not say (signedness, the labels of an `ENUM` or
/// `SET`, the character set of text).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Column {
    pub field_type: FieldType,
    pub unsigned: bool,
    pub labels: Vec<String>,
    /// Text in Latin-1 (every other character set is read as UTF-8).
    pub latin1: bool,
}

/// One row image: each column's value, `None` for a column the image
/// leaves out (`binlog_row_image` other than `FULL`).
pub(super) type Image = Vec<Option<Value>>;

/// The table id a rows event names.
pub(super) fn rows_table(body: &[u8]) -> R<u64> {
    Reader(body).u48()
}

/// A rows event's images: `(before, after)` per row (writes have only an
/// after, deletes only a before), for the table `tm` whose columns are
/// `cols`.
/// An update's before image is read for the columns `keys` only (the
/// others are stepped over): what tells whether the key changed.
pub(super) fn rows_event(
    kind: u8,
    body: &[u8],
    tm: &TableMap,
    cols: &[Column],
    keys: &[usize],
) -> R<Vec<(Option<Image>, Option<Image>)>> {
    let rk = rows_kind(kind).ok_or("not a rows event")?;
    let mut r = Reader(body);
    let _id = r.u48()?;
    let _flags = r.u16()?;
    if matches!(kind, WRITE_ROWS_V2 | UPDATE_ROWS_V2 | DELETE_ROWS_V2) {
        let extra = r.u16()? as usize;
        r.take(extra.saturating_sub(2))?;
    }
    let n = r.lenenc()? as usize;
    if n != tm.types.len() {
        return Err(format!("a rows event of {n} columns for a table map of {}", tm.types.len()));
    }
    let present = bitmap(r.take(n.div_ceil(8))?, n);
    let present_after = match rk {
        RowsKind::Update => bitmap(r.take(n.div_ceil(8))?, n),
        _ => present.clone(),
    };
    let mut out = Vec::new();
    while !r.0.is_empty() {
        match rk {
            RowsKind::Write => out.push((None, Some(image(&mut r, tm, cols, &present, None)?))),
            RowsKind::Delete => out.push((Some(image(&mut r, tm, cols, &present, None)?), None)),
            RowsKind::Update => {
                let before = image(&mut r, tm, cols, &present, Some(keys))?;
                let after = image(&mut r, tm, cols, &present_after, None)?;
                out.push((Some(before), Some(after)));
            }
        }
    }
    Ok(out)
}

fn bitmap(bytes: &[u8], n: usize) -> Vec<bool> {
    (0..n).map(|i| bytes[i / 8] & (1 << (i % 8)) != 0).collect()
}

fn image(r: &mut Reader<'_>, tm: &TableMap, cols: &[Column], present: &[bool], keys: Option<&[usize]>) -> R<Image> {
    let count = present.iter().filter(|p| **p).count();
    let nulls = bitmap(r.take(count.div_ceil(8))?, count);
    let mut out = Vec::with_capacity(tm.types.len());
    let mut k = 0;
    for (i, p) in present.iter().enumerate() {
        if !*p {
            out.push(None);
            continue;
        }
        let null = nulls[k];
        k += 1;
        if null {
            out.push(Some(Value::Null));
            continue;
        }
        if keys.is_some_and(|k| !k.contains(&i)) {
            skip(r, tm.types[i], tm.meta[i])?;
            out.push(None);
            continue;
        }
        let col = cols.get(i).ok_or("a row of more columns than its table")?;
        out.push(Some(value(r, tm.types[i], tm.meta[i], col)?));
    }
    Ok(out)
}

/// Steps over one value of a row image without reading it.
/// A `STRING` column's real type (CHAR 254, ENUM 247, SET 248) and length
/// from its metadata: a length over 255 keeps its high bits in the type
/// byte, whose 0x30 bits they replace.
fn string_meta(meta: u16) -> (u8, u16) {
    let (mut real, mut len) = ((meta >> 8) as u8, meta & 0xff);
    if real & 0x30 != 0x30 {
        len |= u16::from((real & 0x30) ^ 0x30) << 4;
        real |= 0x30;
    }
    (real, len)
}

fn skip(r: &mut Reader<'_>, t: u8, meta: u16) -> R<()> {
    let frac = |fsp: u16| usize::from(fsp.min(6)).div_ceil(2);
    let n = match t {
        1 | 13 => 1,
        2 => 2,
        9..=11 => 3,
        3 | 4 | 7 => 4,
        8 | 5 | 12 => 8,
        246 => {
            const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
            let (p, sc) = (usize::from(meta >> 8), usize::from(meta & 0xff));
            let intg = p.saturating_sub(sc);
            intg / 9 * 4 + DIG2BYTES[intg % 9] + sc / 9 * 4 + DIG2BYTES[sc % 9]
        }
        16 => usize::from(meta >> 8) + usize::from((meta & 0xff) > 0),
        15 | 253 => (if meta < 256 { r.le(1)? } else { r.le(2)? }) as usize,
        254 => {
            let (real, len) = string_meta(meta);
            match real {
                247 | 248 => usize::from(len),
                _ => (if len < 256 { r.le(1)? } else { r.le(2)? }) as usize,
            }
        }
        252 | 255 | 245 => r.le(usize::from(meta.clamp(1, 4)))? as usize,
        18 => 5 + frac(meta),
        17 => 4 + frac(meta),
        19 => 3 + frac(meta),
        other => return Err(format!("a column of the binlog's type {other}, which is not read")),
    };
    r.take(n)?;
    Ok(())
}

/// The bytes an integer of `n` bytes takes, as the column's value.
fn int(v: u64, n: usize, col: &Column) -> Value {
    let signed = if col.unsigned || n == 8 {
        v as i64
    } else {
        let shift = 64 - 8 * n as u32;
        ((v << shift) as i64) >> shift
    };
    // An unsigned BIGINT past i64 wraps, as a copy's CAST(… AS SIGNED) does.
    match col.field_type {
        FieldType::Boolean => Value::Bool(signed != 0),
        FieldType::String | FieldType::Decimal => {
            let text = if col.unsigned { v.to_string() } else { signed.to_string() };
            text_value(text, col.field_type)
        }
        FieldType::Number => Value::Float(if col.unsigned { v as f64 } else { signed as f64 }),
        _ => Value::Int(signed),
    }
}

fn text(bytes: &[u8], col: &Column) -> Value {
    if col.field_type == FieldType::Binary {
        return Value::Bytes(bytes.to_vec());
    }
    let s = if col.latin1 {
        bytes.iter().map(|b| cp1252(*b)).collect()
    } else {
        String::from_utf8_lossy(bytes).into_owned()
    };
    text_value(s, col.field_type)
}

/// A byte of MariaDB's `latin1`, which is Windows code page 1252 (0x80 to
/// 0x9F are the euro sign, curly quotes and the like; the five bytes 1252
/// leaves undefined map to the control characters of the same number, as
/// the server's conversion to UTF-8 does).
fn cp1252(b: u8) -> char {
    const HIGH: [char; 32] = [
        '\u{20ac}', '\u{81}', '\u{201a}', '\u{192}', '\u{201e}', '\u{2026}', '\u{2020}', '\u{2021}', '\u{2c6}',
        '\u{2030}', '\u{160}', '\u{2039}', '\u{152}', '\u{8d}', '\u{17d}', '\u{8f}', '\u{90}', '\u{2018}', '\u{2019}',
        '\u{201c}', '\u{201d}', '\u{2022}', '\u{2013}', '\u{2014}', '\u{2dc}', '\u{2122}', '\u{161}', '\u{203a}',
        '\u{153}', '\u{9d}', '\u{17e}', '\u{178}',
    ];
    match b {
        0x80..=0x9f => HIGH[usize::from(b - 0x80)],
        _ => char::from(b),
    }
}

/// One value of a row image, of the log's type `t` with metadata `meta`.
fn value(r: &mut Reader<'_>, t: u8, meta: u16, col: &Column) -> R<Value> {
    Ok(match t {
        1 => int(r.le(1)?, 1, col),
        2 => int(r.le(2)?, 2, col),
        9 => int(r.le(3)?, 3, col),
        3 => int(r.le(4)?, 4, col),
        8 => int(r.le(8)?, 8, col),
        // YEAR: years since 1900, 0 for the zero year.
        13 => {
            let y = r.u8()?;
            Value::Int(if y == 0 { 0 } else { 1900 + i64::from(y) })
        }
        4 => Value::Float(f64::from(f32::from_bits(r.u32()?))),
        5 => Value::Float(f64::from_bits(r.u64()?)),
        246 => text_value(decimal(r, (meta >> 8) as u8, (meta & 0xff) as u8)?, FieldType::Decimal),
        // BIT: (bits % 8, bytes), big-endian.
        16 => {
            let bytes = usize::from(meta >> 8) + usize::from((meta & 0xff) > 0);
            Value::Bytes(r.take(bytes)?.to_vec())
        }
        15 | 253 => {
            let n = if meta < 256 { r.le(1)? } else { r.le(2)? } as usize;
            text(r.take(n)?, col)
        }
        254 => {
            // CHAR, ENUM or SET, by the real type in the metadata's first byte.
            let (real, len) = string_meta(meta);
            match real {
                247 => {
                    let i = r.le(len as usize)? as usize;
                    // 0: the empty string an invalid value was stored as.
                    let label = if i == 0 { String::new() } else { col.labels.get(i - 1).cloned().unwrap_or_default() };
                    text_value(label, col.field_type)
                }
                248 => {
                    let bits = r.le(len as usize)?;
                    let labels: Vec<&str> = col
                        .labels
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i < 64 && bits & (1 << i) != 0)
                        .map(|(_, l)| l.as_str())
                        .collect();
                    text_value(labels.join(","), col.field_type)
                }
                _ => {
                    let n = if len < 256 { r.le(1)? } else { r.le(2)? } as usize;
                    text(r.take(n)?, col)
                }
            }
        }
        // BLOB and TEXT (MariaDB's JSON among them), GEOMETRY: a length of
        // `meta` bytes, then the bytes.
        252 | 255 => {
            let n = r.le(usize::from(meta.clamp(1, 4)))? as usize;
            text(r.take(n)?, col)
        }
        245 => return Err("MySQL's binary JSON is not read from the binlog yet".into()),
        // DATE: day (5 bits), month (4), year (15), little-endian.
        10 => {
            let v = r.le(3)? as u32;
            date_value((v >> 9) as i32, ((v >> 5) & 15) as u8, (v & 31) as u8, None, col)
        }
        // DATETIME2: a 40-bit packed value, then the fraction.
        18 => {
            let packed = r.be(5)? as i64 - 0x80_0000_0000;
            let micro = fraction(r, meta as u8)?;
            let ymd = packed >> 17;
            let ym = ymd >> 5;
            let hms = packed & 0x1ffff;
            let time = ((hms >> 12) as u8, ((hms >> 6) & 63) as u8, (hms & 63) as u8, micro);
            date_value((ym / 13) as i32, (ym % 13) as u8, (ymd & 31) as u8, Some(time), col)
        }
        // Before MySQL 5.6's formats: YYYYMMDDhhmmss as an integer.
        12 => {
            let v = r.u64()?;
            let (d, t) = (v / 1_000_000, v % 1_000_000);
            let time = ((t / 10_000) as u8, ((t / 100) % 100) as u8, (t % 100) as u8, 0);
            date_value((d / 10_000) as i32, ((d / 100) % 100) as u8, (d % 100) as u8, Some(time), col)
        }
        // TIMESTAMP2: seconds since the epoch, big-endian, then the fraction.
        17 => {
            let secs = r.be(4)? as i64;
            let micro = fraction(r, meta as u8)?;
            instant(secs, micro)
        }
        7 => instant(i64::from(r.u32()?), 0),
        19 => text_value(time2(r, meta as u8)?, col.field_type),
        11 => {
            let v = r.le(3)? as i64;
            let v = if v & 0x80_0000 != 0 { v - 0x100_0000 } else { v };
            let (sign, v) = if v < 0 { ("-", -v) } else { ("", v) };
            text_value(format!("{sign}{:02}:{:02}:{:02}", v / 10_000, (v / 100) % 100, v % 100), col.field_type)
        }
        other => return Err(format!("a column of the binlog's type {other}, which is not read")),
    })
}

/// The microseconds of a fraction of `fsp` digits (big-endian, in
/// `(fsp + 1) / 2` bytes).
fn fraction(r: &mut Reader<'_>, fsp: u8) -> R<u32> {
    Ok(match fsp {
        1 | 2 => r.be(1)? as u32 * 10_000,
        3 | 4 => r.be(2)? as u32 * 100,
        5 | 6 => r.be(3)? as u32,
        _ => 0,
    })
}

/// A TIMESTAMP: 0 is the zero timestamp, which names no time.
fn instant(secs: i64, micro: u32) -> Value {
    if secs == 0 && micro == 0 {
        return Value::Null;
    }
    time::OffsetDateTime::from_unix_timestamp(secs)
        .map(|t| Value::Timestamp(t + time::Duration::microseconds(i64::from(micro))))
        .unwrap_or(Value::Null)
}

/// A date or datetime as a copy reads it: a zero part names no time
/// (NULL); a date no calendar has is kept as the server prints it.
fn date_value(year: i32, month: u8, day: u8, time: Option<(u8, u8, u8, u32)>, col: &Column) -> Value {
    if year == 0 || month == 0 || day == 0 {
        return Value::Null;
    }
    let (h, mi, s, micro) = time.unwrap_or_default();
    let date = time::Month::try_from(month).ok().and_then(|m| time::Date::from_calendar_date(year, m, day).ok());
    let out = match (col.field_type, date) {
        (FieldType::Date, Some(d)) => Some(Value::Date(d)),
        (_, Some(d)) => time::Time::from_hms_micro(h, mi, s, micro)
            .ok()
            .map(|t| Value::Timestamp(time::PrimitiveDateTime::new(d, t).assume_utc())),
        _ => None,
    };
    out.unwrap_or_else(|| {
        let day = format!("{year:04}-{month:02}-{day:02}");
        match col.field_type {
            FieldType::Date => Value::String(day),
            _ => Value::String(format!("{day}T{h:02}:{mi:02}:{s:02}.{micro:06}Z")),
        }
    })
}

/// A `TIME2` as `CAST(… AS CHAR)` prints it: `[-]HH:MM:SS[.fff]` with the
/// column's digits of fraction.
fn time2(r: &mut Reader<'_>, fsp: u8) -> R<String> {
    // The value packed as one signed integer, offset so that it sorts as
    // bytes: the time (hours, minutes, seconds) shifted left 24 bits, plus
    // the microseconds (as MySQL's `TIME_from_longlong_time_packed` reads
    // it).
    let packed: i64 = match fsp {
        // The fraction in 1 or 2 bytes apart (hundredths, ten-thousandths).
        1..=4 => {
            let (bytes, unit) = if fsp <= 2 { (1, 10_000) } else { (2, 100) };
            let mut i = r.be(3)? as i64 - 0x80_0000;
            let mut f = r.be(bytes)? as i64;
            if i < 0 && f != 0 {
                i += 1;
                f -= 1 << (8 * bytes);
            }
            (i << 24) + f * unit
        }
        5 | 6 => r.be(6)? as i64 - 0x8000_0000_0000,
        _ => (r.be(3)? as i64 - 0x80_0000) << 24,
    };
    let negative = packed < 0;
    let packed = packed.abs();
    let (int, frac) = (packed >> 24, packed % (1 << 24));
    let mut s =
        format!("{}{:02}:{:02}:{:02}", if negative { "-" } else { "" }, (int >> 12) & 0x3ff, (int >> 6) & 63, int & 63);
    if fsp > 0 {
        let digits = format!("{frac:06}");
        s.push('.');
        s.push_str(&digits[..usize::from(fsp.min(6))]);
    }
    Ok(s)
}

/// A `DECIMAL(precision, scale)` in MySQL's binary form: groups of nine
/// digits in four bytes, big-endian, the leftover digits in fewer, the
/// sign in the first bit (set for positive; a negative one is stored with
/// every bit inverted).
fn decimal(r: &mut Reader<'_>, precision: u8, scale: u8) -> R<String> {
    const DIG2BYTES: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];
    if scale > precision || precision > 65 {
        return Err(format!("a DECIMAL({precision},{scale}) the binlog cannot hold"));
    }
    let intg = usize::from(precision - scale);
    let (intg0, intg0x) = (intg / 9, intg % 9);
    let (frac0, frac0x) = (usize::from(scale) / 9, usize::from(scale) % 9);
    let size = intg0 * 4 + DIG2BYTES[intg0x] + frac0 * 4 + DIG2BYTES[frac0x];
    // At most 65 digits: 30 bytes.
    let mut bytes = [0u8; 32];
    bytes[..size].copy_from_slice(r.take(size)?);
    let bytes = &mut bytes[..size];
    if bytes.is_empty() {
        return Ok("0".into());
    }
    let positive = bytes[0] & 0x80 != 0;
    bytes[0] ^= 0x80;
    if !positive {
        for b in bytes.iter_mut() {
            *b = !*b;
        }
    }
    // The digits, each group zero-padded to its width, in one buffer.
    let mut digits = [0u8; 72];
    let mut n = 0;
    fn push(digits: &mut [u8; 72], n: &mut usize, v: u64, width: usize) {
        let mut v = v;
        for i in (0..width).rev() {
            digits[*n + i] = b'0' + (v % 10) as u8;
            v /= 10;
        }
        *n += width;
    }
    let mut d = Reader(bytes);
    if intg0x > 0 {
        push(&mut digits, &mut n, d.be(DIG2BYTES[intg0x])?, intg0x);
    }
    for _ in 0..intg0 {
        push(&mut digits, &mut n, d.be(4)?, 9);
    }
    let int_end = n;
    for _ in 0..frac0 {
        push(&mut digits, &mut n, d.be(4)?, 9);
    }
    if frac0x > 0 {
        push(&mut digits, &mut n, d.be(DIG2BYTES[frac0x])?, frac0x);
    }
    let int_digits = &digits[..int_end];
    let first = int_digits.iter().position(|c| *c != b'0').unwrap_or(int_end);
    let mut s = String::with_capacity(n + 3);
    if !positive {
        s.push('-');
    }
    if first == int_end {
        s.push('0');
    } else {
        s.extend(int_digits[first..].iter().map(|c| char::from(*c)));
    }
    if n > int_end {
        s.push('.');
        s.extend(digits[int_end..n].iter().map(|c| char::from(*c)));
    }
    Ok(s)
}

/// The labels of `enum('a','b''c')` or `set(…)` as the catalog's
/// `COLUMN_TYPE` gives them.
pub(super) fn labels(column_type: &str) -> Vec<String> {
    let Some(open) = column_type.find('(') else { return Vec::new() };
    let mut out = Vec::new();
    let mut chars = column_type[open + 1..].chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\'' {
            continue;
        }
        let mut label = String::new();
        loop {
            match chars.next() {
                Some('\'') if chars.peek() == Some(&'\'') => {
                    chars.next();
                    label.push('\'');
                }
                Some('\'') | None => break,
                Some('\\') => {
                    if let Some(n) = chars.next() {
                        label.push(n);
                    }
                }
                Some(c) => label.push(c),
            }
        }
        out.push(label);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(t: FieldType) -> Column {
        Column { field_type: t, unsigned: false, labels: Vec::new(), latin1: false }
    }

    #[test]
    fn gtid_positions_compare_by_domain() {
        let a = GtidPos::parse("0-1-10,1-2-5").unwrap();
        let b = GtidPos::parse("0-1-12").unwrap();
        assert!(b.after(&a) && a.after(&b), "each holds what the other lacks");
        assert!(!a.after(&a));
        assert_eq!(a.min(&b).to_string(), "0-1-10");
        assert_eq!(GtidPos::parse("").unwrap().to_string(), "0-0-0");
        assert_eq!(GtidPos::parse("0-0-0").unwrap().connect_state(), "");
        assert!(a.precedes(&Gtid { domain: 1, server: 9, seq: 6 }));
        assert!(!a.precedes(&Gtid { domain: 0, server: 9, seq: 10 }));
        assert!(a.precedes(&Gtid { domain: 7, server: 9, seq: 1 }), "a new domain");
        for bad in ["0-1", "x-1-2", "0-1-2-3", "0-1-2,0-1-3", "16/B374D848"] {
            assert!(GtidPos::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn decimals_read_in_their_binary_form() {
        // DECIMAL(10,2) 1234567.89 and -1234567.89, as MySQL writes them.
        let pos = [0x80, 0x12, 0xd6, 0x87, 0x59];
        assert_eq!(decimal(&mut Reader(&pos), 10, 2).unwrap(), "1234567.89");
        let neg: Vec<u8> = pos.iter().map(|b| !b).collect();
        assert_eq!(decimal(&mut Reader(&neg), 10, 2).unwrap(), "-1234567.89");
        let mut r = Reader(&pos);
        skip(&mut r, 246, (10 << 8) | 2).unwrap();
        assert!(r.0.is_empty(), "a skipped decimal takes its bytes");
        assert_eq!(decimal(&mut Reader(&[0x80, 0x00, 0x00, 0x00, 0x05]), 10, 2).unwrap(), "0.05");
        // DECIMAL(5,0) 0.
        assert_eq!(decimal(&mut Reader(&[0x80, 0, 0]), 5, 0).unwrap(), "0");
    }

    #[test]
    fn temporal_values_read_as_a_copy_reads_them() {
        use time::macros::{date, datetime};
        // DATETIME2(0) 2024-05-01 10:11:12.
        let ym = 2024 * 13 + 5;
        let packed: u64 = (((ym << 5 | 1) << 17) | (10 << 12) | (11 << 6) | 12) + 0x80_0000_0000;
        let bytes = packed.to_be_bytes();
        let v = value(&mut Reader(&bytes[3..]), 18, 0, &col(FieldType::Timestamp)).unwrap();
        assert_eq!(v, Value::Timestamp(datetime!(2024-05-01 10:11:12 UTC)));
        // DATE 2024-05-01.
        let d: u32 = (2024 << 9) | (5 << 5) | 1;
        let v = value(&mut Reader(&d.to_le_bytes()[..3]), 10, 0, &col(FieldType::Date)).unwrap();
        assert_eq!(v, Value::Date(date!(2024 - 05 - 01)));
        assert_eq!(value(&mut Reader(&[0, 0, 0]), 10, 0, &col(FieldType::Date)).unwrap(), Value::Null);
        // TIME2(0) 12:34:56 and -01:00:00.
        let t: u64 = ((12 << 12) | (34 << 6) | 56) + 0x80_0000;
        assert_eq!(time2(&mut Reader(&t.to_be_bytes()[5..]), 0).unwrap(), "12:34:56");
        let t: u64 = 0x80_0000 - (1 << 12);
        assert_eq!(time2(&mut Reader(&t.to_be_bytes()[5..]), 0).unwrap(), "-01:00:00");
        // As MySQL packs them: -00:00:01.50 in TIME(2), -01:00:00.500000 in TIME(6).
        let pack = |int: i64, micro: i64| (int << 24) + micro;
        let v = pack(-1, -500_000);
        let (i, f) = (v >> 24, (v % (1 << 24)) / 10_000);
        // (MySQL stores the integer part floored, -2, and the fraction's byte 0xCE.)
        let i = i + 0x80_0000;
        let bytes = [(i >> 16) as u8, (i >> 8) as u8, i as u8, f as i8 as u8];
        assert_eq!(time2(&mut Reader(&bytes), 2).unwrap(), "-00:00:01.50");
        let v = (pack(-(1 << 12), -500_000) + 0x8000_0000_0000) as u64;
        assert_eq!(time2(&mut Reader(&v.to_be_bytes()[2..]), 6).unwrap(), "-01:00:00.500000");
        let v = (pack((1 << 12) | (2 << 6) | 3, 250_000) + 0x8000_0000_0000) as u64;
        assert_eq!(time2(&mut Reader(&v.to_be_bytes()[2..]), 6).unwrap(), "01:02:03.250000");
        // TIMESTAMP2(3) at 1.5 s after the epoch.
        let v = value(&mut Reader(&[0, 0, 0, 1, 0x13, 0x88]), 17, 3, &col(FieldType::Timestamp)).unwrap();
        assert_eq!(v, Value::Timestamp(datetime!(1970-01-01 00:00:01.5 UTC)));
    }

    #[test]
    fn integers_strings_and_labels() {
        let mut c = col(FieldType::Integer);
        assert_eq!(value(&mut Reader(&[0xff]), 1, 0, &c).unwrap(), Value::Int(-1));
        c.unsigned = true;
        assert_eq!(value(&mut Reader(&[0xff]), 1, 0, &c).unwrap(), Value::Int(255));
        assert_eq!(value(&mut Reader(&[1]), 1, 0, &col(FieldType::Boolean)).unwrap(), Value::Bool(true));
        let s = value(&mut Reader(b"\x03abc"), 15, 40, &col(FieldType::String)).unwrap();
        assert_eq!(s, Value::String("abc".into()));
        let mut latin = col(FieldType::String);
        latin.latin1 = true;
        assert_eq!(value(&mut Reader(b"\x01\xe9"), 15, 40, &latin).unwrap(), Value::String("é".into()));
        assert_eq!(value(&mut Reader(b"\x02\x80\x92"), 15, 40, &latin).unwrap(), Value::String("€’".into()));
        let mut e = col(FieldType::String);
        e.labels = labels("enum('a','b''c','d\\\\e')");
        assert_eq!(e.labels, ["a", "b'c", "d\\e"]);
        assert_eq!(value(&mut Reader(&[2]), 254, (247 << 8) | 1, &e).unwrap(), Value::String("b'c".into()));
        assert_eq!(value(&mut Reader(&[5]), 254, (248 << 8) | 1, &e).unwrap(), Value::String("a,d\\e".into()));
        assert!(value(&mut Reader(&[1]), 245, 4, &e).is_err(), "MySQL's binary JSON");
        assert!(value(&mut Reader(&[]), 3, 0, &c).is_err(), "a short value");
    }

    #[test]
    fn events_check_their_checksum() {
        let mut ev = vec![0u8; HEADER];
        ev[4] = XID;
        let size = (HEADER + 8 + 4) as u32;
        ev[9..13].copy_from_slice(&size.to_le_bytes());
        ev.extend_from_slice(&7u64.to_le_bytes());
        let sum = crc32fast::hash(&ev);
        ev.extend_from_slice(&sum.to_le_bytes());
        let (h, body) = split(&ev, true).unwrap();
        assert_eq!((h.kind, body.len()), (XID, 8));
        let last = ev.len() - 1;
        ev[last] ^= 1;
        assert!(split(&ev, true).unwrap_err().contains("checksum"));
    }
}
