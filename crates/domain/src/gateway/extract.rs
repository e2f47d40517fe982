//! Extraction: the one JSON object of raw model output, linear in the
//! input (one bracket scan, bounded tries), repaired the ways LLM output
//! breaks, the best fit for the contract among candidates.
//!
//! Long file: the bracket scan, the candidates it yields and the repairs
//! tried on them share one budget of attempts and bytes, kept here in one
//! place so that the whole stays linear in the input.

use super::ContractField;
use super::repair::{Repair, RepairKind, TextNotes};
use super::text::is_space;
use super::validate::{Walk, walk};
use serde_json::{Map, Number, Value};

/// At most this many candidate objects are weighed against the contract.
pub const MAX_CANDIDATES: usize = 64;
/// At most this many bracketed spans are tried as candidates.
const MAX_ATTEMPTS: usize = 256;
/// The bytes of candidate text tried, as a multiple of the input's length
/// (each try is a parse, a repair and a parse): what bounds the work on
/// hostile input to a fixed multiple of its length.
const WORK_PER_BYTE: usize = 4;

/// At most this many times is the text scanned again after a bracket left
/// open in prose (`"I, ["` before the answer), from just after it.
const MAX_RESCANS: usize = 8;

/// The object extraction found, and the repairs it took (see
/// [`crate::gateway::repair`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Extraction {
    pub object: Map<String, Value>,
    pub repairs: Vec<Repair>,
}

/// A candidate object: where it was found (bytes of the raw text; `None`:
/// the whole text, strict JSON) and the repairs its text took.
struct Candidate {
    obj: Map<String, Value>,
    span: Option<(usize, usize)>,
    repairs: Vec<Repair>,
    /// Made of nothing but an opening brace the end cut off: an object
    /// with every field missing, taken only when there is nothing else.
    empty_cut: bool,
}

/// The JSON object in `raw`, if any: of several candidates the one that
/// fits `contract` best (fewest missing required fields, then fewest type
/// mismatches), the first among equals.
///
/// Linear in the input: one pass finds every bracketed span and its end,
/// and the spans tried are bounded in number and in total length.
pub fn extract(raw: &str, contract: &[ContractField]) -> Option<Map<String, Value>> {
    extract_noted(raw, contract).map(|e| e.object)
}

/// [`extract`], with the repairs that made the object: where it was taken
/// from, why it won over other candidates, and what its text needed.
pub fn extract_noted(raw: &str, contract: &[ContractField]) -> Option<Extraction> {
    let mut found = candidates(raw);
    let n = found.len();
    let (index, chosen, fit_of) = if n <= 1 {
        // Nothing to choose between: no need to weigh it.
        (0, found.pop()?, None)
    } else {
        let mut best: Option<((usize, usize), usize)> = None;
        for (i, c) in found.iter().enumerate() {
            let fit = fit(&c.obj, contract);
            if best.as_ref().is_none_or(|(b, _)| fit < *b) {
                best = Some((fit, i));
            }
        }
        let (fit, i) = best?;
        (i, found.swap_remove(i), Some(fit))
    };
    let mut repairs = Vec::new();
    if let Some((start, end)) = chosen.span {
        let around =
            !raw[..start].trim_matches(is_space).is_empty() || !raw[end + 1..].trim_matches(is_space).is_empty();
        if around {
            repairs.push(Repair::new(
                "$",
                RepairKind::Extracted,
                format!("the object at bytes {start}..{} of {} (prose or a code fence around it)", end + 1, raw.len()),
            ));
        }
    }
    if let Some((missing, mismatches)) = fit_of {
        repairs.push(Repair::new(
            "$",
            RepairKind::CandidateChosen,
            format!(
                "candidate {} of {n}: the best fit for the contract ({missing} missing required fields, \
                 {mismatches} type mismatches; the first among equals)",
                index + 1
            ),
        ));
    }
    repairs.extend(chosen.repairs);
    Some(Extraction { object: chosen.obj, repairs })
}

/// How badly `obj` fits the contract: (missing required fields, type
/// mismatches).
fn fit(obj: &Map<String, Value>, contract: &[ContractField]) -> (usize, usize) {
    if contract.is_empty() {
        return (0, 0);
    }
    let mut w = Walk::quiet();
    walk(obj, contract, "", &mut w);
    (w.missing.len(), w.mismatches.len())
}

