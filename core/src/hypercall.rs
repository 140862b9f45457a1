//! Decoding of guest HVC/SMC calls (SMCCC 1.1, PSCI 1.1) into typed requests.
//!
//! The decoder is pure: it turns the guest's x0..x3 into a [`Call`]; the hypervisor
//! carries it out and turns the outcome into x0 at the hypercall edge.

use crate::abi::{self, psci};

/// A decoded guest call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// [`abi::KEEL_VERSION`].
    KeelVersion,
    /// [`abi::KEEL_VM_ID`].
    KeelVmId,
    /// [`abi::KEEL_YIELD`].
    KeelYield,
    /// [`abi::KEEL_SCHED_STATS`].
    KeelSchedStats,
    /// [`abi::KEEL_TASK_CREATE`].
    TaskCreate(crate::tasks::TaskRequest),
    /// [`abi::KEEL_TASK_LAUNCH`]: the handle and the first release (counter ticks; 0: now).
    TaskLaunch {
        /// The task's handle.
        handle: u64,
        /// When its first job is released.
        release: u64,
    },
    /// [`abi::KEEL_TASK_DELETE`] of a handle.
    TaskDelete(u64),
    /// [`abi::KEEL_TASK_WAIT`].
    TaskWait,
    /// [`abi::KEEL_TASK_STATS`] of a handle.
    TaskStats(u64),
    /// [`abi::KEEL_MSG_SEND`].
    MsgSend(crate::ipc::SendRequest),
    /// [`abi::KEEL_MSG_RECV`].
    MsgRecv(crate::ipc::ReceiveRequest),
    /// [`abi::KEEL_CHANNEL_NOTIFY`].
    ChannelNotify(crate::channel::NotifyRequest),
    /// [`abi::KEEL_TRACE_MARK`]: the mark's value.
    TraceMark(u32),
    /// [`abi::KEEL_TRACE_READ`].
    TraceRead {
        /// The pCPU whose ring.
        pcpu: u64,
        /// The first record index wanted.
        from: u64,
        /// The buffer's IPA and length in bytes.
        buffer: u64,
        len: u64,
    },
    /// [`abi::KEEL_WATCHDOG`].
    Watchdog,
    /// A manager's service ([`abi::KEEL_VM_STATUS`] ... [`abi::KEEL_VM_SCHED_STATS`]): the
    /// function id and x1 (the VM), x2 (a vCPU).
    Manager {
        /// The function id.
        function: u32,
        /// x1..x6.
        args: [u64; 6],
    },
    /// [`abi::KEEL_MASKED_STRETCH`].
    MaskedStretch {
        /// The pCPU asked about.
        pcpu: u64,
        /// Reset the record after reading it.
        reset: bool,
    },
    /// [`abi::KEEL_CRASH`]: the guest reports a fatal exception.
    KeelCrash {
        /// The guest's ESR_EL1.
        esr: u64,
        /// The guest's ELR_EL1.
        elr: u64,
        /// The guest's FAR_EL1.
        far: u64,
    },
    /// SMCCC_VERSION.
    SmcccVersion,
    /// SMCCC_ARCH_FEATURES for the given function id.
    SmcccArchFeatures(u32),
    /// PSCI_VERSION.
    PsciVersion,
    /// PSCI_FEATURES for the given function id.
    PsciFeatures(u32),
    /// CPU_ON.
    PsciCpuOn {
        /// MPIDR of the target vCPU.
        target: u64,
        /// Guest-physical entry point.
        entry: u64,
        /// Value for the target's x0.
        context: u64,
    },
    /// CPU_OFF.
    PsciCpuOff,
    /// CPU_SUSPEND (treated as a standby: the caller resumes at once).
    PsciCpuSuspend,
    /// AFFINITY_INFO.
    PsciAffinityInfo {
        /// MPIDR of the vCPU asked about.
        target: u64,
        /// Affinity level (only 0 is supported).
        level: u64,
    },
    /// MIGRATE_INFO_TYPE.
    PsciMigrateInfoType,
    /// SYSTEM_OFF: powers off the calling VM only.
    PsciSystemOff,
    /// SYSTEM_RESET: restarts the calling VM only.
    PsciSystemReset,
    /// Anything else: answered NOT_SUPPORTED.
    Unknown(u32),
}

