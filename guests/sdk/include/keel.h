/*
 * keel.h - Keel's guest-visible hypercall ABI for C guests (the same as keel_core::abi).
 *
 * Calls use `HVC #0` with the SMC Calling Convention (Arm DEN0028, SMCCC 1.1): function
 * id in w0, arguments in x1..x3, results in x0..x3; x4..x17 are preserved. Keel's own
 * services are 64-bit fast calls of the Vendor Specific Hypervisor Service range (owning
 * entity 6, SMCCC table 6-4). Errors are negative values, sign-extended in x0.
 *
 * The SDK's build script checks every KEEL_* number below against keel_core::abi, so
 * the two cannot drift apart.
 */
#ifndef KEEL_H
#define KEEL_H

#include <stdint.h>

/* SMCCC function id fields. */
#define KEEL_SMCCC_FAST_CALL 0x80000000u
#define KEEL_SMCCC_64BIT 0x40000000u
#define KEEL_OWNER_VENDOR_HYP 6u

/* Keel services (vendor hypervisor range). */
/* Returns Keel's version in x0 (major << 16 | minor): the null hypercall. */
#define KEEL_FN_VERSION 0xC6000000u
/* Returns the caller's VM id in x0 and its vCPU index in x1. */
#define KEEL_FN_VM_ID 0xC6000001u
/* Gives up the rest of the caller's time slice; returns 0. */
#define KEEL_FN_YIELD 0xC6000002u
/* Reports a fatal exception (x1 = ESR_EL1, x2 = ELR_EL1, x3 = FAR_EL1); does not return. */
#define KEEL_FN_CRASH 0xC6000003u
/* KEEL_FN_VERSION's answer for this ABI. */
#define KEEL_VERSION_VALUE 0x00010000u

/* SMCCC architecture calls (SMCCC 1.1 sections 7.2, 7.3). */
#define KEEL_SMCCC_VERSION 0x80000000u
#define KEEL_SMCCC_ARCH_FEATURES 0x80000001u
#define KEEL_SMCCC_VERSION_1_1 0x00010001u

/* PSCI function ids (Arm DEN0022, PSCI 1.1). */
#define KEEL_PSCI_VERSION 0x84000000u
#define KEEL_PSCI_CPU_SUSPEND_32 0x84000001u
#define KEEL_PSCI_CPU_SUSPEND_64 0xC4000001u
#define KEEL_PSCI_CPU_OFF 0x84000002u
#define KEEL_PSCI_CPU_ON_32 0x84000003u
#define KEEL_PSCI_CPU_ON_64 0xC4000003u
#define KEEL_PSCI_AFFINITY_INFO_32 0x84000004u
#define KEEL_PSCI_AFFINITY_INFO_64 0xC4000004u
#define KEEL_PSCI_MIGRATE_INFO_TYPE 0x84000006u
#define KEEL_PSCI_SYSTEM_OFF 0x84000008u
#define KEEL_PSCI_SYSTEM_RESET 0x84000009u
#define KEEL_PSCI_FEATURES 0x8400000Au
#define KEEL_PSCI_VERSION_1_1 0x00010001u
#define KEEL_PSCI_TOS_NOT_PRESENT_MP 2u

/* Result codes (SMCCC and PSCI), as signed values of x0. */
#define KEEL_NOT_SUPPORTED (-1)
#define KEEL_INVALID_PARAMETERS (-2)
#define KEEL_DENIED (-3)
#define KEEL_ALREADY_ON (-4)
#define KEEL_INVALID_ADDRESS (-9)

/* Guest-physical layout of the emulated platform (QEMU `virt` addresses). */
#define KEEL_GICD_BASE 0x08000000u
#define KEEL_GICD_SIZE 0x00010000u
#define KEEL_GICR_BASE 0x080A0000u
#define KEEL_GICR_STRIDE 0x00020000u
#define KEEL_UART_BASE 0x09000000u
#define KEEL_UART_SIZE 0x00001000u
#define KEEL_UART_INTID 33u
#define KEEL_VTIMER_INTID 27u
#define KEEL_PTIMER_INTID 30u
#define KEEL_MAINTENANCE_INTID 25u
#define KEEL_HYP_TIMER_INTID 26u

#if defined(__aarch64__)

/* What a call left in x0..x3. */
struct keel_hvc_result {
	uint64_t x0;
	uint64_t x1;
	uint64_t x2;
	uint64_t x3;
};

/* Issues `HVC #0` with `function` in w0 and three arguments in x1..x3. */
static inline struct keel_hvc_result keel_hvc(uint32_t function, uint64_t arg1, uint64_t arg2,
					       uint64_t arg3)
{
	register uint64_t x0 __asm__("x0") = function;
	register uint64_t x1 __asm__("x1") = arg1;
	register uint64_t x2 __asm__("x2") = arg2;
	register uint64_t x3 __asm__("x3") = arg3;

	__asm__ volatile("hvc #0" : "+r"(x0), "+r"(x1), "+r"(x2), "+r"(x3) : : "memory");
	return (struct keel_hvc_result){ x0, x1, x2, x3 };
}

/* KEEL_FN_VERSION: major << 16 | minor, or a negative error. */
static inline int64_t keel_version(void)
{
	return (int64_t)keel_hvc(KEEL_FN_VERSION, 0, 0, 0).x0;
}

/* KEEL_FN_VM_ID: the VM id; the vCPU index goes to *vcpu if vcpu is not null. */
static inline uint64_t keel_vm_id(uint64_t *vcpu)
{
	struct keel_hvc_result result = keel_hvc(KEEL_FN_VM_ID, 0, 0, 0);

	if (vcpu)
		*vcpu = result.x1;
	return result.x0;
}

/* KEEL_FN_YIELD. */
static inline void keel_yield(void)
{
	keel_hvc(KEEL_FN_YIELD, 0, 0, 0);
}

/* KEEL_FN_CRASH: Keel stops the VM with a diagnostic. */
static inline __attribute__((noreturn)) void keel_crash(uint64_t esr, uint64_t elr, uint64_t far)
{
	keel_hvc(KEEL_FN_CRASH, esr, elr, far);
	for (;;)
		__asm__ volatile("wfi");
}

/* PSCI_VERSION: major << 16 | minor. */
static inline int64_t keel_psci_version(void)
{
	return (int64_t)keel_hvc(KEEL_PSCI_VERSION, 0, 0, 0).x0;
}

/* PSCI SYSTEM_OFF: powers the VM off. */
static inline __attribute__((noreturn)) void keel_system_off(void)
{
	keel_hvc(KEEL_PSCI_SYSTEM_OFF, 0, 0, 0);
	for (;;)
		__asm__ volatile("wfi");
}

/* PSCI SYSTEM_RESET: restarts the VM. */
static inline __attribute__((noreturn)) void keel_system_reset(void)
{
	keel_hvc(KEEL_PSCI_SYSTEM_RESET, 0, 0, 0);
	for (;;)
		__asm__ volatile("wfi");
}

#endif /* __aarch64__ */

#endif /* KEEL_H */
