/*
 * keel.h - Keel's guest-visible hypercall ABI for C guests (the same as keel_core::abi), and a
 * small helper for the guest's GIC (GICv3 or GICv2, read from its device tree).
 *
 * Calls use `HVC #0` with the SMC Calling Convention (Arm DEN0028, SMCCC 1.1): function
 * id in w0, arguments in x1..x3, results in x0..x3; x4..x17 are preserved. The real-time
 * task services take up to seven arguments (x1..x7) and return up to six results (x0..x5),
 * as SMCCC 1.2 allows. Keel's own services are 64-bit fast calls of the Vendor Specific
 * Hypervisor Service range (owning entity 6, SMCCC table 6-4). Errors are negative values,
 * sign-extended in x0.
 *
 * The SDK's build script checks every KEEL_* number below against keel_core::abi (and
 * keel_core::tasks for the task refusal codes), so the two cannot drift apart. Assembly
 * sources (.S) may include it for the numbers alone: GNU as reads their `u` suffixes.
 */
#ifndef KEEL_H
#define KEEL_H

#ifndef __ASSEMBLER__
#include <stdint.h>
#endif

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
/*
 * The caller's scheduling statistics on a shared pCPU: x0 = jobs released, x1 = deadline
 * misses, x2 = budget overruns, x3 = worst response time (ns). KEEL_NOT_SUPPORTED on a
 * pinned pCPU.
 */
#define KEEL_FN_SCHED_STATS 0xC6000004u

/*
 * Real-time tasks: periodic vCPUs of the caller's partition with a reservation each, scheduled
 * by Keel (keel_core::tasks). A task starts at EL1h with SP = the stack it was given, x0 = its
 * argument, interrupts masked and the MMU off (SCTLR_EL1 and VBAR_EL1 are its own to set);
 * each job ends with KEEL_FN_TASK_WAIT.
 */
/*
 * Creates a task, stopped: x1 = entry point, x2 = stack top (16-byte aligned), x3 = x0 at
 * entry, x4 = period, x5 = budget, x6 = relative deadline (0: the period), all in ns,
 * x7 = pCPU (bits 0-7) | priority on a fixed-priority pCPU (bits 8-15). Returns the task's
 * handle (vm << 8 | index) or a negative error.
 */
#define KEEL_FN_TASK_CREATE 0xC6000010u
/* Launches task x1: its first job is released when the virtual counter reaches x2 (0: now). */
#define KEEL_FN_TASK_LAUNCH 0xC6000011u
/* Deletes task x1: it stops at once and its vCPU is reused by the next create. */
#define KEEL_FN_TASK_DELETE 0xC6000012u
/* Called by a task: its job is complete; returns 0 at its next release. */
#define KEEL_FN_TASK_WAIT 0xC6000013u
/*
 * Statistics of task x1: x0 = jobs released, x1 = deadline misses, x2 = budget overruns,
 * x3 = worst response time, x4 = last response time, x5 = worst release lateness (ns).
 */
#define KEEL_FN_TASK_STATS 0xC6000014u
/*
 * The longest stretch pCPU x1 ran at EL2 with interrupts masked since boot (or since the last
 * call with x2 = 1, which resets the record): x0 = its length (ns), x1 = where (keel_core's
 * MaskedSite number), x2 = ESR_EL2 and x3 = ELR_EL2 when it ended. KEEL_NOT_SUPPORTED if the
 * pCPU does not exist.
 */
#define KEEL_FN_MASKED_STRETCH 0xC6000020u

/*
 * Messages between VMs, through Keel: each vCPU and task of a VM with a `messages` table has
 * a bounded queue of its own. A full queue refuses (never a silent drop).
 */
/*
 * Sends: x1 = destination VM, x2 = its vCPU (a task: the VM's configured vCPUs plus the task's
 * index), x3 = the message's address, x4 = its length. Keel copies it into the destination's
 * queue and raises the destination's message interrupt. Returns the number now queued there.
 */
#define KEEL_FN_MSG_SEND 0xC6000030u
/*
 * Receives the caller's next message: x1 = buffer, x2 = its capacity, x3 = 0 (do not wait) or
 * the virtual counter value to wait until (UINT64_MAX: for ever). Returns x0 = its length,
 * x1 = sender VM, x2 = sender vCPU, x3 = messages still queued (buffer too small: x1 = the
 * message's length; it stays queued).
 */
#define KEEL_FN_MSG_RECV 0xC6000031u

