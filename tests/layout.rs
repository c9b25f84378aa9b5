//! The layout rule: no import circle between the parts of a scope (issue 19).
//!
//! A *scope* is a folder whose parts should form layers: for `src/`, its folders and top-level
//! files (`executor/`, `drom/`, `cpuset.rs`, ...); for `doca-soft/src/rdma/`, its files. A part
//! *imports* another when one of its files names it through a path that starts with `crate::`,
//! `super::` or `self::` (resolved to the module it means), including every first segment of a
//! group (`use crate::{a, b::c}` names `a` and `b`). A name that the scope's root file
//! (`lib.rs` / `mod.rs`) re-exports from a child (`pub use cpuset::CpuSet;`) counts as that
//! child, so `crate::CpuSet` is an import of `cpuset`. The root file's wiring is not an
//! import: its `mod child;` declarations and its re-exports (`pub use ...;`, at any visibility,
//! also inside its inline modules) only give children's items another name. Comments, doc comments, string
//! literals and `#[cfg(test)]` code (inline items and test-only files such as `tests.rs` and
//! `testkit`) do not count: tests may reach across layers.
//!
//! When parts import each other (directly or around a longer loop), the test fails with the
//! loop and, for each step of it, the files and lines that make it.
//!
//! Only std: the sources are scanned with a small hand-written lexer (comments, strings, char
//! literals, raw strings), which is all that finding paths needs.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------
// The scopes

/// The folders and top-level files of the runtime's `src/` import each other in one
/// direction only (the picture in docs/ARCHITECTURE.md).
#[test]
fn src_folders_have_no_import_circle() {
    assert_no_circle(&Scope::new("src", &[], "lib.rs"));
}

/// The files of `src/urom/` (service, worker, domain, the offload engine `coll.rs`, ...).
#[test]
fn src_urom_files_have_no_import_circle() {
    assert_no_circle(&Scope::new("src/urom", &["urom"], "mod.rs"));
}

/// doca-soft's top-level modules (task -> ctx -> pe layering, mmap/ by concern, ...).
///
/// Expected to FAIL on branch h-rtlay alone: the doca-soft restructuring is done by the
/// parallel part h-softlay; this passes once it is merged. Do not weaken it.
#[test]
fn doca_soft_top_level_modules_have_no_import_circle() {
    assert_no_circle(&Scope::new("doca-soft/src", &[], "lib.rs"));
}

/// The files of doca-soft's RDMA (the engine owns the state transitions; tasks only decode
/// and validate).
///
/// Expected to FAIL on branch h-rtlay alone: done by the parallel part h-softrdma; this passes
/// once it is merged. Do not weaken it.
#[test]
fn doca_soft_rdma_files_have_no_import_circle() {
    assert_no_circle(&Scope::new("doca-soft/src/rdma", &["rdma"], "mod.rs"));
}

/// The files of doca-soft's UROM host side (cmd_task, worker, domain, ...).
///
/// Expected to FAIL on branch h-rtlay alone: done by the parallel part h-softlay; this passes
/// once it is merged. Do not weaken it.
#[test]
fn doca_soft_urom_host_files_have_no_import_circle() {
    assert_no_circle(&Scope::new("doca-soft/src/urom/host", &["urom", "host"], "mod.rs"));
}

/// The scanner itself: what counts as an import and what does not.
#[test]
fn scanner_counts_only_real_imports() {
    let src = r##"
//! `crate::doc_comment` does not count, nor does [`crate::doc_link`].
// crate::line_comment
/* crate::block /* nested crate::nested */ comment */
use crate::{alpha, beta::{Gamma, delta}, self as _};
use super::sibling::Thing;
const S: &str = "crate::in_string";
const R: &str = r#"crate::in_raw "string""#;
const C: char = '"'; // a quote char must not start a string: crate::after_quote_char
fn f<'a>(x: &'a u8) -> u8 { crate::epsilon::call(*x) }
#[cfg(test)]
mod tests { use crate::test_only; }
#[cfg(test)]
use crate::test_only_use;
#[cfg(all(test, not(loom)))]
fn helper() { crate::test_only_fn(); }
"##;
    let cleaned = strip_test_items(&strip_comments_and_literals(src));
    let mut found: Vec<String> = find_paths(&cleaned).into_iter().map(|(_, segs)| segs.join("::")).collect();
    found.sort();
    assert_eq!(found, ["crate::alpha", "crate::beta", "crate::epsilon::call", "super::sibling::Thing"]);
}

