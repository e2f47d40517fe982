//! Bulk streams out of PostgreSQL: a `COPY … TO STDOUT` passed on in
//! large chunks, and a cursor read's binary COPY cut into whole records
//! that follow the cursor column.

use super::{PgConnector, binary, err};
use sluice_domain::connect::connector::*;
use sqlx::Postgres;
use sqlx::pool::PoolConnection;

/// The size a chunk of records grows to before it is passed on.
const ROWS_CHUNK: usize = 256 * 1024;
pub(super) const COPY_CHUNK: usize = 1 << 20;

impl PgConnector {
    /// A `COPY … TO STDOUT` on the pool as a bulk stream.
    pub(super) async fn copy_out(&self, sql: &str) -> ConnectorResult<PgBulkOut<'static>> {
        use sqlx::postgres::PgPoolCopyExt;
        let stream = self.pool.copy_out_raw(sql).await.map_err(|e| self.e(&e))?;
        Ok(PgBulkOut {
            stream,
            host: self.host.clone(),
            database: self.database.clone(),
            failed: None,
            binary_tail: None,
        })
    }
}

/// A range's `COPY … TO STDOUT` on its own connection, as a bulk stream.
pub(super) async fn copy_on<'c>(
    conn: &'c mut PoolConnection<Postgres>,
    sql: &str,
    host: String,
    database: String,
) -> ConnectorResult<PgBulkOut<'c>> {
    match conn.copy_out_raw(sql).await {
        Ok(stream) => Ok(PgBulkOut { stream, host, database, failed: None, binary_tail: None }),
        Err(e) => Err(err(&e, &host, &database)),
    }
}

pub(super) struct PgBulkOut<'a> {
    stream: futures_util::stream::BoxStream<'a, Result<bytes::Bytes, sqlx::Error>>,
    host: String,
    database: String,
    /// A failure met while joining ready pieces, told at the next call.
    failed: Option<ConnectorError>,
    /// For a binary COPY, its last two bytes so far: a whole stream ends
    /// with the trailer (-1), one cut between records does not.
    binary_tail: Option<[u8; 2]>,
}

#[async_trait::async_trait]
impl BulkStream for PgBulkOut<'static> {
    async fn next_chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        self.chunk().await
    }
}

impl PgBulkOut<'_> {
    /// Checks, at its end, that this binary COPY is whole (its trailer
    /// came): a stream whose connection was lost between records is an
    /// error, not a shorter table. (A cut stream whose last two bytes
    /// happen to be 0xFFFF passes: the check is cheap, not complete.)
    pub(super) fn binary(mut self) -> Self {
        self.binary_tail = Some([0, 0]);
        self
    }

    /// The next piece, with every piece already received joined to it (up
    /// to [`COPY_CHUNK`]): PostgreSQL sends a message per record, and a
    /// writer is faster with fewer, larger pieces.
    pub(super) async fn chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        use futures_util::{FutureExt, StreamExt};
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut out = match self.stream.next().await {
            None if self.binary_tail.is_some_and(|t| t != [0xff, 0xff]) => {
                return Err(ConnectorError::Other(format!(
                    "reading {}: the binary COPY stream was cut before its end",
                    self.host
                )));
            }
            None => return Ok(None),
            Some(Ok(b)) => b.to_vec(),
            Some(Err(e)) => return Err(err(&e, &self.host, &self.database)),
        };
        // Only what is ready: a failure is told at the next call, and the
        // end is met by it.
        while out.len() < COPY_CHUNK {
            match self.stream.next().now_or_never() {
                Some(Some(Ok(b))) => out.extend_from_slice(&b),
                Some(Some(Err(e))) => {
                    self.failed = Some(err(&e, &self.host, &self.database));
                    break;
                }
                Some(None) | None => break,
            }
        }
        if let Some(tail) = &mut self.binary_tail {
            match out.len() {
                0 => {}
                1 => *tail = [tail[1], out[0]],
                n => *tail = [out[n - 2], out[n - 1]],
            }
        }
        Ok(Some(out))
    }
}