/// Arguments of SMC32/HVC32 calls are 32-bit: the upper halves are ignored (SMCCC 1.1 §3.1).
fn arg(function: u32, value: u64) -> u64 {
    if function & abi::SMCCC_64BIT == 0 {
        value & 0xffff_ffff
    } else {
        value
    }
}

const _: () = assert!(
    abi::KEEL_MSG_RECV == abi::KEEL_MSG_SEND | 1 && abi::KEEL_MSG_SEND & 1 == 0,
    "decode tells the two message calls apart by bit 0"
);

/// Decodes a call from the guest's registers x0..x7.
#[inline(always)]
pub fn decode(regs: &[u64; 8]) -> Call {
    let function = regs[0] as u32;
    // The two message calls first, with one comparison: each message delivered is a send and
    // a receive, and the tree of comparisons below takes five to tell either apart.
    if function & !1 == abi::KEEL_MSG_SEND {
        return if function == abi::KEEL_MSG_SEND {
            Call::MsgSend(crate::ipc::SendRequest {
                vm: regs[1],
                vcpu: regs[2],
                buffer: regs[3],
                len: regs[4],
            })
        } else {
            Call::MsgRecv(crate::ipc::ReceiveRequest::from_regs(regs))
        };
    }
    let a = |i: usize| arg(function, regs[i]);
    match function {
        abi::KEEL_VERSION => Call::KeelVersion,
        abi::KEEL_VM_ID => Call::KeelVmId,
        abi::KEEL_YIELD => Call::KeelYield,
        abi::KEEL_SCHED_STATS => Call::KeelSchedStats,
        abi::KEEL_TASK_CREATE => Call::TaskCreate(crate::tasks::TaskRequest {
            entry: regs[1],
            stack: regs[2],
            arg: regs[3],
            period: regs[4],
            budget: regs[5],
            deadline: regs[6],
            pcpu: (regs[7] & 0xff) as u32,
            priority: (regs[7] >> 8) as u8,
        }),
        abi::KEEL_TASK_LAUNCH => Call::TaskLaunch {
            handle: regs[1],
            release: regs[2],
        },
        abi::KEEL_TASK_DELETE => Call::TaskDelete(regs[1]),
        abi::KEEL_TASK_WAIT => Call::TaskWait,
        abi::KEEL_TASK_STATS => Call::TaskStats(regs[1]),
        abi::KEEL_CHANNEL_NOTIFY => Call::ChannelNotify(crate::channel::NotifyRequest {
            channel: regs[1],
            member: regs[2],
        }),
        abi::KEEL_TRACE_MARK => Call::TraceMark(regs[1] as u32),
        abi::KEEL_TRACE_READ => Call::TraceRead {
            pcpu: regs[1],
            from: regs[2],
            buffer: regs[3],
            len: regs[4],
        },
        abi::KEEL_WATCHDOG => Call::Watchdog,
        abi::KEEL_VM_STATUS
        | abi::KEEL_VM_START
        | abi::KEEL_VM_STOP
        | abi::KEEL_VM_RESTART
        | abi::KEEL_VM_SCHED_STATS
        | abi::KEEL_VM_RESOURCES => Call::Manager {
            function,
            args: [regs[1], regs[2], regs[3], regs[4], regs[5], regs[6]],
        },
        abi::KEEL_MASKED_STRETCH => Call::MaskedStretch {
            pcpu: regs[1],
            reset: regs[2] == 1,
        },
        abi::KEEL_CRASH => Call::KeelCrash {
            esr: a(1),
            elr: a(2),
            far: a(3),
        },
        abi::SMCCC_VERSION => Call::SmcccVersion,
        abi::SMCCC_ARCH_FEATURES => Call::SmcccArchFeatures(a(1) as u32),
        psci::VERSION => Call::PsciVersion,
        psci::FEATURES => Call::PsciFeatures(a(1) as u32),
        psci::CPU_ON_32 | psci::CPU_ON_64 => Call::PsciCpuOn {
            target: a(1),
            entry: a(2),
            context: a(3),
        },
        psci::CPU_OFF => Call::PsciCpuOff,
        psci::CPU_SUSPEND_32 | psci::CPU_SUSPEND_64 => Call::PsciCpuSuspend,
        psci::AFFINITY_INFO_32 | psci::AFFINITY_INFO_64 => Call::PsciAffinityInfo {
            target: a(1),
            level: a(2),
        },
        psci::MIGRATE_INFO_TYPE => Call::PsciMigrateInfoType,
        psci::SYSTEM_OFF => Call::PsciSystemOff,
        psci::SYSTEM_RESET => Call::PsciSystemReset,
        other => Call::Unknown(other),
    }
}

