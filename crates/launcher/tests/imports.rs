//! The launcher's modules form no import circle: the run reactor must not
//! reach the command line, nor a library module the crate root.
//!
//! A module's edges are the top-level modules its code names through
//! `crate::…` (also inside `use crate::{a, b::c}` groups; a name that is no
//! module is an item of `lib.rs`, the crate root) or, in a top-level file,
//! through `super::…`; the crate root's edges are the modules it names. Comments and the trailing `#[cfg(test)] mod tests`
//! are not code the module runs. A circle fails the test with its members.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// `crate::{a, b::c}` → `["a", "b"]`; `crate::a::b` → `["a"]`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let is_path = at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '$');
        rest = &rest[at + "crate::".len()..];
        if !is_path {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            // Top-level items of a (possibly nested) use group.
            let (mut depth, mut item) = (0, String::new());
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => out.push(std::mem::take(&mut item)),
                    _ if depth == 0 => item.push(c),
                    _ => {}
                }
            }
            out.push(item);
        } else {
            out.push(rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect());
        }
    }
    out.iter().map(|p| p.trim().split("::").next().unwrap_or("").trim().to_string()).filter(|p| !p.is_empty() && p != "self").collect()
}

/// Whether `code` names the path `module::…` (not `x_module::…`).
fn names_path(code: &str, module: &str) -> bool {
    let needle = format!("{module}::");
    code.match_indices(&needle).any(|(at, _)| at == 0 || !code[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':'))
}

/// The code of a file: no comments, no trailing unit-test module.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

fn files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())).flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The launcher's module graph: top-level module → the top-level modules it names.
fn graph(src: &Path) -> Graph {
    let mut paths = Vec::new();
    files(src, &mut paths);
    let module_of = |path: &Path| -> (String, bool) {
        let rel = path.strip_prefix(src).unwrap();
        let first = rel.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        let top_file = rel.components().count() == 1 || rel.ends_with(format!("{first}/mod.rs"));
        (first, top_file)
    };
    let modules: BTreeSet<String> = paths.iter().map(|p| module_of(p).0).collect();
    let mut g = Graph::new();
    for path in &paths {
        let rel = path.strip_prefix(src).unwrap();
        if rel.components().any(|c| c.as_os_str() == "tests") {
            continue; // a module's unit tests (`run/tests/`)
        }
        let (module, top_file) = module_of(path);
        let code = code_of(&fs::read_to_string(path).unwrap());
        let mut named = crate_paths(&code);
        if top_file && module != "lib" && code.contains("super::") {
            named.push("lib".into());
        }
        if module == "lib" {
            // The crate root names its modules without `crate::`.
            named.extend(modules.iter().filter(|m| names_path(&code, m)).cloned());
        }
        let edges = g.entry(module.clone()).or_default();
        for name in named {
            let target = if modules.contains(&name) { name } else { "lib".to_string() };
            if target != module {
                edges.insert(target);
            }
        }
    }
    g
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(g: &Graph) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a Graph,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
        s.stack.push(v);
        for w in s.g.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                s.low.entry(v).and_modify(|l| *l = (*l).min(lw));
            } else if s.stack.contains(&w) {
                let iw = s.index[w];
                s.low.entry(v).and_modify(|l| *l = (*l).min(iw));
            }
        }
        if s.low[v] == s.index[v] {
            let at = s.stack.iter().rposition(|x| *x == v).unwrap();
            let members: Vec<String> = s.stack.drain(at..).map(String::from).collect();
            if members.len() > 1 {
                s.found.push(members);
            }
        }
    }
    let mut s = State { g, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), found: Vec::new() };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.found
}

#[test]
fn the_launchers_modules_import_no_circle() {
    let g = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g.len() > 10, "the launcher's modules were not found: {g:?}");
    let found = circles(&g);
    let show: Vec<String> = found
        .iter()
        .map(|c| {
            let set: BTreeSet<&String> = c.iter().collect();
            let edges: Vec<String> = c.iter().flat_map(|m| g[m].iter().filter(|t| set.contains(t)).map(move |t| format!("{m} → {t}"))).collect();
            format!("{c:?}: {}", edges.join(", "))
        })
        .collect();
    assert!(found.is_empty(), "import circles among the launcher's modules:\n{}", show.join("\n"));
}

/// The check itself finds a circle, through a use group and the crate root.
#[test]
fn a_circle_is_found() {
    assert_eq!(crate_paths("use crate::{a, b::{c, d}, self};\nlet x = crate::e::f();"), ["a", "b", "e"]);
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("lib".into());
    g.entry("lib".into()).or_default().insert("a".into());
    g.entry("c".into()).or_default().insert("a".into());
    let found = circles(&g);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].iter().collect::<BTreeSet<_>>(), ["a", "b", "lib"].iter().map(|s| s.to_string()).collect::<BTreeSet<_>>().iter().collect());
}
