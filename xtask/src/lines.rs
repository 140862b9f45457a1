//! The check of Keel's lines: every line a guest's action can cause is rate-limited.
//!
//! Keel says a line in one of two ways (`hypervisor/src/console.rs`). Limited, naming its kind
//! and VM: `keel_println_limited!`, `console::limited_line`, `console::line_in_steps` and
//! `console::start_line` (at most 5 a second per kind and VM, the next one printed counting
//! those left out). Or unlimited, naming a cause that is not a guest's: `keel_println!` takes a
//! `console::Boot` (a pCPU's bring-up, `Boot::bring_up`) or a `console::Operator` (a `Ctrl-A`
//! command read from the physical UART, `Received::operator`) as its first argument, and no
//! other type can be one. The panic path's `console::emergency_line` reports a bug of Keel's.
//!
//! The types make an unlimited line name its cause; this check says where such a cause may be
//! made and taken. Each function of `hypervisor/src` (but `console.rs`, which defines them)
//! that makes a cause must be one of [`MADE`]; each that names one of [`UNLIMITED_NAMES`]
//! (`keel_println!`, the causes, the line functions beneath them, the UART) must be one of
//! [`UNLIMITED`], each with why no guest reaches it; a `use` only names them. A new line a
//! guest can cause therefore either names its kind and VM or adds its function to
//! [`UNLIMITED`] here, in review. The check also counts the limited lines and the kinds they
//! name.
//!
//! Comments, strings and character literals are not code (`layers::code_only`). A function is
//! the text from its `fn` to the end of its body; a name in a nested function belongs to the
//! innermost.

use std::collections::BTreeSet;

use crate::layers::code_only;

/// The names that say a line without a limit, or carry what lets one be said: the macro, its
/// function and the panic path's, the two causes and their trait, and the UART itself (a line
/// written to it directly would bypass the limits).
pub const UNLIMITED_NAMES: [&str; 7] = [
    "keel_println",
    "hypervisor_line",
    "emergency_line",
    "Boot",
    "Operator",
    "NotAGuest",
    "Uart",
];

/// Where a cause is made (its maker's name, file, function): a pCPU's bring-up at its entry,
/// an operator's from what the physical UART's interrupt read (and the name of its value).
pub const MADE: &[(&str, &str, &str)] = &[
    ("bring_up", "main.rs", "keel_primary_main"),
    ("bring_up", "main.rs", "keel_secondary_main"),
    ("operator", "irq.rs", "console_input"),
];

/// Where [`UNLIMITED_NAMES`] may be named: (file or directory under `hypervisor/src`, ending
/// in `/` for a directory; function, `*` for any; why no guest's action reaches it).
pub const UNLIMITED: &[(&str, &str, &str)] = &[
    (
        "main.rs",
        "keel_primary_main",
        "the boot pCPU's boot: board, configuration, the VMs' places",
    ),
    (
        "main.rs",
        "keel_secondary_main",
        "a secondary pCPU's bring-up takes its Boot",
    ),
    (
        "main.rs",
        "boot_failure",
        "a boot error: the machine powers off",
    ),
    (
        "main.rs",
        "platform_uart",
        "the UART of a boot error: a device tree not of the board Keel was built for",
    ),
    (
        "main.rs",
        "check_configuration",
        "the configuration against the board, at boot",
    ),
    (
        "main.rs",
        "cpu_main",
        "each pCPU's bring-up, before it runs a guest",
    ),
    ("main.rs", "panic", "a bug of Keel's (the panic handler)"),
    (
        "main.rs",
        "keel_hyp_fault",
        "a bug of Keel's (an exception taken at EL2)",
    ),
    (
        "sched/mod.rs",
        "init",
        "each pCPU's scheduler, at its bring-up",
    ),
    (
        "irq.rs",
        "console_input",
        "the operator's Ctrl-A commands, read from the physical UART",
    ),
    ("arch/", "*", "the UART's driver"),
];