/// The bytes the extraction of `raw` reads, all passes counted (the strict
/// parse, the bracket scans, each candidate tried): at most
/// `(WORK_PER_BYTE + 2) × len + 64 KiB`, whatever the input. The hostile
/// input tests check this bound, which does not depend on the machine.
pub fn extraction_work(raw: &str) -> usize {
    let mut spent = 0;
    candidates_with(raw, &mut spent);
    spent
}

/// The most [`extraction_work`] may be for an input of `len` bytes.
pub fn work_bound(len: usize) -> usize {
    (WORK_PER_BYTE + 2) * len + 64 * 1024
}

/// Every candidate object of `raw`, in order of appearance (at most
/// [`MAX_CANDIDATES`]).
fn candidates(raw: &str) -> Vec<Candidate> {
    candidates_with(raw, &mut 0)
}

fn candidates_with(raw: &str, spent: &mut usize) -> Vec<Candidate> {
    let trimmed = raw.trim_matches(is_space);
    *spent += raw.len();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        let in_array = v.is_array();
        let found = objects_of(v);
        if !found.is_empty() {
            let dups = duplicate_keys(trimmed);
            return found
                .into_iter()
                .enumerate()
                .map(|(i, obj)| {
                    let mut repairs = element_of_array(in_array, i);
                    repairs.extend(duplicates_of(&dups, i));
                    Candidate { obj, span: None, repairs, empty_cut: false }
                })
                .collect();
        }
    }
    *spent += raw.len();
    let start_budget = WORK_PER_BYTE * raw.len() + 64 * 1024;
    let mut budget = start_budget;
    let mut out: Vec<Candidate> = Vec::new();
    let mut empty_cuts: Vec<Candidate> = Vec::new();
    let mut tried = 0;
    let mut base = 0;
    for rescan in 0..=MAX_RESCANS {
        let text = &raw[base..];
        if rescan > 0 {
            // A scan again, from just after a bracket left open in prose.
            if text.len() > budget {
                break;
            }
            budget -= text.len();
        }
        let scan = scan_brackets(text);
        // An object cut off by the end of the output (closed, whole values
        // only) holds every span after its start: those are its values,
        // tried on their own only when it does not parse.
        let cut = scan.unclosed.unwrap_or(text.len());
        let mut covered = 0;
        let mut try_span = |start: usize, end: usize, out: &mut Vec<Candidate>, budget: &mut usize| {
            if start < covered || out.len() >= MAX_CANDIDATES || tried >= MAX_ATTEMPTS {
                return;
            }
            let len = end + 1 - start;
            if len > *budget {
                return;
            }
            *budget -= len;
            tried += 1;
            let found = lenient(&text[start..=end], base + start);
            if !found.is_empty() {
                out.extend(found.into_iter().map(|mut c| {
                    c.span = Some((base + start, base + end));
                    c
                }));
                covered = end + 1;
            }
        };
        for &(start, end) in scan.spans.iter().filter(|(start, _)| *start < cut) {
            try_span(start, end, &mut out, &mut budget);
        }
        // The object cut off by the end comes in its place (it encloses the
        // spans after it); those spans are candidates too, and the fit
        // decides (the enclosing object first on a tie). A cut that leaves
        // nothing whole is an object with every field missing, taken only
        // when nothing else is found.
        if let Some(start) = scan.unclosed
            && text.len() - start <= budget
        {
            budget -= text.len() - start;
            let (closed, truncation) = complete_truncated_noted(&text[start..]);
            for mut c in lenient(&closed, base + start) {
                c.span = Some((base + start, raw.len() - 1));
                c.repairs.extend(truncation.iter().cloned());
                if c.obj.is_empty() {
                    c.empty_cut = true;
                    empty_cuts.push(c);
                } else {
                    out.push(c);
                }
            }
        }
        for &(start, end) in scan.spans.iter().filter(|(start, _)| *start > cut) {
            try_span(start, end, &mut out, &mut budget);
        }
        match scan.first_open {
            Some(open) if out.is_empty() => base += open + 1,
            _ => break,
        }
    }
    if out.is_empty() {
        out = empty_cuts;
    }
    out.truncate(MAX_CANDIDATES);
    *spent += start_budget - budget;
    out
}

