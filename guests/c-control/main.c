/*
 * main.c - Keel's sample real-time partition in C (freestanding, no libc), on keel.h alone:
 * the control application of guests/rt-control, whose three periodic tasks (1 ms, 5 ms and
 * 20 ms) are created by Keel as vCPUs of this partition and scheduled by Keel itself, with
 * enforced budgets.
 *
 * vCPU 0 calibrates the work loop, creates the tasks on pCPU TASK_PCPU and launches them with
 * a common first release (phase alignment), then sleeps (virtual timer + WFI, so that Keel
 * gives the pCPU away) and prints once a second what each task counted and what Keel counted
 * (KEEL_FN_TASK_STATS):
 *
 *   c-control: t=1 s task 0 (1000 us): at_us=1000006 jobs=1001 max_jitter_ns=... max_response_ns=... | keel: jobs=1001 misses=0 overruns=0 worst_response_ns=... worst_lateness_ns=...
 *
 * (at_us: when Keel's statistics were read, from the first release.) After SECONDS seconds it
 * prints "c-control: done after 3 s" and powers the partition off (PSCI SYSTEM_OFF).
 *
 * Everything runs at EL1 with the MMU off and interrupts masked: memory is Device memory (no
 * unaligned access, hence -mstrict-align) and the timer's interrupt is taken by polling,
 * through the GIC the device tree names (a GICv3, or on GICv2 hardware a GICv2; keel.h).
 */
#include <stdint.h>

#include "keel.h"

/* How long the application runs before it powers off. */
#define SECONDS 3
/* The pCPU of the tasks: this partition's own (configs/tests/tasks-c.toml). */
#define TASK_PCPU 1
/* Delay from launching to the tasks' first release. */
#define FIRST_RELEASE_US 5000

/* A task's timing and work per job, in microseconds, and its fixed priority. */
struct plan {
	uint64_t period_us;
	uint64_t budget_us;
	uint64_t work_us;
	uint8_t priority;
};

/* The three control tasks: fast inner loop, middle loop, slow supervisor (U = 0.55). */
static const struct plan plans[] = {
	{ .period_us = 1000, .budget_us = 200, .work_us = 100, .priority = 30 },
	{ .period_us = 5000, .budget_us = 1000, .work_us = 500, .priority = 20 },
	{ .period_us = 20000, .budget_us = 3000, .work_us = 2000, .priority = 10 },
};
#define TASKS (sizeof(plans) / sizeof(plans[0]))

/* Each task's stack. */
#define STACK_SIZE 8192
static uint8_t stacks[TASKS][STACK_SIZE] __attribute__((aligned(16)));

/* What a task records about its jobs (counter ticks); written by the task, read by vCPU 0. */
struct record {
	uint64_t jobs;
	uint64_t max_jitter;
	uint64_t max_response;
	uint64_t wait_errors;
};
static struct record records[TASKS];

/* Set by vCPU 0 before it launches the tasks: their first release, and loop iterations per job. */
static uint64_t phase;
static uint64_t iterations[TASKS];

/* The assembly entry of a task (start.S): sets SCTLR_EL1 and VBAR_EL1, then task_main(x0). */
void task_entry(uint64_t index);
void task_main(uint64_t index) __attribute__((noreturn));
void main(uint64_t device_tree) __attribute__((noreturn));

static uint64_t load(const uint64_t *at)
{
	return __atomic_load_n(at, __ATOMIC_ACQUIRE);
}

static void store(uint64_t *at, uint64_t value)
{
	__atomic_store_n(at, value, __ATOMIC_RELEASE);
}

/* The EL1 virtual timer (Arm ARM D11.2). */

static uint64_t counter(void)
{
	uint64_t value;

	__asm__ volatile("isb\n\tmrs %0, cntvct_el0" : "=r"(value));
	return value;
}

static uint64_t frequency(void)
{
	uint64_t value;

	__asm__ volatile("mrs %0, cntfrq_el0" : "=r"(value));
	return value ? value : 1;
}

/* Counter ticks in `us` microseconds. */
static uint64_t ticks_from_us(uint64_t us)
{
	return us * frequency() / 1000000;
}

/* Nanoseconds in `ticks`. */
static uint64_t ns_from_ticks(uint64_t ticks)
{
	return ticks * 1000000000 / frequency();
}

/* The emulated PL011 (PrimeCell UART TRM, 3.2): data, flags (TXFF = bit 5), control. */

#define UART_DR 0x00
#define UART_FR 0x18
#define UART_CR 0x30
#define UART_FR_TX_FIFO_FULL (1u << 5)
#define UART_CR_ENABLE (1u << 0 | 1u << 8 | 1u << 9)

static volatile uint32_t *uart(uint32_t offset)
{
	return (volatile uint32_t *)(uintptr_t)(KEEL_UART_BASE + offset);
}

static void put_char(char c)
{
	while (*uart(UART_FR) & UART_FR_TX_FIFO_FULL)
		;
	*uart(UART_DR) = (uint8_t)c;
}

static void put_str(const char *text)
{
	while (*text)
		put_char(*text++);
}