/// The functions that say a line limited by its kind and VM.
pub const LIMITED_NAMES: [&str; 4] = [
    "keel_println_limited",
    "limited_line",
    "line_in_steps",
    "start_line",
];

/// Checks `hypervisor/src` of the workspace: a summary when every unlimited line is where
/// [`UNLIMITED`] allows, every misplaced one (file, line, function) otherwise.
pub fn check_workspace() -> Result<String, String> {
    let root = crate::workspace().join("hypervisor/src");
    let mut sources = Vec::new();
    crate::layers::collect(&root, &root, &mut sources)?;
    check(&sources).map_err(|problems| {
        let located: Vec<String> = problems
            .iter()
            .map(|problem| format!("hypervisor/src/{problem}"))
            .collect();
        format!(
            "{}\n(a line a guest's action can cause names its kind and VM: keel_println_limited!; xtask/src/lines.rs lists where a line may go unlimited, and why)",
            located.join("\n")
        )
    })
}

/// Checks the hypervisor's sources (`(path relative to its src, text)`): a summary when every
/// name of [`UNLIMITED_NAMES`] is in a `use` or a function of [`UNLIMITED`], every problem
/// otherwise.
pub fn check(sources: &[(String, String)]) -> Result<String, Vec<String>> {
    let mut problems = Vec::new();
    let (mut unlimited, mut limited) = (0, 0);
    let mut places = BTreeSet::new();
    let mut kinds = BTreeSet::new();
    for (path, text) in sources {
        if path == "console.rs" {
            continue;
        }
        let code: Vec<char> = code_only(text).chars().collect();
        let functions = functions(&code);
        let uses = use_items(&code);
        let line_of = |at: usize| code[..at].iter().filter(|&&c| c == '\n').count() + 1;
        for (at, name) in identifiers(&code) {
            let called = next_code(&code, at + name.chars().count());
            if LIMITED_NAMES.contains(&name.as_str()) && matches!(called, Some('!' | '(')) {
                limited += 1;
                kinds.extend(kinds_named(&code, at));
                continue;
            }
            let made = MADE.iter().any(|&(maker, _, _)| maker == name);
            if !(made || UNLIMITED_NAMES.contains(&name.as_str()))
                || uses.iter().any(|use_item| use_item.contains(&at))
            {
                continue;
            }
            let function = functions
                .iter()
                .filter(|f| f.span.contains(&at))
                .min_by_key(|f| f.span.len())
                .map(|f| f.name.as_str());
            let allowed = if made {
                MADE.iter().any(|&(maker, file, maker_function)| {
                    maker == name && path == file && function == Some(maker_function)
                })
            } else {
                UNLIMITED.iter().any(|&(place, allowed_function, _)| {
                    let in_place = match place.strip_suffix('/') {
                        Some(directory) => path.starts_with(&format!("{directory}/")),
                        None => path == place,
                    };
                    in_place && (allowed_function == "*" || function == Some(allowed_function))
                })
            };
            if !allowed {
                problems.push(format!(
                    "{path}:{}: `{name}` in {}: an unlimited line (or its cause) where a guest's action may reach it",
                    line_of(at),
                    function.map_or("no function".to_string(), |f| format!("fn {f}")),
                ));
                continue;
            }
            if name == "keel_println" && called == Some('!') {
                unlimited += 1;
                places.insert(format!("{path}:{}", function.unwrap_or("?")));
            }
        }
    }
    if problems.is_empty() {
        let kinds: Vec<&str> = kinds.iter().map(String::as_str).collect();
        Ok(format!(
            "{limited} limited lines (kinds named: {}); {unlimited} unlimited lines, in {} functions of boot and the operator",
            kinds.join(", "),
            places.len()
        ))
    } else {
        Err(problems)
    }
}

/// A function: its name, and its text from `fn` to the end of its body (or its `;`).
struct Function {
    name: String,
    span: std::ops::Range<usize>,
}

