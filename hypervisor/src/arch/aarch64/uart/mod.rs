//! The physical UART of Keel's console: a PL011 ([`pl011`]) or a Cadence UART ([`cadence`]),
//! chosen when Keel is built for its board (xtask sets `cfg(keel_uart_cadence)` for a board
//! whose console is a Cadence UART). Both are a [`Uart`] with the same functions.

#[cfg(keel_uart_cadence)]
mod cadence;
#[cfg(not(keel_uart_cadence))]
mod pl011;

#[cfg(keel_uart_cadence)]
pub use cadence::Uart;
#[cfg(not(keel_uart_cadence))]
pub use pl011::Uart;