/*
 * Shared-memory channels: memory each member VM sees at an address of its own (read-write or
 * read-only, from the configuration's [[channel]] tables), and a doorbell. Rings the doorbell:
 * x1 = the channel's id (its index among the [[channel]] tables), x2 = the member to ring (its
 * position in the channel's vms) or KEEL_EVERY_OTHER_MEMBER. Keel raises the channel's
 * interrupt in each (an SGI at its vCPU 0, an SPI where the VM routes it). Returns the number
 * of members rung (stopped ones are skipped).
 */
#define KEEL_FN_CHANNEL_NOTIFY 0xC6000032u
/* KEEL_FN_CHANNEL_NOTIFY's x2 that rings every member but the caller. */
#define KEEL_EVERY_OTHER_MEMBER 0xFFFFFFFFFFFFFFFFull

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
/*
 * The task services' refusals besides those above: KEEL_DENIED (not allowed: no tasks grant,
 * not the task's partition nor a manager, or a wait by what is not a task),
 * KEEL_INVALID_PARAMETERS (period, budget, deadline, priority or pCPU), KEEL_ALREADY_ON (a
 * second launch), KEEL_INVALID_ADDRESS (entry or stack outside the caller's memory), and:
 */
/* No task has that handle (never created, or deleted). */
#define KEEL_NO_SUCH_TASK (-16)
/* The partition already has as many tasks as its grant allows. */
#define KEEL_LIMIT_REACHED (-17)
/* Admitting the task would break a reservation on its pCPU, or the partition's grant. */
#define KEEL_NOT_SCHEDULABLE (-18)
/*
 * The message services' refusals besides KEEL_DENIED (the destination does not take messages
 * from the caller, or the caller has no queue) and KEEL_INVALID_ADDRESS (a buffer not wholly
 * in the caller's memory): each changes nothing.
 */
/* The destination's queue is full: retry later. */
#define KEEL_QUEUE_FULL (-32)
/* The message is longer than the destination's largest. */
#define KEEL_TOO_LARGE (-33)
/* The receive buffer is smaller than the next message (its length in x1; it stays queued). */
#define KEEL_BUFFER_TOO_SMALL (-34)
/* No such VM, or no such vCPU or task in it. */
#define KEEL_UNKNOWN_DESTINATION (-35)
/* The destination VM or vCPU is stopped (powered off, stopped by Keel, or off). */
#define KEEL_DESTINATION_STOPPED (-36)
/* Nothing is queued (no wait asked, or the wait ended). */
#define KEEL_NO_MESSAGE (-37)
/*
 * The doorbell's refusals besides KEEL_DENIED (the caller is not a member of the channel) and
 * KEEL_DESTINATION_STOPPED (the member rung, or every other member, is stopped): each rings
 * nothing.
 */
/* No channel has that id, or the channel no member at that position. */
#define KEEL_NO_SUCH_CHANNEL (-38)

/*
 * Guest-physical layout of the emulated platform (QEMU `virt` addresses). The GIC's are those
 * of a GICv3; a guest on GICv2 hardware has a GICv2 instead (distributor at the same address,
 * a memory-mapped CPU interface after it): read the GIC from the device tree with
 * keel_gic_from_device_tree() below rather than assume these.
 */
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

#if defined(__aarch64__) && !defined(__ASSEMBLER__)

/*
 * The guest's GIC, read from the device tree the guest was entered with (x0), for guests that
 * take an interrupt or two without a driver of their own: the node whose compatible is
 * "arm,gic-v3" (a GICv3: reg = distributor, redistributors) or "arm,cortex-a15-gic",
 * "arm,gic-400" or "arm,cortex-a7-gic" (a GICv2: reg = distributor, CPU interface). Every
 * interrupt is Group 1 on a GICv3 (system-register CPU interface, ICC_*) and Group 0 on a
 * GICv2 (memory-mapped CPU interface, GICC_*; no ICC_* register exists there, and none is
 * touched). EOImode 0 on both: an end of interrupt drops the priority and deactivates.
 * Its register accesses are single aligned 32-bit loads and stores (MMU off: Device memory).
 */
enum keel_gic_version { KEEL_GIC_NONE = 0, KEEL_GIC_V2 = 2, KEEL_GIC_V3 = 3 };

struct keel_gic {
	enum keel_gic_version version;
	uint64_t distributor; /* GICD */
	uint64_t cpu; /* GICv2: the CPU interface (GICC); GICv3: the first redistributor */
	uint64_t cpu_size; /* the size of that region (GICv3: 128 KiB per vCPU) */
};

