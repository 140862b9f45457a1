//! The guest-visible hypercall ABI: function identifiers and result codes.
//!
//! Calls use `HVC #0` with the SMC Calling Convention (Arm DEN0028, SMCCC 1.1):
//! function id in `w0`, arguments in `x1..x6`, results in `x0..x3`.
//! Keel's own services sit in the Vendor Specific Hypervisor Service range
//! (owning entity 6, SMCCC table 6-4), as 64-bit fast calls `0xC600_xxxx`.

/// SMCCC bit 31: fast call.
pub const SMCCC_FAST_CALL: u32 = 1 << 31;
/// SMCCC bit 30: SMC64/HVC64 calling convention.
pub const SMCCC_64BIT: u32 = 1 << 30;
/// SMCCC owning entity number for the Vendor Specific Hypervisor Service.
pub const OWNER_VENDOR_HYP: u32 = 6;

/// Builds a 64-bit fast-call id of the vendor hypervisor service range.
pub const fn keel_call(function: u16) -> u32 {
    SMCCC_FAST_CALL | SMCCC_64BIT | (OWNER_VENDOR_HYP << 24) | function as u32
}

/// Returns Keel's version in x0 (`major << 16 | minor`): the cheapest call, used as the null hypercall.
pub const KEEL_VERSION: u32 = keel_call(0x00);
/// Returns the caller's VM id in x0 and its vCPU index in x1.
pub const KEEL_VM_ID: u32 = keel_call(0x01);
/// Gives up the rest of the caller's time slice; returns 0.
pub const KEEL_YIELD: u32 = keel_call(0x02);
/// The guest reports a fatal exception it cannot handle (x1 = ESR_EL1, x2 = ELR_EL1, x3 = FAR_EL1);
/// Keel stops the VM with a diagnostic. Does not return.
pub const KEEL_CRASH: u32 = keel_call(0x03);
/// The caller's scheduling statistics on a shared pCPU: x0 = jobs released, x1 = deadline
/// misses, x2 = budget overruns, x3 = worst response time in nanoseconds. NOT_SUPPORTED on a
/// pinned pCPU (no scheduler counts anything there).
pub const KEEL_SCHED_STATS: u32 = keel_call(0x04);

/// Creates a real-time task in the caller's partition, stopped (see [`crate::tasks`]):
/// x1 = entry point, x2 = stack pointer (top, 16-byte aligned), x3 = x0 at entry,
/// x4 = period, x5 = budget, x6 = relative deadline (0: the period), all in nanoseconds,
/// x7 = pCPU (bits 0-7) and priority on a fixed-priority pCPU (bits 8-15). Returns the task's
/// handle (`vm << 8 | index`) or a negative error ([`crate::tasks::TaskError`]).
pub const KEEL_TASK_CREATE: u32 = keel_call(0x10);
/// Launches task x1 (a handle): its first job is released at once (x2 = 0) or when the
/// virtual counter reaches x2 (phase alignment; a time already passed means at once).
pub const KEEL_TASK_LAUNCH: u32 = keel_call(0x11);
/// Deletes task x1: it stops at once and its vCPU is freed for reuse.
pub const KEEL_TASK_DELETE: u32 = keel_call(0x12);
/// Called by a task: its job is complete; it sleeps until its next release. Returns 0.
pub const KEEL_TASK_WAIT: u32 = keel_call(0x13);
/// Statistics of task x1: x0 = jobs released, x1 = deadline misses, x2 = budget overruns,
/// x3 = worst response time, x4 = last response time, x5 = worst release lateness (ns).
pub const KEEL_TASK_STATS: u32 = keel_call(0x14);
/// The longest stretch pCPU x1 ran at EL2 with interrupts masked since boot (or since the
/// last call with x2 = 1, which resets the record): x0 = its length in nanoseconds, x1 = where
/// (a [`MaskedSite`] number), x2 and x3 = ESR_EL2 and ELR_EL2 when it ended (the trap it was
/// spent on, and the guest's PC). NOT_SUPPORTED if the pCPU does not exist.
pub const KEEL_MASKED_STRETCH: u32 = keel_call(0x20);

