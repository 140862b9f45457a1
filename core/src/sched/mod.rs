//! vCPU scheduling on one pCPU: policies fed with events, answering with decisions.

#[cfg(test)]
mod budget_tests;
mod params;
mod scheduler;
#[cfg(any(test, feature = "std"))]
pub mod sim;
#[cfg(test)]
mod sim_tests;
mod slot;
#[cfg(test)]
mod tests;

pub use params::{scale, Params, Policy, Reservation, Time};
pub use scheduler::{Decision, SchedError, Scheduler, MAX_SLOTS};
pub use slot::{Journal, Stats};
