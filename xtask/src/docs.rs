//! The book under `docs/` (mdBook): `cargo xtask docs` builds it, and the test command checks
//! it: it builds, every relative link and anchor of its chapters and of `README.md` resolves,
//! and every TOML example in them compiles. The host tests at the end hold the chapters that
//! describe code to that code: the configuration reference to the compiler's keys, the guest
//! ABI chapter to `core/src/abi.rs` and the services' refusal codes, the architecture chapter
//! to the module layers `hypervisor/src/main.rs` declares.
//!
//! mdBook is linked as a library (`mdbook-driver`, pinned in `Cargo.toml`), so the book builds
//! on a fresh machine with nothing to install; its Markdown parser (`pulldown-cmark`, the
//! version mdBook uses) reads the links, headings and code blocks here.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

use pulldown_cmark::{CodeBlockKind, Event, Options, Parser, Tag, TagEnd};

use crate::{workspace, Result};

/// The book's root (where `book.toml` is), relative to the workspace.
const BOOK: &str = "docs";
/// The chapters' directory, relative to the workspace.
const SOURCES: &str = "docs/src";
/// The pages outside the book whose links are checked too, relative to the workspace.
const OTHER_PAGES: &[&str] = &["README.md"];
/// The mark of a TOML block that is only part of a system: ```` ```toml,fragment ````.
const FRAGMENT: &str = "fragment";

/// Builds the book with mdBook into the directory `docs/book.toml` names (`target/book/`);
/// returns the directory of its HTML.
pub fn build() -> Result<PathBuf> {
    let book = mdbook_driver::MDBook::load(workspace().join(BOOK))
        .map_err(|error| format!("loading the book in {BOOK}/: {error:#}"))?;
    book.build()
        .map_err(|error| format!("building the book in {BOOK}/: {error:#}"))?;
    let html = book.build_dir_for("html");
    Ok(html.canonicalize().unwrap_or(html))
}

/// Runs the book's checks for the test command, those whose name contains `filter` (all
/// without one), handing each name and outcome to `report`: a summary when it passes, the
/// problems found (one a line, each naming its file and line) when it fails.
pub fn run_checks(filter: Option<&str>, mut report: impl FnMut(&str, Result<String>)) {
    let selected = |name: &str| filter.is_none_or(|text| name.contains(text));
    let root = workspace();
    let pages = match read_pages(&root) {
        Ok(pages) => pages,
        Err(problem) => return report("book: sources", Err(problem)),
    };
    let mut built: Option<Result<PathBuf>> = None;
    let mut build_once = || built.get_or_insert_with(build).clone();
    if selected("book: builds") {
        let outcome = build_once().map(|html| {
            let chapters = pages.iter().filter(|page| page.in_book()).count() - 1;
            format!("{chapters} chapters built into {}", html.display())
        });
        report("book: builds", outcome);
    }
    if selected("book: links") {
        let outcome = build_once().and_then(|html| check_links(&root, &pages, &html));
        report("book: links", outcome);
    }
    for example in pages.iter().flat_map(Page::examples) {
        let name = format!("book: example {}:{}", example.page.display(), example.line);
        if selected(&name) {
            report(&name, check_example(&example));
        }
    }
}

/// A Markdown file whose links and examples are checked.
struct Page {
    /// Its path, relative to the workspace.
    path: PathBuf,
    /// Its text.
    text: String,
}

impl Page {
    /// Whether it is a chapter's source (under `docs/src/`).
    fn in_book(&self) -> bool {
        self.path.starts_with(SOURCES)
    }

    /// Its TOML blocks.
    fn examples(&self) -> Vec<Example> {
        toml_blocks(&self.text)
            .into_iter()
            .map(|(line, marks, text)| Example {
                page: self.path.clone(),
                line,
                marks,
                text,
            })
            .collect()
    }
}

/// Every `.md` file under `docs/src/` (sorted), then the [`OTHER_PAGES`].
fn read_pages(root: &Path) -> Result<Vec<Page>> {
    let mut paths = Vec::new();
    markdown_files(root, &root.join(SOURCES), &mut paths)?;
    paths.sort();
    paths.extend(OTHER_PAGES.iter().map(PathBuf::from));
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(root.join(&path))
                .map_err(|error| format!("{}: {error}", path.display()))?;
            Ok(Page { path, text })
        })
        .collect()
}