/// A cursor read's binary COPY, re-cut into chunks of whole records with
/// the header and trailer taken off, following the cursor column.
pub(super) struct PgRowsOut {
    pub(super) stream: futures_util::stream::BoxStream<'static, Result<bytes::Bytes, sqlx::Error>>,
    pub(super) host: String,
    pub(super) database: String,
    pub(super) parser: RowsParser,
}

#[async_trait::async_trait]
impl BulkStream for PgRowsOut {
    async fn next_chunk(&mut self) -> ConnectorResult<Option<Vec<u8>>> {
        use futures_util::StreamExt;
        loop {
            if self.parser.ready() >= ROWS_CHUNK {
                return Ok(Some(self.parser.take()));
            }
            match self.stream.next().await {
                Some(Ok(b)) => self.parser.feed(&b).map_err(ConnectorError::Other)?,
                Some(Err(e)) => return Err(err(&e, &self.host, &self.database)),
                None => {
                    self.parser.end().map_err(ConnectorError::Other)?;
                    return Ok((self.parser.ready() > 0).then(|| self.parser.take()));
                }
            }
        }
    }

    fn records(&self) -> Option<u64> {
        Some(self.parser.taken_records)
    }

    fn last_cursor(&self) -> Option<Value> {
        self.parser.taken_cursor.clone()
    }
}

/// The types of cursor column a binary COPY stream can follow.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum CursorKind {
    Int2,
    Int4,
    Int8,
    Timestamp,
    Date,
    Text,
}

impl CursorKind {
    pub(super) fn of(native: &str) -> Option<Self> {
        Some(match native {
            "smallint" => Self::Int2,
            "integer" => Self::Int4,
            "bigint" => Self::Int8,
            "timestamp with time zone" | "timestamp without time zone" => Self::Timestamp,
            "date" => Self::Date,
            "text" => Self::Text,
            n if n.starts_with("character varying") => Self::Text,
            _ => return None,
        })
    }

    /// A value in binary COPY's representation; `None` for ±infinity.
    fn decode(self, b: &[u8]) -> Option<Value> {
        let wire = match self {
            Self::Int2 => binary::Wire::Int2,
            Self::Int4 => binary::Wire::Int4,
            Self::Int8 => binary::Wire::Int8,
            Self::Timestamp => binary::Wire::Micros,
            Self::Date => binary::Wire::Date,
            Self::Text => binary::Wire::Text(FieldType::String),
        };
        wire.decode(b).ok()
    }
}

/// Cuts a binary COPY byte stream into whole records: drops the header,
/// stops at the trailer, and keeps the cursor column of the last record
/// whose cursor is not NULL.
pub(super) struct RowsParser {
    width: usize,
    cursor_at: usize,
    kind: CursorKind,
    /// Bytes received and not yet passed on; whole records up to `whole`.
    buf: Vec<u8>,
    whole: usize,
    header_done: bool,
    ended: bool,
    records: u64,
    /// Where the last non-NULL cursor of the whole records is in `buf`.
    cursor: Option<std::ops::Range<usize>>,
    /// What was passed on so far.
    taken_records: u64,
    taken_cursor: Option<Value>,
}

impl RowsParser {
    pub(super) fn new(width: usize, cursor_at: usize, kind: CursorKind) -> Self {
        Self {
            width,
            cursor_at,
            kind,
            buf: Vec::with_capacity(ROWS_CHUNK + 64 * 1024),
            whole: 0,
            header_done: false,
            ended: false,
            records: 0,
            cursor: None,
            taken_records: 0,
            taken_cursor: None,
        }
    }

    fn ready(&self) -> usize {
        self.whole
    }

