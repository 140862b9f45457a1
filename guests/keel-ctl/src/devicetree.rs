//! The management window's node in this VM's device tree, as Linux shows it under
//! `/proc/device-tree` (a directory per node, a file per property, the property's bytes as
//! written): Keel's configuration compiler gives every VM that manages another a node
//! compatible with `keel,manager` whose `reg` is the window (two cells of address, two of
//! size), `keel,managed` the ids of the VMs it manages (32-bit cells) and `keel,managed-names`
//! their names (NUL-terminated strings, in the same order). `keel` looks for it before it maps
//! anything: in a VM without the window, an access there would be a stage-2 fault that stops
//! the VM.

use std::fmt;
use std::path::{Path, PathBuf};

/// The node's `compatible` string.
pub const COMPATIBLE: &str = "keel,manager";

/// Where Linux shows the device tree.
pub const TREE: &str = "/proc/device-tree";

/// A VM this VM manages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Managed {
    /// Its id.
    pub id: u16,
    /// Its name.
    pub name: String,
}

/// What the node says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowNode {
    /// The window's guest-physical address.
    pub base: u64,
    /// Its size in bytes.
    pub size: u64,
    /// The VMs this VM manages.
    pub managed: Vec<Managed>,
}

/// Why the window was not found.
#[derive(Debug, PartialEq, Eq)]
pub enum NodeError {
    /// The device tree directory cannot be read.
    NoTree {
        /// The directory.
        path: PathBuf,
        /// Why.
        error: String,
    },
    /// No node is compatible with [`COMPATIBLE`]: this VM manages none.
    NoNode {
        /// The directory looked in.
        path: PathBuf,
    },
    /// A property of the node is not what the binding says.
    BadProperty {
        /// The property's file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeError::NoTree { path, error } => write!(
                f,
                "cannot read the device tree at {}: {error}",
                path.display()
            ),
            NodeError::NoNode { path } => write!(
                f,
                "this VM has no management window: no node of {} is compatible with \
                 \"{COMPATIBLE}\" (Keel gives the window only to a VM that another VM's \
                 [vm.health] managers names)",
                path.display()
            ),
            NodeError::BadProperty { path, problem } => {
                write!(f, "{}: {problem}", path.display())
            }
        }
    }
}

/// Finds the window's node among the children of `tree` (the device tree's root directory).
pub fn find(tree: &Path) -> Result<WindowNode, NodeError> {
    let entries = std::fs::read_dir(tree).map_err(|error| NodeError::NoTree {
        path: tree.to_path_buf(),
        error: error.to_string(),
    })?;
    let mut nodes: Vec<PathBuf> = entries
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.is_dir())
        .collect();
    nodes.sort();
    for node in nodes {
        let Ok(compatible) = std::fs::read(node.join("compatible")) else {
            continue;
        };
        if strings(&compatible).any(|string| string == COMPATIBLE) {
            return read_node(&node);
        }
    }
    Err(NodeError::NoNode {
        path: tree.to_path_buf(),
    })
}

/// The NUL-terminated strings of a string-list property.
fn strings(bytes: &[u8]) -> impl Iterator<Item = &str> {
    bytes
        .strip_suffix(&[0])
        .unwrap_or(bytes)
        .split(|&byte| byte == 0)
        .filter_map(|string| std::str::from_utf8(string).ok())
}

/// Reads the window node at `node`.
fn read_node(node: &Path) -> Result<WindowNode, NodeError> {
    let read = |name: &str, required: bool| -> Result<Vec<u8>, NodeError> {
        let path = node.join(name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(bytes),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !required => {
                Ok(Vec::new())
            }
            Err(error) => Err(NodeError::BadProperty {
                path,
                problem: error.to_string(),
            }),
        }
    };
    let reg = read("reg", true)?;
    let ids = read("keel,managed", false)?;
    let names = read("keel,managed-names", false)?;
    parse(&reg, &ids, &names).map_err(|(property, problem)| NodeError::BadProperty {
        path: node.join(property),
        problem,
    })
}

