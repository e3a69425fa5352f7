//! The workspace's structure, checked where the compiler cannot: which crate may depend on which
//! (read from `cargo metadata`, transitively), and that no module of a crate imports, directly or
//! not, a sibling that imports it back (read from the sources).
//!
//! The layering (DESIGN.md §14): the engine knows no protocol; the configuration parses and
//! validates, and opens nothing; the service core (`floodgate-app`) knows no front door; the front
//! doors (`floodgate-api`, `floodgate-gateway`) never depend on each other; only the binary's crate
//! wires them together, and nothing depends on it but its own tests.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

/// Every package of the resolved graph, by name, with the names of its normal (not dev, not
/// build) dependencies.
fn normal_dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked", "--filter-platform"])
        .arg(host())
        .current_dir(workspace())
        .output()
        .expect("cargo metadata runs");
    assert!(output.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&output.stderr));
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let names: BTreeMap<&str, &str> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let mut graph = BTreeMap::new();
    for node in metadata["resolve"]["nodes"].as_array().unwrap() {
        let deps = node["deps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["dep_kinds"].as_array().unwrap().iter().any(|k| k["kind"].is_null()))
            .map(|d| names[d["pkg"].as_str().unwrap()].to_owned())
            .collect();
        graph.insert(names[node["id"].as_str().unwrap()].to_owned(), deps);
    }
    graph
}

/// The host's target triple, as `rustc -vV` gives it.
fn host() -> String {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let output = Command::new(rustc).arg("-vV").output().expect("rustc runs");
    let text = String::from_utf8(output.stdout).unwrap();
    text.lines().find_map(|l| l.strip_prefix("host: ")).expect("rustc -vV names the host").to_owned()
}

/// Every package `package` depends on, directly or not, through normal dependencies.
fn closure(graph: &BTreeMap<String, BTreeSet<String>>, package: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![package.to_owned()];
    while let Some(next) = stack.pop() {
        for dep in graph.get(&next).into_iter().flatten() {
            if seen.insert(dep.clone()) {
                stack.push(dep.clone());
            }
        }
    }
    seen
}

#[test]
fn each_crate_depends_only_on_the_layers_below_it() {
    let graph = normal_dependencies();
    let forbidden: [(&str, &[&str]); 9] = [
        ("floodgate-core", &["tokio", "floodgate", "http", "serde"]),
        (
            "floodgate",
            &["http", "hyper", "axum", "serde", "serde_json", "tonic", "floodgate-http", "floodgate-redis"],
        ),
        ("floodgate-http", &["tokio", "floodgate-config", "floodgate-app"]),
        ("floodgate-config", &["tokio", "floodgate-redis", "floodgate-app", "redis"]),
        ("floodgate-redis", &["floodgate-config", "floodgate-app"]),
        ("floodgate-app", &["floodgate-api", "floodgate-gateway", "floodgate-server", "floodgate-tower"]),
        ("floodgate-api", &["floodgate-gateway", "floodgate-server"]),
        ("floodgate-gateway", &["floodgate-api", "floodgate-server"]),
        ("floodgate-tower", &["floodgate-app", "floodgate-api", "floodgate-gateway", "floodgate-server"]),
    ];
    for (package, below) in forbidden {
        let reached = closure(&graph, package);
        assert!(!reached.is_empty() || package == "floodgate-core", "{package} was found: {reached:?}");
        for name in below {
            assert!(!reached.contains(*name), "{package} depends on {name}, directly or not");
        }
    }
    for (package, deps) in &graph {
        if package != "floodgate-server" {
            assert!(!deps.contains("floodgate-server"), "{package} depends on the binary's crate");
        }
    }
}

#[test]
fn no_module_of_a_crate_imports_a_sibling_that_imports_it_back() {
    let crates = workspace().join("crates");
    let mut checked = 0;
    let mut loops = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        let root = root_module(&src);
        for (dir, graph) in sibling_graphs(&src, &root) {
            checked += graph.len();
            if let Some(c) = cycle(&graph) {
                loops.push(format!("{}: {}", dir.strip_prefix(&crates).unwrap().display(), c.join(" → ")));
            }
        }
    }
    assert!(loops.is_empty(), "import loops between the modules of a folder:\n{}", loops.join("\n"));
    assert!(checked >= 100, "the modules were found: {checked}");
}

/// The crate's root file: `lib.rs`, else `main.rs`.
fn root_module(src: &Path) -> PathBuf {
    let lib = src.join("lib.rs");
    if lib.exists() { lib } else { src.join("main.rs") }
}

