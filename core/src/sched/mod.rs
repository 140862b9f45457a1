//! vCPU scheduling on one pCPU: policies fed with events, answering with decisions.

mod params;

pub use params::{Params, Policy, Reservation, Time};
