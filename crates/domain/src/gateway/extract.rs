//! Extraction: the one JSON object of raw model output, linear in the
//! input (one bracket scan, bounded tries), repaired the ways LLM output
//! breaks, the best fit for the contract among candidates.

use super::ContractField;
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

/// The JSON object in `raw`, if any: of several candidates the one that
/// fits `contract` best (fewest missing required fields, then fewest type
/// mismatches), the first among equals.
///
/// Linear in the input: one pass finds every bracketed span and its end,
/// and the spans tried are bounded in number and in total length.
pub fn extract(raw: &str, contract: &[ContractField]) -> Option<Map<String, Value>> {
    let mut found = candidates(raw);
    if found.len() <= 1 {
        // Nothing to choose between: no need to weigh it.
        return found.pop();
    }
    let mut best: Option<((usize, usize), Map<String, Value>)> = None;
    for c in found {
        let fit = fit(&c, contract);
        if best.as_ref().is_none_or(|(b, _)| fit < *b) {
            best = Some((fit, c));
        }
    }
    best.map(|(_, o)| o)
}

/// How badly `obj` fits the contract: (missing required fields, type
/// mismatches).
fn fit(obj: &Map<String, Value>, contract: &[ContractField]) -> (usize, usize) {
    if contract.is_empty() {
        return (0, 0);
    }
    let mut w = Walk { missing: Vec::new(), mismatches: Vec::new(), governance: Vec::new() };
    walk(obj, contract, "", &mut w);
    (w.missing.len(), w.mismatches.len())
}

/// The bytes the extraction of `raw` reads, all passes counted (the strict
/// parse, the bracket scan, each candidate tried): at most
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
fn candidates(raw: &str) -> Vec<Map<String, Value>> {
    candidates_with(raw, &mut 0)
}

fn candidates_with(raw: &str, spent: &mut usize) -> Vec<Map<String, Value>> {
    let trimmed = raw.trim_matches(is_space);
    *spent += raw.len();
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        let found = objects_of(v);
        if !found.is_empty() {
            return found;
        }
    }
    *spent += raw.len();
    let scan = scan_brackets(raw);
    let start_budget = WORK_PER_BYTE * raw.len() + 64 * 1024;
    let mut budget = start_budget;
    let mut out = Vec::new();
    // An object cut off by the end of the output (closed, whole values
    // only) holds every span after its start: those are its values, tried
    // on their own only when it does not parse.
    let cut = scan.unclosed.unwrap_or(raw.len());
    let mut covered = 0;
    let mut tried = 0;
    let mut try_span = |start: usize, end: usize, out: &mut Vec<Map<String, Value>>, budget: &mut usize| {
        if start < covered || out.len() >= MAX_CANDIDATES || tried >= MAX_ATTEMPTS {
            return;
        }
        let len = end + 1 - start;
        if len > *budget {
            return;
        }
        *budget -= len;
        tried += 1;
        let found = lenient(&raw[start..=end]);
        if !found.is_empty() {
            out.extend(found);
            covered = end + 1;
        }
    };
    for &(start, end) in scan.spans.iter().filter(|(start, _)| *start < cut) {
        try_span(start, end, &mut out, &mut budget);
    }
    // The object cut off by the end comes in its place (it encloses the
    // spans after it); those spans are candidates too, and the fit decides
    // (the enclosing object first on a tie). A cut that leaves nothing
    // whole (`{x` in prose before the answer) makes no candidate.
    if let Some(start) = scan.unclosed
        && raw.len() - start <= budget
    {
        budget -= raw.len() - start;
        out.extend(lenient(&complete_truncated(&raw[start..])).into_iter().filter(|o| !o.is_empty()));
    }
    for &(start, end) in scan.spans.iter().filter(|(start, _)| *start > cut) {
        try_span(start, end, &mut out, &mut budget);
    }
    out.truncate(MAX_CANDIDATES);
    *spent += start_budget - budget;
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

fn lenient(text: &str) -> Vec<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(v) => objects_of(v),
        // Nested deeper than the parser goes (128 levels): a repair keeps
        // the nesting, so it would fail the same way.
        Err(e) if e.to_string().starts_with("recursion limit exceeded") => Vec::new(),
        Err(_) => serde_json::from_str::<Value>(&repair(text)).map(objects_of).unwrap_or_default(),
    }
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
    Brackets { spans, unclosed }
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

/// Whitespace between tokens: Unicode's, plus the zero-width space and
/// byte-order mark models leave in.
pub(super) fn is_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{200b}' || c == '\u{feff}'
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
            i = next;
        } else if is_quote(c) {
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
                        let (decoded, next) = unescape(text, i + 1);
                        if let Some(e) = decoded {
                            push_escaped(&mut out, e);
                        }
                        i = next.max(i + 1);
                    }
                    Some(d) => {
                        push_escaped(&mut out, d);
                        i += d.len_utf8();
                    }
                }
            }
            out.push('"');
        } else if c == ',' {
            if !matches!(next_significant(i + 1), Some('}') | Some(']') | None) {
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
                    out.push_str(&t);
                } else {
                    push_quoted(&mut out, token);
                }
            } else if serde_json::from_str::<Number>(t).is_ok() {
                out.push_str(t);
            } else {
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
            match literal {
                Some(l) if next_significant(i) != Some(':') => out.push_str(l),
                _ => push_quoted(&mut out, word),
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
/// gone on) is dropped, then the open brackets are closed. Linear.
fn complete_truncated(text: &str) -> String {
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
            '{' | '[' if stack.len() >= MAX_DEPTH => return String::new(),
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
    let Some(top) = stack.last() else { return text.to_string() };
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
            }
        };
    let mut out = if whole { text.trim_end_matches(is_space).to_string() } else { text[..top.member].to_string() };
    while out.ends_with(|c: char| is_space(c) || c == ',') {
        out.pop();
    }
    while let Some(l) = stack.pop() {
        out.push(l.close);
    }
    out
}