/// For every folder of modules (the crate root's and each module's), its child modules, each with
/// the siblings it names (through `crate::…` or `super::…` paths), a child's own descendants
/// counting as the child.
fn sibling_graphs(src: &Path, root: &Path) -> Vec<(PathBuf, BTreeMap<String, BTreeSet<String>>)> {
    let mut files = Vec::new();
    collect(src, &mut files);
    // Each file as its module path: `src/http/api.rs` → ["http", "api"]; `src/http/mod.rs` → ["http"].
    let modules: Vec<(Vec<String>, String)> = files
        .iter()
        .filter(|f| f.as_path() != root && !f.ends_with("main.rs"))
        .map(|f| (module_path(src, f), without_tests(std::fs::read_to_string(f).unwrap())))
        .collect();
    let all: BTreeSet<Vec<String>> = modules.iter().map(|(p, _)| p.clone()).collect();
    let mut graphs: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (path, text) in &modules {
        for named in named_modules(path, text) {
            // The deepest known module the name leads to.
            let Some(target) = (1..=named.len()).rev().map(|n| named[..n].to_vec()).find(|p| all.contains(p))
            else {
                continue;
            };
            // Where `path` and `target` part ways: the folder whose children they belong to.
            let common = path.iter().zip(&target).take_while(|(a, b)| a == b).count();
            if common >= path.len() || common >= target.len() {
                // A module naming its own descendant or ancestor is no loop between siblings.
                continue;
            }
            let folder = path[..common].to_vec();
            graphs
                .entry(folder)
                .or_default()
                .entry(path[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
        // Every module is a node of its folder's graph, named or not.
        if let Some((last, parent)) = path.split_last() {
            graphs.entry(parent.to_vec()).or_default().entry(last.clone()).or_default();
        }
    }
    graphs.into_iter().map(|(folder, graph)| (src.join(folder.join("/")), graph)).collect()
}

/// `text` without its `#[cfg(test)]` items (to the end of each one's braces): unit tests are not
/// part of the crate they test, and may name any module of it (a scenario's tests parse the
/// command line, say).
fn without_tests(text: String) -> String {
    let mut kept = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        kept.push_str(&rest[..at]);
        let item = &rest[at..];
        let Some(open) = item.find('{') else { return kept };
        let mut depth = 0usize;
        let mut end = item.len();
        for (i, c) in item[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    kept.push_str(rest);
    kept
}

/// The module paths `text` (the file of module `path`) names through `crate::` and `super::`.
fn named_modules(path: &[String], text: &str) -> Vec<Vec<String>> {
    let mut named = Vec::new();
    for line in text.lines() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        for (prefix, base) in
            [("crate::", Vec::new()), ("super::", path[..path.len().saturating_sub(1)].to_vec())]
        {
            for (i, _) in code.match_indices(prefix) {
                if i > 0 && code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let mut target = base.clone();
                let mut rest = &code[i + prefix.len()..];
                // `super::super::x`
                while let Some(r) = rest.strip_prefix("super::") {
                    target.pop();
                    rest = r;
                }
                // `a::b::{c, d}` names `a::b`; `a::b::C` names `a::b::C` (the deepest module
                // it leads to is found by the caller).
                loop {
                    let name: String =
                        rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if name.is_empty() {
                        break;
                    }
                    rest = &rest[name.len()..];
                    target.push(name);
                    match rest.strip_prefix("::") {
                        Some(r) => rest = r,
                        None => break,
                    }
                }
                named.push(target);
            }
        }
    }
    named
}

fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> =
        relative.components().map(|c| c.as_os_str().to_str().unwrap().to_owned()).collect();
    let last = parts.pop().unwrap();
    let stem = last.strip_suffix(".rs").unwrap().to_owned();
    if stem != "mod" {
        parts.push(stem);
    }
    parts
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

/// A loop between a type's module and its own parts, as tower shapes middleware: a service and
/// its `future`, `error` or `body` (the future names the service's error; the service returns the
/// future).
fn own_parts(cycle: &[String]) -> bool {
    cycle.len() == 3 && cycle.iter().any(|m| matches!(m.as_str(), "future" | "error" | "body"))
}

/// A cycle in `graph`, if there is one, as the path that closes it.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        node: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
        found: &mut Vec<Vec<String>>,
    ) {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_owned());
            found.push(cycle);
            return;
        }
        if done.contains(node) {
            return;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            visit(graph, next, path, done, found);
        }
        path.pop();
        done.insert(node.to_owned());
    }
    let mut found = Vec::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        visit(graph, node, &mut Vec::new(), &mut done, &mut found);
    }
    found.into_iter().find(|c| !own_parts(c))
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

#[test]
fn a_service_and_its_future_may_name_each_other() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    graph.entry("service".into()).or_default().insert("future".into());
    graph.entry("future".into()).or_default().insert("service".into());
    assert_eq!(cycle(&graph), None);
    graph.entry("future".into()).or_default().insert("layer".into());
    graph.entry("layer".into()).or_default().insert("service".into());
    assert!(cycle(&graph).is_some());
}

#[test]
fn sibling_graphs_see_loops_inside_a_folder() {
    let dir = std::env::temp_dir().join(format!("floodgate-structure-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("gateway")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod gateway;\n").unwrap();
    std::fs::write(src.join("gateway/mod.rs"), "mod handler;\nmod routes;\n").unwrap();
    std::fs::write(src.join("gateway/handler.rs"), "use super::routes::Table;\n").unwrap();
    std::fs::write(src.join("gateway/routes.rs"), "use crate::gateway::handler::Context;\n").unwrap();
    let graphs = sibling_graphs(&src, &src.join("lib.rs"));
    let gateway = &graphs.iter().find(|(d, _)| d.ends_with("gateway")).unwrap().1;
    assert!(cycle(gateway).is_some(), "{gateway:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn test_items_are_left_out_and_what_follows_them_is_kept() {
    let text = "use crate::a::A;\n#[cfg(test)]\nfn helper() { let _ = crate::cli::Cli { x: {} }; }\nuse crate::b::B;\n#[cfg(test)]\nmod tests {\n    use crate::cli::Cli;\n}\n";
    let kept = without_tests(text.to_owned());
    assert!(kept.contains("crate::a::A") && kept.contains("crate::b::B"), "{kept}");
    assert!(!kept.contains("cli"), "{kept}");
}
