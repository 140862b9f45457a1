//! The shared last-level cache model (`tools/llc-model`, a QEMU TCG plugin): built for the
//! host, and given to a machine as `-plugin` with its arguments (the plugin's crate
//! documentation describes them and its report).

use std::ops::Range;
use std::path::{Path, PathBuf};

use keel_core::colour::CacheGeometry;

use crate::Result;

/// Builds the plugin for the host, in release mode (cargo rebuilds it only when its sources
/// changed), and returns the path of the library to give QEMU.
pub fn plugin() -> Result<PathBuf> {
    crate::build_lock::exclusive(|| {
        let mut command = crate::image::cargo();
        command.args(["build", "--quiet", "--release", "-p", "keel-llc-model"]);
        crate::process::output_quoting(&mut command, 60)
            .map_err(|e| format!("building keel-llc-model: {e}"))?;
        Ok(crate::image::target_dir()
            .join("release")
            .join("libkeel_llc_model.so"))
    })
}

/// A machine's cache model: the plugin, the cache it models, what it counts apart, and the
/// file its report goes to.
#[derive(Clone, Debug)]
pub struct LlcModel {
    /// The plugin's library ([`plugin`]).
    pub plugin: PathBuf,
    pub geometry: CacheGeometry,
    /// Physical ranges counted under their names (`range=`), each `start..end`.
    pub ranges: Vec<(String, Range<u64>)>,
    /// Physical ranges counted apart as excluded (`exclude=`): Keel's own image.
    pub excluded: Vec<Range<u64>>,
    /// The report (`out=`).
    pub out: PathBuf,
    /// Lookups of all vCPUs between two interval lines (`interval=`), or none.
    pub interval: Option<u64>,
}

impl LlcModel {
    /// `plugin` modelling `geometry`, its report to `out`, nothing counted apart.
    pub fn new(plugin: &Path, geometry: CacheGeometry, out: &Path) -> Self {
        LlcModel {
            plugin: plugin.into(),
            geometry,
            ranges: Vec::new(),
            excluded: Vec::new(),
            out: out.into(),
            interval: None,
        }
    }

    /// The value of QEMU's `-plugin`: `file=` and the plugin's arguments, each `key=value`
    /// (QEMU 7.2 takes them so; `arg=key=value` is its deprecated form).
    pub fn plugin_option(&self) -> String {
        // QEMU's option syntax: a comma inside a value is written twice.
        let path = |path: &Path| path.display().to_string().replace(',', ",,");
        let CacheGeometry { size, ways, line } = self.geometry;
        let mut option = format!(
            "file={},size={size},ways={ways},line={line},out={}",
            path(&self.plugin),
            path(&self.out)
        );
        for (name, range) in &self.ranges {
            let name = name.replace(',', ",,");
            option += &format!(",range={name}:{:#x}-{:#x}", range.start, range.end);
        }
        for range in &self.excluded {
            option += &format!(",exclude={:#x}-{:#x}", range.start, range.end);
        }
        if let Some(interval) = self.interval {
            option += &format!(",interval={interval}");
        }
        option
    }
}
