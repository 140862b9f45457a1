//! The TOML file exactly as written: serde structures, before any resolution or checking.

use serde::Deserialize;

use super::size::ByteSize;

/// A whole configuration file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// The `[system]` table.
    pub system: SystemTable,
    /// The `[[vm]]` tables, in file order (a VM's index is its id).
    #[serde(default)]
    pub vm: Vec<VmTable>,
}

/// The `[system]` table: the board and what Keel keeps for itself.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SystemTable {
    /// Name of the configuration.
    pub name: String,
    /// The board's RAM.
    pub ram: RegionTable,
    /// Memory reserved for Keel.
    pub hypervisor: RegionTable,
    /// Number of pCPUs: ids `0..pcpus`.
    pub pcpus: u32,
}

/// `{ base = ..., size = ... }`.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionTable {
    /// First address.
    pub base: u64,
    /// Size in bytes.
    pub size: ByteSize,
}

/// One `[[vm]]` table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmTable {
    /// The VM's name.
    pub name: String,
    /// Where its kernel comes from.
    pub image: ImageTable,
    /// Its initial RAM disk, if any.
    pub initrd: Option<ImageTable>,
    /// Its physical backing memory.
    pub memory: RegionTable,
    /// Guest-physical base of that memory (default [`super::DEFAULT_IPA`]).
    pub ipa: Option<u64>,
    /// Physical backing of a flash bank at IPA 0 that the image boots from (firmware VMs).
    pub flash: Option<RegionTable>,
    /// vCPU `i` is pinned on pCPU `pcpus[i]`.
    pub pcpus: Vec<u32>,
    /// Emulated devices by name.
    #[serde(default)]
    pub devices: Vec<String>,
    /// Kernel command line (`/chosen/bootargs`).
    #[serde(default)]
    pub cmdline: String,
    /// WFI policy: `"native"` or `"trap"` (checked later, so the message names the VM).
    pub wfi: Option<String>,
    /// Whether the VM owns its pCPUs' PMU (counters passed through; default: hidden).
    #[serde(default)]
    pub pmu: bool,
}

/// `image = { guest = "..." }` or `image = { file = "..." }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImageTable {
    /// A guest of this workspace, built by xtask.
    pub guest: Option<String>,
    /// A file, relative to the configuration file's directory.
    pub file: Option<String>,
    /// A Debian arm64 kernel flavour or firmware package, fetched and built by xtask.
    pub debian: Option<String>,
}
