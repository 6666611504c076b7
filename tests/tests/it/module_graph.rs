//! The crates' module graphs have no rings: no two files of dataplane/ or control/ import each
//! other, directly or around a cycle (issue 13, deliverable 6), and routing/ stays pure (no
//! monoio, no sockets, no clock reads, no unsafe).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of `file` under `src` (`a/b.rs` and `a/b/mod.rs` are `a::b`).
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts.join("::")
}

/// Source without comments (line comments and doc comments), so doc links do not count.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The module-to-module edges of a crate: `m -> t` when `m`'s code names `crate::t...` (or a
/// `use crate::{t, ...}` group), for every module `t` other than `m` and its ancestors.
fn edges(crate_dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(crate_dir)
        .join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: BTreeMap<String, String> = files
        .iter()
        .map(|f| {
            (
                module_of(&src, f),
                code_of(&std::fs::read_to_string(f).unwrap()),
            )
        })
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &modules {
        let mut targets = BTreeSet::new();
        let mut rest = code.as_str();
        while let Some(at) = rest.find("crate::") {
            rest = &rest[at + "crate::".len()..];
            let group = rest.starts_with('{');
            let names: Vec<String> = if group {
                let end = rest.find('}').unwrap_or(rest.len());
                rest[1..end]
                    .split(',')
                    .map(|s| s.trim().to_string())
                    .collect()
            } else {
                let end = rest
                    .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                    .unwrap_or(rest.len());
                vec![rest[..end].to_string()]
            };
            for name in names {
                let segs: Vec<&str> = name.split("::").filter(|s| !s.is_empty()).collect();
                for k in (1..=segs.len()).rev() {
                    let t = segs[..k].join("::");
                    if modules.contains_key(&t) {
                        if &t != module && !module.starts_with(&format!("{t}::")) {
                            targets.insert(t);
                        }
                        break;
                    }
                }
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// The strongly connected components with more than one module (the rings).
fn rings(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability by DFS from every node: fine for a few dozen modules.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(m) = stack.pop() {
            for t in graph.get(&m).into_iter().flatten() {
                if seen.insert(t.clone()) {
                    stack.push(t.clone());
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|m| (m, reach(m))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for m in graph.keys() {
        if placed.contains(m) || !reachable[m].contains(m) {
            continue;
        }
        let ring: Vec<String> = graph
            .keys()
            .filter(|o| reachable[m].contains(*o) && reachable[*o].contains(m))
            .cloned()
            .collect();
        placed.extend(ring.iter().cloned());
        out.push(ring);
    }
    out
}

#[test]
fn dataplane_and_control_have_no_import_rings() {
    for crate_dir in ["dataplane", "control", "routing", "tools"] {
        let found = rings(&edges(crate_dir));
        assert!(
            found.is_empty(),
            "{crate_dir}: modules importing each other: {found:?}"
        );
    }
}

#[test]
fn the_ring_finder_finds_a_ring() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["c".to_string()]));
    g.insert("c".to_string(), BTreeSet::from(["a".to_string()]));
    g.insert("d".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(
        rings(&g),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
}

#[test]
fn routing_is_pure() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../routing/src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(!files.is_empty());
    for f in files {
        let code = code_of(&std::fs::read_to_string(&f).unwrap());
        for banned in [
            "Instant::now",
            "SystemTime",
            "monoio",
            "std::net",
            "unsafe ",
        ] {
            assert!(!code.contains(banned), "{}: uses {banned}", f.display());
        }
    }
}
