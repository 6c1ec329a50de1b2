//! The crate's top-level modules keep the layers the crate root declares (`src/lib.rs`,
//! "Layers") and form no cycles but the ones listed in [`KNOWN_CYCLES`] (none; the list can only
//! shrink); the files of one module import each other in one direction. No database: this reads `src/**/*.rs` the way `scripts/module-deps` does (that
//! script prints the whole graph in dependency order; keep the two in step).
//!
//! Each file belongs to its top-level module (`src/ops/x.rs` → `ops`, `src/cli.rs` → `cli`;
//! `lib.rs` and `main.rs` are the crate root and belong to none). A module depends on another
//! when its code names it: `crate::other`, `$crate::other`, `crate::{other, ..}`, or a `super::`
//! path that climbs out of its own module. Comments and string literals are skipped, so a doc
//! link is no dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Cycles tolerated, each a strongly connected component (its modules, sorted). Empty since
/// issue 18: the modules form a strict order. A cycle not listed here fails the test; so does a
/// listed one that no longer exists as listed, so this list can only shrink.
const KNOWN_CYCLES: &[&[&str]] = &[];

type Graph = BTreeMap<String, BTreeSet<String>>;

#[test]
fn top_level_modules_form_no_cycle_but_the_known_ones() {
    let graph = graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(graph.contains_key("http") && graph.contains_key("storage"), "read the crate's modules: {graph:?}");
    let problems = check(&graph, KNOWN_CYCLES);
    assert!(problems.is_empty(), "module cycles (see scripts/module-deps):\n{}", problems.join("\n"));
}

/// No import circle between the files of one module either: within `src/<module>/`, each file
/// (a subdirectory counts as one) uses its siblings in one direction. The module root (`mod.rs`
/// or `<module>.rs`) is left out: it declares and re-exports its files, which use its items.
#[test]
fn the_files_of_a_module_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut problems = Vec::new();
    let mut modules = 0;
    for entry in std::fs::read_dir(&src).unwrap() {
        let dir = entry.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        modules += 1;
        let graph = file_graph(&dir);
        problems.extend(check(&graph, &[]).into_iter().map(|p| format!("{}: {p}", dir.display())));
    }
    assert!(modules > 5, "read the module directories of {}", src.display());
    assert!(problems.is_empty(), "import circles between the files of a module:\n{}", problems.join("\n"));
}

/// The files of the module directory `dir` → the sibling files each one names.
fn file_graph(dir: &Path) -> Graph {
    let top = dir.file_name().unwrap().to_string_lossy().into_owned();
    let mut graph = Graph::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        if name != "mod" && (p.is_dir() || p.extension().is_some_and(|e| e == "rs")) {
            graph.insert(name, BTreeSet::new());
        }
    }
    let children: BTreeSet<String> = graph.keys().cloned().collect();
    let mut files = Vec::new();
    collect_rs(dir, &mut files);
    for file in files {
        let rel = file.strip_prefix(dir).unwrap().with_extension("");
        let mut path: Vec<String> = std::iter::once(top.clone())
            .chain(rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()))
            .collect();
        if path.last().map(String::as_str) == Some("mod") {
            path.pop();
        }
        let Some(child) = path.get(1).cloned() else { continue }; // the module root
        let code = strip(&std::fs::read_to_string(&file).unwrap());
        for sibling in names_at(&code, &path, 1) {
            if children.contains(&sibling) && sibling != child {
                graph.get_mut(&child).unwrap().insert(sibling);
            }
        }
    }
    graph
}

#[test]
fn sibling_files_are_found_through_crate_and_super_paths() {
    let path = |p: &[&str]| p.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let code = strip(
        "use crate::ops::{decide::{apply, Decide}, types};\nuse super::review::x;\nuse crate::jobs::y;\n\
         fn f() { super::super::audit::g(); crate::ops::routes::X; }",
    );
    assert_eq!(
        names_at(&code, &path(&["ops", "types", "review"]), 1),
        ["audit", "decide", "routes", "types"].map(String::from).into_iter().collect::<BTreeSet<_>>()
    );
    assert_eq!(
        names_at(&code, &path(&["ops", "review"]), 1),
        ["decide", "review", "routes", "types"].map(String::from).into_iter().collect::<BTreeSet<_>>()
    );
}

