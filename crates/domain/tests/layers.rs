//! The shape of the workspace, read from its sources, so that a new
//! import that breaks it fails the build's tests:
//! - the domain's contexts call downward only: a file of a context names
//!   (`crate::<context>`) only its own context and those below it, gateway
//!   and iac not each other, and only `app` (the facade) names them all;
//! - the API and the console reach the store and the connectors only
//!   through the domain;
//! - no two modules of any crate import each other (at any depth: sibling
//!   files of a folder, or the top-level modules of a crate).

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

/// The workspace's `crates/` folder.
fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("crates/").to_path_buf()
}

/// A source without its comments and its test module (a test may reach
/// into a sibling's test helpers).
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module path of a source file below `src` (`sync/run.rs` →
/// `[sync, run]`; `lib.rs`, `main.rs` and `mod.rs` name their folder).
fn module_of(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("inside src").with_extension("");
    let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("lib" | "main" | "mod")) {
        parts.pop();
    }
    parts
}

/// The module paths `code` names from module `me`: `crate::a::b…` and
/// `super::a…` (resolved against `me`).
fn references(me: &[String], code: &str) -> Vec<Vec<String>> {
    let path_after = |rest: &str| -> Vec<String> {
        let mut out = Vec::new();
        let mut rest = rest;
        while let Some(r) = rest.strip_prefix("::") {
            let name: String =
                r.chars().take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_').collect();
            if name.is_empty() {
                break;
            }
            rest = &r[name.len()..];
            out.push(name);
        }
        out
    };
    let mut out = Vec::new();
    for (word, base) in [("crate", Vec::new()), ("super", me[..me.len().saturating_sub(1)].to_vec())] {
        for (i, _) in code.match_indices(word) {
            let before = code[..i].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
                continue;
            }
            let named = path_after(&code[i + word.len()..]);
            if !named.is_empty() {
                out.push([base.clone(), named].concat());
            }
        }
    }
    out
}

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let mut problems = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(crates_dir()).expect("crates/ is readable") {
        let src = entry.expect("an entry").path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        let mut files = Vec::new();
        sources(&src, &mut files);
        // Module → the sibling modules it names, at the depth where they part.
        let mut edges: std::collections::BTreeSet<(String, String)> = Default::default();
        for file in &files {
            let me = module_of(&src, file);
            let code = code_of(&std::fs::read_to_string(file).expect("readable"));
            for other in references(&me, &code) {
                let shared = me.iter().zip(&other).take_while(|(a, b)| a == b).count();
                if shared < me.len() && shared < other.len() {
                    edges.insert((me[..=shared].join("::"), other[..=shared].join("::")));
                }
            }
        }
        for (a, b) in &edges {
            if a < b && edges.contains(&(b.clone(), a.clone())) {
                problems.push(format!("{}: {a} and {b} import each other", src.display()));
            }
        }
    }
    assert!(problems.is_empty(), "modules import each other:\n{}", problems.join("\n"));
    assert!(crates >= 8, "the crates were found");
}

#[test]
fn the_api_and_the_console_reach_the_store_only_through_the_domain() {
    let banned = ["sluice-store", "sluice-connectors", "sluice-migrations", "sea-orm", "sqlx"];
    let mut problems = Vec::new();
    for adapter in ["http", "console"] {
        let dir = crates_dir().join(adapter);
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).expect("a manifest");
        let dependencies =
            manifest.split("[dependencies]").nth(1).expect("dependencies").split("\n[").next().unwrap_or("");
        for line in dependencies.lines() {
            let name = line.split(['=', '.']).next().unwrap_or("").trim();
            if banned.contains(&name) {
                problems.push(format!("{adapter} depends on {name}"));
            }
        }
        let mut files = Vec::new();
        sources(&dir.join("src"), &mut files);
        for file in &files {
            let code = code_of(&std::fs::read_to_string(file).expect("readable"));
            for name in banned {
                if code.contains(&format!("{}::", name.replace('-', "_"))) {
                    problems.push(format!("{} names {name}", file.display()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "an adapter reaches past the domain:\n{}", problems.join("\n"));
}
