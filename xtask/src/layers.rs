//! The check of the hypervisor's module layers: the layers `hypervisor/src/main.rs` declares
//! (one `//! - layer N, `module`: ...` line per module), every module's references to the
//! others, and a refusal of each reference to the same or a higher layer, of each module no
//! layer names, and of each cycle, named.
//!
//! A module is a top-level file or directory of `hypervisor/src` (`arch/aarch64/gic.rs` is
//! `arch`, `sched/tasks.rs` is `sched`) or a `mod` that `main.rs` declares inline (`config`);
//! `main.rs` itself is `main`. A reference is a `crate::` path in code (`crate::vm::vm(id)`,
//! `use crate::vm::{self, VmState}`, each name of a grouped `use crate::{irq, vm::{self, Vm}}`)
//! or a use of a macro another module defines (`keel_println!`, defined in `console.rs`).
//! Comments, strings and character literals are not code; a `crate::` path to an item of
//! the crate root (not a module) refers to `main`; a `super::` path is taken to stay in its
//! module (Keel uses them only in its modules' own files, `sched/tasks.rs` to `sched`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The macros Keel exports from a module (`#[macro_export]` puts them at the crate root), and
/// the module that defines each: using one refers to that module.
const MACROS: [(&str, &str); 2] = [
    ("keel_println", "console"),
    ("keel_println_limited", "console"),
];

/// The crate root's module name.
const ROOT: &str = "main";

/// One reference of a module to another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    /// The file that makes it, relative to the source root (`irq.rs`).
    pub file: String,
    /// Its line (from 1).
    pub line: usize,
    /// The module of that file.
    pub from: String,
    /// The module referred to.
    pub to: String,
}

/// Checks `hypervisor/src` of the workspace: a summary line when the layers hold, every
/// violation (one a line) otherwise.
pub fn check_workspace() -> Result<String, String> {
    let root = crate::workspace().join("hypervisor/src");
    let mut sources = Vec::new();
    collect(&root, &root, &mut sources)?;
    check(&sources).map_err(|problems| {
        let located: Vec<String> = problems
            .iter()
            .map(|problem| match problem.starts_with("cycle:") {
                true => problem.clone(),
                false => format!("hypervisor/src/{problem}"),
            })
            .collect();
        format!(
            "{}\n(each module refers only to modules of lower layers: hypervisor/src/main.rs declares them)",
            located.join("\n")
        )
    })
}

/// Checks `core/src` of the workspace (the portable core declares no layers): a summary line
/// when its modules' references, test code included, form no cycle; every cycle otherwise.
pub fn check_core_workspace() -> Result<String, String> {
    let root = crate::workspace().join("core/src");
    let mut sources = Vec::new();
    collect(&root, &root, &mut sources)?;
    check_acyclic(&sources).map_err(|problems| {
        format!(
            "{}
(core/src: no module may reach itself through others' references)",
            problems.join("\n")
        )
    })
}

/// The cycles among the modules of one crate's sources, each a problem line.
pub fn check_acyclic(sources: &[(String, String)]) -> Result<String, Vec<String>> {
    let known: BTreeSet<String> = sources.iter().map(|(path, _)| module_of(path)).collect();
    let mut all = Vec::new();
    for (path, text) in sources {
        all.extend(references(path, text, &known));
    }
    let found = cycles(&all);
    if found.is_empty() {
        Ok(format!(
            "{} modules, {} references, no cycle",
            known.len(),
            all.len()
        ))
    } else {
        Err(found
            .iter()
            .map(|cycle| format!("cycle: {}", cycle.join(" -> ")))
            .collect())
    }
}

/// Every `.rs` file under `dir`, as (path relative to `root` with `/`, text), sorted.
pub fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths: Vec<_> = entries
        .map(|entry| entry.map(|e| e.path()))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("{}: {e}", dir.display()))?;
    paths.sort();
    for path in paths {
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let relative = path.strip_prefix(root).unwrap_or(&path);
            let name = relative
                .components()
                .map(|c| c.as_os_str().to_string_lossy())
                .collect::<Vec<_>>()
                .join("/");
            out.push((name, text));
        }
    }
    Ok(())
}