// ---------------------------------------------------------------------------------------
// Scopes, parts and edges

struct Scope {
    /// The folder, relative to the workspace root.
    dir: PathBuf,
    /// The module path of the folder (`[]` for a crate's `src/`).
    module: Vec<String>,
    /// The root file of the folder (`lib.rs` or `mod.rs`).
    root_file: &'static str,
}

impl Scope {
    fn new(dir: &str, module: &[&str], root_file: &'static str) -> Scope {
        Scope {
            dir: Path::new(env!("CARGO_MANIFEST_DIR")).join(dir),
            module: module.iter().map(|s| s.to_string()).collect(),
            root_file,
        }
    }
}

/// One import found: the importing file, its line and the line's text.
#[derive(Clone)]
struct Evidence {
    file: PathBuf,
    line: usize,
    text: String,
}

type Edges = BTreeMap<String, BTreeMap<String, Vec<Evidence>>>;

fn assert_no_circle(scope: &Scope) {
    let edges = scope_edges(scope);
    let circles = circles(&edges);
    if circles.is_empty() {
        return;
    }
    let mut msg = format!("import circles between the parts of {}:\n", scope.dir.display());
    for (circle, component) in circles {
        let _ = writeln!(msg, "\ncircle: {} -> {}", circle.join(" -> "), circle[0]);
        if component.len() > circle.len() {
            let _ = writeln!(msg, "  (one loop of the tangle {})", component.join(", "));
        }
        for (i, from) in circle.iter().enumerate() {
            let to = &circle[(i + 1) % circle.len()];
            let _ = writeln!(msg, "  {from} imports {to}:");
            for ev in edges[from][to].iter().take(5) {
                let _ = writeln!(msg, "    {}:{}: {}", ev.file.display(), ev.line, ev.text.trim());
            }
        }
    }
    panic!("{msg}");
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else { continue };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The part of the scope a file belongs to (its first path component under the scope,
/// without `.rs`), and its module path.
fn part_and_module(scope: &Scope, file: &Path) -> (String, Vec<String>) {
    let rel: Vec<String> = file
        .strip_prefix(&scope.dir)
        .expect("under the scope")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let part = rel[0].trim_end_matches(".rs").to_string();
    let mut module = scope.module.clone();
    for (i, c) in rel.iter().enumerate() {
        let last = i + 1 == rel.len();
        if !last {
            module.push(c.clone());
        } else if c != "mod.rs" && !(rel.len() == 1 && c == scope.root_file) {
            module.push(c.trim_end_matches(".rs").to_string());
        }
    }
    (part, module)
}

/// Test-only files: named so, or declared behind `#[cfg(test)]` by their parent.
fn is_test_file(file: &Path, test_modules: &BTreeSet<PathBuf>) -> bool {
    let name = file.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let test_name = |n: &str| matches!(n, "tests" | "testkit" | "testutil") || n.ends_with("_tests");
    test_name(&name)
        || file.ancestors().any(|a| test_modules.contains(a))
        || file.parent().into_iter().flat_map(|p| p.components()).any(|c| test_name(&c.as_os_str().to_string_lossy()))
}

fn scope_edges(scope: &Scope) -> Edges {
    let files = rust_files(&scope.dir);
    assert!(!files.is_empty(), "no sources under {}", scope.dir.display());
    let mut parts = BTreeSet::new();
    let mut cleaned = BTreeMap::new();
    let mut test_modules = BTreeSet::new();
    for f in &files {
        let text = fs::read_to_string(f).unwrap_or_else(|e| panic!("read {}: {e}", f.display()));
        let no_comments = strip_comments_and_literals(&text);
        // `#[cfg(test)] mod NAME;`: NAME.rs / NAME/ next to this file's module folder.
        for name in test_mod_declarations(&no_comments) {
            let base = if f.file_name().is_some_and(|n| n == "mod.rs" || n == "lib.rs" || n == "main.rs") {
                f.parent().unwrap().to_path_buf()
            } else {
                f.with_extension("")
            };
            test_modules.insert(base.join(format!("{name}.rs")));
            test_modules.insert(base.join(&name));
        }
        cleaned.insert(f.clone(), (strip_test_items(&no_comments), text));
        let (part, _) = part_and_module(scope, f);
        parts.insert(part);
    }
    let root_part = scope.root_file.trim_end_matches(".rs").to_string();
    // Names the root file re-exports from a child: `pub use child::{A, B};`.
    let reexports = root_reexports(&cleaned[&scope.dir.join(scope.root_file)].0, &parts);

    let mut edges: Edges = BTreeMap::new();
    for f in &files {
        if is_test_file(f, &test_modules) {
            continue;
        }
        let (from, module) = part_and_module(scope, f);
        let (code, original) = &cleaned[f];
        let code = if from == root_part { blank_reexports(code) } else { code.clone() };
        let code = &code;
        let lines: Vec<&str> = original.lines().collect();
        for (line, segs) in find_paths(code) {
            let Some(abs) = resolve(&module, &segs) else { continue };
            if abs.len() < scope.module.len() || abs[..scope.module.len()] != scope.module[..] {
                continue; // outside the scope
            }
            // The part named: a child, a name the root file re-exports from a child, or
            // (an item of the root file itself, or the module as a whole) the root file.
            let to = match abs.get(scope.module.len()) {
                Some(name) if parts.contains(name) && *name != root_part => name.clone(),
                Some(name) => reexports.get(name).cloned().unwrap_or_else(|| root_part.clone()),
                None => root_part.clone(),
            };
            if to == from {
                continue;
            }
            let ev = Evidence { file: f.clone(), line, text: lines.get(line - 1).unwrap_or(&"").to_string() };
            let found = edges.entry(from.clone()).or_default().entry(to).or_default();
            // One line may name the part several times (a group): show it once.
            if !found.last().is_some_and(|last| last.file == ev.file && last.line == ev.line) {
                found.push(ev);
            }
        }
    }
    edges
}

/// The absolute module path a path names (`crate::`, `super::`, `self::` prefixes resolved
/// against the file's module), or `None` for other paths.
fn resolve(module: &[String], segs: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match segs.first().map(String::as_str) {
        Some("crate") => Vec::new(),
        Some("self") | Some("super") => module.to_vec(),
        _ => return None,
    };
    let mut rest = &segs[1..];
    if segs[0] == "super" {
        base.pop()?;
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// `pub use child::{A, B as C};` and `pub use child::A;` in a root file: name -> child.
fn root_reexports(code: &str, parts: &BTreeSet<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = code;
    while let Some(i) = rest.find("use ") {
        let before = &rest[..i];
        rest = &rest[i + 4..];
        if !before.trim_end().ends_with("pub") && !before.trim_end().ends_with(')') {
            continue;
        }
        let stmt = &rest[..rest.find(';').unwrap_or(rest.len())];
        let stmt: String = stmt.chars().filter(|c| !c.is_whitespace()).collect();
        let stmt = stmt.strip_prefix("self::").or_else(|| stmt.strip_prefix("crate::")).unwrap_or(&stmt);
        let Some((child, tail)) = stmt.split_once("::") else { continue };
        if !parts.contains(child) {
            continue;
        }
        let tail = tail.trim_start_matches('{').trim_end_matches('}');
        for item in split_top_level(tail) {
            let name = match item.split_once("as") {
                Some((_, alias)) if item.contains("as") && !alias.is_empty() => alias.to_string(),
                _ => item.rsplit("::").next().unwrap_or("").to_string(),
            };
            if !name.is_empty() && name != "*" && name != "self" {
                out.insert(name, child.to_string());
            }
        }
    }
    out
}

/// The text with every re-export (`pub use ...;`, `pub(crate) use ...;`) blanked: in a root
/// file they are wiring, not imports.
fn blank_reexports(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let mut i = 0;
    while let Some(p) = code[i..].find("use ") {
        let at = i + p;
        i = at + 4;
        let before = code[..at].trim_end();
        let visibility = before.ends_with("pub")
            || (before.ends_with(')') && before[..before.rfind('(').unwrap_or(0)].trim_end().ends_with("pub"));
        if !visibility || (at > 0 && is_ident(code.as_bytes()[at - 1])) {
            continue;
        }
        let end = code[at..].find(';').map_or(code.len(), |e| at + e);
        for c in &mut out[at..end] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = end;
    }
    String::from_utf8(out).expect("only ASCII was replaced")
}

// ---------------------------------------------------------------------------------------
// Finding paths

/// Every path starting with `crate`, `super` or `self` (at a token boundary): its line and
/// its segments. A group is expanded to one path per item, cut after the item's first
/// segment (`use crate::{a, b::c}` gives `crate::a` and `crate::b`); a glob (`use super::*`)
/// gives the bare prefix (`super`), an import of that module itself.
fn find_paths(code: &str) -> Vec<(usize, Vec<String>)> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"].iter().any(|p| code[i..].starts_with(*p));
        let boundary = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        if !(starts && boundary) {
            i += 1;
            continue;
        }
        let line = code[..i].matches('\n').count() + 1;
        let (segs, group, end) = parse_path(code, i);
        if group.is_empty() {
            out.push((line, segs));
        } else {
            for g in group {
                let mut s = segs.clone();
                s.push(g);
                out.push((line, s));
            }
        }
        i = end.max(i + 1);
    }
    out
}

/// Parses `a::b::c`, `a::b::{x, y::z}` or `a::*` from `start`; returns the segments, the first
/// segments of a trailing group's items, and where parsing stopped.
fn parse_path(code: &str, start: usize) -> (Vec<String>, Vec<String>, usize) {
    let bytes = code.as_bytes();
    let mut i = start;
    let mut segs = Vec::new();
    loop {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        if i < bytes.len() && bytes[i] == b'{' {
            let close = matching(code, i, b'{', b'}');
            let inner = &code[i + 1..close];
            let group = split_top_level(inner)
                .into_iter()
                .filter_map(|item| {
                    let first: String = item.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    (!first.is_empty() && first != "self").then_some(first)
                })
                .collect();
            return (segs, group, close + 1);
        }
        let s = i;
        while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
            i += 1;
        }
        if s == i {
            return (segs, Vec::new(), i);
        }
        segs.push(code[s..i].to_string());
        let mut j = i;
        while j < bytes.len() && bytes[j].is_ascii_whitespace() {
            j += 1;
        }
        if code[j..].starts_with("::") {
            i = j + 2;
        } else {
            return (segs, Vec::new(), i);
        }
    }
}

/// The index of the bracket closing the one at `open` (or the end of the text).
fn matching(code: &str, open: usize, o: u8, c: u8) -> usize {
    let mut depth = 0usize;
    for (k, &b) in code.as_bytes().iter().enumerate().skip(open) {
        if b == o {
            depth += 1;
        } else if b == c {
            depth -= 1;
            if depth == 0 {
                return k;
            }
        }
    }
    code.len()
}

/// Splits on commas outside braces; trims each item, drops empty ones.
fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for ch in s.chars() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    out.push(cur);
    out.into_iter().map(|x| x.trim().to_string()).filter(|x| !x.is_empty()).collect()
}