/// The crate root declares the layers, top to bottom (`src/lib.rs`, "Layers": one numbered line
/// per layer); every top-level module is in exactly one, and uses only modules of lower layers.
#[test]
fn every_module_uses_only_the_layers_below_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let layers = declared_layers(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    assert!(layers.len() > 5, "read the declared layers from src/lib.rs: {layers:?}");
    let problems = check_layers(&graph(&src), &layers);
    assert!(problems.is_empty(), "the layers of src/lib.rs do not hold:\n{}", problems.join("\n"));
}

#[test]
fn the_layer_check_names_an_upward_use_a_same_layer_use_and_an_unplaced_module() {
    let doc = "//! # Layers\n//! Top to bottom:\n//! 1. `cli`\n//! 2. `http`, `ops`\n//! 3. `domain`\n//!\n//! # Next\n//! 4. `x`\n";
    let layers = declared_layers(doc);
    assert_eq!(layers, [vec!["cli"], vec!["http", "ops"], vec!["domain"]]);
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    assert!(check_layers(&graph(&[("cli", "http"), ("ops", "domain"), ("cli", "domain")]), &layers).is_empty());
    assert_eq!(
        check_layers(&graph(&[("domain", "ops"), ("http", "ops"), ("cli", "jobs")]), &layers),
        [
            "`cli` (layer 1) uses `jobs` (no layer)",
            "`domain` (layer 3) uses `ops` (layer 2), a layer above it",
            "`http` (layer 2) uses `ops` (layer 2), its own layer",
            "`jobs` is in no layer of src/lib.rs",
        ]
    );
    assert_eq!(
        check_layers(&graph(&[("cli", "http")]), &layers),
        ["`domain` is declared but no module has that name", "`ops` is declared but no module has that name"]
    );
}

