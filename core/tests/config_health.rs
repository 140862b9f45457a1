//! The rules of `[vm.health]`: each refusal names the VM, the field and what is wrong; a valid
//! table compiles into the policy the hypervisor links in.

#[cfg(not(feature = "std"))]
compile_error!("the configuration rule tests need keel-core's `std` feature (on by default)");

use std::path::{Path, PathBuf};

use keel_core::config::{emit_rust, parse_str, System};
use keel_core::health::{Action, Misses, RestartLimit, Watchdog};

fn guest_image(name: &str) -> Option<PathBuf> {
    (name == "test-guest").then(|| PathBuf::from("tests/fixtures/images/test-guest.bin"))
}

const PATH: &str = "tests/fixtures/health.toml";

/// Two VMs: `rt` (with `rt_extra` in its table) and `mgr` (with `mgr_extra`).
fn compile(rt_extra: &str, mgr_extra: &str) -> Result<System, String> {
    let text = format!(
        r#"
[system]
name = "health"
ram = {{ base = 0x4000_0000, size = "1G" }}
hypervisor = {{ base = 0x4000_0000, size = "32M" }}
pcpus = 3

[[vm]]
name = "rt"
image = {{ guest = "test-guest" }}
memory = {{ base = 0x5000_0000, size = "16M" }}
pcpus = [1]
{rt_extra}

[[vm]]
name = "mgr"
image = {{ guest = "test-guest" }}
memory = {{ base = 0x5100_0000, size = "16M" }}
pcpus = [2]
{mgr_extra}
"#
    );
    parse_str(&text, Path::new(PATH), &guest_image).map_err(|error| error.to_string())
}

const MGR_MESSAGES: &str = "messages = { depth = 4, size = 16, interrupt = 40, from = [\"rt\"] }";

fn refused(rt_extra: &str, mgr_extra: &str, message: &str) {
    assert_eq!(
        compile(rt_extra, mgr_extra).map(|_| ()),
        Err(format!("{PATH}: {message}"))
    );
}

#[test]
fn without_a_table_the_policy_is_todays() {
    let system = compile("", "").unwrap();
    let health = &system.vms[0].health;
    assert_eq!(health.policy, keel_core::health::Policy::DEFAULT);
    assert!(health.managers.is_empty());
}

#[test]
fn a_full_table_compiles_into_the_policy() {
    let system = compile(
        r#"devices = ["watchdog"]
[vm.health]
fault = "restart"
power_off = "restart"
reset = "stop"
watchdog = { period = "500ms", action = "restart" }
misses = { count = 3, window = "1s", action = "ignore" }
restarts = { max = 4, window = "10s" }
managers = ["mgr"]"#,
        MGR_MESSAGES,
    )
    .unwrap();
    let vm = &system.vms[0];
    let policy = &vm.health.policy;
    assert!(vm.watchdog_device);
    assert_eq!(policy.fault, Action::Restart);
    assert_eq!(policy.power_off, Action::Restart);
    assert_eq!(policy.reset, Action::Stop);
    assert_eq!(
        policy.watchdog,
        Some(Watchdog {
            period_ns: 500_000_000,
            action: Action::Restart
        })
    );
    assert_eq!(
        policy.misses,
        Some(Misses {
            count: 3,
            window_ns: 1_000_000_000,
            action: Action::Ignore
        })
    );
    assert_eq!(
        policy.restarts,
        Some(RestartLimit {
            max: 4,
            window_ns: 10_000_000_000
        })
    );
    assert_eq!(vm.health.managers, [1]);
    let rust = emit_rust(&system, &[PathBuf::from("/a.dtb"), PathBuf::from("/b.dtb")]);
    assert!(
        rust.contains(
            "health: ::keel_core::health::Policy { fault: ::keel_core::health::Action::Restart, \
             power_off: ::keel_core::health::Action::Restart, reset: \
             ::keel_core::health::Action::Stop, watchdog: Some(::keel_core::health::Watchdog { \
             period_ns: 500000000, action: ::keel_core::health::Action::Restart }), misses: \
             Some(::keel_core::health::Misses { count: 3, window_ns: 1000000000, action: \
             ::keel_core::health::Action::Ignore }), restarts: \
             Some(::keel_core::health::RestartLimit { max: 4, window_ns: 10000000000 }), \
             managers: &[1] }"
        ),
        "{rust}"
    );
    assert!(rust.contains("watchdog_device: true,"));
}

