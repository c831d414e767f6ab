//! Fails when two modules of one crate import each other, directly or through others.
//!
//! A module is a source file (inline `mod x { .. }` blocks belong to their file). An edge M → N is a
//! `crate::…`, `super::…` or `self::…` path in M that names an item of N, resolved to the deepest
//! module the path reaches. Edges to M's own ancestors are not counted: a child using its parent's
//! items, and a parent declaring or re-exporting its children, is how Rust nests modules, not a
//! dependency between peers. Every other cycle (siblings, cousins, across subtrees) is reported with
//! the files that form it and one path that closes each edge, so the fix is findable.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every crate root of the workspace (the fuzz target is not a member but is source too).
fn crate_roots(workspace: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let mut dirs = vec![workspace.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() && !name.starts_with('.') && name != "target" && name != "tests" {
                dirs.push(path);
            } else if name == "Cargo.toml" {
                for root in ["src/lib.rs", "src/main.rs"] {
                    let file = dir.join(root);
                    if file.is_file() {
                        roots.push(file);
                    }
                }
            }
        }
    }
    roots.sort();
    roots
}

/// Strips comments and string/char literals so that paths in them are not read as imports.
fn code_only(source: &str) -> String {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &source[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').unwrap_or(rest.len());
            i += end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map(|e| e + 2).unwrap_or(rest.len());
            i += end;
        } else if let Some(hashes) = raw_string_hashes(rest) {
            let close = format!("\"{}", "#".repeat(hashes));
            let body = 2 + hashes;
            let end = rest[body..].find(&close).map(|e| body + e + close.len());
            i += end.unwrap_or(rest.len());
            out.push_str("\"\"");
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            i = j + 1;
            out.push_str("\"\"");
        } else if bytes[i] == b'\'' && is_char_literal(rest) {
            let end = rest[1..].find('\'').map(|e| e + 2).unwrap_or(1);
            i += end;
            out.push_str("' '");
        } else {
            let ch = rest.chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

fn raw_string_hashes(rest: &str) -> Option<usize> {
    let tail = rest.strip_prefix('r').or_else(|| rest.strip_prefix("br"))?;
    let hashes = tail.bytes().take_while(|&b| b == b'#').count();
    (tail.as_bytes().get(hashes) == Some(&b'"')).then_some(hashes)
}

/// A `'` starts a char literal (not a lifetime) when it closes within a few characters.
fn is_char_literal(rest: &str) -> bool {
    let body = &rest[1..];
    if body.starts_with('\\') {
        return true;
    }
    let mut chars = body.chars();
    chars.next();
    chars.next() == Some('\'')
}

/// The child modules a file declares with `mod name;` (not inline blocks), with `#[path]` honoured.
fn declared_children(code: &str) -> Vec<(String, Option<String>)> {
    let mut children = Vec::new();
    let mut pending_path: Option<String> = None;
    for line in code.lines() {
        let line = line.trim();
        if line.starts_with("#[path") {
            pending_path = Some(String::new());
            continue;
        }
        let decl = line
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub(super) ")
            .trim_start_matches("pub ");
        if let Some(rest) = decl.strip_prefix("mod ")
            && let Some(name) = rest.strip_suffix(';')
        {
            children.push((name.trim().to_string(), pending_path.take()));
        } else if !line.starts_with("#[") {
            pending_path = None;
        }
    }
    children
}

struct Module {
    /// Path from the crate root, empty for the root itself.
    path: Vec<String>,
    file: PathBuf,
    code: String,
}

fn load_crate(root: &Path) -> Vec<Module> {
    let mut modules = Vec::new();
    // (module path, file, directory its children live in)
    let mut todo = vec![(
        Vec::new(),
        root.to_path_buf(),
        root.parent().unwrap().to_path_buf(),
    )];
    while let Some((path, file, child_dir)) = todo.pop() {
        let code = code_only(&fs::read_to_string(&file).unwrap());
        for (name, custom) in declared_children(&code) {
            if custom.is_some() {
                // #[path] modules are rare here; their location is not derivable by name.
                continue;
            }
            let flat = child_dir.join(format!("{name}.rs"));
            let nested = child_dir.join(&name).join("mod.rs");
            let (child_file, grandchild_dir) = if flat.is_file() {
                (flat, child_dir.join(&name))
            } else if nested.is_file() {
                (nested, child_dir.join(&name))
            } else {
                panic!("{}: mod {name}; has no file", file.display());
            };
            let mut child_path = path.clone();
            child_path.push(name);
            todo.push((child_path, child_file, grandchild_dir));
        }
        modules.push(Module { path, file, code });
    }
    modules
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Expands the path tree that starts at `text` (just after `crate::`, `super::` or `self::`) into
/// every leaf path: `a::{b, c::d}` gives [a, b], [a, c, d].
fn path_trees(text: &str) -> Vec<Vec<String>> {
    fn parse(chars: &[char], pos: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut current = prefix;
        loop {
            while *pos < chars.len() && chars[*pos].is_whitespace() {
                *pos += 1;
            }
            if *pos < chars.len() && chars[*pos] == '{' {
                *pos += 1;
                loop {
                    parse(chars, pos, current.clone(), out);
                    while *pos < chars.len() && chars[*pos].is_whitespace() {
                        *pos += 1;
                    }
                    match chars.get(*pos) {
                        Some(',') => *pos += 1,
                        Some('}') => {
                            *pos += 1;
                            return;
                        }
                        _ => return,
                    }
                    while *pos < chars.len() && chars[*pos].is_whitespace() {
                        *pos += 1;
                    }
                    if chars.get(*pos) == Some(&'}') {
                        *pos += 1;
                        return;
                    }
                }
            }
            let start = *pos;
            while *pos < chars.len() && is_ident_char(chars[*pos]) {
                *pos += 1;
            }
            if start == *pos {
                out.push(current);
                return;
            }
            current.push(chars[start..*pos].iter().collect());
            if chars.get(*pos) == Some(&':') && chars.get(*pos + 1) == Some(&':') {
                *pos += 2;
            } else {
                out.push(current);
                return;
            }
        }
    }
    let chars: Vec<char> = text.chars().take(4000).collect();
    let mut out = Vec::new();
    parse(&chars, &mut 0, Vec::new(), &mut out);
    out
}

/// The modules this file's paths reach, with one example path for each.
fn references(module: &Module, known: &BTreeSet<Vec<String>>) -> BTreeMap<Vec<String>, String> {
    let code = &module.code;
    let mut found = BTreeMap::new();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let preceded_by_ident = code[..i]
            .chars()
            .next_back()
            .is_some_and(|c| is_ident_char(c) || c == ':');
        let anchor = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|a| rest.starts_with(a) && !preceded_by_ident);
        let Some(anchor) = anchor else {
            i += rest.chars().next().unwrap().len_utf8();
            continue;
        };
        let mut base: Vec<String> = match anchor {
            "crate::" => Vec::new(),
            "self::" => module.path.clone(),
            _ => module.path[..module.path.len().saturating_sub(1)].to_vec(),
        };
        let mut after = &rest[anchor.len()..];
        while let Some(more) = after.strip_prefix("super::") {
            base.pop();
            after = more;
        }
        for leaf in path_trees(after) {
            let mut full = base.clone();
            full.extend(leaf.iter().cloned());
            let target = (0..=full.len())
                .rev()
                .map(|n| full[..n].to_vec())
                .find(|p| known.contains(p))
                .unwrap_or_default();
            let is_ancestor_or_self = module.path.starts_with(&target);
            if !is_ancestor_or_self {
                let shown = format!("{}{}", &rest[..anchor.len()], leaf.join("::"));
                found.entry(target).or_insert(shown);
            }
        }
        i += anchor.len();
    }
    found
}

/// Tarjan's strongly connected components, returned when they hold more than one module.
fn cycles(edges: &BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeMap<Vec<String>, String>>,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        on_stack: BTreeSet<Vec<String>>,
        next: usize,
        out: Vec<Vec<Vec<String>>>,
    }
    fn visit(s: &mut State, v: &Vec<String>) {
        s.index.insert(v.clone(), s.next);
        s.low.insert(v.clone(), s.next);
        s.next += 1;
        s.stack.push(v.clone());
        s.on_stack.insert(v.clone());
        let targets: Vec<Vec<String>> = s
            .edges
            .get(v)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        for w in &targets {
            if !s.index.contains_key(w) {
                visit(s, w);
                let low = s.low[v].min(s.low[w]);
                s.low.insert(v.clone(), low);
            } else if s.on_stack.contains(w) {
                let low = s.low[v].min(s.index[w]);
                s.low.insert(v.clone(), low);
            }
        }
        if s.low[v] == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack.remove(&w);
                let done = &w == v;
                component.push(w);
                if done {
                    break;
                }
            }
            if component.len() > 1 {
                component.sort();
                s.out.push(component);
            }
        }
    }
    let mut state = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !state.index.contains_key(v) {
            visit(&mut state, v);
        }
    }
    state.out
}