/// The layers the crate root's "# Layers" section declares: its numbered lines, top first, each
/// the backquoted module names on it.
fn declared_layers(lib_rs: &str) -> Vec<Vec<String>> {
    let mut in_section = false;
    let mut layers = Vec::new();
    for line in lib_rs.lines() {
        let Some(doc) = line.strip_prefix("//!") else { continue };
        let doc = doc.trim();
        if doc.starts_with('#') {
            in_section = doc == "# Layers";
            continue;
        }
        let numbered = doc.split_once(". ").filter(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
        if let (true, Some((_, rest))) = (in_section, numbered) {
            layers.push(rest.split('`').skip(1).step_by(2).map(str::to_owned).collect());
        }
    }
    layers
}

/// Every way `graph` breaks the declared `layers`; empty when it keeps them.
fn check_layers(graph: &Graph, layers: &[Vec<String>]) -> Vec<String> {
    let layer_of = |m: &str| layers.iter().position(|l| l.iter().any(|x| x == m));
    let name = |m: &str| match layer_of(m) {
        Some(n) => format!("`{m}` (layer {})", n + 1),
        None => format!("`{m}` (no layer)"),
    };
    let mut problems = Vec::new();
    for (module, uses) in graph {
        for used in uses {
            match (layer_of(module), layer_of(used)) {
                (Some(a), Some(b)) if a == b => {
                    problems.push(format!("{} uses {}, its own layer", name(module), name(used)))
                }
                (Some(a), Some(b)) if a > b => {
                    problems.push(format!("{} uses {}, a layer above it", name(module), name(used)))
                }
                (Some(_), None) => problems.push(format!("{} uses {}", name(module), name(used))),
                _ => {}
            }
        }
        if layer_of(module).is_none() {
            problems.push(format!("`{module}` is in no layer of src/lib.rs"));
        }
    }
    for declared in layers.iter().flatten().filter(|m| !graph.contains_key(m.as_str())) {
        problems.push(format!("`{declared}` is declared but no module has that name"));
    }
    problems.sort();
    problems
}

/// The checker itself: a new cycle is named with its edges, a listed one that is gone is
/// reported, one that shrank is named with what is left.
#[test]
fn the_check_names_a_new_cycle_and_a_listed_cycle_that_is_gone_or_shrank() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g = Graph::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    let layered = graph(&[("cli", "startup"), ("startup", "http"), ("ops", "http")]);
    assert!(check(&layered, &[]).is_empty());

    let cyclic = graph(&[("cli", "startup"), ("startup", "http"), ("http", "startup")]);
    let problems = check(&cyclic, &[]);
    assert_eq!(problems, ["new cycle {http, startup}: http -> startup, startup -> http"]);
    assert!(check(&cyclic, &[&["http", "startup"]]).is_empty());

    let problems = check(&layered, &[&["http", "startup"]]);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].starts_with("the known cycle {http, startup} no longer exists"), "{problems:?}");

    let smaller = graph(&[("a", "b"), ("b", "a"), ("b", "c")]);
    let problems = check(&smaller, &[&["a", "b", "c"]]);
    assert_eq!(problems.len(), 1);
    assert!(problems[0].starts_with("the known cycle {a, b, c} shrank to {a, b}"), "{problems:?}");

    // Comments, strings and inline test modules are no dependencies; groups and `super::` are.
    let code = strip(
        "//! see [`crate::ops`]\nuse crate::{http::{self, AppState}, jobs};\nfn f() { let s = \"crate::console\"; \
         let c = '\"'; super::metrics::x(); }\n#[cfg(test)] mod tests { use super::*; fn g() { super::y(); } }",
    );
    let found = references(&code, &["cli".to_owned()]);
    assert_eq!(found, ["http", "jobs", "metrics"].map(String::from).into_iter().collect::<BTreeSet<_>>());
}

/// Every problem with the graph's cycles against `known`; empty when all is well.
fn check(graph: &Graph, known: &[&[&str]]) -> Vec<String> {
    let cycles: Vec<Vec<String>> = sccs(graph).into_iter().filter(|c| c.len() > 1).collect();
    let known: Vec<Vec<String>> = known
        .iter()
        .map(|c| {
            let mut c: Vec<String> = c.iter().map(|m| m.to_string()).collect();
            c.sort();
            c
        })
        .collect();
    let mut problems = Vec::new();
    for cycle in &cycles {
        if known.contains(cycle) || known.iter().any(|k| cycle.iter().all(|m| k.contains(m))) {
            continue; // a listed cycle, or part of one (reported below as shrunk)
        }
        let edges: Vec<String> = cycle
            .iter()
            .flat_map(|a| graph[a].iter().filter(|b| cycle.contains(b)).map(move |b| format!("{a} -> {b}")))
            .collect();
        problems.push(format!("new cycle {{{}}}: {}", cycle.join(", "), edges.join(", ")));
    }
    for listed in &known {
        if cycles.contains(listed) {
            continue;
        }
        let left: Vec<String> = cycles
            .iter()
            .filter(|c| c.iter().all(|m| listed.contains(m)))
            .map(|c| format!("{{{}}}", c.join(", ")))
            .collect();
        if left.is_empty() {
            problems.push(format!(
                "the known cycle {{{}}} no longer exists: remove it from KNOWN_CYCLES",
                listed.join(", ")
            ));
        } else {
            problems.push(format!(
                "the known cycle {{{}}} shrank to {}: list that instead in KNOWN_CYCLES",
                listed.join(", "),
                left.join(" and ")
            ));
        }
    }
    problems
}