/// The repair of an object taken out of a top-level array (none for an
/// object on its own).
fn element_of_array(in_array: bool, index: usize) -> Vec<Repair> {
    if in_array {
        vec![Repair::new("$", RepairKind::Extracted, format!("element {index} of a top-level array"))]
    } else {
        Vec::new()
    }
}

/// The repairs for the duplicate keys `dups` found in element `index` of
/// the parsed text (an object is element 0).
fn duplicates_of(dups: &[(usize, String)], index: usize) -> Vec<Repair> {
    dups.iter()
        .filter(|(i, _)| *i == index)
        .map(|(_, path)| {
            Repair::new(path.clone(), RepairKind::DuplicateKey, "the key is repeated; the last value is kept")
        })
        .collect()
}

/// The keys a strict JSON text repeats within one object, by dotted path,
/// with the element of a top-level array they are in (0 for an object).
/// One pass of the parser, keeping no values.
fn duplicate_keys(json: &str) -> Vec<(usize, String)> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    struct Seek<'a> {
        path: String,
        element: usize,
        /// At the top: a top-level array's elements count as elements.
        top: bool,
        out: &'a mut Vec<(usize, String)>,
    }
    impl<'de> DeserializeSeed<'de> for Seek<'_> {
        type Value = ();
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
            d.deserialize_any(self)
        }
    }
    impl<'de> Visitor<'de> for Seek<'_> {
        type Value = ();
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("JSON")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            // Sets, not lists: an object of many keys stays linear.
            let mut seen: std::collections::HashSet<String> = std::collections::HashSet::new();
            let mut reported: std::collections::HashSet<String> = std::collections::HashSet::new();
            while let Some(key) = map.next_key::<String>()? {
                let path = super::text::dotted(&self.path, &key);
                if !seen.insert(key) && reported.insert(path.clone()) {
                    self.out.push((self.element, path.clone()));
                }
                map.next_value_seed(Seek { path, element: self.element, top: false, out: &mut *self.out })?;
            }
            Ok(())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
            let mut i = 0;
            loop {
                let element = if self.top { i } else { self.element };
                let seed = Seek { path: self.path.clone(), element, top: false, out: &mut *self.out };
                if seq.next_element_seed(seed)?.is_none() {
                    return Ok(());
                }
                i += 1;
            }
        }
        fn visit_bool<E>(self, _: bool) -> Result<(), E> {
            Ok(())
        }
        fn visit_i64<E>(self, _: i64) -> Result<(), E> {
            Ok(())
        }
        fn visit_u64<E>(self, _: u64) -> Result<(), E> {
            Ok(())
        }
        fn visit_f64<E>(self, _: f64) -> Result<(), E> {
            Ok(())
        }
        fn visit_str<E>(self, _: &str) -> Result<(), E> {
            Ok(())
        }
        fn visit_unit<E>(self) -> Result<(), E> {
            Ok(())
        }
    }
    let _ = IgnoredAny;
    let mut out = Vec::new();
    let mut d = serde_json::Deserializer::from_str(json);
    let _ = Seek { path: String::new(), element: 0, top: true, out: &mut out }.deserialize(&mut d);
    out
}

/// The objects a parsed value offers: itself, or the objects of an array.
fn objects_of(v: Value) -> Vec<Map<String, Value>> {
    match v {
        Value::Object(o) => vec![o],
        Value::Array(items) => items
            .into_iter()
            .filter_map(|x| match x {
                Value::Object(o) => Some(o),
                _ => None,
            })
            .take(MAX_CANDIDATES)
            .collect(),
        _ => Vec::new(),
    }
}