/* A big-endian 32-bit cell of the device tree, read a byte at a time (any alignment). */
static inline uint32_t keel_fdt_cell(const uint8_t *at)
{
	return (uint32_t)at[0] << 24 | (uint32_t)at[1] << 16 | (uint32_t)at[2] << 8 | at[3];
}

/* Whether the NUL-terminated `text` is `name`. */
static inline int keel_fdt_name_is(const char *text, const char *name)
{
	while (*name && *text == *name) {
		text++;
		name++;
	}
	return *text == *name;
}

/* Whether the stringlist `list` (`length` bytes) holds `name`. */
static inline int keel_fdt_has_string(const uint8_t *list, uint32_t length, const char *name)
{
	uint32_t start = 0;

	while (start < length) {
		uint32_t i = 0;

		while (start + i < length && name[i] && list[start + i] == (uint8_t)name[i])
			i++;
		if (!name[i] && start + i < length && !list[start + i])
			return 1;
		while (start < length && list[start])
			start++;
		start++;
	}
	return 0;
}

/* A (address, size) of `address_cells` and `size_cells` cells (each 1 or 2) at `at`. */
static inline const uint8_t *keel_fdt_pair(const uint8_t *at, uint32_t address_cells,
					   uint32_t size_cells, uint64_t *address, uint64_t *size)
{
	*address = keel_fdt_cell(at);
	if (address_cells == 2)
		*address = *address << 32 | keel_fdt_cell(at + 4);
	at += 4 * address_cells;
	*size = keel_fdt_cell(at);
	if (size_cells == 2)
		*size = *size << 32 | keel_fdt_cell(at + 4);
	return at + 4 * size_cells;
}

/*
 * Fills *gic from the first GIC node of the flattened device tree at `device_tree` (Devicetree
 * Specification 0.4, chapter 5), its reg read with its parent's #address-cells and #size-cells.
 * Returns 0, or -1 (and *gic zeroed) without a valid blob or such a node.
 */
static inline int keel_gic_from_device_tree(const void *device_tree, struct keel_gic *gic)
{
	enum { BEGIN_NODE = 1, END_NODE = 2, PROP = 3, NOP = 4, END = 9, DEPTH = 16 };
	const uint8_t *blob = (const uint8_t *)device_tree;
	const uint8_t *token, *strings, *end, *reg = 0;
	uint32_t address_cells[DEPTH + 1], size_cells[DEPTH + 1], reg_length = 0;
	enum keel_gic_version found = KEEL_GIC_NONE;
	int depth = 0;

	*gic = (struct keel_gic){ KEEL_GIC_NONE, 0, 0, 0 };
	if (!blob || keel_fdt_cell(blob) != 0xd00dfeedu)
		return -1;
	token = blob + keel_fdt_cell(blob + 8);
	strings = blob + keel_fdt_cell(blob + 12);
	end = blob + keel_fdt_cell(blob + 4);
	address_cells[0] = 2; /* the root's defaults (5.2: as if its parent said 2 and 1) */
	size_cells[0] = 1;
	while (token + 4 <= end) {
		uint32_t kind = keel_fdt_cell(token);

		token += 4;
		if (kind == BEGIN_NODE || kind == END_NODE || kind == END) {
			/* The properties of the node at `depth` are all read: is it the GIC? */
			if (found != KEEL_GIC_NONE && reg && depth >= 1) {
				uint32_t address = address_cells[depth - 1];
				uint32_t size = size_cells[depth - 1];
				uint64_t ignored;

				/* Two (address, size) entries of 1 or 2 cells each. */
				if (address < 1 || address > 2 || size < 1 || size > 2 ||
				    reg_length < 8 * (address + size))
					return -1;
				reg = keel_fdt_pair(reg, address, size, &gic->distributor, &ignored);
				keel_fdt_pair(reg, address, size, &gic->cpu, &gic->cpu_size);
				gic->version = found;
				return 0;
			}
			found = KEEL_GIC_NONE;
			reg = 0;
		}
		if (kind == BEGIN_NODE) {
			if (depth >= DEPTH)
				return -1;
			depth++;
			address_cells[depth] = 2;
			size_cells[depth] = 1;
			while (token < end && *token)
				token++;
			token = blob + ((token + 1 - blob + 3) & ~(uintptr_t)3);
		} else if (kind == END_NODE) {
			depth--;
		} else if (kind == PROP) {
			uint32_t length = keel_fdt_cell(token);
			const char *name = (const char *)strings + keel_fdt_cell(token + 4);
			const uint8_t *value = token + 8;

			if (keel_fdt_name_is(name, "compatible")) {
				if (keel_fdt_has_string(value, length, "arm,gic-v3"))
					found = KEEL_GIC_V3;
				else if (keel_fdt_has_string(value, length, "arm,cortex-a15-gic") ||
					 keel_fdt_has_string(value, length, "arm,gic-400") ||
					 keel_fdt_has_string(value, length, "arm,cortex-a7-gic"))
					found = KEEL_GIC_V2;
			} else if (keel_fdt_name_is(name, "reg")) {
				reg = value;
				reg_length = length;
			} else if (keel_fdt_name_is(name, "#address-cells") && length == 4) {
				address_cells[depth] = keel_fdt_cell(value);
			} else if (keel_fdt_name_is(name, "#size-cells") && length == 4) {
				size_cells[depth] = keel_fdt_cell(value);
			}
			token = value + ((length + 3) & ~3u);
		} else if (kind != NOP) {
			return -1;
		}
	}
	return -1;
}