fn show(path: &[String]) -> String {
    if path.is_empty() {
        "crate".to_string()
    } else {
        path.join("::")
    }
}

/// The cycles of every crate, as printable lines.
fn workspace_cycles(workspace: &Path) -> Vec<String> {
    let mut report = Vec::new();
    for root in crate_roots(workspace) {
        let modules = load_crate(&root);
        let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
        let files: BTreeMap<Vec<String>, &PathBuf> =
            modules.iter().map(|m| (m.path.clone(), &m.file)).collect();
        let edges: BTreeMap<_, _> = modules
            .iter()
            .map(|m| (m.path.clone(), references(m, &known)))
            .collect();
        for component in cycles(&edges) {
            let members: BTreeSet<&Vec<String>> = component.iter().collect();
            let mut lines = vec![format!(
                "cycle in {} between {} modules:",
                root.strip_prefix(workspace).unwrap_or(&root).display(),
                component.len()
            )];
            for from in &component {
                for (to, example) in &edges[from] {
                    if members.contains(to) {
                        let file = files[from].strip_prefix(workspace).unwrap_or(files[from]);
                        lines.push(format!(
                            "  {} -> {}   ({}: {example})",
                            show(from),
                            show(to),
                            file.display()
                        ));
                    }
                }
            }
            report.push(lines.join("\n"));
        }
    }
    report
}

