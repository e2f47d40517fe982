//! The CSV bulk format (a file connector's CSV, header apart) and the
//! counting of its records in a stream fed in pieces.

/// The bulk format of a CSV file as the file connector writes it (header
/// apart): a source that can produce it directly (PostgreSQL's `COPY … TO
/// STDOUT (FORMAT csv)` of expressions that format each value as the file
/// writer would) skips decoding records.
pub const SLUICE_CSV: sluice_domain::connect::connector::BulkFormat =
    sluice_domain::connect::connector::BulkFormat::SluiceCsv;

/// Counts the records of a CSV stream fed in pieces: a line end outside
/// quotes ends one (a doubled quote inside a field toggles twice).
#[derive(Debug, Default)]
pub struct CsvRecords {
    pub records: u64,
    quoted: bool,
    line_open: bool,
}

impl CsvRecords {
    pub fn feed(&mut self, bytes: &[u8]) {
        self.feed_ends(bytes);
    }

    /// Feeds `bytes`; answers where in them the last record ended (just
    /// past its newline), if one did.
    pub fn feed_ends(&mut self, bytes: &[u8]) -> Option<usize> {
        let mut end = None;
        // Only quotes and newlines matter: skipped to, not stepped through.
        for i in memchr::memchr2_iter(b'"', b'\n', bytes) {
            if bytes[i] == b'"' {
                self.quoted = !self.quoted;
            } else if !self.quoted {
                self.records += 1;
                end = Some(i + 1);
            }
        }
        // A record is open when any byte came after the last one's end.
        self.line_open = match end {
            Some(e) => e < bytes.len(),
            None => self.line_open || !bytes.is_empty(),
        };
        end
    }

    /// Whether the stream so far ends between records.
    pub fn complete(&self) -> bool {
        !self.quoted && !self.line_open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_records_are_counted_across_pieces_and_quoted_line_ends() {
        let text = b"1,\"two\nlines\",\"say \"\"hi\"\"\"\n2,,x\n";
        let mut c = CsvRecords::default();
        for piece in text.chunks(3) {
            c.feed(piece);
        }
        assert_eq!(c.records, 2);
        assert!(c.complete());
        c.feed(b"3,\"open");
        assert!(!c.complete());
    }

    #[test]
    fn record_ends_are_found_at_any_cut() {
        let text: &[u8] = b"1,\"two\nlines\",\"say \"\"hi\"\"\"\n2,,x\n3,\"\"\"\"\n";
        // Where records end: after each unquoted newline.
        let ends: Vec<usize> = vec![27, 32, 39];
        assert_eq!(text.len(), 39);
        for cut in 0..=text.len() {
            let mut c = CsvRecords::default();
            let first = c.feed_ends(&text[..cut]);
            let second = c.feed_ends(&text[cut..]).map(|e| e + cut);
            assert_eq!(first, ends.iter().copied().rfind(|e| *e <= cut), "cut at {cut}");
            assert_eq!(second, ends.iter().copied().rfind(|e| *e > cut), "cut at {cut}");
            assert_eq!(c.records, 3);
            assert!(c.complete(), "cut at {cut}");
            let mut open = CsvRecords::default();
            open.feed_ends(&text[..cut]);
            assert_eq!(open.complete(), cut == 0 || ends.contains(&cut), "cut at {cut}");
        }
    }
}
