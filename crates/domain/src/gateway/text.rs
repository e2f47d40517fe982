//! What the gateway's readers share about text: the whitespace between
//! tokens and a field's dotted path.

/// Whitespace between tokens: Unicode's, plus the zero-width space and
/// byte-order mark models leave in.
pub(super) fn is_space(c: char) -> bool {
    c.is_whitespace() || c == '\u{200b}' || c == '\u{feff}'
}

/// A field's dotted path below `prefix` (the field's name at the top).
pub(super) fn dotted(prefix: &str, name: &str) -> String {
    if prefix.is_empty() { name.to_string() } else { format!("{prefix}.{name}") }
}