fn is_identifier(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Each identifier of `code` with its position (after a non-identifier character).
fn identifiers(code: &[char]) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let starts =
            (code[i].is_alphabetic() || code[i] == '_') && (i == 0 || !is_identifier(code[i - 1]));
        if starts {
            let name: String = code[i..]
                .iter()
                .take_while(|c| is_identifier(**c))
                .collect();
            let length = name.chars().count();
            found.push((i, name));
            i += length;
        } else {
            i += 1;
        }
    }
    found
}

/// The first character of `code` from `at` that is not white space.
fn next_code(code: &[char], at: usize) -> Option<char> {
    code.get(at..)?.iter().copied().find(|c| !c.is_whitespace())
}

/// Every function of `code` (`fn name`, its signature and its body).
fn functions(code: &[char]) -> Vec<Function> {
    let words = identifiers(code);
    let mut found = Vec::new();
    for (index, (at, word)) in words.iter().enumerate() {
        if word != "fn" {
            continue;
        }
        let Some((name_at, name)) = words.get(index + 1) else {
            continue;
        };
        // `fn(u8)` as a type has no name: its next word is further on.
        if code[at + 2..*name_at].iter().any(|c| !c.is_whitespace()) {
            continue;
        }
        // The body's `{` (or a `;` without one), outside the signature's brackets (`[u8; 4]`).
        let mut depth = 0i32;
        let mut end = None;
        let mut i = *name_at;
        while i < code.len() {
            match code[i] {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => {
                    end = Some(i + 1);
                    break;
                }
                '{' if depth == 0 => {
                    end = Some(closing_brace(code, i));
                    break;
                }
                _ => {}
            }
            i += 1;
        }
        found.push(Function {
            name: name.clone(),
            span: *at..end.unwrap_or(code.len()),
        });
    }
    found
}