/// Checks the sources of one crate (`(path relative to its src, text)`, `main.rs` among
/// them): a summary when every module is in a layer and refers only to lower layers, else
/// every problem found (violations by file and line, missing modules, cycles by name).
pub fn check(sources: &[(String, String)]) -> Result<String, Vec<String>> {
    let Some((_, main)) = sources.iter().find(|(path, _)| path == "main.rs") else {
        return Err(vec!["main.rs: not found (it declares the layers)".into()]);
    };
    let layers = declared_layers(main).map_err(|problem| vec![problem])?;
    let mut modules: BTreeMap<String, String> = BTreeMap::new();
    for (path, _) in sources {
        modules
            .entry(module_of(path))
            .or_insert_with(|| path.clone());
    }
    for name in inline_modules(main) {
        modules.entry(name).or_insert_with(|| "main.rs".into());
    }
    let known: BTreeSet<String> = modules.keys().cloned().collect();
    let mut problems = Vec::new();
    for (module, path) in &modules {
        if !layers.contains_key(module) {
            problems.push(format!(
                "{path}: module `{module}` is in no layer: main.rs must name it in a `//! - layer N, `{module}`: ...` line"
            ));
        }
    }
    for module in layers.keys() {
        if !known.contains(module) {
            problems.push(format!(
                "main.rs: layer {} names `{module}`, which is no module of the crate",
                layers[module]
            ));
        }
    }
    let mut all = Vec::new();
    for (path, text) in sources {
        all.extend(references(path, text, &known));
    }
    for reference in &all {
        let (Some(&from), Some(&to)) = (layers.get(&reference.from), layers.get(&reference.to))
        else {
            continue;
        };
        if to >= from {
            let relation = if to == from { "its own" } else { "a higher" };
            let problem = format!(
                "{}:{}: `{}` (layer {from}) refers to `{}` (layer {to}), {relation} layer",
                reference.file, reference.line, reference.from, reference.to
            );
            // Two references on one line to the same module are one problem.
            if problems.last() != Some(&problem) {
                problems.push(problem);
            }
        }
    }
    for cycle in cycles(&all) {
        problems.push(format!("cycle: {}", cycle.join(" -> ")));
    }
    if problems.is_empty() {
        let count = layers.values().collect::<BTreeSet<_>>().len();
        Ok(format!(
            "{} modules in {count} layers, {} references, each to a lower layer",
            layers.len(),
            all.len()
        ))
    } else {
        Err(problems)
    }
}

/// The layer of each module as `main.rs` declares it: `//! - layer N, `module`: what it owns`.
pub fn declared_layers(main: &str) -> Result<BTreeMap<String, u32>, String> {
    let line = regex::Regex::new(r"^//!\s*-\s*layer\s+(\d+),\s*`([A-Za-z_][A-Za-z0-9_]*)`\s*:")
        .expect("valid pattern");
    let mut layers = BTreeMap::new();
    for (index, text) in main.lines().enumerate() {
        let Some(found) = line.captures(text.trim_start()) else {
            continue;
        };
        let layer: u32 = found[1]
            .parse()
            .map_err(|_| format!("main.rs:{}: layer {} is no number", index + 1, &found[1]))?;
        let module = found[2].to_string();
        if let Some(earlier) = layers.insert(module.clone(), layer) {
            return Err(format!(
                "main.rs:{}: `{module}` is declared twice (layer {earlier}, then layer {layer})",
                index + 1
            ));
        }
    }
    if layers.is_empty() {
        return Err(
            "main.rs: declares no layer (lines `//! - layer N, `module`: ...` expected)".into(),
        );
    }
    Ok(layers)
}

/// The modules `main.rs` declares with a body (`mod config { ... }`): they have no file.
fn inline_modules(main: &str) -> Vec<String> {
    let declaration =
        regex::Regex::new(r"^(?:pub(?:\([a-z]+\))?\s+)?mod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{")
            .expect("valid pattern");
    code_only(main)
        .lines()
        .filter_map(|line| declaration.captures(line).map(|c| c[1].to_string()))
        .collect()
}

/// The top-level module a file (relative to the source root) belongs to.
pub fn module_of(path: &str) -> String {
    match path.split_once('/') {
        Some((directory, _)) => directory.to_string(),
        None if path == "main.rs" || path == "lib.rs" => ROOT.into(),
        None => path.trim_end_matches(".rs").to_string(),
    }
}