/// Writes a mark into Keel's trace (see [`crate::trace`]) with the value x1 (its low 32
/// bits), on the calling vCPU's pCPU: a guest's own point in the trace (a tick count, a
/// phase). Returns 0, also when the system is built without a trace (the call costs a trap).
pub const KEEL_TRACE_MARK: u32 = keel_call(0x21);

/// Copies records of pCPU x1's trace ring into the caller's memory, in the ring's own format
/// (see [`crate::trace`]): those from record index x2 on (or the oldest the ring still
/// holds, if later), at most [`TRACE_READ_MAX`] and as many as fit in the x4 bytes at IPA x3.
/// Returns x0 = records copied, x1 = the index of the first, x2 = the ring's head (records
/// written since boot) when the copy ended, x3 = the byte offset in the buffer where the first
/// is (records found overwritten during the copy are skipped: the ones before that offset are
/// not valid). DENIED unless the configuration makes the VM a `trace_reader`, NOT_SUPPORTED
/// without a trace or for a pCPU that does not exist, INVALID_ADDRESS if the buffer is not in
/// the caller's memory. Read a ring on: call again from x1 + x0.
pub const KEEL_TRACE_READ: u32 = keel_call(0x22);

/// Most records one KEEL_TRACE_READ copies (512 bytes): the copy is Keel's work with
/// interrupts masked, so it is bounded whatever the buffer, inside the masked-stretch bound of
/// 2,000 instructions; a reader behind calls again (each call a trap of its own).
pub const TRACE_READ_MAX: usize = 32;

/// Keeps the caller's VM's watchdog (see [`crate::health`]): the first call arms it, each
/// call after puts its expiry one period ahead. Returns the period in nanoseconds;
/// NOT_SUPPORTED unless the configuration gives the VM `health.watchdog.period`. Its expiry is
/// a health event (the action its configuration names: restart, stop, or a line only).
pub const KEEL_WATCHDOG: u32 = keel_call(0x40);
/// VM x1's health as its managers see it: x0 = its state ([`crate::health::VmStatus`]),
/// x1 = its restarts since boot, x2 = its last health event and the action taken
/// (`event | action << 8`, 0: none yet), x3 = when (ns since boot). DENIED unless the caller
/// is one of its `health.managers` or the VM itself; INVALID_PARAMETERS for no such VM.
pub const KEEL_VM_STATUS: u32 = keel_call(0x41);
/// Starts VM x1 from its pristine image if it is off or stopped (ALREADY_ON if it runs or is
/// restarting). Returns 0. DENIED unless the caller is one of its managers.
pub const KEEL_VM_START: u32 = keel_call(0x42);
/// Stops VM x1 (every vCPU off, its devices' interrupts and DMA cut off) as a fault would.
/// Returns 0 (also if it had ended already). DENIED unless the caller is one of its managers.
pub const KEEL_VM_STOP: u32 = keel_call(0x43);
/// Restarts VM x1 from its pristine image in bounded steps, whatever its state (a restart
/// under way already: nothing more). Returns 0. DENIED unless the caller is one of its managers.
pub const KEEL_VM_RESTART: u32 = keel_call(0x44);
/// Scheduling statistics of vCPU x2 of VM x1 (a task's vCPU too), as KEEL_SCHED_STATS gives
/// the caller its own: x0 = jobs released, x1 = deadline misses, x2 = budget overruns, x3 =
/// worst response time (ns). DENIED unless the caller is one of its managers or the VM itself;
/// NOT_SUPPORTED for a vCPU on a pinned pCPU (nothing is counted there) or not started.
pub const KEEL_VM_SCHED_STATS: u32 = keel_call(0x45);
/// Keel's resource counters of VM x1, which a restart must bring back to what they were at its
/// boot: x0 = messages queued in its queues, x1 = its live tasks, x2 = scheduler slots of its
/// vCPUs and tasks started on shared pCPUs, x3 = its virtual interrupts raised and not done
/// with (pending, active or listed; bits 0-31), whether its devices' DMA translates (bit 32)
/// and whether its watchdog is armed (bit 33). DENIED unless the caller manages it or is it.
pub const KEEL_VM_RESOURCES: u32 = keel_call(0x46);

