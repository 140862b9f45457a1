//! The QEMU side: the few functions of QEMU 7.2's plugin API the model needs (declared here
//! after `include/qemu/qemu-plugin.h`, API version 1), the install entry point, and the
//! callbacks that feed each guest load and store to RAM into the model.
//!
//! Every callback only reads what QEMU hands it and updates the model: the guest's state is
//! never touched. The model sits behind one mutex, so that vCPU threads running at once
//! (MTTCG, QEMU's default without `-icount`) look lines up one at a time; under `-icount`
//! QEMU runs all vCPUs in one thread and the mutex is never contended.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::args::Settings;
use crate::model::Model;
use crate::report;

/// `qemu_plugin_id_t`.
type PluginId = u64;

/// `qemu_plugin_meminfo_t`: an opaque description of one memory access.
type MemInfo = u32;

/// `struct qemu_plugin_tb`, `struct qemu_plugin_insn`, `struct qemu_plugin_hwaddr`: opaque.
#[repr(C)]
struct TranslationBlock {
    _opaque: [u8; 0],
}
#[repr(C)]
struct Instruction {
    _opaque: [u8; 0],
}
#[repr(C)]
struct HardwareAddress {
    _opaque: [u8; 0],
}

/// `qemu_info_t`: what QEMU tells the plugin at install.
#[repr(C)]
pub struct Info {
    // Not read: there for the layout (QEMU itself checks the version).
    #[allow(dead_code)]
    target_name: *const c_char,
    #[allow(dead_code)]
    version: Version,
    system_emulation: bool,
    /// The union's `system` member (the only one).
    system: SystemInfo,
}

#[repr(C)]
pub struct Version {
    min: c_int,
    cur: c_int,
}

#[repr(C)]
pub struct SystemInfo {
    smp_vcpus: c_int,
    max_vcpus: c_int,
}

/// `QEMU_PLUGIN_CB_NO_REGS` of `enum qemu_plugin_cb_flags`.
const CB_NO_REGS: c_int = 0;
/// `QEMU_PLUGIN_MEM_RW` of `enum qemu_plugin_mem_rw`: loads and stores.
const MEM_RW: c_int = 3;

type TranslationCallback = extern "C" fn(PluginId, *mut TranslationBlock);
type MemoryCallback = extern "C" fn(c_uint, MemInfo, u64, *mut c_void);
type AtExitCallback = extern "C" fn(PluginId, *mut c_void);

// The functions QEMU's binary exports; they resolve when QEMU loads the plugin.
unsafe extern "C" {
    fn qemu_plugin_register_vcpu_tb_trans_cb(id: PluginId, callback: TranslationCallback);
    fn qemu_plugin_tb_n_insns(block: *const TranslationBlock) -> usize;
    fn qemu_plugin_tb_get_insn(block: *const TranslationBlock, index: usize) -> *mut Instruction;
    fn qemu_plugin_register_vcpu_mem_cb(
        instruction: *mut Instruction,
        callback: MemoryCallback,
        flags: c_int,
        rw: c_int,
        userdata: *mut c_void,
    );
    fn qemu_plugin_mem_size_shift(info: MemInfo) -> c_uint;
    fn qemu_plugin_get_hwaddr(info: MemInfo, vaddr: u64) -> *mut HardwareAddress;
    fn qemu_plugin_hwaddr_is_io(address: *const HardwareAddress) -> bool;
    fn qemu_plugin_hwaddr_phys_addr(address: *const HardwareAddress) -> u64;
    fn qemu_plugin_register_atexit_cb(
        id: PluginId,
        callback: AtExitCallback,
        userdata: *mut c_void,
    );
    fn qemu_plugin_outs(text: *const c_char);
}

/// The plugin API version this plugin was written against (`QEMU_PLUGIN_VERSION`).
#[no_mangle]
#[allow(non_upper_case_globals)]
pub static qemu_plugin_version: c_int = 1;

/// The model and where its report goes: one per QEMU process.
struct Plugin {
    model: Model,
    output: Output,
}

enum Output {
    File(BufWriter<File>),
    /// QEMU's log (`qemu_plugin_outs`, shown with `-d plugin`).
    Log,
}

impl Output {
    fn write(&mut self, text: &str) {
        match self {
            Output::File(file) => {
                // An output that fails (a full disk) loses lines, never the guest's run.
                let _ = file.write_all(text.as_bytes());
            }
            Output::Log => {
                if let Ok(text) = CString::new(text) {
                    // SAFETY: `text` is a NUL-terminated string that lives across the call;
                    // QEMU copies it into its log.
                    unsafe { qemu_plugin_outs(text.as_ptr()) };
                }
            }
        }
    }
}

