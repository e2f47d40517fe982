//! The domain's contexts call downward only: a file of a context names
//! (`crate::<context>`) only its own context and those below it, gateway
//! and iac not each other, and only `app` (the facade) names them all.
//! This reads the sources, so a new upward import fails the build's tests.

use std::path::{Path, PathBuf};

/// Lowest first; a context may use any context before it.
const ORDER: &[&str] = &["shared", "identity", "monitoring", "billing", "connect", "sync", "catalog", "gateway", "iac"];

fn rank(context: &str) -> Option<usize> {
    match context {
        // gateway and iac stand side by side.
        "iac" => Some(7),
        "app" => Some(ORDER.len()),
        c => ORDER.iter().position(|x| *x == c),
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src is readable") {
        let path = entry.expect("an entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The contexts a source file names through `crate::`.
fn named(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in text.match_indices("crate::") {
        // `sluice_domain::` in doc examples and `$crate::` in macros are not ours.
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
        if !name.is_empty() && !out.contains(&name) {
            out.push(name);
        }
    }
    out
}

#[test]
fn contexts_call_downward_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut problems = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&src).expect("inside src");
        let first = rel.components().next().expect("a component").as_os_str().to_string_lossy().into_owned();
        let context = first.trim_end_matches(".rs").to_string();
        if context == "lib" {
            continue;
        }
        let Some(mine) = rank(&context) else {
            problems.push(format!("{}: not in a context folder", rel.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("readable");
        for other in named(&text) {
            if other == context {
                continue;
            }
            match rank(&other) {
                // `crate::Error`, `crate::Result`, … are re-exports of shared.
                None if other.is_empty() => {}
                None => problems.push(format!("{}: names crate::{other}, which is no context", rel.display())),
                Some(theirs) if theirs > mine || (theirs == mine && other != context) => {
                    problems.push(format!("{} ({context}) calls up into {other}", rel.display()))
                }
                Some(_) => {}
            }
        }
        if context != "app" && text.contains("impl Sluice") {
            problems.push(format!("{}: only app.rs implements Sluice", rel.display()));
        }
    }
    assert!(problems.is_empty(), "the layering is broken:\n{}", problems.join("\n"));
    assert!(files.len() > 20, "the sources were found");
}
