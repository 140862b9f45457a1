//! The virtio-over-MMIO transport, version 2 (virtio 1.2 section 4.2): the register file
//! every virtio-mmio device shares, below its configuration space at 0x100.
//!
//! Control registers take only aligned 32-bit accesses (4.2.2.2); an access of another width,
//! to no register, or in a direction the register does not have, is refused with a
//! [`DeviceError`]. Values the driver writes are taken as hostile: feature words beyond the
//! two defined, queue selectors beyond the device's queues, unusable queue layouts are
//! ignored or refused, never trusted.

use super::queue::{QueueError, SplitQueue, Transfer, MAX_QUEUE_SIZE};
use crate::addr::GuestPhysAddr;
use crate::devices::DeviceError;

/// Register offsets (4.2.2, table "MMIO Device Register Layout").
pub mod register {
    /// "virt" in little-endian ASCII (read).
    pub const MAGIC_VALUE: u64 = 0x000;
    /// Transport version: 2 (read).
    pub const VERSION: u64 = 0x004;
    /// Virtio device type (read).
    pub const DEVICE_ID: u64 = 0x008;
    /// Vendor of the device (read).
    pub const VENDOR_ID: u64 = 0x00c;
    /// The 32 device feature bits DeviceFeaturesSel selects (read).
    pub const DEVICE_FEATURES: u64 = 0x010;
    /// Which 32 device feature bits DeviceFeatures shows (write).
    pub const DEVICE_FEATURES_SEL: u64 = 0x014;
    /// The 32 driver feature bits DriverFeaturesSel selects (write).
    pub const DRIVER_FEATURES: u64 = 0x020;
    /// Which 32 driver feature bits DriverFeatures sets (write).
    pub const DRIVER_FEATURES_SEL: u64 = 0x024;
    /// The queue the Queue* registers refer to (write).
    pub const QUEUE_SEL: u64 = 0x030;
    /// Largest size of the selected queue; 0 if there is no such queue (read).
    pub const QUEUE_NUM_MAX: u64 = 0x034;
    /// Size of the selected queue (write).
    pub const QUEUE_NUM: u64 = 0x038;
    /// Whether the selected queue is enabled (read and write).
    pub const QUEUE_READY: u64 = 0x044;
    /// The driver has buffers for the queue whose index it writes (write).
    pub const QUEUE_NOTIFY: u64 = 0x050;
    /// Why the interrupt is raised (read).
    pub const INTERRUPT_STATUS: u64 = 0x060;
    /// Clears the InterruptStatus bits written (write).
    pub const INTERRUPT_ACK: u64 = 0x064;
    /// Device status (read and write; 0 resets).
    pub const STATUS: u64 = 0x070;
    /// Descriptor table address, low and high 32 bits (write).
    pub const QUEUE_DESC_LOW: u64 = 0x080;
    /// See [`QUEUE_DESC_LOW`].
    pub const QUEUE_DESC_HIGH: u64 = 0x084;
    /// Driver area (available ring) address, low and high 32 bits (write).
    pub const QUEUE_DRIVER_LOW: u64 = 0x090;
    /// See [`QUEUE_DRIVER_LOW`].
    pub const QUEUE_DRIVER_HIGH: u64 = 0x094;
    /// Device area (used ring) address, low and high 32 bits (write).
    pub const QUEUE_DEVICE_LOW: u64 = 0x0a0;
    /// See [`QUEUE_DEVICE_LOW`].
    pub const QUEUE_DEVICE_HIGH: u64 = 0x0a4;
    /// Shared memory region selector (write).
    pub const SHM_SEL: u64 = 0x0ac;
    /// Selected shared memory region's length, low and high 32 bits (read).
    pub const SHM_LEN_LOW: u64 = 0x0b0;
    /// See [`SHM_LEN_LOW`].
    pub const SHM_LEN_HIGH: u64 = 0x0b4;
    /// Selected shared memory region's address, low and high 32 bits (read).
    pub const SHM_BASE_LOW: u64 = 0x0b8;
    /// See [`SHM_BASE_LOW`].
    pub const SHM_BASE_HIGH: u64 = 0x0bc;
    /// Changes whenever the configuration space may have changed (read).
    pub const CONFIG_GENERATION: u64 = 0x0fc;
    /// Start of the device-specific configuration space.
    pub const CONFIG: u64 = 0x100;
}