/// The candidates of one span (`base`: its offset in the raw text): its
/// objects as strict JSON, else as repaired, with the repairs.
fn lenient(text: &str, base: usize) -> Vec<Candidate> {
    let (value, json, notes) = match serde_json::from_str::<Value>(text) {
        Ok(v) => (v, std::borrow::Cow::Borrowed(text), TextNotes::default()),
        // Nested deeper than the parser goes (128 levels): a repair keeps
        // the nesting, so it would fail the same way.
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => return Vec::new(),
        Err(_) => {
            let mut notes = TextNotes::default();
            let repaired = repair_noted(text, &mut notes);
            match serde_json::from_str::<Value>(&repaired) {
                Ok(v) => (v, std::borrow::Cow::Owned(repaired), notes),
                Err(_) => return Vec::new(),
            }
        }
    };
    let in_array = value.is_array();
    let objects = objects_of(value);
    if objects.is_empty() {
        return Vec::new();
    }
    let text_repairs = notes.into_repairs(base);
    let dups = duplicate_keys(&json);
    objects
        .into_iter()
        .enumerate()
        .map(|(i, obj)| {
            let mut repairs = element_of_array(in_array, i);
            repairs.extend(text_repairs.iter().cloned());
            repairs.extend(duplicates_of(&dups, i));
            Candidate { obj, span: None, repairs, empty_cut: false }
        })
        .collect()
}

/// How deep the parser nests (serde_json's limit): an object cut off
/// deeper than this cannot be read, however it is closed.
const MAX_DEPTH: usize = 128;
/// How deep the bracket scan keeps track of spans: a span starting deeper
/// is not tried (its own nesting aside, nothing so deep is an answer), and
/// the scan's memory stays small whatever the input.
const MAX_SCAN_DEPTH: usize = 1024;

/// The spans `{…}` (and `[…]` holding an object) of a text, by start, and
/// where the outermost `{` left open starts: one pass. Outside brackets
/// the text is prose (an apostrophe opens nothing); inside, strings and
/// comments are skipped.
struct Brackets {
    spans: Vec<(usize, usize)>,
    unclosed: Option<usize>,
    /// The outermost bracket left open, of either kind.
    first_open: Option<usize>,
}

fn scan_brackets(s: &str) -> Brackets {
    let b = s.as_bytes();
    // Open brackets: (offset, holds an object); past MAX_SCAN_DEPTH only
    // counted (nothing that deep parses).
    let mut stack: Vec<(usize, bool)> = Vec::new();
    let mut deeper = 0usize;
    let mut spans = Vec::new();
    let mut in_str: Option<char> = None;
    let mut i = 0;
    // Bytes below 0x80 are whole characters; others are decoded (the
    // quotes of other languages are among them).
    let char_at = |i: usize| -> (char, usize) {
        if b[i] < 0x80 {
            (char::from(b[i]), 1)
        } else {
            let c = at(s, i).unwrap_or('\u{fffd}');
            (c, c.len_utf8())
        }
    };
    while i < b.len() {
        if let Some(q) = in_str {
            // Inside a string: straight to the next backslash, quote or
            // non-ASCII byte.
            let plain = b[i..].iter().position(|&x| x == b'\\' || x == b'"' || x == b'\'' || x >= 0x80);
            i += plain.unwrap_or(b.len() - i);
            if i >= b.len() {
                break;
            }
            let (c, w) = char_at(i);
            i += w;
            if c == '\\' {
                if i < b.len() {
                    i += char_at(i).1;
                }
            } else if closes(q, c) {
                in_str = None;
            }
            continue;
        }
        if stack.is_empty() {
            // Prose: straight to the next bracket.
            match b[i..].iter().position(|&x| x == b'{' || x == b'[') {
                Some(p) => {
                    i += p;
                    stack.push((i, b[i] == b'{'));
                    i += 1;
                }
                None => break,
            }
            continue;
        }
        // Inside brackets: straight to the next byte that can matter.
        match b[i..].iter().position(|&x| matches!(x, b'{' | b'}' | b'[' | b']' | b'"' | b'\'' | b'/') || x >= 0x80) {
            Some(p) => i += p,
            None => break,
        }
        let (c, w) = char_at(i);
        if c == '/'
            && let Some(next) = skip_comment(b, i)
        {
            i = next;
            // A comment cut off inside a character ends at the text's end.
            while i < b.len() && !s.is_char_boundary(i) {
                i += 1;
            }
            continue;
        }
        match c {
            '{' | '[' if stack.len() >= MAX_SCAN_DEPTH => deeper += 1,
            '}' | ']' if deeper > 0 => deeper -= 1,
            '{' => {
                if let Some(top) = stack.last_mut() {
                    top.1 = true;
                }
                stack.push((i, true));
            }
            '[' => stack.push((i, false)),
            '}' | ']' => {
                if let Some((open, true)) = stack.pop() {
                    spans.push((open, i));
                    if let Some(top) = stack.last_mut() {
                        top.1 = true;
                    }
                }
            }
            q if is_quote(q) => in_str = Some(q),
            _ => {}
        }
        i += w;
    }
    spans.sort_unstable();
    let unclosed = stack.iter().find(|(i, _)| b[*i] == b'{').map(|(i, _)| *i);
    Brackets { spans, unclosed, first_open: stack.first().map(|(i, _)| *i) }
}