    fn feed(&mut self, bytes: &[u8]) -> Result<(), String> {
        if self.ended {
            return if bytes.is_empty() { Ok(()) } else { Err("data after the end of a binary COPY".into()) };
        }
        self.buf.extend_from_slice(bytes);
        if !self.header_done {
            // Signature (11), flags (4), extension length (4) and extension.
            if self.buf.len() < 19 {
                return Ok(());
            }
            if &self.buf[..11] != b"PGCOPY\n\xff\r\n\0" {
                return Err("not a binary COPY stream".into());
            }
            let ext = u32::from_be_bytes(self.buf[15..19].try_into().unwrap_or_default()) as usize;
            if self.buf.len() < 19 + ext {
                return Ok(());
            }
            self.buf.drain(..19 + ext);
            self.header_done = true;
        }
        // Whole records past `whole`.
        let mut at = self.whole;
        while let Some(n) = self.buf.get(at..at + 2) {
            let n = i16::from_be_bytes([n[0], n[1]]);
            if n == -1 {
                self.ended = true;
                self.buf.truncate(at);
                break;
            }
            if n as usize != self.width {
                return Err(format!("a record of {n} columns in a stream of {}", self.width));
            }
            let mut p = at + 2;
            let mut cursor = None;
            let mut complete = true;
            for i in 0..self.width {
                let Some(len) = self.buf.get(p..p + 4) else {
                    complete = false;
                    break;
                };
                let len = i32::from_be_bytes([len[0], len[1], len[2], len[3]]);
                p += 4;
                if len < 0 {
                    continue;
                }
                let end = p + len as usize;
                if end > self.buf.len() {
                    complete = false;
                    break;
                }
                if i == self.cursor_at {
                    cursor = Some(p..end);
                }
                p = end;
            }
            if !complete {
                break;
            }
            if cursor.is_some() {
                self.cursor = cursor;
            }
            self.records += 1;
            at = p;
        }
        self.whole = at;
        Ok(())
    }

    /// At the end of the source's stream: every byte must be part of a
    /// whole record.
    fn end(&mut self) -> Result<(), String> {
        if self.buf.len() > self.whole {
            return Err("the binary COPY stream ended inside a record".into());
        }
        // Whole streams end with their trailer: one without it was cut
        // (its connection lost) between records, not done.
        if !self.ended {
            return Err("the binary COPY stream was cut before its end".into());
        }
        Ok(())
    }