#[test]
fn the_sp805_alone_needs_no_period() {
    let system = compile(
        "devices = [\"watchdog\"]\n[vm.health]\nwatchdog = { action = \"stop\" }",
        "",
    )
    .unwrap();
    assert_eq!(
        system.vms[0].health.policy.watchdog,
        Some(Watchdog {
            period_ns: 0,
            action: Action::Stop
        })
    );
}

#[test]
fn actions_are_named_and_checked_per_field() {
    refused(
        "[vm.health]\nfault = \"ignore\"",
        "",
        "vm 'rt': health.fault: \"ignore\" is not an action here: give \"stop\" or \"restart\"",
    );
    refused(
        "[vm.health]\nreset = \"reboot\"",
        "",
        "vm 'rt': health.reset: \"reboot\" is not an action here: give \"stop\" or \"restart\"",
    );
    refused(
        "[vm.health]\nmisses = { count = 2, window = \"1s\", action = \"halt\" }",
        "",
        "vm 'rt': health.misses.action: \"halt\" is not an action here: give \"stop\", \
         \"restart\" or \"ignore\"",
    );
}

#[test]
fn the_watchdog_needs_a_period_or_the_device_and_the_device_an_action() {
    refused(
        "[vm.health]\nwatchdog = { action = \"restart\" }",
        "",
        "vm 'rt': health.watchdog: needs a period (KEEL_WATCHDOG's) unless the VM has the \
         emulated watchdog (devices = [\"watchdog\"])",
    );
    refused(
        "devices = [\"watchdog\"]",
        "",
        "vm 'rt': devices: the emulated watchdog needs [vm.health] watchdog = { action = ... }: \
         what its expiry does",
    );
    refused(
        "[vm.health]\nwatchdog = { period = \"0ms\", action = \"restart\" }",
        "",
        "vm 'rt': health.watchdog.period: must be above 0",
    );
}

#[test]
fn counts_and_windows_are_bounded() {
    refused(
        "[vm.health]\nrestarts = { max = 17, window = \"1s\" }",
        "",
        "vm 'rt': health.restarts.max: 17 is outside 1..=16",
    );
    refused(
        "[vm.health]\nmisses = { count = 0, window = \"1s\", action = \"stop\" }",
        "",
        "vm 'rt': health.misses.count: 0 is outside 1..=16",
    );
    refused(
        "[vm.health]\nrestarts = { max = 2, window = \"0s\" }",
        "",
        "vm 'rt': health.restarts.window: must be above 0",
    );
}

#[test]
fn managers_are_other_vms_that_can_take_the_notices() {
    refused(
        "[vm.health]\nmanagers = [\"nobody\"]",
        "",
        "vm 'rt': health.managers: no VM is named 'nobody'",
    );
    refused(
        "[vm.health]\nmanagers = [\"rt\"]",
        "",
        "vm 'rt': health.managers: 'rt' is this VM: a VM's manager is another VM",
    );
    refused(
        "[vm.health]\nmanagers = [\"mgr\", \"mgr\"]",
        MGR_MESSAGES,
        "vm 'rt': health.managers: 'mgr' is listed twice",
    );
    refused(
        "[vm.health]\nmanagers = [\"mgr\"]",
        "",
        "vm 'mgr': messages: manages 'rt', whose health notices come as messages of 16 bytes: \
         give it a messages table whose size is at least 16",
    );
    refused(
        "[vm.health]\nmanagers = [\"mgr\"]",
        "messages = { depth = 4, size = 8, interrupt = 40, from = [\"rt\"] }",
        "vm 'mgr': messages: manages 'rt', whose health notices come as messages of 16 bytes: \
         give it a messages table whose size is at least 16",
    );
}

#[test]
fn a_managers_messages_may_name_no_sender() {
    // Keel's notices are all its queue takes: no VM need be allowed to send to it.
    let system = compile(
        "[vm.health]\nmanagers = [\"mgr\"]",
        "messages = { depth = 4, size = 16, interrupt = 40, from = [] }",
    )
    .unwrap();
    assert!(system.vms[1].messages.as_ref().unwrap().senders.is_empty());
    // A VM that manages none still needs a sender.
    refused(
        "",
        "messages = { depth = 4, size = 16, interrupt = 40, from = [] }",
        "vm 'mgr': messages.from: must name at least one VM (or the VM must manage one, in its \
         `health.managers`): with no sender, its queues would stay empty",
    );
}