/// The characters that close a string opened by `open`; empty when `open`
/// opens none. LLMs quote with typographic marks of many languages, and
/// often close a mark with its twin.
fn closers(open: char) -> &'static [char] {
    match open {
        '"' => &['"', '”'],
        '\'' => &['\''],
        '“' => &['”', '“', '"'],
        '”' => &['”', '“'],
        '‘' | '’' => &['’', '‘'],
        '„' => &['“', '”', '"'],
        '‚' => &['‘', '’'],
        '«' => &['»'],
        '»' => &['«'],
        '‹' => &['›'],
        '「' => &['」'],
        '『' => &['』'],
        _ => &[],
    }
}

fn is_quote(c: char) -> bool {
    !closers(c).is_empty()
}

fn closes(open: char, c: char) -> bool {
    closers(open).contains(&c)
}

/// The character at byte offset `i` of `s` (`None` at the end).
fn at(s: &str, i: usize) -> Option<char> {
    s.get(i..).and_then(|rest| rest.chars().next())
}

/// Skips a `//` or `/* */` comment starting at byte `i`; the offset after
/// it, or `None` when no comment starts there.
fn skip_comment(b: &[u8], mut i: usize) -> Option<usize> {
    match b.get(i..i + 2) {
        Some(b"//") => {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
            Some(i)
        }
        Some(b"/*") => {
            i += 2;
            while i + 1 < b.len() && !(b[i] == b'*' && b[i + 1] == b'/') {
                i += 1;
            }
            Some((i + 2).min(b.len()))
        }
        _ => None,
    }
}

/// Reads the JSON escape at byte `i` of `text` (just after a backslash):
/// the characters it stands for and the offset after it. `\uXXXX` pairs
/// of surrogates make one character; an escape JSON does not know stands
/// for the character itself (`\'` is `'`).
fn unescape(text: &str, i: usize) -> (Option<char>, usize) {
    let hex = |at: usize| {
        text.get(at..at + 4)
            .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|h| u32::from_str_radix(h, 16).ok())
    };
    match at(text, i) {
        None => (None, i),
        Some('n') => (Some('\n'), i + 1),
        Some('t') => (Some('\t'), i + 1),
        Some('r') => (Some('\r'), i + 1),
        Some('b') => (Some('\u{8}'), i + 1),
        Some('f') => (Some('\u{c}'), i + 1),
        Some('u') => match hex(i + 1) {
            Some(hi @ 0xD800..=0xDBFF) => match (text.get(i + 5..i + 7), hex(i + 7)) {
                (Some("\\u"), Some(lo @ 0xDC00..=0xDFFF)) => {
                    (char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)), i + 11)
                }
                _ => (Some('\u{fffd}'), i + 5),
            },
            Some(code) => (Some(char::from_u32(code).unwrap_or('\u{fffd}')), i + 5),
            None => (Some('u'), i + 1),
        },
        Some(other) => (Some(other), i + other.len_utf8()),
    }
}

/// Rewrites JSON-ish text as strict JSON: quotes of any kind become double
/// quotes (their escapes decoded as JSON's), bare keys and words are
/// quoted, Python and JS literals become JSON ones, comments and trailing
/// commas go, and any Unicode space becomes a plain one. Linear.
pub fn repair(text: &str) -> String {
    repair_noted(text, &mut TextNotes::default())
}