/// The answer to a call whose result is a constant of the ABI and that reads no argument and
/// changes nothing: KEEL_VERSION, SMCCC_VERSION, PSCI_VERSION and MIGRATE_INFO_TYPE, each
/// decided from w0 alone as [`decode`] decides it. `None` for every other call. The trap
/// dispatcher answers these first, before any other state is read (the null hypercall's path).
#[inline(always)]
pub fn constant_answer(x0: u64) -> Option<u64> {
    match x0 as u32 {
        abi::KEEL_VERSION => Some(abi::KEEL_VERSION_VALUE),
        abi::SMCCC_VERSION => Some(abi::SMCCC_VERSION_1_1),
        psci::VERSION => Some(psci::VERSION_1_1),
        psci::MIGRATE_INFO_TYPE => Some(psci::TOS_NOT_PRESENT_MP),
        _ => None,
    }
}

/// PSCI_FEATURES answer (PSCI 1.1 §5.1.14): 0 for an implemented function, NOT_SUPPORTED otherwise.
pub fn psci_features(function: u32) -> u64 {
    match decode(&[function as u64, 0, 0, 0, 0, 0, 0, 0]) {
        Call::PsciVersion
        | Call::PsciFeatures(_)
        | Call::PsciCpuOn { .. }
        | Call::PsciCpuOff
        | Call::PsciCpuSuspend
        | Call::PsciAffinityInfo { .. }
        | Call::PsciMigrateInfoType
        | Call::PsciSystemOff
        | Call::PsciSystemReset => 0,
        Call::SmcccVersion => 0,
        _ => abi::CallError::NotSupported.to_x0(),
    }
}