/// The node from its properties' bytes; a problem names the property.
pub fn parse(reg: &[u8], ids: &[u8], names: &[u8]) -> Result<WindowNode, (&'static str, String)> {
    let Ok(reg) = <[u8; 16]>::try_from(reg) else {
        return Err((
            "reg",
            format!(
                "{} bytes, not one address and one size of two cells each (16 bytes)",
                reg.len()
            ),
        ));
    };
    let cell_pair = |at: usize| {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&reg[at..at + 8]);
        u64::from_be_bytes(bytes)
    };
    if !ids.len().is_multiple_of(4) {
        return Err((
            "keel,managed",
            format!("{} bytes, not a list of 32-bit cells", ids.len()),
        ));
    }
    let ids: Vec<u32> = ids
        .chunks_exact(4)
        .map(|cell| u32::from_be_bytes([cell[0], cell[1], cell[2], cell[3]]))
        .collect();
    let names: Vec<&str> = if names.is_empty() {
        Vec::new()
    } else {
        strings(names).collect()
    };
    if names.len() != ids.len() {
        return Err((
            "keel,managed-names",
            format!(
                "{} names for the {} ids of keel,managed",
                names.len(),
                ids.len()
            ),
        ));
    }
    let mut managed = Vec::with_capacity(ids.len());
    for (id, name) in ids.into_iter().zip(names) {
        let id = u16::try_from(id).map_err(|_| ("keel,managed", format!("{id} is not a VM id")))?;
        managed.push(Managed {
            id,
            name: name.to_string(),
        });
    }
    Ok(WindowNode {
        base: cell_pair(0),
        size: cell_pair(8),
        managed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const REG: [u8; 16] = [0, 0, 0, 0, 0x0b, 0x01, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0];

    /// A device tree directory of its own under the system's temporary directory.
    struct Tree(PathBuf);

    impl Tree {
        fn new(test: &str) -> Tree {
            let path = std::env::temp_dir().join(format!("keel-ctl-{test}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Tree(path)
        }

        fn node(&self, name: &str, properties: &[(&str, &[u8])]) {
            let node = self.0.join(name);
            std::fs::create_dir_all(&node).unwrap();
            for (property, bytes) in properties {
                std::fs::write(node.join(property), bytes).unwrap();
            }
        }
    }

    impl Drop for Tree {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn the_node_gives_the_window_and_the_managed_vms() {
        let tree = Tree::new("found");
        tree.node(
            "pl011@9000000",
            &[("compatible", b"arm,pl011\0arm,primecell\0")],
        );
        tree.node(
            "keel-manager@b010000",
            &[
                ("compatible", b"keel,manager\0"),
                ("reg", &REG),
                ("keel,managed", &[0, 0, 0, 1, 0, 0, 0, 3]),
                ("keel,managed-names", b"rt\0bare\0"),
            ],
        );
        assert_eq!(
            find(&tree.0),
            Ok(WindowNode {
                base: 0x0b01_0000,
                size: 0x1000,
                managed: vec![
                    Managed {
                        id: 1,
                        name: "rt".into()
                    },
                    Managed {
                        id: 3,
                        name: "bare".into()
                    },
                ],
            })
        );
    }

    #[test]
    fn without_the_node_the_error_says_why_there_is_no_window() {
        let tree = Tree::new("absent");
        tree.node("pl011@9000000", &[("compatible", b"arm,pl011\0")]);
        let error = find(&tree.0).unwrap_err();
        assert!(matches!(error, NodeError::NoNode { .. }));
        assert!(error
            .to_string()
            .starts_with("this VM has no management window: no node of "));
        let missing = tree.0.join("nothing-here");
        assert!(find(&missing)
            .unwrap_err()
            .to_string()
            .starts_with(&format!(
                "cannot read the device tree at {}: ",
                missing.display()
            )));
    }

    #[test]
    fn malformed_properties_are_named() {
        assert_eq!(
            parse(&REG[..12], &[], &[]).unwrap_err(),
            (
                "reg",
                "12 bytes, not one address and one size of two cells each (16 bytes)".into()
            )
        );
        assert_eq!(parse(&REG, &[0, 1], &[]).unwrap_err().0, "keel,managed");
        assert_eq!(
            parse(&REG, &[0, 0, 0, 1], b"a\0b\0").unwrap_err(),
            (
                "keel,managed-names",
                "2 names for the 1 ids of keel,managed".into()
            )
        );
        assert_eq!(
            parse(&REG, &[0, 1, 0, 0], b"a\0").unwrap_err(),
            ("keel,managed", "65536 is not a VM id".into())
        );
        let tree = Tree::new("bad");
        tree.node(
            "keel-manager@b010000",
            &[("compatible", b"keel,manager\0"), ("reg", &REG[..8])],
        );
        let error = find(&tree.0).unwrap_err().to_string();
        assert!(error.ends_with("keel-manager@b010000/reg: 8 bytes, not one address and one size of two cells each (16 bytes)"), "{error}");
    }
}