/// MagicValue: "virt".
pub const MAGIC: u32 = 0x7472_6976;
/// The transport version Keel implements (virtio 1.x, no legacy interface).
pub const TRANSPORT_VERSION: u32 = 2;
/// VendorID: "KEEL" in ASCII.
pub const VENDOR: u32 = 0x4b45_454c;

/// Device status bits (2.1): the guest saw the device.
pub const STATUS_ACKNOWLEDGE: u32 = 1;
/// The guest has a driver for it.
pub const STATUS_DRIVER: u32 = 2;
/// The driver is set up and the device is live.
pub const STATUS_DRIVER_OK: u32 = 4;
/// Feature negotiation is over (kept only if the device accepts the driver's features).
pub const STATUS_FEATURES_OK: u32 = 8;
/// The device met an error it cannot recover from without a reset (set by the device).
pub const STATUS_DEVICE_NEEDS_RESET: u32 = 0x40;
/// The driver gave up on the device.
pub const STATUS_FAILED: u32 = 0x80;
/// The status bits the driver may set.
const STATUS_DRIVER_BITS: u32 =
    STATUS_ACKNOWLEDGE | STATUS_DRIVER | STATUS_DRIVER_OK | STATUS_FEATURES_OK | STATUS_FAILED;

/// InterruptStatus bits (4.2.2): a used buffer notification.
pub const INTERRUPT_USED_BUFFER: u32 = 1;
/// A configuration change notification (also sent on DEVICE_NEEDS_RESET, 2.1.2).
pub const INTERRUPT_CONFIG_CHANGE: u32 = 2;

/// Feature bit VIRTIO_F_VERSION_1 (6): the device is virtio 1.x, not legacy.
pub const FEATURE_VERSION_1: u64 = 1 << 32;

/// The length a shared memory region that does not exist reads as (4.2.2: -1).
const NO_SHARED_MEMORY: u32 = 0xffff_ffff;

/// The transport state of one virtio-mmio device of type `DEVICE_ID` with `QUEUES` split
/// virtqueues, offering `FEATURES` (which must include [`FEATURE_VERSION_1`]). The device's
/// identity is its type, not state: a transport in its reset state is all zero bytes, so a
/// static table of devices takes no image space (.bss).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transport<const QUEUES: usize, const DEVICE_ID: u32, const FEATURES: u64> {
    device_features_select: u32,
    driver_features: u64,
    driver_features_select: u32,
    queue_select: u32,
    status: u32,
    interrupt_status: u32,
    queues: [SplitQueue; QUEUES],
    error: Option<QueueError>,
}

impl<const QUEUES: usize, const DEVICE_ID: u32, const FEATURES: u64> Default
    for Transport<QUEUES, DEVICE_ID, FEATURES>
{
    fn default() -> Self {
        Self::new()
    }
}