/* A 32-bit GIC register. */
static inline volatile uint32_t *keel_gic_register(uint64_t address)
{
	return (volatile uint32_t *)(uintptr_t)address;
}

/* Sets `intid`'s byte of the byte-per-INTID array at `array` (a 32-bit read-modify-write). */
static inline void keel_gic_set_byte(uint64_t array, uint32_t intid, uint8_t value)
{
	volatile uint32_t *word = keel_gic_register(array + intid / 4 * 4);

	*word = (*word & ~(0xffu << intid % 4 * 8)) | (uint32_t)value << intid % 4 * 8;
}

/*
 * Brings up vCPU `vcpu`'s side of the GIC: the distributor enabled (GICv3: with affinity
 * routing and Group 1; GICv2: Group 0), its redistributor woken (GICv3), and this CPU's
 * interface with every priority let through. IRQs stay masked in PSTATE.
 */
static inline void keel_gic_init(const struct keel_gic *gic, uint64_t vcpu)
{
	if (gic->version == KEEL_GIC_V3) {
		uint64_t redistributor = gic->cpu + vcpu * 0x20000;
		uint64_t value;

		/* GICD_CTLR: ARE | EnableGrp1 (DS = 1), then wait while RWP. */
		*keel_gic_register(gic->distributor) = 1u << 4 | 1u << 1;
		while (*keel_gic_register(gic->distributor) & 1u << 31)
			;
		/* GICR_WAKER: clear ProcessorSleep, wait while ChildrenAsleep. */
		*keel_gic_register(redistributor + 0x14) &= ~(1u << 1);
		while (*keel_gic_register(redistributor + 0x14) & 1u << 2)
			;
		__asm__ volatile("mrs %0, s3_0_c12_c12_5\n\t" /* ICC_SRE_EL1.SRE */
				 "orr %0, %0, #1\n\t"
				 "msr s3_0_c12_c12_5, %0\n\t"
				 "isb\n\t"
				 "msr s3_0_c4_c6_0, %1\n\t" /* ICC_PMR_EL1: every priority */
				 "mrs %0, s3_0_c12_c12_4\n\t" /* ICC_CTLR_EL1.EOImode = 0 */
				 "bic %0, %0, #2\n\t"
				 "msr s3_0_c12_c12_4, %0\n\t"
				 "msr s3_0_c12_c12_7, %2\n\t" /* ICC_IGRPEN1_EL1 */
				 "isb"
				 : "=&r"(value)
				 : "r"((uint64_t)0xff), "r"((uint64_t)1));
	} else if (gic->version == KEEL_GIC_V2) {
		/* GICD_CTLR.EnableGrp0. */
		*keel_gic_register(gic->distributor) = 1u << 0;
		/* GICC_PMR: every priority; GICC_CTLR: EnableGrp0, FIQEn and EOImode clear. */
		*keel_gic_register(gic->cpu + 0x04) = 0xff;
		*keel_gic_register(gic->cpu) =
			(*keel_gic_register(gic->cpu) & ~(1u << 3 | 1u << 9)) | 1u << 0;
	}
}

/*
 * Enables vCPU `vcpu`'s SGI or PPI `intid` (0-31) with `priority`: in its redistributor's SGI
 * frame as Group 1 (GICv3), or in the distributor's banked registers, which are the calling
 * CPU's own whatever `vcpu` says, left in Group 0 (GICv2).
 */