    /// The whole records so far; the partial rest stays.
    fn take(&mut self) -> Vec<u8> {
        if let Some(v) = self.cursor.take().and_then(|r| self.kind.decode(&self.buf[r])) {
            self.taken_cursor = Some(v);
        }
        let rest = self.buf.split_off(self.whole);
        let out = std::mem::replace(&mut self.buf, rest);
        self.whole = 0;
        self.taken_records = self.records;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A binary COPY stream: header (with an extension area), records of
    /// (bigint id, text, timestamptz cursor), trailer.
    fn copy_stream(records: &[(i64, Option<&str>, Option<i64>)]) -> Vec<u8> {
        let mut out = b"PGCOPY\n\xff\r\n\0".to_vec();
        out.extend_from_slice(&0u32.to_be_bytes());
        out.extend_from_slice(&3u32.to_be_bytes());
        out.extend_from_slice(b"ext");
        for (id, text, us) in records {
            out.extend_from_slice(&3i16.to_be_bytes());
            out.extend_from_slice(&8i32.to_be_bytes());
            out.extend_from_slice(&id.to_be_bytes());
            match text {
                Some(t) => {
                    out.extend_from_slice(&(t.len() as i32).to_be_bytes());
                    out.extend_from_slice(t.as_bytes());
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
            match us {
                Some(us) => {
                    out.extend_from_slice(&8i32.to_be_bytes());
                    out.extend_from_slice(&us.to_be_bytes());
                }
                None => out.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        out.extend_from_slice(&(-1i16).to_be_bytes());
        out
    }

    #[test]
    fn a_binary_copy_is_cut_into_whole_records_following_the_cursor() {
        let day = 86_400_000_000i64;
        let records =
            [(1, Some("a"), Some(0)), (2, None, Some(day)), (3, Some("c"), None), (4, Some("d\u{e9}"), Some(2 * day))];
        let stream = copy_stream(&records);
        let header = 19 + 3;
        // Fed a byte at a time, taken whenever something is whole.
        let mut p = RowsParser::new(3, 2, CursorKind::Timestamp);
        let mut out = Vec::new();
        let mut cursors = Vec::new();
        for b in &stream {
            p.feed(std::slice::from_ref(b)).unwrap();
            if p.ready() > 0 {
                out.extend(p.take());
                cursors.push((p.taken_records, p.taken_cursor.clone()));
            }
        }
        p.end().unwrap();
        assert_eq!(out, stream[header..stream.len() - 2], "the records alone, header and trailer gone");
        assert_eq!(p.taken_records, 4);
        let ts = |d: i64| Value::Timestamp(time::macros::datetime!(2000-01-01 0:00 UTC) + time::Duration::days(d));
        assert_eq!(cursors[0], (1, Some(ts(0))));
        assert_eq!(cursors[2], (3, Some(ts(1))), "a NULL cursor keeps the last one");
        assert_eq!(cursors[3], (4, Some(ts(2))));

        // Fed whole, taken once.
        let mut p = RowsParser::new(3, 2, CursorKind::Timestamp);
        p.feed(&stream).unwrap();
        p.end().unwrap();
        assert_eq!(p.take().len(), stream.len() - header - 2);
        assert_eq!((p.taken_records, p.taken_cursor.clone()), (4, Some(ts(2))));
    }

    #[test]
    fn a_broken_binary_copy_is_an_error_not_a_record() {
        let stream = copy_stream(&[(1, Some("a"), Some(0))]);
        let mut p = RowsParser::new(3, 2, CursorKind::Timestamp);
        p.feed(&stream[..stream.len() - 5]).unwrap();
        assert!(p.end().is_err(), "ended inside a record");
        let mut p = RowsParser::new(2, 1, CursorKind::Int8);
        assert!(p.feed(&stream).is_err(), "a record of another width");
        let mut p = RowsParser::new(3, 2, CursorKind::Int8);
        assert!(p.feed(b"COPY not binary at all").is_err());
    }

    #[test]
    fn cursor_columns_decode_from_their_binary_form() {
        assert_eq!(CursorKind::of("bigint"), Some(CursorKind::Int8));
        assert_eq!(CursorKind::of("character varying(20)"), Some(CursorKind::Text));
        assert_eq!(CursorKind::of("numeric(12,2)"), None, "followed by the row path");
        assert_eq!(CursorKind::Int2.decode(&(-7i16).to_be_bytes()), Some(Value::Int(-7)));
        assert_eq!(CursorKind::Int4.decode(&70_000i32.to_be_bytes()), Some(Value::Int(70_000)));
        assert_eq!(CursorKind::Int8.decode(&i64::MIN.to_be_bytes()), Some(Value::Int(i64::MIN)));
        assert_eq!(CursorKind::Int8.decode(&[1, 2]), None);
        assert_eq!(
            CursorKind::Timestamp.decode(&1_500_000i64.to_be_bytes()),
            Some(Value::Timestamp(time::macros::datetime!(2000-01-01 0:00:01.5 UTC)))
        );
        assert_eq!(CursorKind::Timestamp.decode(&i64::MAX.to_be_bytes()), None, "infinity");
        assert_eq!(
            CursorKind::Date.decode(&(-1i32).to_be_bytes()),
            Some(Value::Date(time::macros::date!(1999 - 12 - 31)))
        );
        assert_eq!(CursorKind::Text.decode("z\u{e9}".as_bytes()), Some(Value::String("z\u{e9}".into())));
    }
}