/// What `crate::<name>` refers to: a module, a macro's module, or else the crate root.
fn target(name: &str, modules: &BTreeSet<String>) -> String {
    if let Some((_, module)) = MACROS.iter().find(|(macro_name, _)| *macro_name == name) {
        return (*module).into();
    }
    if modules.contains(name) {
        name.into()
    } else {
        ROOT.into()
    }
}

fn is_identifier(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every reference to another module in `text` (the file at `path`), in order.
pub fn references(path: &str, text: &str, modules: &BTreeSet<String>) -> Vec<Reference> {
    let from = module_of(path);
    let code: Vec<char> = code_only(text).chars().collect();
    let mut lines = vec![1usize; code.len() + 1];
    for i in 0..code.len() {
        lines[i + 1] = lines[i] + usize::from(code[i] == '\n');
    }
    let mut found = Vec::new();
    let mut add = |at: usize, name: &str| {
        let to = target(name, modules);
        if to != from {
            found.push(Reference {
                file: path.into(),
                line: lines[at],
                from: from.clone(),
                to,
            });
        }
    };
    let starts_word = |i: usize| i == 0 || !(is_identifier(code[i - 1]) || code[i - 1] == ':');
    let mut i = 0;
    while i < code.len() {
        if starts_word(i) && matches_at(&code, i, "crate") {
            let mut j = skip_spaces(&code, i + 5);
            if matches_at(&code, j, "::") {
                j = skip_spaces(&code, j + 2);
                if code.get(j) == Some(&'{') {
                    for (at, name) in group_heads(&code, j) {
                        add(at, &name);
                    }
                } else if let Some(name) = identifier_at(&code, j) {
                    add(j, &name);
                }
            }
            i += 5;
            continue;
        }
        if starts_word(i) {
            if let Some(name) = identifier_at(&code, i) {
                let after = skip_spaces(&code, i + name.chars().count());
                let is_macro = MACROS.iter().any(|(macro_name, _)| *macro_name == name);
                if is_macro && code.get(after) == Some(&'!') {
                    add(i, &name);
                }
                i += name.chars().count();
                continue;
            }
        }
        i += 1;
    }
    found
}

fn matches_at(code: &[char], at: usize, word: &str) -> bool {
    let word: Vec<char> = word.chars().collect();
    code.get(at..at + word.len()) == Some(&word[..])
        && (word.iter().all(|c| !is_identifier(*c))
            || code.get(at + word.len()).is_none_or(|c| !is_identifier(*c)))
}

fn skip_spaces(code: &[char], mut at: usize) -> usize {
    while code.get(at).is_some_and(|c| c.is_whitespace()) {
        at += 1;
    }
    at
}

fn identifier_at(code: &[char], at: usize) -> Option<String> {
    let first = *code.get(at)?;
    if !(first.is_alphabetic() || first == '_') {
        return None;
    }
    Some(
        code[at..]
            .iter()
            .take_while(|c| is_identifier(**c))
            .collect(),
    )
}

/// The first name of each item of the group opening at `open` (`{ irq, vm::{self, Vm} }`
/// gives `irq` and `vm`), with its position; nested groups belong to their item.
fn group_heads(code: &[char], open: usize) -> Vec<(usize, String)> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    let mut i = open;
    while i < code.len() {
        match code[i] {
            '{' => {
                depth += 1;
                item_start = depth == 1;
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            ',' if depth == 1 => item_start = true,
            c if c.is_whitespace() => {}
            _ if item_start && depth == 1 => {
                item_start = false;
                if let Some(name) = identifier_at(code, i) {
                    i += name.chars().count();
                    heads.push((i - name.chars().count(), name));
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    heads
}

/// `source` with comments, string literals and character literals blanked (each character
/// but a newline becomes a space, so lines keep their numbers).
pub fn code_only(source: &str) -> String {
    let chars: Vec<char> = source.chars().collect();
    let mut out = String::with_capacity(source.len());
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let after_identifier = i > 0 && is_identifier(chars[i - 1]);
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
        } else if let Some(hashes) = raw_string_at(&chars, i).filter(|_| !after_identifier) {
            // r"...", r#"..."#, br#"..."#: ends at a quote followed by as many hashes.
            let open = i + chars[i..].iter().position(|&c| c == '"').unwrap_or(0);
            out.extend(std::iter::repeat_n(' ', open + 1 - i));
            i = open + 1;
            while i < chars.len() {
                let closes =
                    chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#'));
                if closes {
                    out.extend(std::iter::repeat_n(' ', hashes + 1));
                    i += hashes + 1;
                    break;
                }
                blank(&mut out, chars[i]);
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
                if i < chars.len() {
                    blank(&mut out, chars[i]);
                    i += 1;
                }
            }
            if i < chars.len() {
                out.push(' ');
                i += 1;
            }
        } else if c == '\'' && character_literal_length(&chars, i).is_some() {
            let length = character_literal_length(&chars, i).unwrap_or(1);
            out.extend(std::iter::repeat_n(' ', length));
            i += length;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The number of `#`s of a raw string literal starting at `at` (`r"`, `r#"`, `br##"`).
fn raw_string_at(chars: &[char], at: usize) -> Option<usize> {
    let mut i = at;
    if chars.get(i) == Some(&'b') {
        i += 1;
    }
    if chars.get(i) != Some(&'r') {
        return None;
    }
    i += 1;
    let hashes = chars[i..].iter().take_while(|&&c| c == '#').count();
    (chars.get(i + hashes) == Some(&'"')).then_some(hashes)
}

/// The length of a character literal starting at `at` (`'a'`, `'\n'`, `'\u{7f}'`), or None
/// for a lifetime (`'static`) or a label.
fn character_literal_length(chars: &[char], at: usize) -> Option<usize> {
    match chars.get(at + 1)? {
        '\\' => {
            let close = chars.get(at + 3..)?.iter().position(|&c| c == '\'')?;
            Some(close + 4)
        }
        _ => (chars.get(at + 2) == Some(&'\'')).then_some(3),
    }
}

/// The cycles among the modules, each by the names along it (`["sched", "vm", "sched"]`,
/// starting at its first module by name): the shortest one through each module that is on a
/// cycle, each cycle once.
pub fn cycles(references: &[Reference]) -> Vec<Vec<String>> {
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for reference in references {
        if reference.from != reference.to {
            edges
                .entry(&reference.from)
                .or_default()
                .insert(&reference.to);
        }
    }
    let mut found: Vec<Vec<String>> = Vec::new();
    for &start in edges.keys() {
        let Some(cycle) = shortest_cycle(&edges, start) else {
            continue;
        };
        // The same cycle found from another of its modules is the same rotation of it.
        let first = (0..cycle.len() - 1).min_by_key(|&i| cycle[i]).unwrap_or(0);
        let mut rotated: Vec<String> = cycle[first..cycle.len() - 1]
            .iter()
            .chain(&cycle[..first])
            .map(|name| name.to_string())
            .collect();
        rotated.push(rotated[0].clone());
        if !found.contains(&rotated) {
            found.push(rotated);
        }
    }
    found
}

/// The shortest way from `start` back to itself (breadth first, names in order), if any.
fn shortest_cycle<'a>(
    edges: &BTreeMap<&'a str, BTreeSet<&'a str>>,
    start: &'a str,
) -> Option<Vec<&'a str>> {
    let mut previous: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for &next in edges.get(node).into_iter().flatten() {
            if next == start {
                let mut path = vec![node];
                let mut at = node;
                while at != start {
                    at = previous[at];
                    path.push(at);
                }
                path.reverse();
                path.push(start);
                return Some(path);
            }
            if !previous.contains_key(next) {
                previous.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `main.rs` declaring `layers` (module, layer), with `body` after.
    fn main_rs(layers: &[(&str, u32)], body: &str) -> (String, String) {
        let mut text = String::from("//! A crate.\n//!\n");
        for (module, layer) in layers {
            text.push_str(&format!("//! - layer {layer}, `{module}`: what it owns.\n"));
        }
        text.push_str(body);
        ("main.rs".into(), text)
    }

    fn file(path: &str, text: &str) -> (String, String) {
        (path.into(), text.into())
    }

    fn modules(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|name| name.to_string()).collect()
    }

    #[test]
    fn an_upward_reference_is_refused_with_its_file_line_and_layers() {
        let sources = [
            main_rs(&[("a", 0), ("b", 1), ("main", 2)], "mod a;\nmod b;\n"),
            file("a.rs", "//! A.\npub fn f() {\n    crate::b::g();\n}\n"),
            file("b.rs", "//! B.\npub fn g() {}\n"),
        ];
        let problems = check(&sources).unwrap_err();
        assert_eq!(
            problems,
            ["a.rs:3: `a` (layer 0) refers to `b` (layer 1), a higher layer"]
        );
    }

    #[test]
    fn a_reference_within_the_same_layer_is_refused() {
        let sources = [
            main_rs(&[("a", 1), ("b", 1), ("main", 2)], ""),
            file("a.rs", "use crate::b;\n"),
            file("b.rs", "\n"),
        ];
        let problems = check(&sources).unwrap_err();
        assert_eq!(
            problems,
            ["a.rs:1: `a` (layer 1) refers to `b` (layer 1), its own layer"]
        );
    }

    #[test]
    fn each_name_of_a_grouped_import_is_a_reference_nested_groups_included() {
        let text = "use core::fmt;\n\nuse crate::{\n    c,\n    b::{self, inner::{X, Y}},\n};\n";
        let found = references("a.rs", text, &modules(&["a", "b", "c"]));
        let named: Vec<(usize, &str)> = found.iter().map(|r| (r.line, r.to.as_str())).collect();
        assert_eq!(named, [(4, "c"), (5, "b")]);

        let sources = [
            main_rs(&[("a", 0), ("b", 1), ("c", 1), ("main", 2)], ""),
            file("a.rs", text),
            file("b.rs", ""),
            file("c.rs", ""),
        ];
        assert_eq!(
            check(&sources).unwrap_err(),
            [
                "a.rs:4: `a` (layer 0) refers to `c` (layer 1), a higher layer",
                "a.rs:5: `a` (layer 0) refers to `b` (layer 1), a higher layer",
            ]
        );
    }

    #[test]
    fn a_console_macro_refers_to_the_module_that_defines_it() {
        let text =
            "use crate::keel_println_limited;\n\nfn f() {\n    keel_println!(\"x {}\", 1);\n}\n";
        let found = references("vm.rs", text, &modules(&["vm", "console"]));
        let named: Vec<(usize, &str)> = found.iter().map(|r| (r.line, r.to.as_str())).collect();
        assert_eq!(named, [(1, "console"), (4, "console")]);

        let sources = [
            main_rs(&[("vm", 1), ("console", 2), ("main", 3)], ""),
            file("vm.rs", "fn f() {\n    keel_println!(\"up\");\n}\n"),
            file(
                "console.rs",
                "#[macro_export]\nmacro_rules! keel_println {\n    ($($arg:tt)*) => { $crate::console::line(format_args!($($arg)*)) };\n}\n",
            ),
        ];
        assert_eq!(
            check(&sources).unwrap_err(),
            ["vm.rs:2: `vm` (layer 1) refers to `console` (layer 2), a higher layer"]
        );
    }

    #[test]
    fn a_crate_without_layers_is_checked_for_cycles_only() {
        let acyclic = [
            ("lib.rs".to_string(), "mod a; mod b;".to_string()),
            ("a.rs".to_string(), "use crate::b::X;".to_string()),
            ("b/mod.rs".to_string(), "pub struct X;".to_string()),
        ];
        assert!(check_acyclic(&acyclic).is_ok());
        let mut cyclic = acyclic.to_vec();
        cyclic.push((
            "b/tests.rs".to_string(),
            "fn t() { crate::a::f(); }".to_string(),
        ));
        assert_eq!(
            check_acyclic(&cyclic),
            Err(vec!["cycle: a -> b -> a".to_string()])
        );
    }

    #[test]
    fn a_cycle_is_named() {
        let sources = [
            main_rs(&[("a", 0), ("b", 1), ("main", 2)], ""),
            file("a.rs", "fn f() { crate::b::g() }\n"),
            file("b.rs", "fn g() { crate::a::f() }\n"),
        ];
        let problems = check(&sources).unwrap_err();
        assert!(
            problems.contains(&"cycle: a -> b -> a".to_string()),
            "{problems:?}"
        );

        let reference = |from: &str, to: &str| Reference {
            file: format!("{from}.rs"),
            line: 1,
            from: from.into(),
            to: to.into(),
        };
        let three = [
            reference("vm", "sched"),
            reference("sched", "irq"),
            reference("irq", "vm"),
            reference("irq", "arch"),
            reference("trap", "vm"),
        ];
        assert_eq!(cycles(&three), [["irq", "vm", "sched", "irq"]]);
        assert!(cycles(&three[1..]).is_empty());
        let two_ways = [
            reference("a", "b"),
            reference("b", "a"),
            reference("c", "a"),
            reference("a", "c"),
        ];
        assert_eq!(cycles(&two_ways), [["a", "b", "a"], ["a", "c", "a"]]);
    }

    #[test]
    fn a_clean_graph_passes_whatever_its_comments_and_strings_say() {
        let sources = [
            main_rs(
                &[("arch", 0), ("config", 0), ("vm", 1), ("sched", 2), ("main", 3)],
                "mod arch;\nmod sched;\nmod vm;\n\nmod config {\n    pub const N: usize = 1;\n}\n\nfn main() { sched::run(); }\n",
            ),
            file("arch/mod.rs", "pub mod cpu;\n"),
            file(
                "arch/cpu/regs.rs",
                "//! Registers: see crate::vm.\nglobal_asm!(r#\"\n    // crate::sched\n    \"quoted\" crate::vm\n\"#);\nuse super::X;\n",
            ),
            file(
                "vm.rs",
                "use crate::arch::cpu;\nuse crate::config::N;\n/// Not [`crate::sched::run`].\nconst Q: char = '\"';\nconst S: &str = \"crate::sched\";\nfn f<'a>(x: &'a str) -> &'a str { /* crate::sched /* nested */ crate::main */ x }\n",
            ),
            file(
                "sched/mod.rs",
                "mod tasks;\nuse crate::{arch::{cpu::{self}}, vm};\npub fn run() {}\n",
            ),
            file("sched/tasks.rs", "use super::run;\nuse crate::vm::f;\n"),
        ];
        assert_eq!(
            check(&sources),
            Ok("5 modules in 4 layers, 5 references, each to a lower layer".to_string())
        );
    }

    #[test]
    fn a_module_in_no_layer_is_refused() {
        let sources = [
            main_rs(
                &[("a", 0), ("main", 1)],
                "mod a;\nmod d;\nmod config {\n}\n",
            ),
            file("a.rs", ""),
            file("d.rs", "use crate::a;\n"),
        ];
        assert_eq!(
            check(&sources).unwrap_err(),
            [
                "main.rs: module `config` is in no layer: main.rs must name it in a `//! - layer N, `config`: ...` line",
                "d.rs: module `d` is in no layer: main.rs must name it in a `//! - layer N, `d`: ...` line",
            ]
        );
    }

    #[test]
    fn an_item_of_the_crate_root_is_a_reference_to_main() {
        let found = references(
            "vm.rs",
            "const N: usize = crate::MAX_VCPUS;\n",
            &modules(&["vm", "main"]),
        );
        assert_eq!(found[0].to, "main");
        let sources = [
            main_rs(
                &[("vm", 0), ("main", 1)],
                "pub const MAX_VCPUS: usize = 8;\n",
            ),
            file("vm.rs", "const N: usize = crate::MAX_VCPUS;\n"),
        ];
        assert_eq!(
            check(&sources).unwrap_err(),
            ["vm.rs:1: `vm` (layer 0) refers to `main` (layer 1), a higher layer"]
        );
    }

    #[test]
    fn files_map_to_their_top_level_module() {
        assert_eq!(module_of("arch/aarch64/gic.rs"), "arch");
        assert_eq!(module_of("sched/tasks.rs"), "sched");
        assert_eq!(module_of("sched/mod.rs"), "sched");
        assert_eq!(module_of("vm.rs"), "vm");
        assert_eq!(module_of("main.rs"), "main");
    }

    #[test]
    fn a_layer_declared_twice_or_not_at_all_is_refused() {
        assert!(
            declared_layers("//! - layer 0, `a`: x\n//! - layer 1, `a`: y\n")
                .unwrap_err()
                .contains("`a` is declared twice")
        );
        assert!(declared_layers("//! Nothing.\n")
            .unwrap_err()
            .contains("declares no layer"));
    }

    #[test]
    fn the_hypervisor_declares_its_layers() {
        let main = std::fs::read_to_string(crate::workspace().join("hypervisor/src/main.rs"))
            .expect("hypervisor/src/main.rs");
        let layers = declared_layers(&main).expect("layers declared");
        assert_eq!(layers.get("arch"), Some(&0));
        assert!(layers["trap"] > layers["vm"]);
    }
}
