//! The crate's promises about its own sources, checked on every test run: no clock reads, no
//! I/O or threads, no dependency on the data plane, the index or the async runtime, and module
//! imports that go one way (no two files import each other, directly or around a ring).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("routing/src is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Module path of a source file: `brain/mod.rs` is `brain`, `brain/guards.rs` is
/// `brain::guards`, `lib.rs` is the root (empty).
fn module_of(file: &Path) -> String {
    let rel = file.strip_prefix(src_dir()).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib")) {
        parts.pop();
    }
    parts.join("::")
}

#[test]
fn the_sources_read_no_clock_and_do_no_io() {
    let mut files = Vec::new();
    sources(&src_dir(), &mut files);
    assert!(files.len() > 10, "found the sources: {files:?}");
    let banned = [
        "Instant::now",
        "SystemTime",
        "std::time::Instant",
        "monoio",
        "std::net",
        "std::fs",
        "std::thread",
        "std::io",
        "unsafe",
        "inferrail_shards",
        "inferrail_dataplane",
    ];
    for f in &files {
        let text = std::fs::read_to_string(f).expect("a source file");
        for b in banned {
            assert!(!text.contains(b), "{} mentions {b}", f.display());
        }
    }
    let manifest =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .expect("the manifest");
    for dep in ["monoio", "inferrail-shards", "inferrail-dataplane", "libc"] {
        assert!(!manifest.contains(dep), "routing depends on {dep}");
    }
    assert!(manifest.contains("unsafe_code = \"forbid\""));
}

#[test]
fn no_two_modules_import_each_other_directly_or_around_a_ring() {
    let mut files = Vec::new();
    sources(&src_dir(), &mut files);
    let modules: BTreeSet<String> = files.iter().map(|f| module_of(f)).collect();
    // Edges: a non-test module to every other module its code names by a `crate::` or
    // `super::` path.
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in &files {
        let me = module_of(f);
        if me.is_empty() || me.ends_with("tests") {
            continue;
        }
        let text = std::fs::read_to_string(f).expect("a source file");
        // The code before any inline test module, without comments (doc links are no imports).
        let code: String = text
            .split("#[cfg(test)]\nmod tests {")
            .next()
            .unwrap_or(&text)
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        let parent = me.rsplit_once("::").map_or("", |(p, _)| p).to_string();
        for (prefix, base) in [("crate::", String::new()), ("super::", parent)] {
            for (at, _) in code.match_indices(prefix) {
                let path: String = code[at + prefix.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                    .collect();
                // The longest module the path names.
                let mut named = base.clone();
                let mut best = None;
                for seg in path.split("::").filter(|s| !s.is_empty()) {
                    named = if named.is_empty() {
                        seg.to_string()
                    } else {
                        format!("{named}::{seg}")
                    };
                    if modules.contains(&named) {
                        best = Some(named.clone());
                    }
                }
                let target = best.unwrap_or_else(|| base.clone());
                if target != me && !target.is_empty() {
                    edges.entry(me.clone()).or_default().insert(target);
                }
            }
        }
    }
    assert!(
        edges.get("brain").is_some_and(|e| e.contains("policy")),
        "the scan sees imports: {edges:?}"
    );
    // Depth-first search for a cycle.
    fn visit(
        m: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(m) {
            return;
        }
        if let Some(at) = path.iter().position(|p| p == m) {
            panic!("module ring: {} -> {m}", path[at..].join(" -> "));
        }
        path.push(m.to_string());
        for next in edges.get(m).into_iter().flatten() {
            visit(next, edges, path, done);
        }
        path.pop();
        done.insert(m.to_string());
    }
    let mut done = BTreeSet::new();
    for m in &modules {
        visit(m, &edges, &mut Vec::new(), &mut done);
    }
}