/// Every `.md` file under `dir`, relative to `root`.
fn markdown_files(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    for entry in entries {
        let path = entry.map_err(|error| error.to_string())?.path();
        if path.is_dir() {
            markdown_files(root, &path, out)?;
        } else if path.extension().is_some_and(|extension| extension == "md") {
            out.push(path.strip_prefix(root).unwrap_or(&path).to_path_buf());
        }
    }
    Ok(())
}

/// The Markdown extensions mdBook turns on, so that links and blocks are read as it reads them.
fn markdown_options() -> Options {
    Options::ENABLE_TABLES
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_HEADING_ATTRIBUTES
}

/// The 1-based line of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

/// Every link and image of `text`: its line and its destination as written.
fn links(text: &str) -> Vec<(usize, String)> {
    Parser::new_ext(text, markdown_options())
        .into_offset_iter()
        .filter_map(|(event, range)| match event {
            Event::Start(Tag::Link { dest_url, .. } | Tag::Image { dest_url, .. }) => {
                Some((line_of(text, range.start), dest_url.to_string()))
            }
            _ => None,
        })
        .collect()
}

/// Every fenced block of `text` whose language is `toml`: the line of its first line, the
/// marks after the language (```` ```toml,fragment ````: `["fragment"]`), and its text.
fn toml_blocks(text: &str) -> Vec<(usize, Vec<String>, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, Vec<String>, String)> = None;
    for (event, range) in Parser::new_ext(text, markdown_options()).into_offset_iter() {
        match event {
            Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(info))) => {
                let mut words = info.split(',').map(str::trim);
                if words.next() == Some("toml") {
                    let marks = words.map(str::to_string).collect();
                    open = Some((line_of(text, range.start) + 1, marks, String::new()));
                }
            }
            Event::Text(content) => {
                if let Some((_, _, block)) = open.as_mut() {
                    block.push_str(&content);
                }
            }
            Event::End(TagEnd::CodeBlock) => blocks.extend(open.take()),
            _ => {}
        }
    }
    blocks
}

/// A TOML block of a page.
struct Example {
    /// The page, relative to the workspace.
    page: PathBuf,
    /// The line of its first line.
    line: usize,
    /// The marks after `toml` in its fence.
    marks: Vec<String>,
    /// Its text.
    text: String,
}

