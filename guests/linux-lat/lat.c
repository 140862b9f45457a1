/*
 * keel-lat: the lmbench-style measurements of the Xen on ARM paper's tables I and II
 * (../shared/seeds/002_*), for Linux on arm64: null, read and write system calls, pipe,
 * UNIX-socket and SysV-semaphore round trips between two processes, fork+exit, fork+execve,
 * signal delivery to a handler, and pipe and UNIX-socket bandwidth. lmbench itself is not
 * packaged by Debian; this is a small program of the same measurements, timed with the
 * guest's own monotonic clock (nanoseconds) over many iterations each.
 *
 * Freestanding: raw system calls, no C library (Debian's cross compiler comes without the
 * arm64 libc headers and archives), so xtask builds it with the compiler it already installs.
 * Output, one line per measurement, on standard output:
 *   KEEL-LAT <name> <nanoseconds per operation>
 *   KEEL-BW <name> <bytes per second>
 * `keel-lat exit` exits at once (the image fork+execve runs); `keel-lat bw START WINDOW`
 * measures the two bandwidths alone, in windows of the counter that several VMs share
 * (table II: several VMs at once); `keel-lat now` prints the monotonic clock in nanoseconds
 * (for shell scripts to time commands: busybox's date has no %N).
 */

typedef unsigned long u64;

enum {
    SYS_openat = 56, SYS_close = 57, SYS_pipe2 = 59, SYS_read = 63, SYS_write = 64,
    SYS_exit_group = 94, SYS_clock_gettime = 113, SYS_kill = 129, SYS_rt_sigaction = 134,
    SYS_getpid = 172, SYS_getppid = 173, SYS_semget = 190, SYS_semctl = 191, SYS_semop = 193,
    SYS_socketpair = 199, SYS_clone = 220, SYS_execve = 221, SYS_wait4 = 260,
};

static long syscall6(long n, long a, long b, long c, long d, long e, long f)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    register long x3 __asm__("x3") = d;
    register long x4 __asm__("x4") = e;
    register long x5 __asm__("x5") = f;
    __asm__ volatile("svc 0"
                     : "+r"(x0)
                     : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
                     : "memory");
    return x0;
}

#define sys(n, a, b, c) syscall6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)

static void put(const char *s)
{
    long n = 0;
    while (s[n])
        n++;
    sys(SYS_write, 1, s, n);
}