#[test]
fn no_module_imports_one_that_imports_it_back() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = workspace_cycles(workspace);
    assert!(
        report.is_empty(),
        "{} import cycle(s):\n{}",
        report.len(),
        report.join("\n")
    );
}

/// The checker itself must see a cycle when there is one, and not see one that is parent/child.
#[test]
fn the_checker_finds_a_planted_cycle_and_ignores_nesting() {
    let dir = std::env::temp_dir().join(format!("evenflush-cycles-{}", std::process::id()));
    let src = dir.join("src");
    fs::create_dir_all(src.join("parent")).unwrap();
    fs::write(dir.join("Cargo.toml"), "[package]\nname = \"planted\"\n").unwrap();
    fs::write(
        src.join("lib.rs"),
        "mod a;\nmod b;\nmod parent;\npub use crate::a::A;\n",
    )
    .unwrap();
    fs::write(
        src.join("a.rs"),
        "use crate::{b::{B, other}, parent};\npub struct A;\n",
    )
    .unwrap();
    fs::write(src.join("b.rs"), "// crate::a::A in a comment is not an import\npub fn f() { let _ = \"crate::a\"; super::a::A; }\n").unwrap();
    fs::write(
        src.join("parent/mod.rs"),
        "mod child;\nuse self::child::C;\npub struct P;\n",
    )
    .unwrap();
    fs::write(
        src.join("parent/child.rs"),
        "use super::P;\nuse crate::parent::P as Q;\npub struct C;\n",
    )
    .unwrap();
    let report = workspace_cycles(&dir);
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(report.len(), 1, "{report:?}");
    assert!(
        report[0].contains("a -> b") && report[0].contains("b -> a"),
        "{}",
        report[0]
    );
    assert!(!report[0].contains("parent"), "{}", report[0]);
}