/// Checks one TOML example: a fragment parses as TOML; a whole system builds as
/// `cargo xtask build` builds one ([`crate::image::build_system`]), from a copy of the
/// example under `target/keel/book-examples/` (so an image `{ file = ... }` would be relative
/// to that directory: the book's examples name workspace guests and Debian's images only).
fn check_example(example: &Example) -> Result<String> {
    let at = format!("{}:{}", example.page.display(), example.line);
    if let Some(mark) = example.marks.iter().find(|mark| *mark != FRAGMENT) {
        return Err(format!(
            "{at}: unknown mark `{mark}` after `toml` (the one mark is `{FRAGMENT}`, for a part of a system)"
        ));
    }
    if example.marks.iter().any(|mark| mark == FRAGMENT) {
        return toml::from_str::<toml::Table>(&example.text)
            .map(|table| {
                let keys: Vec<&str> = table.keys().map(String::as_str).collect();
                format!(
                    "a fragment: parses as TOML (its top keys: {})",
                    keys.join(", ")
                )
            })
            .map_err(|error| format!("{at}: a fragment that is not TOML: {error}"));
    }
    let stem = example
        .page
        .strip_prefix(SOURCES)
        .unwrap_or(&example.page)
        .with_extension("")
        .to_string_lossy()
        .replace(['/', '\\'], "-");
    let dir = crate::image::output_dir().join("book-examples");
    let path = dir.join(format!("{stem}-{}.toml", example.line));
    std::fs::create_dir_all(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
    std::fs::write(&path, &example.text).map_err(|error| format!("{}: {error}", path.display()))?;
    crate::image::build_system(&path)
        .map(|image| {
            format!(
                "a whole system: '{}' builds ({} VMs, {})",
                image.system.name,
                image.system.vms.len(),
                image.path.display()
            )
        })
        .map_err(|error| {
            format!("{at}: {error} (a block that is only part of a system is marked ```toml,{FRAGMENT})")
        })
}

/// Checks every relative link of `pages` (see [`LinkChecker::problem`]); `html` is the built
/// book, whose headings' anchors the links' anchors must name.
fn check_links(root: &Path, pages: &[Page], html: &Path) -> Result<String> {
    let summary = Path::new(SOURCES).join("SUMMARY.md");
    let summary_page = pages
        .iter()
        .find(|page| page.path == summary)
        .ok_or_else(|| format!("{}: missing", summary.display()))?;
    let chapters = links(&summary_page.text)
        .into_iter()
        .filter_map(|(_, dest)| resolve(&summary, &dest))
        .collect();
    let mut checker = LinkChecker {
        root,
        html,
        chapters,
        anchors: BTreeMap::new(),
    };
    let mut problems = Vec::new();
    let mut count = 0;
    for page in pages {
        for (line, dest) in links(&page.text) {
            count += 1;
            if let Some(problem) = checker.problem(&page.path, &dest) {
                problems.push(format!(
                    "{}:{line}: `{dest}`: {problem}",
                    page.path.display()
                ));
            }
        }
        if page.in_book() && page.path != summary && !checker.chapters.contains(&page.path) {
            problems.push(format!(
                "{}: in no chapter of {}: mdBook does not build it",
                page.path.display(),
                summary.display()
            ));
        }
    }
    if problems.is_empty() {
        Ok(format!("{count} links in {} pages resolve", pages.len()))
    } else {
        Err(problems.join("\n"))
    }
}

/// Where a relative link leads: the path `dest` names from the page at `page` (both relative
/// to the workspace), without its anchor; None if it leads out of the workspace.
fn resolve(page: &Path, dest: &str) -> Option<PathBuf> {
    let path = dest.split('#').next().unwrap_or("");
    if path.is_empty() {
        return Some(page.to_path_buf());
    }
    let mut resolved = PathBuf::new();
    for component in page.parent()?.join(path).components() {
        match component {
            Component::ParentDir => {
                if !resolved.pop() {
                    return None;
                }
            }
            Component::Normal(part) => resolved.push(part),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(resolved)
}

/// What the links of the pages may lead to.
struct LinkChecker<'a> {
    /// The workspace.
    root: &'a Path,
    /// The built book's HTML.
    html: &'a Path,
    /// The chapters `SUMMARY.md` names, relative to the workspace.
    chapters: BTreeSet<PathBuf>,
    /// The anchors of each built chapter read so far, by chapter.
    anchors: BTreeMap<PathBuf, Result<BTreeSet<String>>>,
}

impl LinkChecker<'_> {
    /// What is wrong with the link `dest` of the page at `page`, if anything. A link with a
    /// scheme (`https:`, `mailto:`) is not followed (no network here). A relative link must
    /// lead to a file or folder of the workspace; from a chapter, not to a Markdown file
    /// outside the book (mdBook turns it into an `.html` link that leads nowhere); to a
    /// chapter, only to one `SUMMARY.md` names; and its anchor, if any, to a heading of that
    /// chapter as mdBook built it.
    fn problem(&mut self, page: &Path, dest: &str) -> Option<String> {
        if dest.contains("://") || dest.starts_with("mailto:") {
            return None;
        }
        let Some(target) = resolve(page, dest) else {
            return Some("leads out of the repository".into());
        };
        if !self.root.join(&target).exists() {
            return Some(format!("no such file or folder: {}", target.display()));
        }
        let is_markdown = target
            .extension()
            .is_some_and(|extension| extension == "md");
        let in_book = is_markdown && target.starts_with(SOURCES);
        if is_markdown && !in_book && page.starts_with(SOURCES) {
            return Some(format!(
                "{} is a Markdown file outside the book: the built book links it as .html, \
                 which does not exist; link its folder instead",
                target.display()
            ));
        }
        if in_book && !self.chapters.contains(&target) {
            return Some(format!(
                "{} is in no chapter of {SOURCES}/SUMMARY.md",
                target.display()
            ));
        }
        let anchor = dest.split_once('#').map(|(_, anchor)| anchor)?;
        if !in_book {
            return Some(format!(
                "an anchor into {}, which is not a chapter: only the book's anchors are checked",
                target.display()
            ));
        }
        match self.anchors_of(&target) {
            Err(problem) => Some(problem.clone()),
            Ok(anchors) if anchors.contains(anchor) => None,
            Ok(_) => Some(format!(
                "{} has no heading with the anchor #{anchor}",
                target.display()
            )),
        }
    }

    /// The anchors (`id`s) of the built page of the chapter `chapter`.
    fn anchors_of(&mut self, chapter: &Path) -> &Result<BTreeSet<String>> {
        let built = self.html.join(
            chapter
                .strip_prefix(SOURCES)
                .unwrap_or(chapter)
                .with_extension("html"),
        );
        self.anchors
            .entry(chapter.to_path_buf())
            .or_insert_with(|| {
                let page = std::fs::read_to_string(&built)
                    .map_err(|error| format!("the built chapter {}: {error}", built.display()))?;
                let id = regex::Regex::new(r#"\sid="([^"]+)""#).expect("valid pattern");
                Ok(id
                    .captures_iter(&page)
                    .map(|found| found[1].to_string())
                    .collect())
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use keel_core::abi;

    fn read(path: &str) -> String {
        std::fs::read_to_string(workspace().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn fail_on(problems: Vec<String>) {
        assert!(problems.is_empty(), "\n{}", problems.join("\n"));
    }

    // The configuration reference against the compiler.

    /// The keys a reference page documents, by table path (`""`: the file): each table of
    /// keys (rows whose first cell is one backticked key) follows a line `Keys of ...:` that
    /// names its tables by dotted path in backticks, or `the file`. With the line of each.
    fn documented_keys(text: &str) -> Result<BTreeMap<String, (usize, BTreeSet<String>)>> {
        let key_row = regex::Regex::new(r"^\|\s*`([A-Za-z0-9_]+)`\s*\|").expect("valid pattern");
        let path = regex::Regex::new(r"`([A-Za-z0-9_.]+)`").expect("valid pattern");
        let mut documented: BTreeMap<String, (usize, BTreeSet<String>)> = BTreeMap::new();
        let mut current: Vec<String> = Vec::new();
        let mut in_table = false;
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            if let Some(names) = line.strip_prefix("Keys of ") {
                let names = names
                    .strip_suffix(':')
                    .ok_or_else(|| format!("line {line_number}: `Keys of ...` ends with `:`"))?;
                current = if names == "the file" {
                    vec![String::new()]
                } else {
                    path.captures_iter(names)
                        .map(|c| c[1].to_string())
                        .collect()
                };
                if current.is_empty() {
                    return Err(format!("line {line_number}: `Keys of` names no table"));
                }
                for table in &current {
                    if documented
                        .insert(table.clone(), (line_number, BTreeSet::new()))
                        .is_some()
                    {
                        return Err(format!("line {line_number}: `{table}` is described twice"));
                    }
                }
                in_table = false;
                continue;
            }
            if line.starts_with('|') {
                in_table = true;
                if let Some(key) = key_row.captures(line) {
                    if current.is_empty() {
                        return Err(format!(
                            "line {line_number}: a key row with no `Keys of ...:` line before its table"
                        ));
                    }
                    for table in &current {
                        documented
                            .get_mut(table)
                            .unwrap()
                            .1
                            .insert(key[1].to_string());
                    }
                }
            } else if in_table {
                in_table = false;
                current.clear();
            }
        }
        Ok(documented)
    }

    /// What differs between the documented keys and the compiler's, one problem a line.
    fn reference_problems(
        documented: &BTreeMap<String, (usize, BTreeSet<String>)>,
        accepted: &[keel_core::config::KeyTable],
    ) -> Vec<String> {
        let name = |path: &str| {
            if path.is_empty() {
                "the file".to_string()
            } else {
                format!("`{path}`")
            }
        };
        let mut problems = Vec::new();
        for table in accepted {
            if !table.refuses_unknown {
                problems.push(format!(
                    "{}: the compiler ignores unknown keys there (no deny_unknown_fields)",
                    name(&table.path)
                ));
            }
            let Some((line, keys)) = documented.get(&table.path) else {
                problems.push(format!(
                    "{}: a table the compiler accepts, with keys {}, has no `Keys of` line",
                    name(&table.path),
                    table.keys.join(", ")
                ));
                continue;
            };
            for key in &table.keys {
                if !keys.contains(*key) {
                    problems.push(format!(
                        "line {line}: {}: the compiler accepts `{key}`, which is not listed",
                        name(&table.path)
                    ));
                }
            }
            for key in keys {
                if !table.keys.contains(&key.as_str()) {
                    problems.push(format!(
                        "line {line}: {}: `{key}` is listed, but the compiler does not accept it",
                        name(&table.path)
                    ));
                }
            }
        }
        for (path, (line, _)) in documented {
            if !accepted.iter().any(|table| &table.path == path) {
                problems.push(format!(
                    "line {line}: {}: not a table of the configuration file",
                    name(path)
                ));
            }
        }
        problems
    }

    #[test]
    fn configuration_reference_lists_every_key_the_compiler_accepts() {
        let page = "docs/src/configuration-reference.md";
        let documented = documented_keys(&read(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        let accepted = keel_core::config::accepted_keys();
        fail_on(
            reference_problems(&documented, &accepted)
                .into_iter()
                .map(|problem| format!("{page}: {problem}"))
                .collect(),
        );
    }

    #[test]
    fn a_reference_that_drifts_from_the_compiler_is_caught() {
        let text = "Keys of the file:\n\n| key | what |\n| --- | --- |\n| `system` | s |\n\n\
                    Keys of `system`, `extra`:\n\n| `name` | n |\n| `colour` | c |\n";
        let documented = documented_keys(text).unwrap();
        let accepted = vec![
            keel_core::config::KeyTable {
                path: String::new(),
                keys: vec!["system", "vm"],
                refuses_unknown: true,
            },
            keel_core::config::KeyTable {
                path: "system".into(),
                keys: vec!["name"],
                refuses_unknown: false,
            },
        ];
        assert_eq!(
            reference_problems(&documented, &accepted),
            [
                "line 1: the file: the compiler accepts `vm`, which is not listed",
                "`system`: the compiler ignores unknown keys there (no deny_unknown_fields)",
                "line 7: `system`: `colour` is listed, but the compiler does not accept it",
                "line 7: `extra`: not a table of the configuration file",
            ]
        );
        assert!(documented_keys("| `name` | n |\n").is_err());
    }

    // The guest ABI chapter against core/src/abi.rs and the services' codes.

    const ABI_CHAPTER: &str = "docs/src/guest-abi.md";

    /// The cells of every table row of `text`, trimmed (header and separator rows included).
    fn table_rows(text: &str) -> Vec<Vec<String>> {
        text.lines()
            .filter(|line| line.starts_with('|'))
            .map(|line| {
                line.trim()
                    .trim_matches('|')
                    .split(" | ")
                    .map(|cell| cell.trim().to_string())
                    .collect()
            })
            .collect()
    }

    /// Every hexadecimal number written in backticks in `text` (`0xC600_0000`).
    fn backticked_hex(text: &str) -> BTreeSet<u64> {
        let hex = regex::Regex::new(r"`0x([0-9A-Fa-f_]+)`").expect("valid pattern");
        hex.captures_iter(text)
            .filter_map(|found| u64::from_str_radix(&found[1].replace('_', ""), 16).ok())
            .collect()
    }

    #[test]
    fn guest_abi_chapter_has_every_keel_hypercall_with_its_name() {
        let source = read("core/src/abi.rs");
        let constant =
            regex::Regex::new(r"pub const (KEEL_[A-Z_]+): u32 = keel_call\((0x[0-9A-Fa-f]+)\);")
                .expect("valid pattern");
        let calls: Vec<(String, u32)> = constant
            .captures_iter(&source)
            .map(|found| {
                let function = u16::from_str_radix(&found[2][2..], 16).unwrap();
                (found[1].to_string(), abi::keel_call(function))
            })
            .collect();
        assert!(!calls.is_empty(), "no `keel_call` constant found in abi.rs");
        let chapter = read(ABI_CHAPTER);
        let rows: BTreeMap<u64, String> = table_rows(&chapter)
            .into_iter()
            .filter(|cells| cells.len() >= 2)
            .filter_map(|cells| {
                let id = backticked_hex(&cells[0]).into_iter().next()?;
                (id >> 24 == 0xC6).then(|| (id, cells[1].clone()))
            })
            .collect();
        let mut problems = Vec::new();
        for (name, id) in &calls {
            match rows.get(&u64::from(*id)) {
                None => problems.push(format!("{ABI_CHAPTER}: no row for {name} ({id:#x})")),
                Some(call) if !call.starts_with(name.as_str()) => problems.push(format!(
                    "{ABI_CHAPTER}: the row of {id:#x} is `{call}`, not {name}"
                )),
                Some(_) => {}
            }
        }
        for id in rows.keys() {
            if !calls.iter().any(|(_, call)| u64::from(*call) == *id) {
                problems.push(format!("{ABI_CHAPTER}: {id:#x} is no hypercall of abi.rs"));
            }
        }
        fail_on(problems);
    }

    #[test]
    fn guest_abi_chapter_has_every_psci_and_smccc_function_id() {
        let source = read("core/src/abi.rs");
        let constant = regex::Regex::new(r"pub const ([A-Z0-9_]+): u32 = 0x([0-9A-Fa-f_]+);")
            .expect("valid pattern");
        let ids: Vec<(String, u64)> = constant
            .captures_iter(&source)
            .map(|found| {
                let value = u64::from_str_radix(&found[2].replace('_', ""), 16).unwrap();
                (found[1].to_string(), value)
            })
            .collect();
        assert!(
            ids.iter()
                .any(|(_, id)| *id == u64::from(abi::psci::SYSTEM_RESET))
                && ids
                    .iter()
                    .any(|(_, id)| *id == u64::from(abi::SMCCC_VERSION)),
            "the pattern no longer finds abi.rs's function ids"
        );
        let written: BTreeSet<u64> = table_rows(&read(ABI_CHAPTER))
            .iter()
            .filter_map(|cells| cells.first())
            .flat_map(|cell| backticked_hex(cell))
            .collect();
        fail_on(
            ids.iter()
                .filter(|(_, id)| !written.contains(id))
                .map(|(name, id)| format!("{ABI_CHAPTER}: no row for {name} ({id:#x})"))
                .collect(),
        );
    }

    #[test]
    fn guest_abi_chapter_has_a_table_of_each_services_refusal_codes() {
        use keel_core::{channel::ChannelError, ipc::MessageError, tasks::TaskError};
        let source = read("core/src/abi.rs");
        let variant = regex::Regex::new(r"(?m)^\s+[A-Za-z]+ = (-\d+),$").expect("valid pattern");
        let call_errors: BTreeSet<i64> = variant
            .captures_iter(&source)
            .map(|found| found[1].parse().unwrap())
            .collect();
        assert!(call_errors.contains(&(abi::CallError::InvalidAddress as i64)));
        let services: [(&str, BTreeSet<i64>); 4] = [
            ("SMCCC and PSCI", call_errors),
            (
                "the task services",
                TaskError::ALL.iter().map(|e| e.code()).collect(),
            ),
            (
                "the message services",
                MessageError::ALL.iter().map(|e| e.code()).collect(),
            ),
            (
                "the channel doorbell",
                ChannelError::ALL.iter().map(|e| e.code()).collect(),
            ),
        ];
        let code = regex::Regex::new(r"^(-\d+)").expect("valid pattern");
        // The first-column codes of each table of the chapter.
        let mut tables: Vec<BTreeSet<i64>> = Vec::new();
        let mut in_table = false;
        for line in read(ABI_CHAPTER).lines() {
            if !line.starts_with('|') {
                in_table = false;
                continue;
            }
            if !in_table {
                tables.push(BTreeSet::new());
                in_table = true;
            }
            let first = line
                .trim_matches('|')
                .split(" | ")
                .next()
                .unwrap_or("")
                .trim();
            if let Some(found) = code.captures(first) {
                tables.last_mut().unwrap().insert(found[1].parse().unwrap());
            }
        }
        fail_on(
            services
                .iter()
                .filter(|(_, codes)| !tables.contains(codes))
                .map(|(service, codes)| {
                    format!("{ABI_CHAPTER}: no table of exactly the codes of {service}: {codes:?}")
                })
                .collect(),
        );
    }

    #[test]
    fn guest_abi_chapter_has_the_guest_physical_layout() {
        let source = read("core/src/abi.rs");
        let layout = &source[source
            .find("pub mod layout")
            .expect("abi.rs has `mod layout`")..];
        let layout = &layout[..layout.find("\n}").unwrap_or(layout.len())];
        let constant =
            regex::Regex::new(r"pub const ([A-Z_]+): u(?:32|64) = (0x[0-9A-Fa-f_]+|\d+);")
                .expect("valid pattern");
        let chapter = read(ABI_CHAPTER);
        let section = &chapter[chapter
            .find("## Guest-physical layout")
            .expect("the chapter has a section `## Guest-physical layout`")..];
        let section = &section[..section[3..]
            .find("\n## ")
            .map_or(section.len(), |end| end + 3)];
        let hex = backticked_hex(section);
        let mut found = 0;
        let mut problems = Vec::new();
        for entry in constant.captures_iter(layout) {
            found += 1;
            let (name, value) = (&entry[1], &entry[2]);
            let written = match value.strip_prefix("0x") {
                Some(digits) => {
                    hex.contains(&u64::from_str_radix(&digits.replace('_', ""), 16).unwrap())
                }
                None => section.contains(&format!("INTID {value}")),
            };
            if !written {
                problems.push(format!(
                    "{ABI_CHAPTER}: the layout does not give {name} ({value})"
                ));
            }
        }
        assert!(found > 0, "no constant found in abi.rs's `mod layout`");
        fail_on(problems);
    }

    // The architecture chapter against hypervisor/src/main.rs.

    #[test]
    fn architecture_chapter_lists_the_module_layers_of_main_rs() {
        let declared = crate::layers::declared_layers(&read("hypervisor/src/main.rs")).unwrap();
        let chapter: String = read("docs/src/architecture.md")
            .lines()
            .map(|line| format!("//! {line}\n"))
            .collect();
        let written = crate::layers::declared_layers(&chapter)
            .unwrap_or_else(|e| panic!("docs/src/architecture.md: {e}"));
        let mut problems = Vec::new();
        for (module, layer) in &declared {
            match written.get(module) {
                Some(other) if other == layer => {}
                Some(other) => problems.push(format!(
                    "docs/src/architecture.md: `{module}` in layer {other}, main.rs says {layer}"
                )),
                None => problems.push(format!(
                    "docs/src/architecture.md: `{module}` (layer {layer} in main.rs) is not listed"
                )),
            }
        }
        for module in written
            .keys()
            .filter(|module| !declared.contains_key(*module))
        {
            problems.push(format!(
                "docs/src/architecture.md: `{module}` is no module of main.rs's layers"
            ));
        }
        fail_on(problems);
    }

    // The link and example checks, on pages made here.

    /// A scratch workspace under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let root = std::env::temp_dir().join(format!("keel-docs-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("docs/src/part")).unwrap();
        std::fs::create_dir_all(root.join("html/part")).unwrap();
        std::fs::create_dir_all(root.join("configs")).unwrap();
        for (path, text) in [
            ("docs/src/SUMMARY.md", "- [A](a.md)\n- [B](part/b.md)\n"),
            ("docs/src/a.md", "# A\n"),
            ("docs/src/part/b.md", "# B\n"),
            ("docs/src/orphan.md", "# O\n"),
            ("docs/notes.md", "notes\n"),
            ("configs/demo.toml", "\n"),
            ("README.md", "[a](docs/src/a.md)\n"),
            (
                "html/a.html",
                "<h1 id=\"a\">A</h1><h2 id=\"the-part\">x</h2>",
            ),
            ("html/part/b.html", "<h1 id=\"b\">B</h1>"),
        ] {
            std::fs::write(root.join(path), text).unwrap();
        }
        root
    }

    #[test]
    fn links_are_checked_for_files_chapters_and_anchors() {
        let root = scratch("links");
        let html = root.join("html");
        let mut checker = LinkChecker {
            root: &root,
            html: &html,
            chapters: [PathBuf::from("docs/src/a.md"), "docs/src/part/b.md".into()]
                .into_iter()
                .collect(),
            anchors: BTreeMap::new(),
        };
        let a = Path::new("docs/src/a.md");
        let b = Path::new("docs/src/part/b.md");
        let readme = Path::new("README.md");
        for good in [
            "part/b.md",
            "part/b.md#b",
            "#the-part",
            "../../configs/demo.toml",
            "../../configs/",
            "https://example.org/x.md",
        ] {
            assert_eq!(checker.problem(a, good), None, "{good}");
        }
        assert_eq!(checker.problem(b, "../a.md#the-part"), None);
        assert_eq!(checker.problem(readme, "docs/src/a.md#the-part"), None);
        let problem = |checker: &mut LinkChecker, page, dest| checker.problem(page, dest).unwrap();
        assert_eq!(
            problem(&mut checker, a, "c.md"),
            "no such file or folder: docs/src/c.md"
        );
        assert_eq!(
            problem(&mut checker, a, "../../../x"),
            "leads out of the repository"
        );
        assert_eq!(
            problem(&mut checker, a, "part/b.md#nowhere"),
            "docs/src/part/b.md has no heading with the anchor #nowhere"
        );
        assert_eq!(
            problem(&mut checker, a, "orphan.md"),
            "docs/src/orphan.md is in no chapter of docs/src/SUMMARY.md"
        );
        assert!(
            problem(&mut checker, a, "../notes.md").contains("a Markdown file outside the book")
        );
        // From outside the book, a Markdown file is fine (GitHub and editors open it).
        assert_eq!(checker.problem(readme, "docs/notes.md"), None);
        assert!(problem(&mut checker, readme, "configs/demo.toml#L1").contains("not a chapter"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_chapter_missing_from_summary_fails_the_link_check() {
        let root = scratch("summary");
        let pages = read_pages(&root).unwrap();
        let problems = check_links(&root, &pages, &root.join("html")).unwrap_err();
        assert_eq!(
            problems,
            "docs/src/orphan.md: in no chapter of docs/src/SUMMARY.md: mdBook does not build it"
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn toml_blocks_are_found_with_their_line_and_marks() {
        let text = "# T\n\n```toml\n[system]\nname = \"x\"\n```\n\n```sh\nls\n```\n\n\
                    ```toml,fragment\ntasks = { max = 3 }\n```\n";
        assert_eq!(
            toml_blocks(text),
            [
                (4, vec![], "[system]\nname = \"x\"\n".to_string()),
                (
                    13,
                    vec!["fragment".to_string()],
                    "tasks = { max = 3 }\n".to_string()
                ),
            ]
        );
    }

    #[test]
    fn fragments_must_parse_and_marks_must_be_known() {
        let example = |marks: &[&str], text: &str| Example {
            page: "docs/src/x.md".into(),
            line: 7,
            marks: marks.iter().map(|mark| mark.to_string()).collect(),
            text: text.into(),
        };
        assert!(check_example(&example(&["fragment"], "tasks = { max = 3 }\n")).is_ok());
        let broken = check_example(&example(&["fragment"], "tasks = { max = \n")).unwrap_err();
        assert!(
            broken.starts_with("docs/src/x.md:7: a fragment that is not TOML"),
            "{broken}"
        );
        let unknown = check_example(&example(&["ignore"], "")).unwrap_err();
        assert!(unknown.contains("unknown mark `ignore`"), "{unknown}");
    }
}
