//! The configuration compiler (host only): a system described in TOML, validated, emitted as Rust tables.
//!
//! [`load`] parses a file (`schema`; durations in `duration`, percentages in `percent`, clock
//! frequencies in `frequency`) and checks every rejection rule in file order (`validate`, with
//! the scheduling rules and build-time admission in `schedule`, the `tasks` table's rules in
//! `tasks`, the `messages` table's in `messages`, the `[[channel]]` tables' in `channels`, the
//! last-level cache's geometry and the VMs' colours in `colouring` (the board's cache read in
//! `board_cache`), and the `[[vm.passthrough]]` tables' against the board's device tree in
//! `passthrough`, which reads the board's tree through `board` and `board_nodes` and makes the
//! VM's copy of a device's node in `device_node`; each rule's exact message is a [`Problem`],
//! [`PassthroughProblem`], [`ColourProblem`] or [`Unschedulable`] variant); [`emit_rust`] turns
//! the result into the [`SystemDesc`](crate::system::SystemDesc) and message pool size the
//! hypervisor links in, and [`colour_report`] describes each VM's share of the cache. EL2 never
//! parses TOML. [`accepted_keys`] lists every key the parser takes, table by table, for the
//! configuration reference's check.

mod board;
mod board_cache;
mod board_nodes;
mod channels;
mod codegen;
mod colour_problem;
mod colouring;
mod decimal;
mod device_node;
mod duration;
mod error;
mod frequency;
mod health;
mod image;
mod keys;
mod load;
mod messages;
mod model;
mod passthrough;
mod passthrough_problem;
mod percent;
mod schedule;
mod schema;
mod size;
mod tasks;
mod unschedulable;
mod validate;

pub use board::{no_board_tree, BoardTree};
pub use codegen::emit_rust;
pub use colour_problem::ColourProblem;
pub use colouring::colour_report;
pub use duration::{format_duration, parse_duration, DurationError};
pub use error::{AddressRange, Backing, ConfigError, ConfigErrorKind, Problem, Subject, VcpuName};
pub use frequency::{parse_frequency, FrequencyError};
pub use image::{inspect as inspect_image, ImageLayout};
pub use keys::{accepted_keys, KeyTable};
pub use load::{load, load_with_board, parse_str, parse_str_with_board};
pub use model::{
    Channel, ChannelMember, DeviceInterrupt, DeviceNode, Flash, Health, ImageSource, Initrd,
    Messages, Passthrough, System, Tasks, Vm, DEFAULT_IPA, DEVICE_WINDOW_END, DEVICE_WINDOW_START,
    DTB_REGION_SIZE, FLASH_WINDOW_SIZE, HYPERVISOR_IMAGE_OFFSET, IPA_BITS, KNOWN_DEVICES,
    LINUX_IMAGE_BASE_ALIGN, MAX_PCPUS, MAX_VCPUS, MAX_VMS, MIN_VM_MEMORY, PAGE_SIZE,
    VM_DEVICE_PHANDLE_BASE, VM_GIC_PHANDLE,
};
pub use passthrough_problem::PassthroughProblem;
pub use percent::{parse_percent, PercentError};
pub use schedule::{DEFAULT_QUANTUM_NS, DEFAULT_SWITCH_COST_NS};
pub use size::{format_size, parse_size, ByteSize};
pub use unschedulable::{Holder, Unschedulable};
