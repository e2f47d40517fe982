//! The shape of the workspace, read from its sources, so that a new
//! import that breaks it fails the build's tests:
//! - the domain's contexts call downward only: a file of a context names
//!   (`crate::<context>`) only its own context and those below it, gateway
//!   and iac not each other, and only `app` (the facade) names them all;
//! - the API and the console reach the store and the connectors only
//!   through the domain;
//! - no modules of any crate import each other in a circle of any length
//!   (at any depth: sibling files of a folder, or the top-level modules of
//!   a crate), found as the strongly connected components of the imports;
//! - no production file of the domain is over 800 lines unless its module
//!   doc says why (`//! Long file: …`).

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

/// The circles of a directed graph: its strongly connected components of
/// more than one node (Tarjan's algorithm), each in name order.
fn circles(edges: &std::collections::BTreeSet<(String, String)>) -> Vec<Vec<String>> {
    use std::collections::BTreeMap;
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges {
        next.entry(a).or_default().push(b);
        next.entry(b).or_default();
    }
    struct Walk<'a> {
        next: &'a BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: std::collections::BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for &w in &self.next[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on_stack.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.out.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        next: &next,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: Default::default(),
        out: Vec::new(),
    };
    for &v in next.keys() {
        if !walk.index.contains_key(v) {
            walk.visit(v);
        }
    }
    walk.out
}

#[test]
fn circles_of_any_length_are_found() {
    let edges = |pairs: &[(&str, &str)]| pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
    assert!(circles(&edges(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    assert_eq!(circles(&edges(&[("a", "b"), ("b", "a")])), [["a", "b"]]);
    assert_eq!(circles(&edges(&[("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")])), [["a", "b", "c"]]);
    let two = circles(&edges(&[("a", "b"), ("b", "a"), ("x", "y"), ("y", "z"), ("z", "x"), ("b", "x")]));
    assert_eq!(two.len(), 2, "{two:?}");
}

/// Module → the sibling modules it names, at the depth where they part, of
/// the crate whose sources are in `src`.
fn sibling_imports(src: &Path) -> std::collections::BTreeSet<(String, String)> {
    let mut files = Vec::new();
    sources(src, &mut files);
    let mut edges = std::collections::BTreeSet::new();
    for file in &files {
        let me = module_of(src, file);
        let code = code_of(&std::fs::read_to_string(file).expect("readable"));
        for other in references(&me, &code) {
            let shared = me.iter().zip(&other).take_while(|(a, b)| a == b).count();
            if shared < me.len() && shared < other.len() {
                edges.insert((me[..=shared].join("::"), other[..=shared].join("::")));
            }
        }
    }
    edges
}

#[test]
fn no_modules_of_a_crate_import_each_other_in_a_circle() {
    let mut problems = Vec::new();
    let mut crates = 0;
    for entry in std::fs::read_dir(crates_dir()).expect("crates/ is readable") {
        let src = entry.expect("an entry").path().join("src");
        if !src.is_dir() {
            continue;
        }
        crates += 1;
        for circle in circles(&sibling_imports(&src)) {
            problems.push(format!("{}: {} import each other in a circle", src.display(), circle.join(", ")));
        }
    }
    assert!(problems.is_empty(), "modules import each other:\n{}", problems.join("\n"));
    assert!(crates >= 8, "the crates were found");
}

/// A file of the domain longer than this (its tests left out) says why in
/// its module doc, in a line that begins `//! Long file:`.
const LONGEST_FILE: usize = 800;

#[test]
fn domain_files_are_short_or_say_why() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let mut problems = Vec::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("readable");
        let code = match text.find("#[cfg(test)]\nmod tests") {
            Some(i) => &text[..i],
            None => &text,
        };
        let lines = code.lines().count();
        let said = text.lines().take_while(|l| l.starts_with("//!")).any(|l| l.starts_with("//! Long file:"));
        if lines > LONGEST_FILE && !said {
            problems.push(format!("{}: {lines} lines", file.strip_prefix(&src).expect("inside").display()));
        }
    }
    assert!(problems.is_empty(), "files over {LONGEST_FILE} lines without a reason:\n{}", problems.join("\n"));
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
