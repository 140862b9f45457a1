//! Entry points of the configuration compiler: read a TOML file, parse it, validate it.

use std::path::{Path, PathBuf};

use super::board::{no_board_tree, BoardTree};
use super::error::{ConfigError, ConfigErrorKind};
use super::model::System;
use super::schema::ConfigFile;
use super::validate::validate;

/// Parses, resolves and validates the configuration at `path`.
///
/// `guest_image` maps the name of a guest of this workspace to its built image
/// (`None`: no such guest). Image files named by `file` are relative to `path`'s directory.
/// No board device tree is given: a `[[vm.passthrough]]` is refused ([`load_with_board`]).
pub fn load(
    path: &Path,
    guest_image: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<System, ConfigError> {
    load_with_board(path, guest_image, &no_board_tree)
}

/// [`load`], with the board's device tree that `[[vm.passthrough]]` paths name (read only if
/// a VM is given a device).
pub fn load_with_board(
    path: &Path,
    guest_image: &dyn Fn(&str) -> Option<PathBuf>,
    board: BoardTree,
) -> Result<System, ConfigError> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| ConfigError::new(path, ConfigErrorKind::Read(error.to_string())))?;
    parse_str_with_board(&text, path, guest_image, board)
}

/// Same as [`load`], from the file's text; `path` names it in errors and anchors relative images.
pub fn parse_str(
    text: &str,
    path: &Path,
    guest_image: &dyn Fn(&str) -> Option<PathBuf>,
) -> Result<System, ConfigError> {
    parse_str_with_board(text, path, guest_image, &no_board_tree)
}

/// Same as [`load_with_board`], from the file's text.
pub fn parse_str_with_board(
    text: &str,
    path: &Path,
    guest_image: &dyn Fn(&str) -> Option<PathBuf>,
    board: BoardTree,
) -> Result<System, ConfigError> {
    let file: ConfigFile =
        toml::from_str(text).map_err(|error| ConfigError::new(path, toml_error(text, &error)))?;
    let config_dir = path.parent().unwrap_or(Path::new(""));
    validate(&file, config_dir, guest_image, board).map_err(|kind| ConfigError::new(path, kind))
}

/// Turns a TOML parser error into its message and 1-based line and column.
fn toml_error(text: &str, error: &toml::de::Error) -> ConfigErrorKind {
    let position = error.span().map(|span| line_and_column(text, span.start));
    ConfigErrorKind::Toml {
        position,
        // The parser's message may span lines ("invalid table header\nexpected `.`, `]`").
        message: error
            .message()
            .lines()
            .map(str::trim)
            .filter(|line| !line.is_empty())
            .collect::<Vec<_>>()
            .join(": "),
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::line_and_column;

    #[test]
    fn positions_are_one_based() {
        let text = "a = 1\nbb = 2\n";
        assert_eq!(line_and_column(text, 0), (1, 1));
        assert_eq!(line_and_column(text, 6), (2, 1));
        assert_eq!(line_and_column(text, 8), (2, 3));
        assert_eq!(line_and_column(text, 100), (3, 1));
    }
}