static inline void keel_gic_enable_private(const struct keel_gic *gic, uint64_t vcpu,
					   uint32_t intid, uint8_t priority)
{
	uint64_t frame;

	if (gic->version == KEEL_GIC_V3) {
		frame = gic->cpu + vcpu * 0x20000 + 0x10000;
		*keel_gic_register(frame + 0x80) |= 1u << intid; /* GICR_IGROUPR0 */
	} else if (gic->version == KEEL_GIC_V2) {
		frame = gic->distributor;
	} else {
		return;
	}
	keel_gic_set_byte(frame + 0x400, intid, priority); /* GICR_/GICD_IPRIORITYR */
	*keel_gic_register(frame + 0x100) = 1u << intid; /* GICR_/GICD_ISENABLER0 */
}

/*
 * Acknowledges the highest-priority pending interrupt: what ICC_IAR1_EL1 (GICv3) or GICC_IAR
 * (GICv2) read, to be given to keel_gic_intid() and keel_gic_end_of_interrupt().
 */
static inline uint32_t keel_gic_acknowledge(const struct keel_gic *gic)
{
	uint64_t value = 1023;

	if (gic->version == KEEL_GIC_V3)
		__asm__ volatile("mrs %0, s3_0_c12_c12_0" : "=r"(value)); /* ICC_IAR1_EL1 */
	else if (gic->version == KEEL_GIC_V2)
		value = *keel_gic_register(gic->cpu + 0x0c); /* GICC_IAR */
	return (uint32_t)value;
}

/* The INTID of what keel_gic_acknowledge() read: 1020-1023 when nothing was pending. */
static inline uint32_t keel_gic_intid(const struct keel_gic *gic, uint32_t acknowledged)
{
	return acknowledged & (gic->version == KEEL_GIC_V2 ? 0x3ffu : 0xffffffu);
}

/* Ends an acknowledged interrupt (GICv2: with the SGI source its acknowledge read). */
static inline void keel_gic_end_of_interrupt(const struct keel_gic *gic, uint32_t acknowledged)
{
	if (gic->version == KEEL_GIC_V3)
		__asm__ volatile("msr s3_0_c12_c12_1, %0" /* ICC_EOIR1_EL1 */
				 :
				 : "r"((uint64_t)(acknowledged & 0xffffffu)));
	else if (gic->version == KEEL_GIC_V2)
		*keel_gic_register(gic->cpu + 0x10) = acknowledged; /* GICC_EOIR */
}

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

/* What a task service left in x0..x5. */
struct keel_hvc7_result {
	uint64_t x0;
	uint64_t x1;
	uint64_t x2;
	uint64_t x3;
	uint64_t x4;
	uint64_t x5;
};