static PLUGIN: OnceLock<Mutex<Plugin>> = OnceLock::new();

fn with_plugin(work: impl FnOnce(&mut Plugin)) {
    if let Some(plugin) = PLUGIN.get() {
        // A panic cannot leave the model half-updated in a way worth refusing: go on.
        work(&mut plugin.lock().unwrap_or_else(PoisonError::into_inner));
    }
}

/// QEMU's entry point: parses `argv` (`argc` strings `key=value`), opens the output and
/// registers the callbacks. Returns 0, or 1 after printing why on stderr.
///
/// # Safety
/// QEMU calls it once, with `info` valid for the call and `argv` holding `argc` valid
/// NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn qemu_plugin_install(
    id: PluginId,
    info: *const Info,
    argc: c_int,
    argv: *const *const c_char,
) -> c_int {
    // SAFETY: QEMU passes `info` valid for this call.
    let info = unsafe { &*info };
    let args: Vec<String> = (0..usize::try_from(argc).unwrap_or(0))
        .map(|index| {
            // SAFETY: `argv` holds `argc` valid NUL-terminated strings.
            unsafe { CStr::from_ptr(*argv.add(index)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    match install(id, info, &args) {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("keel-llc-model: {message}");
            1
        }
    }
}

fn install(id: PluginId, info: &Info, args: &[String]) -> Result<(), String> {
    if !info.system_emulation {
        return Err("models physical addresses: system emulation only".into());
    }
    let settings = Settings::parse(args.iter().map(String::as_str)).map_err(|e| e.to_string())?;
    let mut output = match &settings.out {
        Some(path) => Output::File(BufWriter::new(
            File::create(path).map_err(|e| format!("out={}: {e}", path.display()))?,
        )),
        None => Output::Log,
    };
    output.write(&report::header(&settings.geometry));
    let vcpus = usize::try_from(info.system.smp_vcpus).unwrap_or(0);
    let plugin = Plugin {
        model: Model::new(&settings, vcpus),
        output,
    };
    PLUGIN
        .set(Mutex::new(plugin))
        .map_err(|_| "installed twice in one process")?;
    // SAFETY: `id` is the one QEMU gave this plugin; the callbacks have the API's signatures.
    unsafe {
        qemu_plugin_register_vcpu_tb_trans_cb(id, on_translation);
        qemu_plugin_register_atexit_cb(id, on_exit, std::ptr::null_mut());
    }
    Ok(())
}

/// A block was translated: every instruction of it reports its loads and stores.
extern "C" fn on_translation(_id: PluginId, block: *mut TranslationBlock) {
    // SAFETY: `block` is the handle QEMU passes for the duration of this callback.
    let instructions = unsafe { qemu_plugin_tb_n_insns(block) };
    for index in 0..instructions {
        // SAFETY: `index` is below the block's instruction count; the handle is used within
        // this callback, as the API requires.
        unsafe {
            let instruction = qemu_plugin_tb_get_insn(block, index);
            qemu_plugin_register_vcpu_mem_cb(
                instruction,
                on_memory_access,
                CB_NO_REGS,
                MEM_RW,
                std::ptr::null_mut(),
            );
        }
    }
}

/// A load or store of vCPU `vcpu` at virtual address `vaddr`: to the model if it is to RAM.
extern "C" fn on_memory_access(vcpu: c_uint, info: MemInfo, vaddr: u64, _: *mut c_void) {
    // SAFETY: `info` and `vaddr` are this callback's own; the address handle is used only
    // within it. A null handle (user-mode emulation) is not looked at.
    let (address, size) = unsafe {
        let hardware = qemu_plugin_get_hwaddr(info, vaddr);
        if hardware.is_null() || qemu_plugin_hwaddr_is_io(hardware) {
            return;
        }
        (
            qemu_plugin_hwaddr_phys_addr(hardware),
            // 1 to 16 bytes (shift 0 to 4).
            1u64 << qemu_plugin_mem_size_shift(info).min(12),
        )
    };
    with_plugin(|plugin| {
        plugin.model.access(vcpu as usize, address, size);
        for interval in plugin.model.take_intervals() {
            plugin.output.write(&report::interval(&interval));
        }
    });
}

/// QEMU exits: the summary.
extern "C" fn on_exit(_id: PluginId, _: *mut c_void) {
    with_plugin(|plugin| {
        let summary = report::summary(&plugin.model);
        plugin.output.write(&summary);
        if let Output::File(file) = &mut plugin.output {
            let _ = file.flush();
        }
    });
}