/// SMCCC_ARCH_FEATURES answer (SMCCC 1.1 §7.3). Keel implements SMCCC_ARCH_FEATURES itself and
/// no ARCH_WORKAROUND_*: QEMU's CPUs need none, and advertising one would make Linux issue a
/// hypercall on every kernel entry.
pub fn smccc_arch_features(function: u32) -> u64 {
    match function {
        abi::SMCCC_VERSION | abi::SMCCC_ARCH_FEATURES => 0,
        _ => abi::CallError::NotSupported.to_x0(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_answers_are_exactly_the_constant_calls() {
        // Every function id the decoder knows, with the upper half of x0 set or not.
        let functions = [
            abi::KEEL_VERSION,
            abi::KEEL_VM_ID,
            abi::KEEL_YIELD,
            abi::KEEL_SCHED_STATS,
            abi::SMCCC_VERSION,
            abi::SMCCC_ARCH_FEATURES,
            psci::VERSION,
            psci::FEATURES,
            psci::CPU_ON_64,
            psci::CPU_OFF,
            psci::MIGRATE_INFO_TYPE,
            psci::SYSTEM_OFF,
            psci::SYSTEM_RESET,
            0,
            0xffff_ffff,
        ];
        for function in functions {
            for upper in [0, 0xdead_beef_0000_0000] {
                let x0 = upper | u64::from(function);
                let expected = match decode(&[x0, 1, 2, 3, 4, 5, 6, 7]) {
                    Call::KeelVersion => Some(abi::KEEL_VERSION_VALUE),
                    Call::SmcccVersion => Some(abi::SMCCC_VERSION_1_1),
                    Call::PsciVersion => Some(psci::VERSION_1_1),
                    Call::PsciMigrateInfoType => Some(psci::TOS_NOT_PRESENT_MP),
                    _ => None,
                };
                assert_eq!(constant_answer(x0), expected, "{function:#x}");
            }
        }
    }

    #[test]
    fn decodes_keel_services() {
        assert_eq!(
            decode(&[0xC600_0000, 0, 0, 0, 0, 0, 0, 0]),
            Call::KeelVersion
        );
        assert_eq!(decode(&[0xC600_0001, 0, 0, 0, 0, 0, 0, 0]), Call::KeelVmId);
        assert_eq!(decode(&[0xC600_0002, 0, 0, 0, 0, 0, 0, 0]), Call::KeelYield);
        assert_eq!(
            decode(&[0xC600_0004, 0, 0, 0, 0, 0, 0, 0]),
            Call::KeelSchedStats
        );
        assert_eq!(
            decode(&[0xC600_0003, 1, 2, 3, 0, 0, 0, 0]),
            Call::KeelCrash {
                esr: 1,
                elr: 2,
                far: 3
            }
        );
    }

    #[test]
    fn decodes_health_services() {
        assert_eq!(decode(&[0xC600_0040, 9, 0, 0, 0, 0, 0, 0]), Call::Watchdog);
        for function in 0xC600_0041..=0xC600_0046u32 {
            assert_eq!(
                decode(&[u64::from(function), 1, 2, 3, 4, 5, 6, 7]),
                Call::Manager {
                    function,
                    args: [1, 2, 3, 4, 5, 6]
                }
            );
        }
        assert_eq!(
            decode(&[0xC600_0047, 1, 0, 0, 0, 0, 0, 0]),
            Call::Unknown(0xC600_0047)
        );
    }

    #[test]
    fn decodes_task_services() {
        let create = decode(&[
            0xC600_0010,
            0x4008_0000,
            0x4010_0000,
            9,
            1_000_000,
            200_000,
            0,
            0x0a01,
        ]);
        let Call::TaskCreate(request) = create else {
            panic!("{create:?}")
        };
        assert_eq!(
            (
                request.entry,
                request.stack,
                request.arg,
                request.pcpu,
                request.priority
            ),
            (0x4008_0000, 0x4010_0000, 9, 1, 10)
        );
        assert_eq!(
            (request.period, request.budget, request.deadline),
            (1_000_000, 200_000, 0)
        );
        assert_eq!(
            decode(&[0xC600_0011, 0x102, 77, 0, 0, 0, 0, 0]),
            Call::TaskLaunch {
                handle: 0x102,
                release: 77
            }
        );
        assert_eq!(
            decode(&[0xC600_0012, 5, 0, 0, 0, 0, 0, 0]),
            Call::TaskDelete(5)
        );
        assert_eq!(decode(&[0xC600_0013, 0, 0, 0, 0, 0, 0, 0]), Call::TaskWait);
        assert_eq!(
            decode(&[0xC600_0014, 5, 0, 0, 0, 0, 0, 0]),
            Call::TaskStats(5)
        );
        assert_eq!(
            decode(&[0xC600_0020, 1, 1, 0, 0, 0, 0, 0]),
            Call::MaskedStretch {
                pcpu: 1,
                reset: true
            }
        );
        assert_eq!(
            decode(&[0xC600_0021, 0x1_0000_2a2a, 0, 0, 0, 0, 0, 0]),
            Call::TraceMark(0x2a2a)
        );
        assert_eq!(
            decode(&[0xC600_0022, 1, 500, 0x4800_0000, 4096, 9, 9, 9]),
            Call::TraceRead {
                pcpu: 1,
                from: 500,
                buffer: 0x4800_0000,
                len: 4096
            }
        );
    }

    #[test]
    fn decodes_message_services() {
        assert_eq!(
            decode(&[0xC600_0030, 1, 2, 0x4000_1000, 100, 9, 9, 9]),
            Call::MsgSend(crate::ipc::SendRequest {
                vm: 1,
                vcpu: 2,
                buffer: 0x4000_1000,
                len: 100,
            })
        );
        assert_eq!(
            decode(&[0xC600_0031, 0x4000_2000, 64, u64::MAX, 9, 9, 9, 9]),
            Call::MsgRecv(crate::ipc::ReceiveRequest {
                buffer: 0x4000_2000,
                capacity: 64,
                wait_until: u64::MAX,
            })
        );
    }

    #[test]
    fn decodes_the_doorbell() {
        assert_eq!(
            decode(&[0xC600_0032, 3, u64::MAX, 9, 9, 9, 9, 9]),
            Call::ChannelNotify(crate::channel::NotifyRequest {
                channel: 3,
                member: crate::channel::EVERY_OTHER_MEMBER,
            })
        );
    }

    #[test]
    fn function_id_is_w0_only() {
        assert_eq!(
            decode(&[0xDEAD_BEEF_C600_0000, 0, 0, 0, 0, 0, 0, 0]),
            Call::KeelVersion
        );
    }

    #[test]
    fn decodes_psci() {
        assert_eq!(
            decode(&[0x8400_0000, 0, 0, 0, 0, 0, 0, 0]),
            Call::PsciVersion
        );
        assert_eq!(
            decode(&[0x8400_0008, 0, 0, 0, 0, 0, 0, 0]),
            Call::PsciSystemOff
        );
        assert_eq!(
            decode(&[0x8400_0009, 0, 0, 0, 0, 0, 0, 0]),
            Call::PsciSystemReset
        );
        assert_eq!(
            decode(&[0x8400_000A, 0x8400_0008, 0, 0, 0, 0, 0, 0]),
            Call::PsciFeatures(0x8400_0008)
        );
        assert_eq!(
            decode(&[0xC400_0003, 1, 0x4020_0000, 7, 0, 0, 0, 0]),
            Call::PsciCpuOn {
                target: 1,
                entry: 0x4020_0000,
                context: 7
            }
        );
    }

    #[test]
    fn smc32_arguments_are_truncated() {
        assert_eq!(
            decode(&[
                0x8400_0003,
                0xffff_ffff_0000_0001,
                0x1_4020_0000,
                0,
                0,
                0,
                0,
                0
            ]),
            Call::PsciCpuOn {
                target: 1,
                entry: 0x4020_0000,
                context: 0
            }
        );
    }

    #[test]
    fn unknown_calls_are_reported_as_such() {
        assert_eq!(
            decode(&[0xC600_00FF, 0, 0, 0, 0, 0, 0, 0]),
            Call::Unknown(0xC600_00FF)
        );
        assert_eq!(
            decode(&[0x8400_0012, 0, 0, 0, 0, 0, 0, 0]),
            Call::Unknown(0x8400_0012)
        );
    }

    #[test]
    fn psci_features_answers() {
        assert_eq!(psci_features(psci::SYSTEM_OFF), 0);
        assert_eq!(psci_features(psci::CPU_ON_64), 0);
        assert_eq!(psci_features(0x8400_0012), u64::MAX);
        assert_eq!(psci_features(abi::KEEL_VERSION), u64::MAX);
    }

    #[test]
    fn no_spectre_workarounds_advertised() {
        assert_eq!(smccc_arch_features(0x8000_8000), u64::MAX);
        assert_eq!(smccc_arch_features(0x8000_7fff), u64::MAX);
        assert_eq!(smccc_arch_features(abi::SMCCC_ARCH_FEATURES), 0);
    }
}