/// [`repair`], noting each kind of change it makes in `notes`.
pub(super) fn repair_noted(text: &str, notes: &mut TextNotes) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len() + text.len() / 4 + 16);
    let next_significant = |mut j: usize| -> Option<char> {
        loop {
            let c = at(text, j)?;
            if is_space(c) {
                j += c.len_utf8();
            } else if let Some(next) = skip_comment(b, j) {
                j = next;
            } else {
                return Some(c);
            }
        }
    };
    let mut i = 0;
    while i < b.len() {
        let c = if b[i] < 0x80 { char::from(b[i]) } else { at(text, i).unwrap_or(' ') };
        if is_space(c) {
            out.push(if c.is_ascii() { c } else { ' ' });
            i += c.len_utf8();
        } else if c == '/'
            && let Some(next) = skip_comment(b, i)
        {
            notes.note(RepairKind::CommentRemoved, i);
            i = next;
        } else if is_quote(c) {
            if c != '"' {
                notes.note(RepairKind::SingleQuotes, i);
            }
            i += c.len_utf8();
            out.push('"');
            loop {
                // Plain runs are copied whole; quotes, backslashes and
                // control characters one by one.
                let start = i;
                while let Some(d) = at(text, i) {
                    if closes(c, d) || d == '\\' || d == '"' || u32::from(d) < 0x20 {
                        break;
                    }
                    i += d.len_utf8();
                }
                out.push_str(&text[start..i]);
                match at(text, i) {
                    None => break,
                    Some(d) if closes(c, d) => {
                        i += d.len_utf8();
                        break;
                    }
                    Some('\\') => {
                        if !matches!(at(text, i + 1), Some('n' | 't' | 'r' | 'b' | 'f' | 'u' | '"' | '\\' | '/')) {
                            notes.note(RepairKind::EscapeDecoded, i);
                        }
                        let (decoded, next) = unescape(text, i + 1);
                        if let Some(e) = decoded {
                            push_escaped(&mut out, e);
                        }
                        i = next.max(i + 1);
                    }
                    Some(d) => {
                        if u32::from(d) < 0x20 {
                            notes.note(RepairKind::EscapeDecoded, i);
                        }
                        push_escaped(&mut out, d);
                        i += d.len_utf8();
                    }
                }
            }
            out.push('"');
        } else if c == ',' {
            if matches!(next_significant(i + 1), Some('}') | Some(']') | None) {
                notes.note(RepairKind::TrailingComma, i);
            } else {
                out.push(',');
            }
            i += 1;
        } else if matches!(c, '{' | '}' | '[' | ']' | ':') {
            out.push(c);
            i += 1;
        } else if c.is_ascii_digit() || c == '-' || c == '+' || c == '.' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'.' | b'-' | b'+' | b'_')) {
                i += 1;
            }
            let token = &text[start..i];
            let t = token.trim_start_matches('+');
            if t.contains('_') {
                let t = t.replace('_', "");
                if serde_json::from_str::<Number>(&t).is_ok() {
                    notes.note(RepairKind::SeparatorRemoved, start);
                    out.push_str(&t);
                } else {
                    notes.note(RepairKind::Coerced, start);
                    push_quoted(&mut out, token);
                }
            } else if serde_json::from_str::<Number>(t).is_ok() {
                if t.len() != token.len() {
                    notes.note(RepairKind::Coerced, start);
                }
                out.push_str(t);
            } else {
                notes.note(RepairKind::Coerced, start);
                push_quoted(&mut out, token);
            }
        } else if c.is_alphabetic() || c == '_' || c == '$' {
            let start = i;
            loop {
                // ASCII bytes at once; other characters decoded.
                while i < b.len() && (b[i].is_ascii_alphanumeric() || matches!(b[i], b'_' | b'$' | b'-' | b'.')) {
                    i += 1;
                }
                match at(text, i) {
                    Some(d) if !d.is_ascii() && d.is_alphanumeric() => i += d.len_utf8(),
                    _ => break,
                }
            }
            let word = &text[start..i];
            // A literal word becomes JSON's, unless it is a key (looked
            // ahead for only then).
            let literal = match word {
                "True" | "true" => Some("true"),
                "False" | "false" => Some("false"),
                "None" | "null" | "NULL" | "undefined" | "NaN" | "Infinity" => Some("null"),
                _ => None,
            };
            let key = next_significant(i) == Some(':');
            match literal {
                Some(l) if !key => {
                    if l != word {
                        notes.note(if l == "null" { RepairKind::NullWord } else { RepairKind::Coerced }, start);
                    }
                    out.push_str(l);
                }
                _ => {
                    notes.note(if key { RepairKind::UnquotedKey } else { RepairKind::Coerced }, start);
                    push_quoted(&mut out, word);
                }
            }
        } else {
            i += c.len_utf8();
        }
    }
    out
}