static void put_u64(uint64_t value)
{
	char digits[20];
	int n = 0;

	do {
		digits[n++] = (char)('0' + value % 10);
		value /= 10;
	} while (value);
	while (n)
		put_char(digits[--n]);
}

static void put_i64(int64_t value)
{
	if (value < 0) {
		put_char('-');
		put_u64(-(uint64_t)value);
	} else {
		put_u64((uint64_t)value);
	}
}

static void put_hex(uint64_t value)
{
	int shift = 60;

	put_str("0x");
	while (shift > 0 && !(value >> shift))
		shift -= 4;
	for (; shift >= 0; shift -= 4)
		put_char("0123456789abcdef"[value >> shift & 0xf]);
}

/* A task service's refusal, by the name of its code in keel.h. */
static void put_error(int64_t code)
{
	switch (code) {
	case KEEL_NOT_SUPPORTED:
		put_str("KEEL_NOT_SUPPORTED");
		break;
	case KEEL_INVALID_PARAMETERS:
		put_str("KEEL_INVALID_PARAMETERS");
		break;
	case KEEL_DENIED:
		put_str("KEEL_DENIED");
		break;
	case KEEL_ALREADY_ON:
		put_str("KEEL_ALREADY_ON");
		break;
	case KEEL_INVALID_ADDRESS:
		put_str("KEEL_INVALID_ADDRESS");
		break;
	case KEEL_NO_SUCH_TASK:
		put_str("KEEL_NO_SUCH_TASK");
		break;
	case KEEL_LIMIT_REACHED:
		put_str("KEEL_LIMIT_REACHED");
		break;
	case KEEL_NOT_SCHEDULABLE:
		put_str("KEEL_NOT_SCHEDULABLE");
		break;
	default:
		put_str("error");
		break;
	}
	put_str(" (");
	put_i64(code);
	put_char(')');
}

/*
 * The GIC, as the device tree names it (keel.h: GICv3 or GICv2): enough to wake vCPU 0 from
 * WFI with its virtual timer's interrupt, which stays masked in PSTATE and is acknowledged by
 * polling. Keel's GICv3 at its fixed addresses until main() has read the tree.
 */
static struct keel_gic gic = { KEEL_GIC_V3, KEEL_GICD_BASE, KEEL_GICR_BASE, KEEL_GICR_STRIDE };

/*
 * Sleeps until the counter reaches `at`: WFI, so that Keel gives the pCPU to the tasks, woken
 * by the virtual timer. The timer is disabled BEFORE its interrupt is acknowledged: its
 * condition holds until then, and acknowledged while still asserted it would be pending
 * again at once.
 */
static void sleep_until(uint64_t at)
{
	static int ready;

	if (!ready) {
		keel_gic_init(&gic, 0);
		keel_gic_enable_private(&gic, 0, KEEL_VTIMER_INTID, 0x80);
		ready = 1;
	}
	__asm__ volatile("msr cntv_cval_el0, %0\n\t"
			 "msr cntv_ctl_el0, %1\n\t"
			 "isb"
			 :
			 : "r"(at), "r"((uint64_t)1));
	while (counter() < at)
		__asm__ volatile("wfi");
	__asm__ volatile("msr cntv_ctl_el0, xzr\n\tisb");
	for (;;) {
		uint32_t acknowledged = keel_gic_acknowledge(&gic);

		if (keel_gic_intid(&gic, acknowledged) >= 1020) /* 1020-1023: nothing pending */
			break;
		keel_gic_end_of_interrupt(&gic, acknowledged);
	}
}

/* `n` iterations of work the compiler cannot remove. */
static void __attribute__((noinline)) work(uint64_t n)
{
	uint64_t x = 0;

	for (uint64_t i = 0; i < n; i++) {
		x = x * 31 + i;
		__asm__ volatile("" : "+r"(x));
	}
}

/* Loop iterations per microsecond: the best of five trials (vCPU 0 is alone on its pCPU yet). */
static uint64_t calibrate(void)
{
	const uint64_t trial = 50000;
	uint64_t best = UINT64_MAX;
	uint64_t per_us;

	for (int i = 0; i < 5; i++) {
		uint64_t start = counter();
		uint64_t spent;

		work(trial);
		spent = counter() - start;
		if (spent < best)
			best = spent;
	}
	per_us = trial * frequency() / ((best ? best : 1) * 1000000);
	return per_us ? per_us : 1;
}

/* One task's body: a job per release, then KEEL_FN_TASK_WAIT. */
void task_main(uint64_t index)
{
	struct record *record = &records[index];
	uint64_t period = ticks_from_us(plans[index].period_us);
	uint64_t first = load(&phase);
	uint64_t n = load(&iterations[index]);

	for (;;) {
		uint64_t start = counter();
		/* The ideal release of this job: the last one at or before `start`. */
		uint64_t release = first + (start > first ? start - first : 0) / period * period;
		uint64_t end;

		work(n);
		end = counter();
		if (start - release > record->max_jitter)
			store(&record->max_jitter, start - release);
		if (end - release > record->max_response)
			store(&record->max_response, end - release);
		store(&record->jobs, record->jobs + 1);
		if (keel_task_wait() != 0)
			store(&record->wait_errors, record->wait_errors + 1);
	}
}