// ---------------------------------------------------------------------------------------
// Lexing: comments, literals, test-only items

/// The text with comments, string literals and char literals replaced by spaces (newlines
/// kept, so line numbers stay right).
fn strip_comments_and_literals(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let blank =
        |out: &mut Vec<u8>, bytes: &[u8]| out.extend(bytes.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    let mut i = 0;
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut k = 0;
            while k < rest.len() {
                if rest[k..].starts_with(b"/*") {
                    depth += 1;
                    k += 2;
                } else if rest[k..].starts_with(b"*/") {
                    depth -= 1;
                    k += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    k += 1;
                }
            }
            blank(&mut out, &rest[..k]);
            i += k;
        } else if let Some(len) = raw_string_len(rest, i == 0 || !is_ident(b[i - 1])) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'"' {
            let mut k = 1;
            while k < rest.len() && rest[k] != b'"' {
                k += if rest[k] == b'\\' { 2 } else { 1 };
            }
            let len = (k + 1).min(rest.len());
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'\'' {
            // A char literal ('x', '\n', '\u{..}', '"'), or a lifetime ('a), which stays.
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..].iter().position(|&c| c == b'\'').map(|p| p + 3)
            } else {
                let ch_len =
                    std::str::from_utf8(&rest[1..]).ok().and_then(|s| s.chars().next()).map_or(1, char::len_utf8);
                (rest.get(1 + ch_len) == Some(&b'\'')).then_some(ch_len + 2)
            };
            match len {
                Some(len) => {
                    blank(&mut out, &rest[..len]);
                    i += len;
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("only ASCII was replaced")
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// The length of a raw string literal (`r"..."`, `r#"..."#`, `br#"..."#`) at the start of
/// `s`, if there is one.
fn raw_string_len(s: &[u8], at_boundary: bool) -> Option<usize> {
    if !at_boundary {
        return None;
    }
    let mut k = if s.starts_with(b"br") {
        2
    } else if s.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = s[k..].iter().take_while(|&&c| c == b'#').count();
    k += hashes;
    if s.get(k) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let end = s[k + 1..].windows(close.len()).position(|w| w == close.as_slice())?;
    Some(k + 1 + end + close.len())
}

/// Whether an attribute's text (`#[...]`) makes the item test-only.
fn is_test_cfg(attr: &str) -> bool {
    let a: String = attr.chars().filter(|c| !c.is_whitespace()).collect();
    a.starts_with("#[cfg(test)") || a.starts_with("#[cfg(all(test")
}

/// The text with every `#[cfg(test)]` item (an inline module, a `use`, a function, ...)
/// blanked.
fn strip_test_items(code: &str) -> String {
    let mut out = code.as_bytes().to_vec();
    let b = code.as_bytes();
    let mut i = 0;
    while let Some(p) = code[i..].find("#[") {
        let start = i + p;
        let attr_end = matching(code, start + 1, b'[', b']');
        if !is_test_cfg(&code[start..=attr_end.min(code.len() - 1)]) {
            i = start + 2;
            continue;
        }
        // Skip further attributes, then the item: up to `;` or its balanced `{ }` body.
        let mut k = attr_end + 1;
        loop {
            while k < b.len() && b[k].is_ascii_whitespace() {
                k += 1;
            }
            if code[k..].starts_with("#[") {
                k = matching(code, k + 1, b'[', b']') + 1;
            } else {
                break;
            }
        }
        while k < b.len() && b[k] != b';' && b[k] != b'{' {
            k += 1;
        }
        let end = if k < b.len() && b[k] == b'{' { matching(code, k, b'{', b'}') } else { k };
        for c in &mut out[start..(end + 1).min(b.len())] {
            if *c != b'\n' {
                *c = b' ';
            }
        }
        i = (end + 1).min(b.len());
    }
    String::from_utf8(out).expect("only ASCII was replaced")
}

/// The names of `#[cfg(test)] mod NAME;` declarations (files that are test-only).
fn test_mod_declarations(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(p) = code[i..].find("#[") {
        let start = i + p;
        let attr_end = matching(code, start + 1, b'[', b']');
        i = start + 2;
        if !is_test_cfg(&code[start..=attr_end.min(code.len() - 1)]) {
            continue;
        }
        let rest = code[attr_end + 1..].trim_start();
        let rest = rest.strip_prefix("pub(crate)").or_else(|| rest.strip_prefix("pub")).unwrap_or(rest).trim_start();
        if let Some(r) = rest.strip_prefix("mod ") {
            let name: String = r.trim_start().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if r.trim_start()[name.len()..].trim_start().starts_with(';') {
                out.push(name);
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Circles

/// One loop per strongly connected component of more than one part (Tarjan, then the
/// shortest way back to the start), with the component's parts.
fn circles(edges: &Edges) -> Vec<(Vec<String>, Vec<String>)> {
    let nodes: BTreeSet<&String> = edges.keys().chain(edges.values().flat_map(|m| m.keys())).collect();
    let nodes: Vec<&String> = nodes.into_iter().collect();
    let index_of = |n: &String| nodes.iter().position(|x| *x == n).expect("known node");
    let succ: Vec<Vec<usize>> =
        nodes.iter().map(|n| edges.get(*n).map(|m| m.keys().map(index_of).collect()).unwrap_or_default()).collect();

    struct Tarjan<'a> {
        succ: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        sccs: Vec<Vec<usize>>,
    }
    impl Tarjan<'_> {
        fn visit(&mut self, v: usize) {
            self.index[v] = Some(self.next);
            self.low[v] = self.next;
            self.next += 1;
            self.stack.push(v);
            self.on_stack[v] = true;
            for &w in &self.succ[v] {
                match self.index[w] {
                    None => {
                        self.visit(w);
                        self.low[v] = self.low[v].min(self.low[w]);
                    }
                    Some(iw) if self.on_stack[w] => self.low[v] = self.low[v].min(iw),
                    Some(_) => {}
                }
            }
            if Some(self.low[v]) == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack[w] = false;
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                if scc.len() > 1 {
                    self.sccs.push(scc);
                }
            }
        }
    }
    let n = nodes.len();
    let mut t = Tarjan {
        succ: &succ,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        sccs: Vec::new(),
    };
    for v in 0..n {
        if t.index[v].is_none() {
            t.visit(v);
        }
    }
    let sccs = t.sccs;

    sccs.into_iter()
        .map(|scc| {
            let start = *scc.iter().min().expect("non-empty");
            let inside: BTreeSet<usize> = scc.iter().copied().collect();
            // Breadth-first from `start` back to itself, inside the component.
            let mut prev: BTreeMap<usize, usize> = BTreeMap::new();
            let mut queue = VecDeque::from([start]);
            let mut last = start;
            'search: while let Some(v) = queue.pop_front() {
                for &w in &succ[v] {
                    if w == start {
                        last = v;
                        break 'search;
                    }
                    if inside.contains(&w) && !prev.contains_key(&w) {
                        prev.insert(w, v);
                        queue.push_back(w);
                    }
                }
            }
            let mut path = vec![last];
            while let Some(&p) = prev.get(path.last().expect("non-empty")) {
                path.push(p);
            }
            if *path.last().expect("non-empty") != start {
                path.push(start);
            }
            path.reverse();
            let component = inside.iter().map(|&i| nodes[i].clone()).collect();
            (path.into_iter().map(|i| nodes[i].clone()).collect(), component)
        })
        .collect()
}
