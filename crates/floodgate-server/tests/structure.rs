//! The server's own structure: arrows point inward. Front doors (`http`, `grpc`) and `app` sit on
//! the shared state (`state`, `control`, `decide`, `metrics`, `audit`); no module imports one that
//! (directly or not) imports it back. Read from the sources, so that a loop fails the build's tests
//! rather than a review.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The top-level modules of `src/` (`http/admin.rs` belongs to `http`), each with the top-level
/// modules it names through `crate::`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    collect(&src, &mut files);
    let modules: BTreeSet<String> = files.iter().filter_map(|f| module_of(&src, f)).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let Some(module) = module_of(&src, file) else { continue };
        let text = std::fs::read_to_string(file).unwrap();
        let edges = graph.entry(module.clone()).or_default();
        for (i, _) in text.match_indices("crate::") {
            let name: String = text[i + "crate::".len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            if modules.contains(&name) && name != module {
                edges.insert(name);
            }
        }
    }
    graph
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/http/api.rs` → `http`; `src/state.rs` → `state`; the crate roots are no module.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// A cycle in `graph`, if there is one, as the path that closes it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut found = path[at..].to_vec();
            found.push(node.to_owned());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(found) = visit(graph, next, path, done) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|node| visit(graph, node, &mut Vec::new(), &mut done))
}

#[test]
fn no_module_of_the_server_imports_one_that_imports_it_back() {
    let graph = imports();
    assert!(graph.len() >= 8, "the modules were found: {graph:?}");
    assert_eq!(cycle(&graph), None, "an import loop between the server's modules; the graph: {graph:#?}");
}

#[test]
fn front_doors_sit_on_the_shared_state_and_nothing_below_knows_them() {
    let graph = imports();
    for door in ["http", "grpc", "gateway"] {
        assert!(!graph[door].contains("app"), "{door} imports app");
        assert!(graph[door].contains("state"), "{door} reads the shared state: {:?}", graph[door]);
    }
    for below in ["state", "control", "decide", "metrics", "audit", "switches"] {
        for door in ["http", "grpc", "gateway", "app", "reload", "survival", "cli"] {
            assert!(!graph[below].contains(door), "{below} imports the front door or binary module {door}");
        }
    }
}

#[test]
fn the_cycle_finder_finds_a_cycle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("a".into()).or_default().insert("b".into());
    graph.entry("b".into()).or_default().insert("c".into());
    graph.entry("c".into()).or_default().insert("a".into());
    assert_eq!(cycle(&graph), Some(vec!["a".into(), "b".into(), "c".into(), "a".into()]));
    graph.get_mut("c").unwrap().clear();
    assert_eq!(cycle(&graph), None);
}