impl<const QUEUES: usize, const DEVICE_ID: u32, const FEATURES: u64>
    Transport<QUEUES, DEVICE_ID, FEATURES>
{
    /// The device in its reset state.
    pub const fn new() -> Self {
        Self {
            device_features_select: 0,
            driver_features: 0,
            driver_features_select: 0,
            queue_select: 0,
            status: 0,
            interrupt_status: 0,
            queues: [SplitQueue::new(); QUEUES],
            error: None,
        }
    }

    /// The device status register.
    pub fn status(&self) -> u32 {
        self.status
    }

    /// The features the driver accepted (meaningful once FEATURES_OK is set).
    pub fn driver_features(&self) -> u64 {
        self.driver_features
    }

    /// The first rule a driver broke since the last reset, which set DEVICE_NEEDS_RESET.
    pub fn queue_error(&self) -> Option<QueueError> {
        self.error
    }

    /// Level of the device's interrupt line: some InterruptStatus bit is set.
    pub fn interrupt_level(&self) -> bool {
        self.interrupt_status != 0
    }

    /// Whether the driver finished setting the device up (FEATURES_OK and DRIVER_OK): before
    /// that the device uses no buffer (3.1.1).
    pub fn is_live(&self) -> bool {
        let live = STATUS_FEATURES_OK | STATUS_DRIVER_OK;
        self.status & live == live
    }

    /// Device reset (status 0 written, 4.2.2.1): every queue and the interrupt forgotten.
    fn reset(&mut self) {
        *self = Self::new();
    }

    /// The selected queue, if the device has it.
    fn selected(&mut self) -> Option<&mut SplitQueue> {
        self.queues.get_mut(self.queue_select as usize)
    }

    /// Checks an access to a control register: aligned 32 bits only (4.2.2.2).
    fn check_width(offset: u64, size: u8) -> Result<(), DeviceError> {
        if size == 4 && offset.is_multiple_of(4) {
            Ok(())
        } else {
            Err(DeviceError::BadWidth { offset, size })
        }
    }

    /// A guest read of a control register (`offset` below [`register::CONFIG`]).
    pub fn read(&self, offset: u64, size: u8) -> Result<u32, DeviceError> {
        Self::check_width(offset, size)?;
        let queue = self.queues.get(self.queue_select as usize);
        Ok(match offset {
            register::MAGIC_VALUE => MAGIC,
            register::VERSION => TRANSPORT_VERSION,
            register::DEVICE_ID => DEVICE_ID,
            register::VENDOR_ID => VENDOR,
            register::DEVICE_FEATURES => match self.device_features_select {
                0 => FEATURES as u32,
                1 => (FEATURES >> 32) as u32,
                _ => 0,
            },
            register::QUEUE_NUM_MAX => queue.map_or(0, |_| u32::from(MAX_QUEUE_SIZE)),
            register::QUEUE_READY => queue.map_or(0, |queue| u32::from(queue.is_ready())),
            register::INTERRUPT_STATUS => self.interrupt_status,
            register::STATUS => self.status,
            register::SHM_LEN_LOW
            | register::SHM_LEN_HIGH
            | register::SHM_BASE_LOW
            | register::SHM_BASE_HIGH => NO_SHARED_MEMORY,
            // The configuration space never changes under the driver.
            register::CONFIG_GENERATION => 0,
            _ => {
                return Err(DeviceError::NoSuchRegister {
                    offset,
                    write: false,
                })
            }
        })
    }

    /// A guest write of a control register (`offset` below [`register::CONFIG`]); returns
    /// the queue the driver notified, if it wrote QueueNotify with one of the device's.
    pub fn write(&mut self, offset: u64, size: u8, value: u32) -> Result<Option<u16>, DeviceError> {
        Self::check_width(offset, size)?;
        match offset {
            register::DEVICE_FEATURES_SEL => self.device_features_select = value,
            register::DRIVER_FEATURES => self.write_driver_features(value),
            register::DRIVER_FEATURES_SEL => self.driver_features_select = value,
            register::QUEUE_SEL => self.queue_select = value,
            register::QUEUE_NUM => {
                // Out of u16 range means "unusable", as does any size that is not a power of
                // two no larger than QueueNumMax: checked when the queue is enabled.
                let size = u16::try_from(value).unwrap_or(0);
                self.configure_queue(|queue| queue.size = size);
            }
            register::QUEUE_READY => {
                if let Some(queue) = self.selected() {
                    if value & 1 == 0 {
                        queue.disable();
                    } else if !queue.is_ready() {
                        // An unusable layout leaves the queue disabled (QueueReady reads 0).
                        queue.enable();
                    }
                }
            }
            register::QUEUE_NOTIFY => {
                // Without VIRTIO_F_NOTIFICATION_DATA the value is the queue's index (4.2.3.3).
                if (value as usize) < QUEUES {
                    return Ok(Some(value as u16));
                }
            }
            register::INTERRUPT_ACK => self.interrupt_status &= !value,
            register::STATUS => self.write_status(value),
            register::QUEUE_DESC_LOW => {
                self.configure_queue(|queue| set_low(&mut queue.descriptor_table, value))
            }
            register::QUEUE_DESC_HIGH => {
                self.configure_queue(|queue| set_high(&mut queue.descriptor_table, value))
            }
            register::QUEUE_DRIVER_LOW => {
                self.configure_queue(|queue| set_low(&mut queue.driver_area, value))
            }
            register::QUEUE_DRIVER_HIGH => {
                self.configure_queue(|queue| set_high(&mut queue.driver_area, value))
            }
            register::QUEUE_DEVICE_LOW => {
                self.configure_queue(|queue| set_low(&mut queue.device_area, value))
            }
            register::QUEUE_DEVICE_HIGH => {
                self.configure_queue(|queue| set_high(&mut queue.device_area, value))
            }
            // No shared memory region exists, whichever is selected.
            register::SHM_SEL => {}
            _ => {
                return Err(DeviceError::NoSuchRegister {
                    offset,
                    write: true,
                })
            }
        }
        Ok(None)
    }

    /// Changes the selected queue's configuration, if the device has that queue and it is
    /// not enabled (4.2.3.2: the driver configures a queue before enabling it).
    fn configure_queue(&mut self, change: impl FnOnce(&mut SplitQueue)) {
        if let Some(queue) = self.selected().filter(|queue| !queue.is_ready()) {
            change(queue);
        }
    }

    /// DriverFeatures: a word of the driver's features, until FEATURES_OK freezes them.
    fn write_driver_features(&mut self, value: u32) {
        if self.status & STATUS_FEATURES_OK != 0 {
            return;
        }
        let value = u64::from(value);
        match self.driver_features_select {
            0 => self.driver_features = (self.driver_features & !0xffff_ffff) | value,
            1 => self.driver_features = (self.driver_features & 0xffff_ffff) | value << 32,
            _ => {}
        }
    }

    /// Status: 0 resets the device; otherwise the driver's bits are added (2.1.1: a driver
    /// never clears one). FEATURES_OK stays clear if the driver accepted a feature not
    /// offered or did not accept VIRTIO_F_VERSION_1, which this device requires (2.2.2,
    /// 6.1); the driver sees that when it reads the status back (3.1.1).
    fn write_status(&mut self, value: u32) {
        if value == 0 {
            self.reset();
            return;
        }
        let mut added = value & STATUS_DRIVER_BITS & !self.status;
        let acceptable =
            self.driver_features & !FEATURES == 0 && self.driver_features & FEATURE_VERSION_1 != 0;
        if !acceptable {
            added &= !STATUS_FEATURES_OK;
        }
        self.status |= added;
    }

    /// Runs `step` on queue `index` if the device is live and the queue exists, then applies
    /// what it did: a used buffer notification if the driver wants one; DEVICE_NEEDS_RESET
    /// and a configuration change notification if the driver broke a rule (2.1.2). Returns
    /// the bytes moved.
    pub fn process(
        &mut self,
        index: usize,
        step: impl FnOnce(&mut SplitQueue) -> Transfer,
    ) -> usize {
        if !self.is_live() {
            return 0;
        }
        let Some(queue) = self.queues.get_mut(index) else {
            return 0;
        };
        let transfer = step(queue);
        if transfer.notify {
            self.interrupt_status |= INTERRUPT_USED_BUFFER;
        }
        if let Some(error) = transfer.error {
            self.status |= STATUS_DEVICE_NEEDS_RESET;
            self.interrupt_status |= INTERRUPT_CONFIG_CHANGE;
            self.error.get_or_insert(error);
        }
        transfer.bytes
    }
}

/// Sets the low 32 bits of an address register pair.
fn set_low(address: &mut GuestPhysAddr, value: u32) {
    address.0 = (address.0 & !0xffff_ffff) | u64::from(value);
}

/// Sets the high 32 bits of an address register pair.
fn set_high(address: &mut GuestPhysAddr, value: u32) {
    address.0 = (address.0 & 0xffff_ffff) | u64::from(value) << 32;
}