/// Top-level module → the top-level modules its files name.
fn graph(src: &Path) -> Graph {
    let mut files = Vec::new();
    collect_rs(src, &mut files);
    let paths: Vec<(PathBuf, Vec<String>)> = files
        .into_iter()
        .map(|file| {
            let rel = file.strip_prefix(src).unwrap().with_extension("");
            let mut path: Vec<String> =
                rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if path.last().map(String::as_str) == Some("mod") {
                path.pop();
            }
            (file, path)
        })
        .filter(|(_, path)| path != &["lib"] && path != &["main"])
        .collect();
    let mut graph: Graph = paths.iter().map(|(_, path)| (path[0].clone(), BTreeSet::new())).collect();
    let modules: BTreeSet<String> = graph.keys().cloned().collect();
    for (file, path) in &paths {
        let code = strip(&std::fs::read_to_string(file).unwrap());
        for other in references(&code, path) {
            if modules.contains(&other) && other != path[0] {
                graph.get_mut(&path[0]).unwrap().insert(other);
            }
        }
    }
    graph
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `text` with comments, string and char literals blanked.
fn strip(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let at = |i: usize, pat: &str| pat.chars().enumerate().all(|(k, p)| s.get(i + k) == Some(&p));
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if at(i, "//") {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if at(i, "/*") {
            let mut depth = 0;
            loop {
                if i >= s.len() {
                    break;
                } else if at(i, "/*") {
                    depth += 1;
                    i += 2;
                } else if at(i, "*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if let Some(hashes) = raw_string_start(&s, i) {
            let mut j = i;
            while s[j] != '"' {
                j += 1;
            }
            j += 1;
            let close: String = std::iter::once('"').chain(std::iter::repeat_n('#', hashes)).collect();
            while j < s.len() && !at(j, &close) {
                j += 1;
            }
            i = (j + close.len()).min(s.len());
            out.push_str("\"\"");
        } else if c == '"' {
            let mut j = i + 1;
            while j < s.len() && s[j] != '"' {
                j += if s[j] == '\\' { 2 } else { 1 };
            }
            i = j + 1;
            out.push_str("\"\"");
        } else if let Some(len) = char_literal(&s, i) {
            i += len;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `i`, `r"`, `r#"`, `br##"`, …: the number of `#`.
fn raw_string_start(s: &[char], i: usize) -> Option<usize> {
    if i > 0 && is_ident(s[i - 1]) {
        return None;
    }
    let mut j = i;
    if s.get(j) == Some(&'b') {
        j += 1;
    }
    if s.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|&&c| c == '#').count();
    (s.get(j + hashes) == Some(&'"')).then_some(hashes)
}

/// At `i`, a char literal (`'a'`, `'\n'`, `'\u{1F600}'`), not a lifetime: its length.
fn char_literal(s: &[char], i: usize) -> Option<usize> {
    if s.get(i) != Some(&'\'') {
        return None;
    }
    match s.get(i + 1)? {
        '\\' => {
            let end = (i + 2..s.len().min(i + 14)).find(|&j| s[j] == '\'' && j > i + 2)?;
            Some(end - i + 1)
        }
        '\'' => None,
        _ => (s.get(i + 2) == Some(&'\'')).then_some(3),
    }
}

/// The top-level module names `code` (of the file at module `path`) refers to.
fn references(code: &str, path: &[String]) -> BTreeSet<String> {
    names_at(code, path, 0)
}

/// The names `code` (of the file at module `path`) reaches at depth `level` of the module tree:
/// 0 is the crate root's modules, 1 the files of `path[0]` (through `crate::path[0]::x` or a
/// `super::` chain that climbs to `path[0]`).
fn names_at(code: &str, path: &[String], level: usize) -> BTreeSet<String> {
    let s: Vec<char> = code.chars().collect();
    let mut found = BTreeSet::new();
    let mut inline: Vec<(String, usize)> = Vec::new(); // inline `mod name { .. }` and its depth
    let mut depth = 0;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '{' {
            depth += 1;
            i += 1;
        } else if c == '}' {
            if inline.last().is_some_and(|(_, d)| *d == depth) {
                inline.pop();
            }
            depth = depth.saturating_sub(1);
            i += 1;
        } else if is_ident(c) {
            // Whole words only (`$crate` is the word `crate`).
            let (word, end) = ident_at(&s, i);
            i = end;
            match word.as_str() {
                "mod" => {
                    let (name, j) = ident_at(&s, skip_ws(&s, i));
                    let j = skip_ws(&s, j);
                    if !name.is_empty() && s.get(j) == Some(&'{') {
                        depth += 1;
                        inline.push((name, depth));
                        i = j + 1;
                    }
                }
                "crate" | "super" => {
                    let mut ups = usize::from(word == "super");
                    let mut j = i;
                    // `super::super::…`
                    loop {
                        let k = skip_ws(&s, j);
                        if !(s.get(k) == Some(&':') && s.get(k + 1) == Some(&':')) {
                            j = usize::MAX;
                            break;
                        }
                        let k = skip_ws(&s, k + 2);
                        let (next, after) = ident_at(&s, k);
                        if word == "super" && next == "super" {
                            ups += 1;
                            j = after;
                            continue;
                        }
                        j = k;
                        break;
                    }
                    if j == usize::MAX {
                        continue;
                    }
                    if word == "super" {
                        let here = path.len() + inline.len();
                        if here.checked_sub(ups) != Some(level) {
                            i = j; // past the whole `super::super::…` chain
                            continue; // not at that depth (or not valid Rust)
                        }
                    } else {
                        // `crate::` then the path down to `level`, which must be this file's own.
                        let mut matched = true;
                        for expected in path.iter().take(level) {
                            let (next, after) = ident_at(&s, j);
                            let k = skip_ws(&s, after);
                            if next != *expected || !(s.get(k) == Some(&':') && s.get(k + 1) == Some(&':')) {
                                matched = false;
                                break;
                            }
                            j = skip_ws(&s, k + 2);
                        }
                        if !matched || path.len() < level {
                            continue;
                        }
                    }
                    if s.get(j) == Some(&'{') {
                        found.extend(group_heads(&s, j));
                    } else {
                        let (name, _) = ident_at(&s, j);
                        if !name.is_empty() {
                            found.insert(name);
                        }
                    }
                    i = j;
                }
                _ => {}
            }
        } else {
            i += 1;
        }
    }
    found
}

fn skip_ws(s: &[char], mut i: usize) -> usize {
    while s.get(i).is_some_and(|c| c.is_whitespace()) {
        i += 1;
    }
    i
}

fn ident_at(s: &[char], i: usize) -> (String, usize) {
    let name: String = s[i.min(s.len())..].iter().take_while(|&&c| is_ident(c)).collect();
    let len = name.chars().count();
    (name, i + len)
}

/// The first identifier of each item of the `{ .. }` group opening at `open`.
fn group_heads(s: &[char], open: usize) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    let mut i = open;
    while i < s.len() {
        match s[i] {
            '{' => {
                depth += 1;
                if depth == 1 {
                    item_start = true;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => item_start = true,
            c if depth == 1 && item_start && is_ident(c) => {
                let (name, end) = ident_at(s, i);
                heads.push(name);
                item_start = false;
                i = end;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    heads
}

/// Tarjan's strongly connected components, each sorted.
fn sccs(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(st: &mut State<'g>, v: &'g str) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        st.on_stack.insert(v);
        for w in &st.graph[v] {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let low = st.low[v].min(st.low[w]);
                st.low.insert(v, low);
            } else if st.on_stack.contains(w) {
                let low = st.low[v].min(st.index[w]);
                st.low.insert(v, low);
            }
        }
        if st.low[v] == st.index[v] {
            let mut component = Vec::new();
            loop {
                let w = st.stack.pop().unwrap();
                st.on_stack.remove(w);
                component.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            component.sort();
            st.out.push(component);
        }
    }
    let mut st = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.out
}