/// Sends a message (see [`crate::ipc`]): x1 = destination VM, x2 = its vCPU (a task: the
/// VM's configured vCPUs plus the task's index, as KEEL_VM_ID tells the task), x3 = the
/// message's guest-physical address, x4 = its length. Keel copies it into the destination's
/// queue and raises the destination VM's message interrupt at that vCPU. Returns the number
/// of messages now queued there, or a negative [`crate::ipc::MessageError`] code.
pub const KEEL_MSG_SEND: u32 = keel_call(0x30);
/// Receives the caller's next message: x1 = buffer (guest-physical), x2 = its capacity,
/// x3 = how long to wait if none is queued: 0 not at all, otherwise until the virtual counter
/// reaches x3 (`u64::MAX`: for ever); the caller's pCPU is given away meanwhile. Returns
/// x0 = the length, x1 = the sender's VM, x2 = its vCPU, x3 = messages still queued; or a
/// negative [`crate::ipc::MessageError`] code (buffer too small: x1 = the message's length).
pub const KEEL_MSG_RECV: u32 = keel_call(0x31);
/// Rings a shared-memory channel's doorbell (see [`crate::channel`]): x1 = the channel's id
/// (its index among the `[[channel]]` tables), x2 = the member to ring (its position in the
/// channel's `vms`), or `u64::MAX` for every member but the caller. Keel raises the channel's
/// interrupt in each such VM (an SGI at its vCPU 0, an SPI where the VM routes it). Returns the
/// number of members rung, or a negative [`crate::channel::ChannelError`] code.
pub const KEEL_CHANNEL_NOTIFY: u32 = keel_call(0x32);

/// Where Keel ran with interrupts masked: the handler a stretch ended in, as
/// [`KEEL_MASKED_STRETCH`] reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum MaskedSite {
    /// Nothing recorded yet.
    None = 0,
    /// A synchronous trap from a guest (hypercall, system register, MMIO, WFI).
    GuestTrap = 1,
    /// A physical interrupt taken while a guest ran.
    GuestIrq = 2,
    /// Keel's idle or run loop (after waking, before waiting again or entering a vCPU).
    Idle = 3,
    /// One step of reloading a VM's image (reset).
    Reload = 4,
    /// A real-time task service (create, launch, delete).
    Task = 5,
    /// Boot (before the first guest ran).
    Boot = 6,
}

impl MaskedSite {
    /// The site with number `value`.
    pub fn from_u64(value: u64) -> MaskedSite {
        match value {
            1 => MaskedSite::GuestTrap,
            2 => MaskedSite::GuestIrq,
            3 => MaskedSite::Idle,
            4 => MaskedSite::Reload,
            5 => MaskedSite::Task,
            6 => MaskedSite::Boot,
            _ => MaskedSite::None,
        }
    }

    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            MaskedSite::None => "none",
            MaskedSite::GuestTrap => "guest trap",
            MaskedSite::GuestIrq => "guest interrupt",
            MaskedSite::Idle => "idle/run loop",
            MaskedSite::Reload => "VM reload step",
            MaskedSite::Task => "task service",
            MaskedSite::Boot => "boot",
        }
    }
}

/// Keel's version as returned by [`KEEL_VERSION`].
pub const KEEL_VERSION_VALUE: u64 = 0x0001_0000;

/// SMCCC_VERSION (SMCCC 1.1 section 7.2).
pub const SMCCC_VERSION: u32 = 0x8000_0000;
/// SMCCC_ARCH_FEATURES (SMCCC 1.1 section 7.3).
pub const SMCCC_ARCH_FEATURES: u32 = 0x8000_0001;
/// Version 1.1 as SMCCC_VERSION reports it.
pub const SMCCC_VERSION_1_1: u64 = 0x0001_0001;

