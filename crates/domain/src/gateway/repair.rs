//! The repair record: every change the gateway made between the raw text
//! and its answer, in order, each of a kind from a closed list
//! (`docs/gateway.md`). A sensitive field's value never appears in one.

use serde::{Deserialize, Serialize};

/// What kind of change a repair made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RepairKind {
    /// The object was taken out of prose or a code fence around it.
    Extracted,
    /// Of several candidate objects, this one was taken.
    CandidateChosen,
    /// Brackets the end of the output left open were closed.
    ClosedTruncated,
    /// A value the end of the output cut through was dropped.
    DroppedTruncatedValue,
    /// Strings quoted with single, typographic or foreign marks.
    SingleQuotes,
    /// Keys (or bare words) without quotes were quoted.
    UnquotedKey,
    /// Commas before a closing bracket were dropped.
    TrailingComma,
    /// `//` and `/* */` comments were dropped.
    CommentRemoved,
    /// An escape JSON does not know, or a raw control character, in a
    /// string was decoded.
    EscapeDecoded,
    /// A key was repeated; the last value was kept.
    DuplicateKey,
    /// A key was matched to a field after folding case and separators.
    KeyFolded,
    /// A word standing for "no value" was read as null.
    NullWord,
    /// A value was converted to the field's type.
    Coerced,
    /// A currency or unit around a number was dropped.
    UnitStripped,
    /// Thousands separators inside a number were dropped.
    SeparatorRemoved,
    /// A fraction was rounded for an integer field.
    Rounded,
    /// A field the contract does not name was dropped.
    UnknownFieldDropped,
    /// A sensitive field was masked.
    Masked,
}

impl RepairKind {
    pub const ALL: [RepairKind; 18] = [
        RepairKind::Extracted,
        RepairKind::CandidateChosen,
        RepairKind::ClosedTruncated,
        RepairKind::DroppedTruncatedValue,
        RepairKind::SingleQuotes,
        RepairKind::UnquotedKey,
        RepairKind::TrailingComma,
        RepairKind::CommentRemoved,
        RepairKind::EscapeDecoded,
        RepairKind::DuplicateKey,
        RepairKind::KeyFolded,
        RepairKind::NullWord,
        RepairKind::Coerced,
        RepairKind::UnitStripped,
        RepairKind::SeparatorRemoved,
        RepairKind::Rounded,
        RepairKind::UnknownFieldDropped,
        RepairKind::Masked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RepairKind::Extracted => "extracted",
            RepairKind::CandidateChosen => "candidate_chosen",
            RepairKind::ClosedTruncated => "closed_truncated",
            RepairKind::DroppedTruncatedValue => "dropped_truncated_value",
            RepairKind::SingleQuotes => "single_quotes",
            RepairKind::UnquotedKey => "unquoted_key",
            RepairKind::TrailingComma => "trailing_comma",
            RepairKind::CommentRemoved => "comment_removed",
            RepairKind::EscapeDecoded => "escape_decoded",
            RepairKind::DuplicateKey => "duplicate_key",
            RepairKind::KeyFolded => "key_folded",
            RepairKind::NullWord => "null_word",
            RepairKind::Coerced => "coerced",
            RepairKind::UnitStripped => "unit_stripped",
            RepairKind::SeparatorRemoved => "separator_removed",
            RepairKind::Rounded => "rounded",
            RepairKind::UnknownFieldDropped => "unknown_field_dropped",
            RepairKind::Masked => "masked",
        }
    }
}

/// One change: where (`path`, dotted, `$` for the whole text), what kind,
/// and what exactly, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Repair {
    pub path: String,
    pub kind: RepairKind,
    pub detail: String,
}

impl Repair {
    pub fn new(path: impl Into<String>, kind: RepairKind, detail: impl Into<String>) -> Self {
        Repair { path: path.into(), kind, detail: detail.into() }
    }
}

/// The text-level repairs of one candidate, counted by kind with the byte
/// offset of the first (a text repaired in many places is one entry a
/// kind, not one a quote).
#[derive(Debug, Clone, Default)]
pub(super) struct TextNotes {
    seen: Vec<(RepairKind, usize, usize)>,
}

impl TextNotes {
    pub(super) fn note(&mut self, kind: RepairKind, at: usize) {
        match self.seen.iter_mut().find(|(k, _, _)| *k == kind) {
            Some((_, n, _)) => *n += 1,
            None => self.seen.push((kind, 1, at)),
        }
    }

    /// The notes as repairs, offsets counted from `base` in the raw text.
    pub(super) fn into_repairs(self, base: usize) -> Vec<Repair> {
        self.seen
            .into_iter()
            .map(|(kind, n, at)| {
                let what = match kind {
                    RepairKind::SingleQuotes => "strings quoted with marks other than \"",
                    RepairKind::UnquotedKey => "keys or bare words quoted",
                    RepairKind::TrailingComma => "trailing commas dropped",
                    RepairKind::CommentRemoved => "comments dropped",
                    RepairKind::EscapeDecoded => "escapes or control characters in strings decoded",
                    RepairKind::NullWord => "words read as null (None, undefined, NaN)",
                    RepairKind::Coerced => "words read as JSON literals or strings (True, False, bare values)",
                    RepairKind::SeparatorRemoved => "digit separators in numbers dropped",
                    _ => "changes",
                };
                Repair::new("$", kind, format!("{n} {what}, the first at byte {}", base + at))
            })
            .collect()
    }
}