/// The position after the brace that closes the one at `open`.
fn closing_brace(code: &[char], open: usize) -> usize {
    let mut depth = 0;
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// The text of each `use` item of `code`, to its `;`.
fn use_items(code: &[char]) -> Vec<std::ops::Range<usize>> {
    identifiers(code)
        .into_iter()
        .filter(|(_, word)| word == "use")
        .map(|(at, _)| {
            let end = code[at..]
                .iter()
                .position(|&c| c == ';')
                .map_or(code.len(), |offset| at + offset + 1);
            at..end
        })
        .collect()
}

/// The `DiagnosticKind::X` that the call at `at` names in its arguments.
fn kinds_named(code: &[char], at: usize) -> Vec<String> {
    let Some(open) = code[at..].iter().position(|&c| c == '(').map(|p| at + p) else {
        return Vec::new();
    };
    let mut depth = 0;
    let mut close = code.len();
    for (i, &c) in code.iter().enumerate().skip(open) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    close = i;
                    break;
                }
            }
            _ => {}
        }
    }
    let arguments: String = code[open..close].iter().collect();
    let words: Vec<(usize, String)> = identifiers(&code[open..close]);
    words
        .windows(2)
        .filter(|pair| pair[0].1 == "DiagnosticKind")
        .filter(|pair| {
            let between: String = arguments
                .chars()
                .skip(pair[0].0 + pair[0].1.len())
                .take(pair[1].0 - pair[0].0 - pair[0].1.len())
                .collect();
            between.trim() == "::"
        })
        .map(|pair| pair[1].1.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, text: &str) -> (String, String) {
        (path.into(), text.into())
    }

    #[test]
    fn an_unlimited_line_outside_boot_and_the_operator_is_refused_with_its_place() {
        let sources = [file(
            "health.rs",
            "use crate::keel_println;\n\nfn notify(boot: &Boot) {\n    keel_println!(boot, \"refused\");\n}\n",
        )];
        let problems = check(&sources).unwrap_err();
        assert_eq!(
            problems,
            [
                "health.rs:3: `Boot` in fn notify: an unlimited line (or its cause) where a guest's action may reach it",
                "health.rs:4: `keel_println` in fn notify: an unlimited line (or its cause) where a guest's action may reach it",
            ]
        );
    }

    #[test]
    fn a_cause_handed_on_from_an_allowed_function_is_refused_where_it_goes() {
        let sources = [file(
            "irq.rs",
            "fn console_input() {\n    let operator = received.operator();\n    deliver(&operator);\n}\n\nfn deliver(operator: &Operator) {\n    keel_println!(operator, \"refused\");\n}\n",
        )];
        let problems = check(&sources).unwrap_err();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().all(|p| p.contains("in fn deliver")));
    }

    #[test]
    fn boot_and_the_operator_pass_and_limited_lines_are_counted_with_their_kinds() {
        let sources = [
            file(
                "main.rs",
                "use console::{Boot, VmLabel};\nfn cpu_main(index: usize, boot: Boot) -> ! {\n    keel_println!(&boot, \"pCPU {}\"; index);\n    loop {}\n}\n",
            ),
            file(
                "sched/mod.rs",
                "use crate::console::Boot;\npub fn init(index: usize, boot: &Boot) {\n    keel_println!(boot, \"x\");\n}\n",
            ),
            file(
                "lifecycle.rs",
                "fn power_off(id: usize) {\n    keel_println_limited!(DiagnosticKind::Stop, id, \"powered off\");\n    console::line_in_steps(DiagnosticKind :: Reset, id, &parts, f);\n    // keel_println!(boot, \"a comment is not a line\");\n    let s = \"keel_println!(boot)\";\n}\n",
            ),
            file(
                "console.rs",
                "pub struct Boot(());\npub fn hypervisor_line(_cause: &impl NotAGuest) {}\n",
            ),
            file("arch/uart.rs", "pub struct Uart(u64);\n"),
        ];
        assert_eq!(
            check(&sources).unwrap(),
            "2 limited lines (kinds named: Reset, Stop); 2 unlimited lines, in 2 functions of boot and the operator"
        );
    }

    #[test]
    fn a_cause_is_made_only_at_a_pcpus_entry_and_in_the_console_input() {
        let sources = [
            file(
                "main.rs",
                "extern \"C\" fn keel_secondary_main(index: usize) -> ! {\n    cpu_main(index, Boot::bring_up())\n}\nfn cpu_main(index: usize, boot: Boot) -> ! {\n    let again = Boot::bring_up();\n    loop {}\n}\n",
            ),
            file(
                "irq.rs",
                "fn console_input() {\n    let operator = received.operator();\n}\nfn deliver_input() {\n    let _ = received.operator();\n}\n",
            ),
        ];
        let problems = check(&sources).unwrap_err();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems[0].starts_with("main.rs:5: `bring_up` in fn cpu_main"));
        assert!(problems[1].starts_with("irq.rs:5: `operator` in fn deliver_input"));
    }

    #[test]
    fn a_name_in_a_nested_function_belongs_to_the_innermost_and_fn_types_are_no_functions() {
        let sources = [file(
            "main.rs",
            "fn cpu_main(boot: Boot, between: fn()) {\n    fn helper(array: [u8; 4]) {\n        keel_println!(x, \"y\");\n    }\n}\n",
        )];
        let problems = check(&sources).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].starts_with("main.rs:3: `keel_println` in fn helper"));
    }

    #[test]
    fn the_hypervisor_says_every_guest_caused_line_limited_and_names_every_kind() {
        let summary = check_workspace().unwrap_or_else(|problems| panic!("{problems}"));
        // Every kind is some line's (`Start`: `console::start_line`'s, which names it itself).
        let named = format!(
            "kinds named: {})",
            keel_core::ratelimit::DiagnosticKind::ALL
                .iter()
                .map(|kind| format!("{kind:?}"))
                .filter(|kind| kind != "Start")
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect::<Vec<_>>()
                .join(", ")
        );
        assert!(summary.contains(&named), "{summary}: not {named}");
    }
}