static void put_u64(u64 v)
{
    char digits[24];
    int i = sizeof digits - 1;
    digits[i] = 0;
    do {
        digits[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    put(&digits[i]);
}

static void die(const char *what, long error)
{
    put("keel-lat: ");
    put(what);
    put(" failed, error ");
    put_u64((u64)-error);
    put("\n");
    sys(SYS_exit_group, 1, 0, 0);
}

static long check(const char *what, long result)
{
    if (result < 0 && result > -4096)
        die(what, result);
    return result;
}

struct timespec { long sec; long nsec; };

static u64 now_ns(void)
{
    struct timespec t;
    check("clock_gettime", sys(SYS_clock_gettime, 1 /* CLOCK_MONOTONIC */, &t, 0));
    return (u64)t.sec * 1000000000ul + (u64)t.nsec;
}

static void report_latency(const char *name, u64 start, u64 iterations)
{
    put("KEEL-LAT ");
    put(name);
    put(" ");
    put_u64((now_ns() - start) / iterations);
    put("\n");
}

static long fork_process(void)
{
    return check("fork", syscall6(SYS_clone, 17 /* SIGCHLD */, 0, 0, 0, 0, 0));
}

static void wait_child(long pid)
{
    int status;
    check("wait4", syscall6(SYS_wait4, pid, (long)&status, 0, 0, 0, 0));
}

static char *const no_environment[] = { 0 };
static char *const exit_arguments[] = { "keel-lat", "exit", 0 };
static const char *self_path;

static unsigned char buffer[65536];

static void exact_read(long fd, unsigned char *to, long length)
{
    while (length > 0) {
        long got = check("read", sys(SYS_read, fd, to, length));
        if (got == 0)
            die("read (end of file)", -5);
        to += got;
        length -= got;
    }
}

/* Round trips of one byte through `to_child`/`from_child` (pipes or one socket pair each way). */
static void round_trips(const char *name, long parent_out, long parent_in, long child_in,
                        long child_out, u64 iterations)
{
    long pid = fork_process();
    if (pid == 0) {
        for (u64 i = 0; i < iterations; i++) {
            exact_read(child_in, buffer, 1);
            check("write", sys(SYS_write, child_out, buffer, 1));
        }
        sys(SYS_exit_group, 0, 0, 0);
    }
    u64 start = now_ns();
    for (u64 i = 0; i < iterations; i++) {
        check("write", sys(SYS_write, parent_out, buffer, 1));
        exact_read(parent_in, buffer, 1);
    }
    report_latency(name, start, iterations);
    wait_child(pid);
}

/* `total` bytes from a child to this process through `reader`/`writer`, 64 KiB at a time. */
static void bandwidth(const char *name, long reader, long writer, u64 total)
{
    u64 start = now_ns();
    long pid = fork_process();
    if (pid == 0) {
        for (u64 sent = 0; sent < total; sent += sizeof buffer) {
            long left = sizeof buffer;
            while (left > 0)
                left -= check("write", sys(SYS_write, writer, buffer + sizeof buffer - left, left));
        }
        sys(SYS_exit_group, 0, 0, 0);
    }
    u64 received = 0;
    while (received < total) {
        long got = check("read", sys(SYS_read, reader, buffer, sizeof buffer));
        if (got == 0)
            die("read (end of file)", -5);
        received += (u64)got;
    }
    u64 elapsed = now_ns() - start;
    wait_child(pid);
    put("KEEL-BW ");
    put(name);
    put(" ");
    put_u64(total * 1000000000ul / (elapsed ? elapsed : 1));
    put("\n");
}

struct sembuf { unsigned short number; short op; short flags; };

static void semaphore_round_trips(u64 iterations)
{
    long id = check("semget", sys(SYS_semget, 0 /* IPC_PRIVATE */, 2, 01000 | 0600));
    struct sembuf up0 = { 0, 1, 0 }, down0 = { 0, -1, 0 }, up1 = { 1, 1, 0 }, down1 = { 1, -1, 0 };
    long pid = fork_process();
    if (pid == 0) {
        for (u64 i = 0; i < iterations; i++) {
            check("semop", sys(SYS_semop, id, &down0, 1));
            check("semop", sys(SYS_semop, id, &up1, 1));
        }
        sys(SYS_exit_group, 0, 0, 0);
    }
    u64 start = now_ns();
    for (u64 i = 0; i < iterations; i++) {
        check("semop", sys(SYS_semop, id, &up0, 1));
        check("semop", sys(SYS_semop, id, &down1, 1));
    }
    report_latency("sysv-semaphore", start, iterations);
    wait_child(pid);
    check("semctl", sys(SYS_semctl, id, 0, 0 /* IPC_RMID */));
}

static volatile u64 signals_caught;

static void on_signal(int number)
{
    (void)number;
    signals_caught++;
}

/* The kernel's struct sigaction on arm64; without SA_RESTORER the vDSO returns from it. */
struct kernel_sigaction { void (*handler)(int); unsigned long flags; void *restorer; u64 mask; };

static void signal_handler(u64 iterations)
{
    struct kernel_sigaction action = { on_signal, 0, 0, 0 };
    check("rt_sigaction", syscall6(SYS_rt_sigaction, 10 /* SIGUSR1 */, (long)&action, 0, 8, 0, 0));
    long self = sys(SYS_getpid, 0, 0, 0);
    u64 start = now_ns();
    for (u64 i = 0; i < iterations; i++)
        check("kill", sys(SYS_kill, self, 10, 0));
    report_latency("signal-handler", start, iterations);
    if (signals_caught != iterations)
        die("signal count", -22);
}

static u64 counter(void)
{
    u64 value;
    __asm__ volatile("isb\n mrs %0, cntvct_el0" : "=r"(value));
    return value;
}

static u64 counter_frequency(void)
{
    u64 value;
    __asm__ volatile("mrs %0, cntfrq_el0" : "=r"(value));
    return value;
}

/* Sleeps, a millisecond at a time, until the counter (the same in every VM) reaches `at`. */
static void sleep_until(u64 at)
{
    struct timespec millisecond = { 0, 1000000 };
    while (counter() < at)
        sys(101 /* nanosleep */, &millisecond, 0, 0);
}

/*
 * Bytes from a child through `reader`/`writer` in the counter window [start, end): several
 * VMs started with the same window measure at the same time. The child writes until the
 * reader is closed (SIGPIPE ends it).
 */
static void bandwidth_window(const char *name, long reader, long writer, u64 start, u64 end)
{
    long pid = fork_process();
    if (pid == 0) {
        sys(SYS_close, reader, 0, 0);
        for (;;)
            check("write", sys(SYS_write, writer, buffer, sizeof buffer));
    }
    sys(SYS_close, writer, 0, 0);
    sleep_until(start);
    u64 received = 0;
    for (;;) {
        long got = check("read", sys(SYS_read, reader, buffer, sizeof buffer));
        if (got == 0 || counter() >= end)
            break;
        received += (u64)got;
    }
    sys(SYS_close, reader, 0, 0);
    wait_child(pid);
    put("KEEL-BW ");
    put(name);
    put(" ");
    put_u64(received * counter_frequency() / (end - start));
    put("\n");
}

static u64 decimal(const char *text)
{
    u64 value = 0;
    while (*text >= '0' && *text <= '9')
        value = value * 10 + (u64)(*text++ - '0');
    return value;
}

/* `keel-lat bw START WINDOW` (milliseconds of the counter): the pipe's window, then the UNIX
 * socket's a window later. */
static void bandwidths(const char *start_ms, const char *window_ms)
{
    u64 per_ms = counter_frequency() / 1000;
    u64 start = decimal(start_ms) * per_ms, window = decimal(window_ms) * per_ms;
    if (window == 0)
        die("window", -22);
    if (start < counter())
        start = counter();
    int pipe_ends[2], pair[2];
    check("pipe2", sys(SYS_pipe2, pipe_ends, 0, 0));
    bandwidth_window("pipe", pipe_ends[0], pipe_ends[1], start, start + window);
    check("socketpair", syscall6(SYS_socketpair, 1 /* AF_UNIX */, 1 /* SOCK_STREAM */, 0,
                                 (long)pair, 0, 0));
    bandwidth_window("unix-socket", pair[0], pair[1], start + 2 * window, start + 3 * window);
}

static void run(void)
{
    u64 start = now_ns();
    for (u64 i = 0; i < 20000; i++)
        sys(SYS_getppid, 0, 0, 0);
    report_latency("null-syscall", start, 20000);

    long zero = check("open /dev/zero", sys(SYS_openat, -100, "/dev/zero", 0));
    start = now_ns();
    for (u64 i = 0; i < 10000; i++)
        check("read", sys(SYS_read, zero, buffer, 1));
    report_latency("read-syscall", start, 10000);
    sys(SYS_close, zero, 0, 0);

    long null = check("open /dev/null", sys(SYS_openat, -100, "/dev/null", 1));
    start = now_ns();
    for (u64 i = 0; i < 10000; i++)
        check("write", sys(SYS_write, null, buffer, 1));
    report_latency("write-syscall", start, 10000);
    sys(SYS_close, null, 0, 0);

    int there[2], back[2];
    check("pipe2", sys(SYS_pipe2, there, 0, 0));
    check("pipe2", sys(SYS_pipe2, back, 0, 0));
    round_trips("pipe", there[1], back[0], there[0], back[1], 2000);
    bandwidth("pipe", back[0], back[1], 16ul << 20);
    for (int i = 0; i < 2; i++) {
        sys(SYS_close, there[i], 0, 0);
        sys(SYS_close, back[i], 0, 0);
    }

    int pair[2];
    check("socketpair", syscall6(SYS_socketpair, 1 /* AF_UNIX */, 1 /* SOCK_STREAM */, 0,
                                 (long)pair, 0, 0));
    round_trips("unix-socket", pair[0], pair[0], pair[1], pair[1], 2000);
    bandwidth("unix-socket", pair[0], pair[1], 16ul << 20);
    sys(SYS_close, pair[0], 0, 0);
    sys(SYS_close, pair[1], 0, 0);

    semaphore_round_trips(2000);
    signal_handler(5000);

    start = now_ns();
    for (u64 i = 0; i < 100; i++) {
        long pid = fork_process();
        if (pid == 0)
            sys(SYS_exit_group, 0, 0, 0);
        wait_child(pid);
    }
    report_latency("fork+exit", start, 100);

    start = now_ns();
    for (u64 i = 0; i < 50; i++) {
        long pid = fork_process();
        if (pid == 0) {
            sys(SYS_execve, self_path, exit_arguments, no_environment);
            sys(SYS_exit_group, 127, 0, 0);
        }
        wait_child(pid);
    }
    report_latency("fork+execve", start, 50);
}

void start_c(long *stack)
{
    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    if (argc > 1 && argv[1][0] == 'e')
        sys(SYS_exit_group, 0, 0, 0);
    if (argc > 1 && argv[1][0] == 'n') {
        put_u64(now_ns());
        put("\n");
        sys(SYS_exit_group, 0, 0, 0);
    }
    self_path = argv[0];
    if (argc > 3 && argv[1][0] == 'b')
        bandwidths(argv[2], argv[3]);
    else
        run();
    sys(SYS_exit_group, 0, 0, 0);
}

__asm__(".global _start\n"
        "_start:\n"
        "    mov x0, sp\n"
        "    bl start_c\n"
        "    b .\n");