/* One line per task: its own figures and Keel's. */
static void report(uint64_t second, const int64_t handles[TASKS])
{
	for (uint64_t i = 0; i < TASKS; i++) {
		struct keel_task_stats stats = { 0 };
		int64_t answer = keel_task_stats((uint64_t)handles[i], &stats);
		uint64_t at = counter() - load(&phase);

		put_str("c-control: t=");
		put_u64(second);
		put_str(" s task ");
		put_u64(i);
		put_str(" (");
		put_u64(plans[i].period_us);
		put_str(" us): at_us=");
		put_u64(ns_from_ticks(at) / 1000);
		put_str(" jobs=");
		put_u64(load(&records[i].jobs));
		put_str(" max_jitter_ns=");
		put_u64(ns_from_ticks(load(&records[i].max_jitter)));
		put_str(" max_response_ns=");
		put_u64(ns_from_ticks(load(&records[i].max_response)));
		if (load(&records[i].wait_errors)) {
			put_str(" wait_errors=");
			put_u64(load(&records[i].wait_errors));
		}
		put_str(" | keel: ");
		if (answer < 0) {
			put_error(answer);
		} else {
			put_str("jobs=");
			put_u64(stats.jobs);
			put_str(" misses=");
			put_u64(stats.deadline_misses);
			put_str(" overruns=");
			put_u64(stats.overruns);
			put_str(" worst_response_ns=");
			put_u64(stats.worst_response_ns);
			put_str(" worst_lateness_ns=");
			put_u64(stats.worst_lateness_ns);
		}
		put_str("\n");
	}
}

/* vCPU 0, from start.S with the device tree's address (read for the GIC alone). */
void main(uint64_t device_tree)
{
	int64_t handles[TASKS];
	struct keel_gic found;
	uint64_t vcpu = 0;
	uint64_t vm = keel_vm_id(&vcpu);
	int64_t version = keel_version();
	uint64_t per_us;
	uint64_t next;

	*uart(UART_CR) = UART_CR_ENABLE;
	put_str("c-control: Keel ");
	put_u64((uint64_t)version >> 16);
	put_char('.');
	put_u64((uint64_t)version & 0xffff);
	put_str(", vm ");
	put_u64(vm);
	put_str(" vcpu ");
	put_u64(vcpu);
	put_str("\n");
	if (keel_gic_from_device_tree((const void *)(uintptr_t)device_tree, &found) == 0) {
		gic = found;
	} else {
		put_str("c-control: no GIC in the device tree; Keel's GICv3 assumed\n");
	}
	/* On a GICv3 nothing more is said, so that those runs print what they always did. */
	if (gic.version == KEEL_GIC_V2) {
		put_str("c-control: GICv2 (from the device tree): distributor ");
		put_hex(gic.distributor);
		put_str(", CPU interface ");
		put_hex(gic.cpu);
		put_str("\n");
	}

	per_us = calibrate();
	for (uint64_t i = 0; i < TASKS; i++)
		store(&iterations[i], per_us * plans[i].work_us);
	store(&phase, counter() + ticks_from_us(FIRST_RELEASE_US));

	for (uint64_t i = 0; i < TASKS; i++) {
		const struct plan *plan = &plans[i];

		handles[i] = keel_task_create(task_entry, stacks[i] + STACK_SIZE, i,
					      plan->period_us * 1000, plan->budget_us * 1000, 0,
					      TASK_PCPU, plan->priority);
		put_str("c-control: task ");
		put_u64(i);
		if (handles[i] < 0) {
			put_str(": create refused: ");
			put_error(handles[i]);
			put_str("\n");
			keel_system_off();
		}
		put_str(" created: handle ");
		put_hex((uint64_t)handles[i]);
		put_str(", period ");
		put_u64(plan->period_us);
		put_str(" us, budget ");
		put_u64(plan->budget_us);
		put_str(" us, work ");
		put_u64(plan->work_us);
		put_str(" us\n");
	}
	for (uint64_t i = 0; i < TASKS; i++) {
		int64_t answer = keel_task_launch((uint64_t)handles[i], load(&phase));

		if (answer != 0) {
			put_str("c-control: launch ");
			put_hex((uint64_t)handles[i]);
			put_str(" refused: ");
			put_error(answer);
			put_str("\n");
		}
	}
	put_str("c-control: launched, first release in ");
	put_u64(FIRST_RELEASE_US / 1000);
	put_str(" ms; ");
	put_u64(per_us);
	put_str(" iterations per us\n");

	next = load(&phase);
	for (uint64_t second = 1; second <= SECONDS; second++) {
		next += ticks_from_us(1000000);
		sleep_until(next);
		report(second, handles);
	}
	put_str("c-control: done after ");
	put_u64(SECONDS);
	put_str(" s\n");
	keel_system_off();
}