/* Issues `HVC #0` with `function` in w0 and seven arguments in x1..x7; returns x0..x5. */
static inline struct keel_hvc7_result keel_hvc7(uint32_t function, uint64_t arg1, uint64_t arg2,
						 uint64_t arg3, uint64_t arg4, uint64_t arg5,
						 uint64_t arg6, uint64_t arg7)
{
	register uint64_t x0 __asm__("x0") = function;
	register uint64_t x1 __asm__("x1") = arg1;
	register uint64_t x2 __asm__("x2") = arg2;
	register uint64_t x3 __asm__("x3") = arg3;
	register uint64_t x4 __asm__("x4") = arg4;
	register uint64_t x5 __asm__("x5") = arg5;
	register uint64_t x6 __asm__("x6") = arg6;
	register uint64_t x7 __asm__("x7") = arg7;

	__asm__ volatile("hvc #0"
			 : "+r"(x0), "+r"(x1), "+r"(x2), "+r"(x3), "+r"(x4), "+r"(x5), "+r"(x6),
			   "+r"(x7)
			 :
			 : "memory");
	return (struct keel_hvc7_result){ x0, x1, x2, x3, x4, x5 };
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

/* What Keel counted for a task (KEEL_FN_TASK_STATS), times in nanoseconds. */
struct keel_task_stats {
	uint64_t jobs;
	uint64_t deadline_misses;
	uint64_t overruns;
	uint64_t worst_response_ns;
	uint64_t last_response_ns;
	uint64_t worst_lateness_ns;
};

/*
 * KEEL_FN_TASK_CREATE: a task that starts at `entry` with x0 = `arg` on the stack whose top is
 * `stack_top`, created stopped. `entry` runs with the MMU off and VBAR_EL1 unset: it is
 * usually a few instructions of assembly that set them up before calling C. `deadline_ns` 0
 * means the period; `priority` counts on a fixed-priority pCPU only (higher first). Returns
 * the task's handle, or a negative error.
 */
static inline int64_t keel_task_create(void (*entry)(uint64_t arg), void *stack_top, uint64_t arg,
				       uint64_t period_ns, uint64_t budget_ns, uint64_t deadline_ns,
				       uint8_t pcpu, uint8_t priority)
{
	uint64_t placement = (uint64_t)pcpu | (uint64_t)priority << 8;

	return (int64_t)keel_hvc7(KEEL_FN_TASK_CREATE, (uint64_t)(uintptr_t)entry,
				  (uint64_t)(uintptr_t)stack_top, arg, period_ns, budget_ns,
				  deadline_ns, placement)
		.x0;
}

/*
 * KEEL_FN_TASK_LAUNCH: the task's first job is released when the virtual counter reaches
 * `release_at` (0, or a time already passed: at once). Returns 0 or a negative error.
 */
static inline int64_t keel_task_launch(uint64_t handle, uint64_t release_at)
{
	return (int64_t)keel_hvc7(KEEL_FN_TASK_LAUNCH, handle, release_at, 0, 0, 0, 0, 0).x0;
}

/* KEEL_FN_TASK_DELETE: the task stops at once. Returns 0 or a negative error. */
static inline int64_t keel_task_delete(uint64_t handle)
{
	return (int64_t)keel_hvc7(KEEL_FN_TASK_DELETE, handle, 0, 0, 0, 0, 0, 0).x0;
}

/* KEEL_FN_TASK_WAIT, by a task: its job is done; returns 0 at its next release. */
static inline int64_t keel_task_wait(void)
{
	return (int64_t)keel_hvc7(KEEL_FN_TASK_WAIT, 0, 0, 0, 0, 0, 0, 0).x0;
}

/*
 * KEEL_FN_TASK_STATS: fills *stats and returns the jobs released, or returns a negative error
 * and leaves *stats alone.
 */
static inline int64_t keel_task_stats(uint64_t handle, struct keel_task_stats *stats)
{
	struct keel_hvc7_result result = keel_hvc7(KEEL_FN_TASK_STATS, handle, 0, 0, 0, 0, 0, 0);

	if ((int64_t)result.x0 >= 0) {
		stats->jobs = result.x0;
		stats->deadline_misses = result.x1;
		stats->overruns = result.x2;
		stats->worst_response_ns = result.x3;
		stats->last_response_ns = result.x4;
		stats->worst_lateness_ns = result.x5;
	}
	return (int64_t)result.x0;
}

/* Who sent a received message, and how many are still queued. */
struct keel_msg_info {
	uint64_t vm;
	uint64_t vcpu;
	uint64_t left;
};

/* KEEL_FN_MSG_SEND: returns the number of messages queued at the destination, or an error. */
static inline int64_t keel_msg_send(uint64_t vm, uint64_t vcpu, const void *message, uint64_t len)
{
	return (int64_t)keel_hvc7(KEEL_FN_MSG_SEND, vm, vcpu, (uint64_t)(uintptr_t)message, len, 0, 0,
				  0)
		.x0;
}

/*
 * KEEL_FN_MSG_RECV: returns the message's length (and fills *info) or a negative error;
 * `wait_until` as x3 above.
 */
static inline int64_t keel_msg_recv(void *buffer, uint64_t capacity, uint64_t wait_until,
				    struct keel_msg_info *info)
{
	struct keel_hvc_result result =
		keel_hvc(KEEL_FN_MSG_RECV, (uint64_t)(uintptr_t)buffer, capacity, wait_until);

	if ((int64_t)result.x0 >= 0) {
		info->vm = result.x1;
		info->vcpu = result.x2;
		info->left = result.x3;
	}
	return (int64_t)result.x0;
}

/*
 * KEEL_FN_CHANNEL_NOTIFY: rings `channel`'s doorbell at its member `member` (or at
 * KEEL_EVERY_OTHER_MEMBER). Returns the number of members rung, or a negative error.
 */
static inline int64_t keel_channel_notify(uint64_t channel, uint64_t member)
{
	return (int64_t)keel_hvc(KEEL_FN_CHANNEL_NOTIFY, channel, member, 0).x0;
}

#endif /* __aarch64__ && !__ASSEMBLER__ */

#endif /* KEEL_H */
