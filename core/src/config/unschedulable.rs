//! Why admission refuses the reservations on a shared pCPU: one variant per refusal, each with
//! its exact message (shown after `pCPU <id>: `).

use std::fmt;

use super::duration::format_duration;
use super::error::VcpuName;

/// Why admission refuses the reservations of a shared pCPU (durations in nanoseconds, shown
/// with units); the doc comment of each variant is its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unschedulable {
    /// `<policy> utilisation <total> > 1 (<holder>: <share>, ...)`: a reservation's share is
    /// (budget + 2 × switch cost) / period, a task allowance's its `tasks.utilisation`; shares
    /// and total rounded up to two decimals.
    Utilisation {
        /// `EDF` or `fixed-priority`.
        policy: &'static str,
        /// Σ of the shares, parts per million.
        total_ppm: u64,
        /// Each holder's share, parts per million: the reservations, then the allowances.
        shares: Vec<(Holder, u64)>,
    },
    /// `EDF processor demand <demand> at <at> after a synchronous release exceeds the time
    /// available (<vcpu>: <n> job(s) of <length>, ...; each job is its budget plus twice the
    /// switch cost of <switch_cost>)`.
    EdfDemand {
        /// The instant, from a synchronous release.
        at: u64,
        /// The work due by then.
        demand: u64,
        /// The vCPUs with a deadline by then: how many jobs, and each job's length.
        jobs: Vec<(VcpuName, u64, u64)>,
        /// The switch cost charged twice per job.
        switch_cost: u64,
    },
    /// `<policy>: <vcpu>'s budget <budget> plus twice the switch cost of <switch_cost> is above
    /// its deadline <deadline>`.
    SwitchCostAboveDeadline {
        /// `EDF` or `fixed-priority`.
        policy: &'static str,
        /// The vCPU.
        vcpu: VcpuName,
        /// Its budget.
        budget: u64,
        /// The switch cost.
        switch_cost: u64,
        /// Its deadline.
        deadline: u64,
    },
    /// `<policy> admission cannot decide for <count> reservations (at most <max_tasks>, and at
    /// most <max_points> deadlines to check): refused rather than guessed`.
    TooComplex {
        /// `EDF` or `fixed-priority`.
        policy: &'static str,
        /// Number of reservations on the pCPU.
        count: usize,
    },
    /// `fixed-priority response time of <vcpu> reaches <response> > its deadline <deadline>`.
    ResponseTime {
        /// The vCPU.
        vcpu: VcpuName,
        /// Its worst-case response time (or the first value found above its deadline).
        response: u64,
        /// Its deadline.
        deadline: u64,
    },
}

/// Who holds a share of a shared pCPU: a vCPU's reservation or a VM's task allowance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// `vm '<vm>' vCPU <index>`: a vCPU with a reservation.
    Vcpu(VcpuName),
    /// `vm '<vm>' tasks`: the allowance of a VM with `tasks` and a vCPU on the pCPU.
    Tasks(String),
}

impl fmt::Display for Holder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Vcpu(vcpu) => write!(f, "{vcpu}"),
            Self::Tasks(vm) => write!(f, "vm '{vm}' tasks"),
        }
    }
}

/// Parts per million with two decimals, rounded up: `1.05`.
fn ppm_two_places(ppm: u64) -> String {
    let hundredths = ppm.div_ceil(10_000);
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

impl fmt::Display for Unschedulable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Utilisation {
                policy,
                total_ppm,
                shares,
            } => {
                let shares: Vec<String> = shares
                    .iter()
                    .map(|(holder, ppm)| format!("{holder}: {}", ppm_two_places(*ppm)))
                    .collect();
                write!(
                    f,
                    "{policy} utilisation {} > 1 ({})",
                    ppm_two_places(*total_ppm),
                    shares.join(", ")
                )
            }
            Self::EdfDemand {
                at,
                demand,
                jobs,
                switch_cost,
            } => {
                let jobs: Vec<String> = jobs
                    .iter()
                    .map(|(vcpu, count, length)| {
                        let plural = if *count == 1 { "" } else { "s" };
                        format!(
                            "{vcpu}: {count} job{plural} of {}",
                            format_duration(*length)
                        )
                    })
                    .collect();
                write!(
                    f,
                    "EDF processor demand {} at {} after a synchronous release exceeds the time \
                     available ({}; each job is its budget plus twice the switch cost of {})",
                    format_duration(*demand),
                    format_duration(*at),
                    jobs.join(", "),
                    format_duration(*switch_cost)
                )
            }
            Self::SwitchCostAboveDeadline {
                policy,
                vcpu,
                budget,
                switch_cost,
                deadline,
            } => write!(
                f,
                "{policy}: {vcpu}'s budget {} plus twice the switch cost of {} is above its \
                 deadline {}",
                format_duration(*budget),
                format_duration(*switch_cost),
                format_duration(*deadline)
            ),
            Self::TooComplex { policy, count } => write!(
                f,
                "{policy} admission cannot decide for {count} reservations (at most {}, and at \
                 most {} deadlines to check): refused rather than guessed",
                crate::admission::MAX_TASKS,
                crate::admission::MAX_CHECK_POINTS
            ),
            Self::ResponseTime {
                vcpu,
                response,
                deadline,
            } => write!(
                f,
                "fixed-priority response time of {vcpu} reaches {} > its deadline {}",
                format_duration(*response),
                format_duration(*deadline)
            ),
        }
    }
}