/// Appends `c` as it is written inside a JSON string.
fn push_escaped(out: &mut String, c: char) {
    match c {
        '"' => out.push_str("\\\""),
        '\\' => out.push_str("\\\\"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if u32::from(c) < 0x20 => {
            use std::fmt::Write;
            let _ = write!(out, "\\u{:04x}", u32::from(c));
        }
        c => out.push(c),
    }
}

fn push_quoted(out: &mut String, s: &str) {
    out.push('"');
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push_str(s);
    } else {
        s.chars().for_each(|c| push_escaped(out, c));
    }
    out.push('"');
}

/// Closes what a cut-off object left open, keeping only what was whole: a
/// member whose key, string or number the cut went through (it might have
/// gone on) is dropped, then the open brackets are closed; with the
/// repairs that took. A number followed by white space before the end was
/// whole. Linear.
fn complete_truncated_noted(text: &str) -> (String, Vec<Repair>) {
    struct Level {
        close: char,
        /// Where the member being read began: just after the bracket, or
        /// at its comma (dropping a member cuts there).
        member: usize,
        /// An object's member has passed its colon.
        colon: bool,
    }
    let mut stack: Vec<Level> = Vec::new();
    let mut in_str: Option<char> = None;
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if let Some(q) = in_str {
            if c == '\\' {
                chars.next();
            } else if closes(q, c) {
                in_str = None;
            }
            continue;
        }
        match c {
            // Deeper than the parser goes: nothing of it can be read.
            '{' | '[' if stack.len() >= MAX_DEPTH => return (String::new(), Vec::new()),
            '{' => stack.push(Level { close: '}', member: i + 1, colon: false }),
            '[' => stack.push(Level { close: ']', member: i + 1, colon: true }),
            '}' | ']' => {
                stack.pop();
            }
            ',' => {
                if let Some(l) = stack.last_mut() {
                    l.member = i;
                    l.colon = l.close == ']';
                }
            }
            ':' => {
                if let Some(l) = stack.last_mut() {
                    l.colon = true;
                }
            }
            q if is_quote(q) => in_str = Some(q),
            _ => {}
        }
    }
    let Some(top) = stack.last() else { return (text.to_string(), Vec::new()) };
    // Is the member the cut went through whole?
    let tail = text[top.member..].trim_matches(|c: char| is_space(c) || c == ',');
    let value = if top.close == '}' { tail.split_once(':').map(|(_, v)| v.trim_matches(is_space)) } else { Some(tail) };
    let whole = in_str.is_none()
        && top.colon
        && match value {
            None | Some("") => tail.is_empty(),
            Some(v) => {
                let last = v.chars().last().unwrap_or(' ');
                matches!(last, '}' | ']')
                    || (is_quote(last) && v.chars().count() >= 2)
                    || matches!(v, "true" | "false" | "null" | "True" | "False" | "None")
                    // White space after a number ended it.
                    || (text.ends_with(is_space) && serde_json::from_str::<Number>(v.trim_start_matches('+')).is_ok())
            }
        };
    let mut repairs = Vec::new();
    if !whole {
        // The member's key, when the cut left one.
        let key = if top.close == '}' { tail.split_once(':').map(|(k, _)| k) } else { None };
        let key = key.map(|k| k.trim_matches(|c: char| is_space(c) || is_quote(c)).to_string());
        let path = key.filter(|k| !k.is_empty()).unwrap_or_else(|| "$".into());
        if !tail.is_empty() {
            repairs.push(Repair::new(
                path,
                RepairKind::DroppedTruncatedValue,
                "the end of the output cut through this member; it is dropped, not shortened",
            ));
        }
    }
    repairs.push(Repair::new(
        "$",
        RepairKind::ClosedTruncated,
        format!("{} bracket(s) the end of the output left open were closed", stack.len()),
    ));
    let mut out = if whole { text.trim_end_matches(is_space).to_string() } else { text[..top.member].to_string() };
    while out.ends_with(|c: char| is_space(c) || c == ',') {
        out.pop();
    }
    while let Some(l) = stack.pop() {
        out.push(l.close);
    }
    (out, repairs)
}
