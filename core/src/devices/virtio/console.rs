//! Emulated virtio console (virtio 1.2 section 5.3) over MMIO: one port, the receive queue
//! and the transmit queue, as Linux's `virtio_console` drives it.
//!
//! Offered features: VIRTIO_F_VERSION_1 and VIRTIO_CONSOLE_F_EMERG_WRITE. Not offered: the
//! console size (F_SIZE), several ports (F_MULTIPORT: port 0's queues are 0 and 1, 5.3.2),
//! indirect descriptors, event indices. The hypervisor calls [`VirtioConsole::transmit`] when
//! the driver notifies the transmit queue (and again later while output is left: Linux's
//! console waits for each buffer it sent to be used), and [`VirtioConsole::receive`] with
//! input bytes when it has some (and again when the driver notifies the receive queue).

use super::memory::GuestMemory;
use super::mmio::{register, Transport, FEATURE_VERSION_1};
use super::queue::QueueError;
use crate::devices::DeviceError;

/// Virtio device ID of a console (5.3.1).
pub const DEVICE_ID: u32 = 3;
/// Port 0's receive queue (device to driver).
pub const RECEIVE_QUEUE: u16 = 0;
/// Port 0's transmit queue (driver to device).
pub const TRANSMIT_QUEUE: u16 = 1;

/// VIRTIO_CONSOLE_F_SIZE (5.3.3): `cols` and `rows` are valid (not offered).
pub const FEATURE_SIZE: u64 = 1 << 0;
/// VIRTIO_CONSOLE_F_MULTIPORT: several ports and a control queue (not offered).
pub const FEATURE_MULTIPORT: u64 = 1 << 1;
/// VIRTIO_CONSOLE_F_EMERG_WRITE: `emerg_wr` writes one byte out.
pub const FEATURE_EMERGENCY_WRITE: u64 = 1 << 2;
/// The features the device offers.
pub const DEVICE_FEATURES: u64 = FEATURE_VERSION_1 | FEATURE_EMERGENCY_WRITE;

/// Configuration space layout (5.3.4, `struct virtio_console_config`), offsets from
/// [`register::CONFIG`]: `cols` (le16), `rows` (le16), `max_nr_ports` (le32), `emerg_wr`
/// (le32).
const CONFIG_MAX_NR_PORTS: u64 = 4;
const CONFIG_EMERGENCY_WRITE: u64 = 8;
/// Bytes of the configuration space.
pub const CONFIG_SIZE: u64 = 12;

/// What a register write asks of the hypervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing beyond the write.
    None,
    /// The driver notified the transmit queue: call [`VirtioConsole::transmit`].
    Transmit,
    /// The driver notified the receive queue (it has new buffers for input): input that
    /// waits can go to [`VirtioConsole::receive`] now.
    ReceiveBuffers,
    /// The driver wrote this byte to `emerg_wr`: write it out as the console's output.
    EmergencyWrite(u8),
}

/// One emulated virtio-mmio console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtioConsole {
    transport: Transport<2, DEVICE_ID, DEVICE_FEATURES>,
}

impl Default for VirtioConsole {
    fn default() -> Self {
        Self::new()
    }
}

impl VirtioConsole {
    /// A console in its reset state.
    pub const fn new() -> Self {
        Self {
            transport: Transport::new(),
        }
    }

    /// The device status register (DEVICE_NEEDS_RESET once the driver broke a queue rule).
    pub fn status(&self) -> u32 {
        self.transport.status()
    }

    /// The first queue rule the driver broke since the last reset, if any.
    pub fn queue_error(&self) -> Option<QueueError> {
        self.transport.queue_error()
    }

    /// Level of the device's interrupt line (InterruptStatus is not zero).
    pub fn interrupt_level(&self) -> bool {
        self.transport.interrupt_level()
    }

    /// A guest read of `size` bytes at `offset` in the device's frame.
    pub fn mmio_read(&self, offset: u64, size: u8) -> Result<u32, DeviceError> {
        match offset.checked_sub(register::CONFIG) {
            None => self.transport.read(offset, size),
            Some(config) => {
                Self::check_config_access(offset, config, size, false)?;
                // cols and rows are 0 (F_SIZE is not offered); emerg_wr reads as 0.
                let mut bytes = [0u8; CONFIG_SIZE as usize];
                bytes[CONFIG_MAX_NR_PORTS as usize..][..4].copy_from_slice(&1u32.to_le_bytes());
                let field = &bytes[config as usize..][..usize::from(size)];
                Ok(field
                    .iter()
                    .rev()
                    .fold(0, |value, &byte| value << 8 | u32::from(byte)))
            }
        }
    }

    /// A guest write of the low `size` bytes of `value` at `offset` in the device's frame.
    pub fn mmio_write(&mut self, offset: u64, size: u8, value: u64) -> Result<Effect, DeviceError> {
        match offset.checked_sub(register::CONFIG) {
            None => Ok(match self.transport.write(offset, size, value as u32)? {
                Some(RECEIVE_QUEUE) => Effect::ReceiveBuffers,
                Some(_) => Effect::Transmit,
                None => Effect::None,
            }),
            Some(config) => {
                Self::check_config_access(offset, config, size, true)?;
                if config != CONFIG_EMERGENCY_WRITE {
                    return Err(DeviceError::NoSuchRegister {
                        offset,
                        write: true,
                    });
                }
                // Usable before the queues, even before features are negotiated (5.3.6.1).
                Ok(Effect::EmergencyWrite(value as u8))
            }
        }
    }

    /// Checks an access at `config` bytes into the configuration space: 1, 2 or 4 bytes,
    /// aligned (4.2.2.2), inside it.
    fn check_config_access(
        offset: u64,
        config: u64,
        size: u8,
        write: bool,
    ) -> Result<(), DeviceError> {
        if !matches!(size, 1 | 2 | 4) || !offset.is_multiple_of(u64::from(size)) {
            return Err(DeviceError::BadWidth { offset, size });
        }
        if config + u64::from(size) > CONFIG_SIZE {
            return Err(DeviceError::NoSuchRegister { offset, write });
        }
        Ok(())
    }

    /// Moves the driver's output from the transmit queue to `sink`, at most `budget` bytes
    /// (the hypervisor's step, e.g. 4 KiB); `sink` takes as many leading bytes as it can and
    /// returns how many. Output the sink does not take stays in the queue for the next call.
    /// Returns the bytes that went out; raises the interrupt if buffers were used.
    pub fn transmit(
        &mut self,
        memory: &mut impl GuestMemory,
        budget: usize,
        sink: &mut impl FnMut(&[u8]) -> usize,
    ) -> usize {
        self.transport
            .process(usize::from(TRANSMIT_QUEUE), |queue| {
                queue.drain_readable(memory, budget, sink)
            })
    }

    /// Gives the driver input: fills its receive buffers with as many leading bytes of
    /// `bytes` as fit and returns how many it took (the rest stays with the caller, who
    /// bounds the step by the length of `bytes`). Raises the interrupt if buffers were used.
    pub fn receive(&mut self, memory: &mut impl GuestMemory, bytes: &[u8]) -> usize {
        self.transport.process(usize::from(RECEIVE_QUEUE), |queue| {
            queue.fill_writable(memory, bytes)
        })
    }
}