/// PSCI function ids (Arm DEN0022, PSCI 1.1, table 5-x).
pub mod psci {
    /// PSCI_VERSION.
    pub const VERSION: u32 = 0x8400_0000;
    /// CPU_SUSPEND (SMC32 / SMC64).
    pub const CPU_SUSPEND_32: u32 = 0x8400_0001;
    /// CPU_SUSPEND, SMC64 convention.
    pub const CPU_SUSPEND_64: u32 = 0xC400_0001;
    /// CPU_OFF.
    pub const CPU_OFF: u32 = 0x8400_0002;
    /// CPU_ON, SMC32 convention.
    pub const CPU_ON_32: u32 = 0x8400_0003;
    /// CPU_ON, SMC64 convention.
    pub const CPU_ON_64: u32 = 0xC400_0003;
    /// AFFINITY_INFO, SMC32 convention.
    pub const AFFINITY_INFO_32: u32 = 0x8400_0004;
    /// AFFINITY_INFO, SMC64 convention.
    pub const AFFINITY_INFO_64: u32 = 0xC400_0004;
    /// MIGRATE_INFO_TYPE.
    pub const MIGRATE_INFO_TYPE: u32 = 0x8400_0006;
    /// SYSTEM_OFF.
    pub const SYSTEM_OFF: u32 = 0x8400_0008;
    /// SYSTEM_RESET.
    pub const SYSTEM_RESET: u32 = 0x8400_0009;
    /// PSCI_FEATURES.
    pub const FEATURES: u32 = 0x8400_000A;

    /// PSCI 1.1 as PSCI_VERSION reports it.
    pub const VERSION_1_1: u64 = 0x0001_0001;
    /// MIGRATE_INFO_TYPE answer: no Trusted OS, migration not required.
    pub const TOS_NOT_PRESENT_MP: u64 = 2;
}

/// Result codes, as the negative values SMCCC and PSCI define (returned sign-extended in x0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i64)]
pub enum CallError {
    /// The function is not implemented (SMCCC and PSCI: -1).
    NotSupported = -1,
    /// An argument is invalid (PSCI INVALID_PARAMETERS: -2).
    InvalidParameters = -2,
    /// The caller may not do this (PSCI DENIED: -3).
    Denied = -3,
    /// The target vCPU is already on (PSCI ALREADY_ON: -4).
    AlreadyOn = -4,
    /// What is asked waits on something under way (PSCI ON_PENDING: -5).
    OnPending = -5,
    /// The address given is not in the caller's memory (PSCI INVALID_ADDRESS: -9).
    InvalidAddress = -9,
}

impl CallError {
    /// The value written to x0.
    pub const fn to_x0(self) -> u64 {
        self as i64 as u64
    }
}

