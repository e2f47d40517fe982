//! Safety findings in fields not tagged sensitive: secrets, e-mail
//! addresses, card numbers, prompt-injection phrases.

use super::ContractField;
use super::text::dotted;
use serde::Serialize;
use serde_json::{Map, Value};

/// A safety finding in a field that is not tagged sensitive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    pub field: String,
    /// `secret`, `email`, `card_number` or `prompt_injection`.
    pub kind: String,
    pub detail: String,
}

/// What the scan looks for, as one set: a string is searched once for all
/// of them.
struct Patterns {
    set: regex::RegexSet,
    /// `(kind, detail)` of each pattern of `set`, in its order.
    meta: Vec<(&'static str, &'static str)>,
}

fn patterns() -> &'static Patterns {
    static P: std::sync::OnceLock<Patterns> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let table: [(&str, &str, &str); 8] = [
            (r"\bsk-[A-Za-z0-9_-]{20,}", "secret", "an OpenAI-style API key"),
            (r"\bAKIA[0-9A-Z]{16}\b", "secret", "an AWS access key id"),
            (r"\bgh[pousr]_[A-Za-z0-9]{36,}\b", "secret", "a GitHub token"),
            (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "secret", "a Slack token"),
            (r"\bslk_[A-Za-z0-9]{32,}\b", "secret", "a Sluice API key"),
            (r"-----BEGIN [A-Z ]*PRIVATE KEY-----", "secret", "a private key"),
            (r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}", "email", "an e-mail address"),
            (
                r"(?i)\b(ignore|disregard|forget)\s+(all\s+|the\s+|any\s+)?(previous|prior|above)\s+(instructions|prompts?|messages?)|\bsystem prompt\b|\byou are now\b|\bjailbreak\b",
                "prompt_injection",
                "a prompt-injection phrase",
            ),
        ];
        Patterns {
            set: regex::RegexSet::new(table.iter().map(|(p, _, _)| *p)).expect("valid patterns"),
            meta: table.iter().map(|(_, k, d)| (*k, *d)).collect(),
        }
    })
}

fn luhn(digits: &[u32]) -> bool {
    let sum: u32 = digits
        .iter()
        .rev()
        .enumerate()
        .map(|(i, d)| {
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 { x - 9 } else { x }
            } else {
                *d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// Card-number-like runs of 13–19 digits (spaces and dashes allowed) that
/// pass the Luhn check.
fn card_numbers(s: &str) -> bool {
    if s.bytes().filter(u8::is_ascii_digit).count() < 13 {
        return false;
    }
    let re = {
        static R: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
        R.get_or_init(|| regex::Regex::new(r"\b\d(?:[ -]?\d){12,18}\b").expect("a valid pattern"))
    };
    re.find_iter(s).any(|m| {
        let digits: Vec<u32> = m.as_str().chars().filter_map(|c| c.to_digit(10)).collect();
        (13..=19).contains(&digits.len()) && luhn(&digits)
    })
}

pub(super) fn scan(data: &Map<String, Value>, fields: &[ContractField], prefix: &str, out: &mut Vec<Finding>) {
    for f in fields {
        if f.sensitive() {
            continue;
        }
        let path = || dotted(prefix, &f.name);
        match data.get(&f.name) {
            Some(Value::Object(inner)) if !f.fields.is_empty() => scan(inner, &f.fields, &path(), out),
            Some(Value::String(s)) => {
                let p = patterns();
                let hits = p.set.matches(s);
                let card = card_numbers(s);
                if !hits.matched_any() && !card {
                    continue;
                }
                let path = path();
                for (kind, detail) in hits.into_iter().map(|i| p.meta[i]) {
                    if !out.iter().any(|x| x.field == path && x.kind == kind) {
                        out.push(Finding { field: path.clone(), kind: kind.into(), detail: detail.into() });
                    }
                }
                if card {
                    out.push(Finding {
                        field: path.clone(),
                        kind: "card_number".into(),
                        detail: "a Luhn-valid card number".into(),
                    });
                }
            }
            _ => {}
        }
    }
}
