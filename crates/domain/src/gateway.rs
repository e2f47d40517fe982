//! The LLM validation gateway as pure functions, embeddable without HTTP:
//! [`extract`] one JSON object from raw model output, [`validate`] it
//! against a contract (coercion, masking of sensitive fields, dropping
//! unknown fields, the failure report), and list safety findings.
//!
//! Extraction tries strict JSON first. Otherwise one pass over the text
//! finds its balanced `{…}` (and `[…]`) spans, which covers prose around
//! the object, fenced code blocks and XML-like tags, and each is repaired
//! the ways LLM output breaks: trailing commas, single, smart or foreign
//! quotes, unquoted keys, comments, Python literals (`True`, `None`),
//! Unicode spaces, and a final object cut off before its closing braces.
//! Of several candidates the one that fits the contract best wins. The
//! work is linear in the input and bounded (see `docs/gateway.md`).

pub mod extract;
pub mod repair;
pub mod scan;
pub mod service;
mod text;
pub mod validate;

pub use extract::{Extraction, MAX_CANDIDATES, extract, extract_noted, extraction_work, repair, work_bound};
pub use repair::{Repair, RepairKind};
pub use scan::Finding;
pub use validate::{Outcome, TypeMismatch, retry_prompt, type_name, validate, validate_noted};

pub use crate::catalog::contract::{ContractField, SENSITIVE};
#[cfg(test)]
use serde_json::{Map, Value};

/// The whole pipeline on one payload: the best-fitting object of `raw`
/// coerced, masked and checked against `contract`; `None` when `raw` holds
/// no JSON object.
pub fn check(raw: &str, contract: &[ContractField]) -> Option<Outcome> {
    extract_noted(raw, contract).map(|e| validate_noted(&e.object, contract, e.repairs))
}

#[cfg(test)]
mod tests;