/// Guest physical layout of the emulated platform (the addresses of QEMU `virt`, which Linux expects).
pub mod layout {
    /// Emulated GICv3 distributor.
    pub const GICD_BASE: u64 = 0x0800_0000;
    /// Size of the distributor frame.
    pub const GICD_SIZE: u64 = 0x1_0000;
    /// GICv2 CPU interface of a guest that sees a GICv2 (where QEMU `virt,gic-version=2` puts
    /// its GICC): Keel maps the hardware's virtual CPU interface (GICV) there, so the guest
    /// acknowledges and ends its interrupts without a trap.
    pub const GICC_BASE: u64 = 0x0801_0000;
    /// Size of the GICv2 CPU interface frame: two 4 KiB pages, GICC_DIR in the second (GICv2
    /// spec, IHI 0048B, 4.4).
    pub const GICC_SIZE: u64 = 0x2000;
    /// First emulated GICv3 redistributor (RD + SGI frames, 128 KiB per vCPU).
    pub const GICR_BASE: u64 = 0x080A_0000;
    /// Size of one redistributor.
    pub const GICR_STRIDE: u64 = 0x2_0000;
    /// Emulated PL011 console.
    pub const UART_BASE: u64 = 0x0900_0000;
    /// Size of the PL011 frame.
    pub const UART_SIZE: u64 = 0x1000;
    /// The console's interrupt: SPI 1.
    pub const UART_INTID: u32 = 33;
    /// Emulated virtio-mmio console (where QEMU `virt` puts its first virtio-mmio device).
    pub const VIRTIO_BASE: u64 = 0x0a00_0000;
    /// Size of the virtio-mmio frame.
    pub const VIRTIO_SIZE: u64 = 0x200;
    /// The virtio console's interrupt: SPI 16.
    pub const VIRTIO_INTID: u32 = 48;
    /// EL1 virtual timer PPI.
    pub const VTIMER_INTID: u32 = 27;
    /// EL1 physical timer PPI (shown in the DTB, not delivered).
    pub const PTIMER_INTID: u32 = 30;
    /// Maintenance interrupt PPI of the GIC virtual interface.
    pub const MAINTENANCE_INTID: u32 = 25;
    /// EL2 physical timer PPI (Keel's own).
    pub const HYP_TIMER_INTID: u32 = 26;
    /// Emulated SP805 watchdog (`devices = ["watchdog"]`; `arm,sp805`), in a hole of QEMU
    /// `virt`'s map.
    pub const WATCHDOG_BASE: u64 = 0x0b00_0000;
    /// Size of the SP805 frame.
    pub const WATCHDOG_SIZE: u64 = 0x1000;
    /// The SP805's counting clock (WDOGCLK) as the device tree tells the guest: 1 MHz, so
    /// that the 32-bit WdogLoad holds a period of up to 71 minutes in microseconds (Linux's
    /// `sp805_wdt` loads half its timeout: 30 s is 14,999,999, 1 s is 499,999).
    pub const WATCHDOG_CLOCK_HZ: u32 = 1_000_000;
    /// The management window of a VM that manages others (`health.managers` names it): the
    /// KEEL_VM_* services as registers, for a guest that cannot make hypercalls from where it
    /// runs (a Linux command through `/dev/mem`). See [`super::manager_window`].
    pub const MANAGER_BASE: u64 = 0x0b01_0000;
    /// Size of the management window.
    pub const MANAGER_SIZE: u64 = 0x1000;
}

/// The management window's registers ([`layout::MANAGER_BASE`]), 64-bit each: a write of a
/// function id to [`FUNCTION`](manager_window::FUNCTION) makes the call with `ARGS` as x1..x6,
/// as an HVC would, and leaves x0..x7 in `RESULTS`. The functions are KEEL_VM_STATUS, _START,
/// _STOP, _RESTART, _SCHED_STATS, _RESOURCES, KEEL_VM_ID, and KEEL_MSG_RECV, which takes the
/// next message (at most [`MESSAGE_BYTES`](manager_window::MESSAGE_BYTES)) into RESULTS:
/// x0 = its length, x1 = sender VM, x2 = sender vCPU, x3 = messages still queued, x4..x7 = its
/// bytes; a longer one is refused (BUFFER_TOO_SMALL) and stays queued. Any other function:
/// NOT_SUPPORTED.
pub mod manager_window {
    /// Offset of the function register (write only).
    pub const FUNCTION: u64 = 0x00;
    /// Offset of the first argument (x1); x2..x6 follow every 8 bytes.
    pub const ARGS: u64 = 0x08;
    /// Arguments.
    pub const ARG_COUNT: u64 = 6;
    /// Offset of the first result (x0); x1..x7 follow every 8 bytes.
    pub const RESULTS: u64 = 0x40;
    /// Results.
    pub const RESULT_COUNT: u64 = 8;
    /// Longest message KEEL_MSG_RECV takes through the window (x4..x7).
    pub const MESSAGE_BYTES: usize = 32;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vendor_hyp_ids_are_fast_64bit_owner_6() {
        assert_eq!(KEEL_VERSION, 0xC600_0000);
        assert_eq!(KEEL_VM_ID, 0xC600_0001);
        assert_eq!(KEEL_CRASH >> 24 & 0x3f, OWNER_VENDOR_HYP);
    }

    #[test]
    fn errors_are_sign_extended() {
        assert_eq!(CallError::NotSupported.to_x0(), u64::MAX);
        assert_eq!(CallError::InvalidAddress.to_x0(), (-9i64) as u64);
    }
}
