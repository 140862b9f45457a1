//! The configuration compiler's rejection rules: one fixture and one exact-message test per rule.

// Without `std` (the default feature) there is no configuration compiler to test: refuse to
// build rather than run zero rule tests and report success.
#[cfg(not(feature = "std"))]
compile_error!("the configuration rule tests need keel-core's `std` feature (on by default)");

use std::path::{Path, PathBuf};

use keel_core::config::{
    emit_rust, load, parse_str, Channel, ChannelMember, ImageSource, Messages, System, Tasks,
};
use keel_core::sched::{Params, Policy, Reservation};
use keel_core::system::WfiPolicy;

/// Cargo runs integration tests from the crate root, so relative paths keep messages exact.
const FIXTURES: &str = "tests/fixtures";

/// The workspace guests the fixtures may name: one built, one not.
fn guest_image(name: &str) -> Option<PathBuf> {
    match name {
        // The hostile guest and the sample real-time partitions (Rust and C) are small arm64
        // Images like the test guest: the same fixture fits.
        "test-guest" | "hostile" | "rt-control" | "c-control" => {
            Some(PathBuf::from("tests/fixtures/images/test-guest.bin"))
        }
        "unbuilt-guest" => Some(PathBuf::from("tests/fixtures/images/not-built.bin")),
        _ => None,
    }
}

fn load_fixture(name: &str) -> System {
    let path = Path::new(FIXTURES).join(name);
    load(&path, &guest_image).unwrap_or_else(|error| panic!("{name} rejected: {error}"))
}

/// Asserts that fixture `name` is rejected with exactly `message` (after the `<path>: ` prefix,
/// or the `<path>:` prefix for TOML errors that carry their own `line:column: `).
fn assert_rejected(name: &str, message: &str) {
    let path = Path::new(FIXTURES).join(name);
    let error = match load(&path, &guest_image) {
        Ok(_) => panic!("{name} was accepted"),
        Err(error) => error,
    };
    let separator = if message.starts_with(|c: char| c.is_ascii_digit()) {
        ":"
    } else {
        ": "
    };
    assert_eq!(
        error.to_string(),
        format!("{}{separator}{message}", path.display())
    );
}

/// The Rust `system` is emitted as, each VM's device tree at `/out/<name>.dtb`.
fn emitted(system: &System) -> String {
    let dtbs: Vec<PathBuf> = system
        .vms
        .iter()
        .map(|vm| PathBuf::from(format!("/out/{}.dtb", vm.name)))
        .collect();
    emit_rust(system, &dtbs)
}

/// Asserts that the Rust `system` is emitted as holds each of `expected`, and parses.
fn assert_emits(system: &System, expected: &[&str]) {
    let source = emitted(system);
    for expected in expected {
        assert!(
            source.contains(expected),
            "missing {expected:?} in:\n{source}"
        );
    }
    syn::parse_file(&source).expect("emitted Rust parses");
}

// ---- Accepted configurations -------------------------------------------------------------

#[test]
fn valid_system_resolves_every_field() {
    let system = load_fixture("valid.toml");
    assert_eq!(system.name, "fixture");
    assert_eq!(
        (system.ram_base, system.ram_size),
        (0x4000_0000, 0x4000_0000)
    );
    assert_eq!(
        (system.hypervisor_base, system.hypervisor_size),
        (0x4000_0000, 0x200_0000)
    );
    assert_eq!(system.pcpus, 4);
    assert_eq!(system.vms.len(), 2);

    let rt_a = &system.vms[0];
    assert_eq!(rt_a.id, 0);
    assert_eq!(rt_a.name, "rt-a");
    assert_eq!(
        (rt_a.phys, rt_a.ipa, rt_a.size),
        (0x5000_0000, 0x4000_0000, 0x100_0000)
    );
    assert_eq!(rt_a.pcpus, [1]);
    assert_eq!(rt_a.image, ImageSource::Guest("test-guest".into()));
    assert!(rt_a.image_path.is_absolute());
    assert!(rt_a
        .image_path
        .ends_with("tests/fixtures/images/test-guest.bin"));
    // A raw binary runs from the base of guest memory; the DTB takes the last 2 MiB.
    assert_eq!(rt_a.image_ipa, 0x4000_0000);
    assert_eq!(rt_a.dtb_ipa, 0x40e0_0000);
    assert!(rt_a.console);
    assert!(!rt_a.raw_console, "escaped unless asked for");
    assert_eq!(rt_a.wfi, WfiPolicy::Native);
    assert!(!rt_a.pmu, "the PMU is hidden unless asked for");
    assert!(
        !rt_a.monitor_masked_stretch,
        "only the pCPUs it alone uses, unless made a monitor"
    );
    assert_eq!(rt_a.cmdline, "keel.mode=ticks");

    let rt_b = &system.vms[1];
    assert_eq!(
        (rt_b.id, rt_b.phys, rt_b.pcpus.as_slice()),
        (1, 0x5100_0000, &[2][..])
    );
    assert!(rt_b.raw_console);
    assert_eq!(rt_b.wfi, WfiPolicy::Trap);
    assert!(rt_b.pmu);
    assert!(rt_b.monitor_masked_stretch);
    assert_eq!(rt_b.cmdline, "");
}

#[test]
fn valid_system_is_pinned_with_the_default_switch_cost() {
    let system = load_fixture("valid.toml");
    assert_eq!(system.policies, [Policy::Pinned; 4]);
    assert_eq!(system.switch_cost_ns, 2_000);
    for vm in &system.vms {
        assert_eq!(vm.sched, [Params::default()]);
    }
}

#[test]
fn shared_pcpus_resolve_policies_and_parameters_in_nanoseconds() {
    let system = load_fixture("valid-shared.toml");
    assert_eq!(system.switch_cost_ns, 5_000);
    assert_eq!(
        system.policies,
        [
            Policy::Pinned,
            Policy::FixedPriority { quantum: 500_000 },
            Policy::Edf { quantum: 1_000_000 },
            Policy::RoundRobin { quantum: 2_000_000 },
        ]
    );
    let reservation = |period, budget, deadline| {
        Some(Reservation {
            period,
            budget,
            deadline,
        })
    };
    assert_eq!(
        system.vms[0].sched,
        [
            Params {
                priority: 10,
                reservation: reservation(1_000_000, 200_000, 1_000_000),
            },
            Params {
                priority: 0,
                reservation: reservation(2_000_000, 500_000, 1_500_000),
            },
        ]
    );
    assert_eq!(
        system.vms[1].sched,
        [
            Params {
                priority: 5,
                reservation: reservation(10_000_000, 2_000_000, 10_000_000),
            },
            Params::default(),
        ]
    );
    let best_effort = Params {
        priority: 1,
        reservation: None,
    };
    assert_eq!(
        system.vms[2].pcpus,
        [1, 3, 3],
        "a shared pCPU takes several vCPUs"
    );
    assert_eq!(
        system.vms[2].sched,
        [best_effort, Params::default(), Params::default()]
    );
}

#[test]
fn shared_pcpus_are_emitted() {
    let system = load_fixture("valid-shared.toml");
    assert_emits(
        &system,
        &[
            "policies: &[::keel_core::sched::Policy::Pinned, \
             ::keel_core::sched::Policy::FixedPriority { quantum: 500000 }, \
             ::keel_core::sched::Policy::Edf { quantum: 1000000 }, \
             ::keel_core::sched::Policy::RoundRobin { quantum: 2000000 }],",
            "switch_cost_ns: 5000,",
            "pcpus: &[1, 3, 3],",
            "sched: &[::keel_core::sched::Params { priority: 10, reservation: \
             Some(::keel_core::sched::Reservation { period: 1000000, budget: 200000, deadline: 1000000 }) }, \
             ::keel_core::sched::Params { priority: 0, reservation: \
             Some(::keel_core::sched::Reservation { period: 2000000, budget: 500000, deadline: 1500000 }) }],",
            "sched: &[::keel_core::sched::Params { priority: 1, reservation: None }, \
             ::keel_core::sched::Params { priority: 0, reservation: None }, \
             ::keel_core::sched::Params { priority: 0, reservation: None }],",
        ],
    );
}

#[test]
fn tasks_resolve_to_a_grant_with_managers_as_vm_ids() {
    let system = load_fixture("valid-tasks.toml");
    assert_eq!(
        system.vms[0].tasks,
        Some(Tasks {
            max: 3,
            utilisation_ppm: 125_000,
            managers: vec![2, 1],
        }),
        "managers in the order written, a later VM included"
    );
    assert_eq!(
        system.vms[1].tasks,
        Some(Tasks {
            max: 6,
            utilisation_ppm: 300_000,
            managers: vec![],
        }),
        "two vCPUs and six tasks make the most a VM may have"
    );
    assert_eq!(system.vms[2].tasks, None);
    assert_eq!(load_fixture("valid-shared.toml").vms[0].tasks, None);
}

#[test]
fn tasks_are_emitted_as_task_grants() {
    let system = load_fixture("valid-tasks.toml");
    assert_emits(
        &system,
        &[
            "tasks: Some(::keel_core::system::TaskGrant { max: 3, utilisation_ppm: 125000, \
             managers: &[2, 1] }),",
            "tasks: Some(::keel_core::system::TaskGrant { max: 6, utilisation_ppm: 300000, \
             managers: &[] }),",
            "tasks: None,",
        ],
    );
}

/// `valid-tasks.toml` with `old` replaced by `new`, compiled.
fn valid_tasks_with(old: &str, new: &str) -> Result<System, String> {
    let path = Path::new(FIXTURES).join("valid-tasks.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text.matches(old).count(), 1, "{old:?}");
    parse_str(&text.replace(old, new), &path, &guest_image).map_err(|error| error.to_string())
}

#[test]
fn task_allowances_may_fill_a_pcpu_exactly() {
    // Fixed-priority pCPU 1: rt-a vCPU 0 0.21 + rt-b vCPU 0 0.201 + rt-a tasks 0.125, so
    // rt-b's allowance may be 46.4% and not one part per million more.
    let rt_b = "tasks = { max = 6, utilisation = \"30%\" }";
    let system = valid_tasks_with(rt_b, "tasks = { max = 6, utilisation = \"46.4%\" }").unwrap();
    assert_eq!(
        system.vms[1].tasks.as_ref().unwrap().utilisation_ppm,
        464_000
    );
    assert_eq!(
        valid_tasks_with(rt_b, "tasks = { max = 6, utilisation = \"46.4001%\" }").unwrap_err(),
        "tests/fixtures/valid-tasks.toml: pCPU 1: fixed-priority utilisation 1.01 > 1 \
         (vm 'rt-a' vCPU 0: 0.21, vm 'rt-b' vCPU 0: 0.21, vm 'rt-a' tasks: 0.13, \
         vm 'rt-b' tasks: 0.47)"
    );
}

#[test]
fn messages_resolve_to_grants_laid_out_in_one_pool() {
    let system = load_fixture("valid-messages.toml");
    assert_eq!(
        system.vms[0].messages,
        Some(Messages {
            depth: 8,
            size: 256,
            intid: 9,
            senders: vec![2, 1],
            pool_offset: 0,
        }),
        "senders in the order written, later VMs included"
    );
    assert_eq!(system.vms[1].messages, None);
    assert_eq!(
        system.vms[2].messages,
        Some(Messages {
            depth: 4,
            size: 64,
            intid: 40,
            senders: vec![0, 2],
            // rt-a's two vCPUs and three tasks: five rings of 8 * (8 + 256) bytes.
            pool_offset: 10_560,
        }),
        "the VM itself may send, and its rings follow rt-a's (rt-b has none)"
    );
    // be's three vCPUs: three rings of 4 * (8 + 64) bytes.
    assert_eq!(system.message_pool_len(), 10_560 + 864);
    assert_eq!(load_fixture("valid-tasks.toml").message_pool_len(), 0);
}

#[test]
fn messages_are_emitted_as_message_grants_and_the_pool_size() {
    let system = load_fixture("valid-messages.toml");
    assert_emits(
        &system,
        &[
            "messages: Some(::keel_core::system::MessageGrant { depth: 8, size: 256, intid: 9, \
             senders: &[2, 1], pool_offset: 0 }),",
            "messages: None,",
            "messages: Some(::keel_core::system::MessageGrant { depth: 4, size: 64, intid: 40, \
             senders: &[0, 2], pool_offset: 10560 }),",
            "\n};\npub const MESSAGE_POOL: usize = 11424;\n",
        ],
    );
}

/// `valid-messages.toml` with each `(old, new)` of `replacements` made, compiled.
fn valid_messages_with_all(replacements: &[(&str, &str)]) -> Result<System, String> {
    let path = Path::new(FIXTURES).join("valid-messages.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (old, new) in replacements {
        assert_eq!(text.matches(old).count(), 1, "{old:?}");
        text = text.replace(old, new);
    }
    parse_str(&text, &path, &guest_image).map_err(|error| error.to_string())
}

/// `valid-messages.toml` with `old` replaced by `new`, compiled.
fn valid_messages_with(old: &str, new: &str) -> Result<System, String> {
    valid_messages_with_all(&[(old, new)])
}

#[test]
fn message_queues_may_fill_the_pool_exactly() {
    // rt-a: five rings of 64 * (8 + 504) bytes, 163840; be: three of 256 * (8 + 1144), 884736;
    // together 1 MiB, and one byte more per message of be's is refused.
    let with_sizes = |be_size: u32| {
        valid_messages_with_all(&[
            ("depth = 8, size = 256", "depth = 64, size = 504"),
            (
                "depth = 4, size = 64",
                &format!("depth = 256, size = {be_size}"),
            ),
        ])
    };
    let system = with_sizes(1144).unwrap();
    assert_eq!(
        system.vms[2].messages.as_ref().unwrap().pool_offset,
        163_840
    );
    assert_eq!(system.message_pool_len(), 1 << 20);
    assert_eq!(
        with_sizes(1145).unwrap_err(),
        "tests/fixtures/valid-messages.toml: vm 'be': messages: the message queues take \
         1049344 bytes in all, above Keel's 1048576"
    );
}

#[test]
fn the_console_interrupt_is_free_without_the_console() {
    let system = valid_messages_with_all(&[
        (
            "pcpus = [1, 3, 3]\ndevices = [\"console\"]",
            "pcpus = [1, 3, 3]\ndevices = []",
        ),
        ("interrupt = 40", "interrupt = 33"),
    ])
    .unwrap();
    assert!(!system.vms[2].console);
    assert_eq!(system.vms[2].messages.as_ref().unwrap().intid, 33);
}

#[test]
fn linux_image_loads_at_text_offset() {
    let system = load_fixture("valid-linux.toml");
    let vm = &system.vms[0];
    assert_eq!(vm.image, ImageSource::File("images/linux-image.bin".into()));
    assert_eq!(vm.ipa, 0x8000_0000);
    assert_eq!(vm.image_ipa, 0x8008_0000);
    assert_eq!(vm.dtb_ipa, 0x80e0_0000);
    assert_eq!(vm.pcpus, [1, 2]);
}

#[test]
fn parse_str_matches_load() {
    let path = Path::new(FIXTURES).join("valid.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        parse_str(&text, &path, &guest_image).unwrap(),
        load(&path, &guest_image).unwrap()
    );
}

#[test]
fn scenario_configs_are_valid() {
    let mut paths = Vec::new();
    for entry in std::fs::read_dir("../configs/tests").unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        // Configurations with Debian images need xtask to fetch them: not a host unit test.
        let debian = std::fs::read_to_string(&path).unwrap().contains("debian =");
        if name.ends_with(".toml") && !name.starts_with("bad-") && !debian {
            paths.push(path);
        }
    }
    assert!(paths.len() >= 8, "scenario configs missing: {paths:?}");
    for path in paths {
        // Those given board devices name QEMU's, which the fixture board has too.
        let system = keel_core::config::load_with_board(&path, &guest_image, &passthrough_board)
            .unwrap_or_else(|error| panic!("{} rejected: {error}", path.display()));
        // Up to the compiler's most (the management window's probes pin eight VMs).
        assert!(
            (2..=keel_core::config::MAX_PCPUS).contains(&system.pcpus),
            "{}",
            path.display()
        );
        // Most scenarios run two VMs or more; tasks-c runs its partition alone.
        assert!(!system.vms.is_empty(), "{}", path.display());
        assert!(system.vms.iter().all(|vm| vm.console));
    }
}

#[test]
fn hostile_read_other_targets_the_victim() {
    let system = load(
        Path::new("../configs/tests/hostile-read-other.toml"),
        &guest_image,
    )
    .unwrap();
    let target = format!("keel.target={:#x}", system.vms[0].phys);
    assert!(system.vms[1].cmdline.contains(&target));
}

#[test]
fn bad_scenario_configs_fail() {
    let cases = [
        (
            "bad-overlap.toml",
            "vm 'rt-b': memory: 0x50800000..0x51800000 overlaps vm 'rt-a' memory 0x50000000..0x51000000",
        ),
        (
            "bad-pcpu-twice.toml",
            "vm 'rt-b': pcpus: pCPU 1 is already claimed by vm 'rt-a', and it is pinned \
             (one vCPU only): a [[pcpu]] policy lets vCPUs share it",
        ),
        (
            "bad-hypervisor-overlap.toml",
            "vm 'rt-a': memory: 0x41000000..0x42000000 overlaps the hypervisor region 0x40000000..0x42000000",
        ),
    ];
    for (name, message) in cases {
        let path = Path::new("../configs/tests").join(name);
        let error = load(&path, &guest_image).unwrap_err();
        assert_eq!(error.to_string(), format!("{}: {message}", path.display()));
    }
    let path = Path::new("../configs/tests/bad-unknown-field.toml");
    let error = load(path, &guest_image).unwrap_err().to_string();
    assert!(error.contains("unknown field `pcpu`"), "{error}");
}

// ---- Rule 1: TOML syntax, unknown fields, wrong types ------------------------------------

#[test]
fn rule_1_toml_syntax_error_has_line_and_column() {
    assert_rejected(
        "toml-syntax.toml",
        "2:8: invalid table header: expected `.`, `]`",
    );
}

#[test]
fn rule_1_unknown_field() {
    assert_rejected(
        "toml-unknown-field.toml",
        "14:1: unknown field `memroy`, expected one of `name`, `image`, `initrd`, `memory`, `ipa`, `colours`, `colours_exclusive`, `flash`, `pcpus`, `schedule`, `tasks`, `messages`, `virtio_console`, `devices`, `console`, `passthrough`, `cmdline`, `wfi`, `pmu`, `monitor_masked_stretch`, `trace_reader`, `health`",
    );
}

#[test]
fn rule_1_wrong_type() {
    assert_rejected(
        "toml-wrong-type.toml",
        "12:9: invalid type: string \"1\", expected a sequence",
    );
}

#[test]
fn rule_1_bad_size_string() {
    assert_rejected(
        "toml-bad-size.toml",
        "11:39: invalid size \"16Q\": expected an integer (decimal or 0x hexadecimal) with an optional K, M or G suffix",
    );
}

#[test]
fn rule_1_missing_field() {
    assert_rejected("toml-missing-field.toml", "8:1: missing field `memory`");
}

#[test]
fn rule_1_unreadable_file() {
    let error = load(
        Path::new("tests/fixtures/no-such-config.toml"),
        &guest_image,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "tests/fixtures/no-such-config.toml: cannot read: No such file or directory (os error 2)"
    );
}

// ---- Rule 2: VMs and names ---------------------------------------------------------------

#[test]
fn rule_2_no_vm() {
    assert_rejected(
        "no-vm.toml",
        "no [[vm]] table: a system needs at least one VM",
    );
}

#[test]
fn rule_2_duplicate_name() {
    assert_rejected(
        "duplicate-name.toml",
        "vm 'rt-a': name: used by two VMs (#0 and #1)",
    );
}

#[test]
fn rule_2_empty_name() {
    assert_rejected("empty-name.toml", "vm #1: name: must not be empty");
}

#[test]
fn rule_2_empty_system_name() {
    assert_rejected("system-empty-name.toml", "system: name: must not be empty");
}

#[test]
fn rule_2_too_many_vms() {
    let mut text = String::from(
        "[system]\nname = \"many\"\nram = { base = 0x4000_0000, size = \"1G\" }\n\
         hypervisor = { base = 0x4000_0000, size = \"32M\" }\npcpus = 17\n",
    );
    for index in 0..17 {
        text.push_str(&format!(
            "[[vm]]\nname = \"vm{index}\"\nimage = {{ guest = \"test-guest\" }}\n\
             memory = {{ base = 0x5000_0000, size = \"4M\" }}\npcpus = [{index}]\n"
        ));
    }
    let error = parse_str(&text, Path::new("many.toml"), &guest_image).unwrap_err();
    assert_eq!(
        error.to_string(),
        "many.toml: 17 [[vm]] tables exceed Keel's maximum of 16 VMs"
    );
}

// ---- Rule 3: memory shape ----------------------------------------------------------------

#[test]
fn rule_3_memory_base_unaligned() {
    assert_rejected(
        "memory-base-unaligned.toml",
        "vm 'rt-b': memory: base 0x51000800 is not 4 KiB aligned",
    );
}

#[test]
fn rule_3_memory_size_unaligned() {
    assert_rejected(
        "memory-size-unaligned.toml",
        "vm 'rt-b': memory: size 0x1000800 is not 4 KiB aligned",
    );
}

#[test]
fn rule_3_memory_size_zero() {
    assert_rejected("memory-size-zero.toml", "vm 'rt-a': memory: size is zero");
}

#[test]
fn rule_3_memory_too_small() {
    assert_rejected(
        "memory-too-small.toml",
        "vm 'rt-a': memory: size 0x200000 is below the minimum of 0x400000 (4 MiB)",
    );
}

#[test]
fn rule_3_memory_wraps() {
    assert_rejected(
        "memory-wraps.toml",
        "vm 'rt-a': memory: 0x50000000 + 0xfffffffff0000000 wraps past the end of the 64-bit address space",
    );
}

#[test]
fn rule_3_ram_unaligned() {
    assert_rejected(
        "ram-unaligned.toml",
        "system: ram: size 0x3fffffff is not 4 KiB aligned",
    );
}

// ---- Rule 4: memory inside RAM -----------------------------------------------------------

#[test]
fn rule_4_memory_outside_ram() {
    assert_rejected(
        "memory-outside-ram.toml",
        "vm 'rt-b': memory: 0x7f800000..0x80800000 is outside RAM 0x40000000..0x80000000",
    );
}

// ---- Rule 5: VMs' memory disjoint --------------------------------------------------------

#[test]
fn rule_5_memory_overlap() {
    assert_rejected(
        "memory-overlap.toml",
        "vm 'rt-b': memory: 0x50800000..0x51800000 overlaps vm 'rt-a' memory 0x50000000..0x51000000",
    );
}

// ---- Rule 6: the hypervisor's region -----------------------------------------------------

#[test]
fn rule_6_memory_overlaps_hypervisor() {
    assert_rejected(
        "memory-overlaps-hypervisor.toml",
        "vm 'rt-a': memory: 0x41000000..0x42000000 overlaps the hypervisor region 0x40000000..0x42000000",
    );
}

#[test]
fn rule_6_hypervisor_outside_ram() {
    assert_rejected(
        "hypervisor-outside-ram.toml",
        "system: hypervisor: 0x3f000000..0x41000000 is outside RAM 0x40000000..0x80000000",
    );
}

#[test]
fn rule_6_hypervisor_too_small() {
    assert_rejected(
        "hypervisor-too-small.toml",
        "system: hypervisor: size 0x200000 leaves no room for Keel's image, which loads at base + 2 MiB",
    );
}

// ---- Rule 7: pCPUs -----------------------------------------------------------------------

#[test]
fn rule_7_pcpu_claimed_by_two_vms() {
    assert_rejected(
        "pcpu-claimed-twice.toml",
        "vm 'rt-b': pcpus: pCPU 1 is already claimed by vm 'rt-a', and it is pinned \
         (one vCPU only): a [[pcpu]] policy lets vCPUs share it",
    );
}

#[test]
fn rule_7_pcpu_listed_twice() {
    assert_rejected(
        "pcpu-listed-twice.toml",
        "vm 'rt-a': pcpus: pCPU 1 is listed twice, but it is pinned (one vCPU only): \
         a [[pcpu]] policy lets vCPUs share it",
    );
}

#[test]
fn rule_7_pcpu_out_of_range() {
    assert_rejected(
        "pcpu-out-of-range.toml",
        "vm 'rt-a': pcpus: pCPU 4 does not exist (system.pcpus = 4)",
    );
}

#[test]
fn rule_7_pcpus_empty() {
    assert_rejected(
        "pcpus-empty.toml",
        "vm 'rt-a': pcpus: must not be empty: a VM needs at least one vCPU",
    );
}

#[test]
fn rule_7_system_pcpus_zero() {
    assert_rejected(
        "system-pcpus-zero.toml",
        "system: pcpus: must be at least 1",
    );
}

#[test]
fn rule_7_system_pcpus_too_many() {
    assert_rejected(
        "system-pcpus-too-many.toml",
        "system: pcpus: 4294967295 pCPUs exceed Keel's maximum of 256",
    );
}

#[test]
fn rule_7_too_many_vcpus() {
    let pcpus: Vec<String> = (0..9).map(|pcpu| pcpu.to_string()).collect();
    let text = format!(
        "[system]\nname = \"wide\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
         hypervisor = {{ base = 0x4000_0000, size = \"32M\" }}\npcpus = 200\n\
         [[vm]]\nname = \"wide\"\nimage = {{ guest = \"test-guest\" }}\n\
         memory = {{ base = 0x5000_0000, size = \"16M\" }}\npcpus = [{}]\n",
        pcpus.join(", ")
    );
    let error = parse_str(&text, Path::new("wide.toml"), &guest_image).unwrap_err();
    assert_eq!(
        error.to_string(),
        "wide.toml: vm 'wide': pcpus: 9 vCPUs exceed Keel's maximum of 8 per VM"
    );
}

// ---- Rule 8: images ----------------------------------------------------------------------

#[test]
fn rule_8_image_file_missing() {
    assert_rejected(
        "image-file-missing.toml",
        "vm 'rt-a': image: file 'tests/fixtures/images/no-such-kernel.bin' not found",
    );
}

#[test]
fn rule_8_unknown_guest() {
    assert_rejected(
        "image-unknown-guest.toml",
        "vm 'rt-a': image: no workspace guest named 'no-such-guest'",
    );
}

#[test]
fn rule_8_guest_not_built() {
    assert_rejected(
        "image-guest-not-built.toml",
        "vm 'rt-a': image: guest 'unbuilt-guest' has no built image at \
         'tests/fixtures/images/not-built.bin' (build it first)",
    );
}

#[test]
fn rule_8_both_guest_and_file() {
    assert_rejected(
        "image-both.toml",
        "vm 'rt-a': image: give exactly one of 'guest', 'file' or 'debian', not several",
    );
}

#[test]
fn rule_8_neither_guest_nor_file() {
    assert_rejected(
        "image-neither.toml",
        "vm 'rt-a': image: give exactly one of 'guest', 'file' or 'debian'",
    );
}

#[test]
fn rule_8_empty_image() {
    assert_rejected(
        "image-empty.toml",
        "vm 'rt-a': image: 'tests/fixtures/images/empty.bin' is empty",
    );
}

// ---- Rule 9: devices ---------------------------------------------------------------------

#[test]
fn rule_9_unknown_device() {
    assert_rejected(
        "device-unknown.toml",
        "vm 'rt-a': devices: unknown device 'gpu' (known devices: 'console', 'watchdog')",
    );
}

#[test]
fn rule_9_duplicate_device() {
    assert_rejected(
        "device-duplicate.toml",
        "vm 'rt-a': devices: 'console' is listed twice",
    );
}

#[test]
fn rule_9_console_table_without_the_console() {
    assert_rejected(
        "console-without-device.toml",
        "vm 'rt-a': console: a console table needs the emulated console: add \"console\" to devices",
    );
}

#[test]
fn rule_9_second_raw_console() {
    assert_rejected(
        "console-raw-twice.toml",
        "vm 'rt-b': console.raw: vm 'rt-a' is raw already: one VM of a system at most may have a \
         raw console (it takes the terminal while it has the input focus)",
    );
}

#[test]
fn rule_9_console_unknown_key() {
    assert_rejected(
        "console-unknown-key.toml",
        "14:25: unknown field `colour`, expected `raw`",
    );
}

// ---- Rule 10: image layout ---------------------------------------------------------------

#[test]
fn rule_10_image_does_not_fit_below_the_dtb() {
    assert_rejected(
        "image-does-not-fit.toml",
        "vm 'rt-a': image: 0x300000 bytes loaded at 0x40080000..0x40380000 \
         do not fit below the device tree at 0x40200000",
    );
}

#[test]
fn rule_10_linux_image_misaligned() {
    assert_rejected(
        "linux-image-misaligned.toml",
        "vm 'rt-a': image: a Linux Image loads text_offset above a 2 MiB aligned base, \
         but ipa 0x40100000 is not 2 MiB aligned",
    );
}

// ---- Rule 11: guest-physical window ------------------------------------------------------

#[test]
fn rule_11_ipa_unaligned() {
    assert_rejected(
        "ipa-unaligned.toml",
        "vm 'rt-a': ipa: address 0x40000800 is not 4 KiB aligned",
    );
}

#[test]
fn rule_11_ipa_overlaps_device_window() {
    assert_rejected(
        "ipa-overlaps-devices.toml",
        "vm 'rt-a': ipa: guest memory 0x7800000..0x8800000 overlaps the emulated device window \
         0x8000000..0xa001000 (GIC, PL011, virtio)",
    );
}

#[test]
fn rule_11_ipa_overlaps_health_devices() {
    assert_rejected(
        "ipa-overlaps-health-devices.toml",
        "vm 'rt-a': ipa: guest memory 0xb000000..0xc000000 overlaps the emulated device window \
         0xb000000..0xb011000 (SP805, management window)",
    );
}

#[test]
fn rule_11_ipa_beyond_address_space() {
    assert_rejected(
        "ipa-beyond-space.toml",
        "vm 'rt-a': ipa: guest memory 0x7fff800000..0x8000800000 extends past the 39-bit \
         guest-physical address space",
    );
}

// ---- Rule 12: WFI policy -----------------------------------------------------------------

#[test]
fn rule_12_unknown_wfi_policy() {
    assert_rejected(
        "wfi-unknown.toml",
        "vm 'rt-a': wfi: unknown policy 'sleep' (expected 'native' or 'trap')",
    );
}

// ---- Command line ------------------------------------------------------------------------

#[test]
fn cmdline_with_nul() {
    assert_rejected(
        "cmdline-nul.toml",
        "vm 'rt-a': cmdline: contains a NUL character",
    );
}

// ---- Rule 13: pCPU policies ([[pcpu]]) ----------------------------------------------------

#[test]
fn rule_13_pcpu_table_out_of_range() {
    assert_rejected(
        "pcpu-table-out-of-range.toml",
        "[[pcpu]] #2: id: pCPU 4 does not exist (system.pcpus = 4)",
    );
}

#[test]
fn rule_13_pcpu_table_twice() {
    assert_rejected(
        "pcpu-table-twice.toml",
        "pCPU 2: id: listed in two [[pcpu]] tables",
    );
}

#[test]
fn rule_13_unknown_policy() {
    assert_rejected(
        "pcpu-policy-unknown.toml",
        "pCPU 3: policy: unknown policy 'lottery' \
         (expected 'pinned', 'fixed-priority', 'edf' or 'round-robin')",
    );
}

#[test]
fn rule_13_quantum_zero() {
    assert_rejected("pcpu-quantum-zero.toml", "pCPU 3: quantum: must be above 0");
}

#[test]
fn rule_13_quantum_on_pinned() {
    assert_rejected(
        "pcpu-quantum-pinned.toml",
        "pCPU 3: quantum: a pinned pCPU has one vCPU and no time slice",
    );
}

// ---- Rule 14: durations --------------------------------------------------------------------

#[test]
fn rule_14_duration_without_unit() {
    assert_rejected(
        "duration-no-unit.toml",
        "vm 'rt-b' vCPU 0: period: duration '10000' has no unit \
         (write e.g. \"250us\"; units: ns, us, ms, s)",
    );
}

#[test]
fn rule_14_duration_unknown_unit() {
    assert_rejected(
        "duration-unknown-unit.toml",
        "pCPU 3: quantum: duration '2 jiffies' has an unknown unit 'jiffies' \
         (units: ns, us, ms, s)",
    );
}

#[test]
fn rule_14_duration_not_a_number() {
    assert_rejected(
        "duration-not-a-number.toml",
        "vm 'rt-a' vCPU 0: budget: 'short' is not a duration \
         (write e.g. \"250us\"; units: ns, us, ms, s)",
    );
}

#[test]
fn rule_14_duration_fraction_of_a_nanosecond() {
    assert_rejected(
        "duration-fraction-of-ns.toml",
        "system: switch_cost: duration '1.5ns' is not a whole number of nanoseconds",
    );
}

#[test]
fn rule_14_duration_of_the_wrong_type() {
    assert_rejected(
        "toml-bad-duration-type.toml",
        "30:47: invalid type: boolean `true`, expected a duration: a string with a unit \
         like \"250us\" or \"1ms\"",
    );
}

// ---- Rule 15: each vCPU's schedule -----------------------------------------------------------

#[test]
fn rule_15_schedule_count() {
    assert_rejected(
        "schedule-count.toml",
        "vm 'be': schedule: 2 entries for 3 vCPUs: give one per vCPU, in vCPU order",
    );
}

#[test]
fn rule_15_priority_out_of_range() {
    assert_rejected(
        "schedule-priority-range.toml",
        "vm 'rt-a' vCPU 0: priority: 256 is outside 0..=255",
    );
}

#[test]
fn rule_15_parameters_on_a_pinned_pcpu() {
    assert_rejected(
        "schedule-on-pinned.toml",
        "vm 'rt-a' vCPU 0: period: pCPU 1 is pinned (its one vCPU runs whenever it is ready), \
         which takes no scheduling parameters",
    );
}

#[test]
fn rule_15_parameters_on_a_round_robin_pcpu() {
    assert_rejected(
        "schedule-on-round-robin.toml",
        "vm 'be' vCPU 2: priority: pCPU 3 is shared by round robin, \
         which takes no scheduling parameters",
    );
}

#[test]
fn rule_15_priority_on_an_edf_pcpu() {
    assert_rejected(
        "schedule-priority-on-edf.toml",
        "vm 'rt-a' vCPU 1: priority: pCPU 2 is scheduled by EDF, which takes no priority \
         (a period and budget make a reservation)",
    );
}

#[test]
fn rule_15_budget_zero() {
    assert_rejected(
        "schedule-budget-zero.toml",
        "vm 'rt-a' vCPU 0: budget: must be above 0",
    );
}

#[test]
fn rule_15_budget_above_period() {
    assert_rejected(
        "schedule-budget-above-period.toml",
        "vm 'rt-a' vCPU 0: budget: 1.20ms is above the period 1ms",
    );
}

#[test]
fn rule_15_deadline_above_period() {
    assert_rejected(
        "schedule-deadline-above-period.toml",
        "vm 'rt-a' vCPU 1: deadline: 2.50ms is above the period 2ms",
    );
}

#[test]
fn rule_15_budget_above_deadline() {
    assert_rejected(
        "schedule-budget-above-deadline.toml",
        "vm 'rt-a' vCPU 1: budget: 500us is above the deadline 400us",
    );
}

#[test]
fn rule_15_period_without_budget() {
    assert_rejected(
        "schedule-period-without-budget.toml",
        "vm 'rt-b' vCPU 0: budget: missing: a period of 10ms needs a budget",
    );
}

#[test]
fn rule_15_budget_without_period() {
    assert_rejected(
        "schedule-budget-without-period.toml",
        "vm 'rt-b' vCPU 0: period: missing: a budget of 2ms needs a period",
    );
}

#[test]
fn rule_15_deadline_without_period() {
    assert_rejected(
        "schedule-deadline-without-period.toml",
        "vm 'rt-b' vCPU 1: period: missing: a deadline of 1ms needs a period and a budget",
    );
}

// ---- Rule 16: ranks on a fixed-priority pCPU -----------------------------------------------

#[test]
fn rule_16_reservations_share_a_priority() {
    assert_rejected(
        "fixed-priority-shared.toml",
        "vm 'rt-b' vCPU 0: priority: 10 is also the priority of vm 'rt-a' vCPU 0 on \
         fixed-priority pCPU 1: vCPUs with a reservation need distinct priorities",
    );
}

#[test]
fn rule_16_reservation_below_best_effort() {
    assert_rejected(
        "fixed-priority-below-best-effort.toml",
        "vm 'rt-b' vCPU 0: priority: 5 does not rank above best-effort vm 'be' vCPU 0 \
         (priority 7) on fixed-priority pCPU 1, so its budget cannot be guaranteed",
    );
}

// ---- Rule 17: admission on each shared pCPU --------------------------------------------------

#[test]
fn rule_17_edf_utilisation() {
    assert_rejected(
        "edf-utilisation.toml",
        "pCPU 2: EDF utilisation 1.14 > 1 (vm 'rt-a' vCPU 1: 0.26, vm 'rt-b' vCPU 1: 0.88)",
    );
}

#[test]
fn rule_17_edf_processor_demand() {
    assert_rejected(
        "edf-demand.toml",
        "pCPU 2: EDF processor demand 1.72ms at 1.60ms after a synchronous release exceeds \
         the time available (vm 'rt-a' vCPU 1: 1 job of 510us, vm 'rt-b' vCPU 1: 1 job of \
         1.21ms; each job is its budget plus twice the switch cost of 5us)",
    );
}

#[test]
fn rule_17_edf_switch_cost_above_deadline() {
    assert_rejected(
        "edf-switch-cost.toml",
        "pCPU 2: EDF: vm 'rt-a' vCPU 1's budget 1.50ms plus twice the switch cost of 5us \
         is above its deadline 1.50ms",
    );
}

#[test]
fn rule_17_edf_too_complex() {
    assert_rejected(
        "edf-too-complex.toml",
        "pCPU 1: EDF admission cannot decide for 72 reservations (at most 64, and at most \
         1000000 deadlines to check): refused rather than guessed",
    );
}

#[test]
fn rule_17_fixed_priority_response_time() {
    assert_rejected(
        "fixed-priority-response-time.toml",
        "pCPU 1: fixed-priority response time of vm 'rt-b' vCPU 0 reaches 1.02ms \
         > its deadline 1ms",
    );
}

#[test]
fn rule_17_fixed_priority_switch_cost_above_deadline() {
    assert_rejected(
        "fixed-priority-switch-cost.toml",
        "pCPU 1: fixed-priority: vm 'rt-a' vCPU 0's budget 1ms plus twice the switch cost \
         of 5us is above its deadline 1ms",
    );
}

#[test]
fn rule_17_edf_utilisation_with_task_allowances() {
    assert_rejected(
        "edf-task-allowance.toml",
        "pCPU 2: EDF utilisation 1.06 > 1 (vm 'rt-a' vCPU 1: 0.26, vm 'rt-b' vCPU 1: 0.38, \
         vm 'rt-a' tasks: 0.13, vm 'rt-b' tasks: 0.30)",
    );
}

#[test]
fn rule_17_fixed_priority_utilisation_with_task_allowances() {
    assert_rejected(
        "fixed-priority-task-allowance.toml",
        "pCPU 1: fixed-priority utilisation 1.14 > 1 (vm 'rt-a' vCPU 0: 0.21, \
         vm 'rt-b' vCPU 0: 0.21, vm 'rt-a' tasks: 0.13, vm 'rt-b' tasks: 0.60)",
    );
}

#[test]
fn every_fixture_is_tested() {
    let source = include_str!("config_rules.rs");
    for entry in std::fs::read_dir(FIXTURES).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".toml") {
            assert!(
                source.contains(&format!("\"{name}\"")),
                "fixture {name} has no test"
            );
        }
    }
}

// ---- Initial RAM disks and Debian images ---------------------------------------------------

fn initrd_system(memory_size: &str, image: &str, initrd: &str) -> String {
    format!(
        "[system]\nname = \"initrd\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
         hypervisor = {{ base = 0x4000_0000, size = \"32M\" }}\npcpus = 2\n\
         [[vm]]\nname = \"linux\"\nimage = {image}\ninitrd = {initrd}\n\
         memory = {{ base = 0x5000_0000, size = \"{memory_size}\" }}\npcpus = [1]\n"
    )
}

#[test]
fn initrd_is_placed_just_below_the_device_tree() {
    let text = initrd_system(
        "16M",
        "{ guest = \"test-guest\" }",
        "{ file = \"images/linux-image.bin\" }",
    );
    let system = parse_str(
        &text,
        &Path::new(FIXTURES).join("inline.toml"),
        &guest_image,
    )
    .unwrap();
    let initrd = system.vms[0].initrd.as_ref().expect("an initrd");
    assert_eq!(system.vms[0].dtb_ipa, 0x40e0_0000);
    assert_eq!((initrd.ipa, initrd.size), (0x40df_f000, 0x1000));
}

#[test]
fn initrd_that_does_not_fit_is_rejected() {
    let big = std::env::temp_dir().join(format!("keel-big-initrd-{}.bin", std::process::id()));
    std::fs::write(&big, vec![0u8; 0x40_0000]).unwrap();
    let text = initrd_system(
        "8M",
        "{ file = \"images/linux-image.bin\" }",
        &format!("{{ file = {:?} }}", big.display().to_string()),
    );
    let error = parse_str(
        &text,
        &Path::new(FIXTURES).join("inline.toml"),
        &guest_image,
    )
    .unwrap_err();
    std::fs::remove_file(&big).unwrap();
    assert_eq!(
        error.to_string(),
        "tests/fixtures/inline.toml: vm 'linux': initrd: 0x400000 bytes do not fit between the \
         image's end 0x40380000 and the device tree at 0x40600000"
    );
}

#[test]
fn unknown_debian_flavour_is_rejected() {
    let text = initrd_system(
        "256M",
        "{ debian = \"sparc64\" }",
        "{ debian = \"sparc64\" }",
    );
    let error = parse_str(
        &text,
        &Path::new(FIXTURES).join("inline.toml"),
        &guest_image,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "tests/fixtures/inline.toml: vm 'linux': image: no Debian kernel flavour or firmware 'sparc64' \
         could be provided (known: cloud-arm64, arm64, rt-arm64, u-boot-qemu)"
    );
}

// ---- Firmware booting from flash -----------------------------------------------------------

/// A system whose VM 'fw' has `extra` lines (e.g. its flash), after a VM 'rt' at 0x5000_0000.
fn flash_system(extra: &str) -> Result<System, String> {
    flash_system_with_image("{ guest = \"test-guest\" }", extra)
}

fn flash_system_with_image(image: &str, extra: &str) -> Result<System, String> {
    let text = format!(
        "[system]\nname = \"flash\"\nram = {{ base = 0x4000_0000, size = \"1G\" }}\n\
         hypervisor = {{ base = 0x4000_0000, size = \"32M\" }}\npcpus = 2\n\
         [[vm]]\nname = \"rt\"\nimage = {{ guest = \"test-guest\" }}\n\
         memory = {{ base = 0x5000_0000, size = \"16M\" }}\npcpus = [0]\n\
         [[vm]]\nname = \"fw\"\nimage = {image}\n\
         memory = {{ base = 0x6000_0000, size = \"64M\" }}\npcpus = [1]\n{extra}\n"
    );
    parse_str(
        &text,
        &Path::new(FIXTURES).join("inline.toml"),
        &guest_image,
    )
    .map_err(|error| error.to_string())
}

#[test]
fn firmware_boots_from_flash_with_the_device_tree_at_the_start_of_ram() {
    let system = flash_system("flash = { base = 0x7000_0000, size = \"128M\" }").unwrap();
    let fw = &system.vms[1];
    let flash = fw.flash_region().expect("a flash");
    assert_eq!(
        (flash.ipa.0, flash.phys.0, flash.size),
        (0, 0x7000_0000, 0x800_0000)
    );
    assert_eq!(fw.image_ipa, 0);
    assert_eq!(fw.dtb_ipa, 0x4000_0000);
    assert!(system.vms[0].flash.is_none());
}

#[test]
fn flash_larger_than_its_window_is_rejected() {
    assert_eq!(
        flash_system("flash = { base = 0x7000_0000, size = \"130M\" }").unwrap_err(),
        "tests/fixtures/inline.toml: vm 'fw': flash: size 0x8200000 is larger than the \
         0x8000000-byte flash window at IPA 0"
    );
}

#[test]
fn flash_over_its_own_memory_or_another_vm_is_rejected() {
    assert_eq!(
        flash_system("flash = { base = 0x6200_0000, size = \"64M\" }").unwrap_err(),
        "tests/fixtures/inline.toml: vm 'fw': flash: 0x62000000..0x66000000 overlaps vm 'fw' \
         memory 0x60000000..0x64000000"
    );
    assert_eq!(
        flash_system("flash = { base = 0x5000_0000, size = \"2M\" }").unwrap_err(),
        "tests/fixtures/inline.toml: vm 'fw': flash: 0x50000000..0x50200000 overlaps vm 'rt' \
         memory 0x50000000..0x51000000"
    );
    assert_eq!(
        flash_system("flash = { base = 0x3000_0000, size = \"2M\" }").unwrap_err(),
        "tests/fixtures/inline.toml: vm 'fw': flash: 0x30000000..0x30200000 is outside RAM \
         0x40000000..0x80000000"
    );
}

#[test]
fn memory_over_an_earlier_vms_flash_is_rejected() {
    let text = "[system]\nname = \"flash\"\nram = { base = 0x4000_0000, size = \"1G\" }\n\
                hypervisor = { base = 0x4000_0000, size = \"32M\" }\npcpus = 2\n\
                [[vm]]\nname = \"fw\"\nimage = { guest = \"test-guest\" }\n\
                memory = { base = 0x6000_0000, size = \"64M\" }\npcpus = [1]\n\
                flash = { base = 0x7000_0000, size = \"64M\" }\n\
                [[vm]]\nname = \"rt\"\nimage = { guest = \"test-guest\" }\n\
                memory = { base = 0x7100_0000, size = \"16M\" }\npcpus = [0]\n";
    let error = parse_str(text, &Path::new(FIXTURES).join("inline.toml"), &guest_image)
        .unwrap_err()
        .to_string();
    assert_eq!(
        error,
        "tests/fixtures/inline.toml: vm 'rt': memory: 0x71000000..0x72000000 overlaps vm 'fw' \
         flash 0x70000000..0x74000000"
    );
}

#[test]
fn guest_memory_inside_the_flash_window_is_rejected() {
    assert_eq!(
        flash_system("ipa = 0x0200_0000\nflash = { base = 0x7000_0000, size = \"64M\" }")
            .unwrap_err(),
        "tests/fixtures/inline.toml: vm 'fw': flash: guest memory 0x2000000..0x6000000 overlaps \
         the flash window 0x0..0x4000000 at IPA 0"
    );
}

#[test]
fn firmware_that_does_not_fit_its_flash_or_has_an_initrd_is_rejected() {
    let big = std::env::temp_dir().join(format!("keel-big-firmware-{}.bin", std::process::id()));
    std::fs::write(&big, vec![0u8; 0x20_1000]).unwrap();
    let too_big = flash_system_with_image(
        &format!("{{ file = {:?} }}", big.display().to_string()),
        "flash = { base = 0x7000_0000, size = \"2M\" }",
    );
    std::fs::remove_file(&big).unwrap();
    assert_eq!(
        too_big.unwrap_err(),
        "tests/fixtures/inline.toml: vm 'fw': image: 0x201000 bytes do not fit the \
         0x200000-byte flash the image boots from"
    );
    assert_eq!(
        flash_system(
            "flash = { base = 0x7000_0000, size = \"2M\" }\n\
             initrd = { file = \"images/linux-image.bin\" }"
        )
        .unwrap_err(),
        "tests/fixtures/inline.toml: vm 'fw': initrd: a VM that boots firmware from flash takes \
         no initrd (its firmware loads one)"
    );
}

#[test]
fn rule_18_native_wfi_on_a_shared_pcpu() {
    assert_rejected(
        "wfi-native-on-shared.toml",
        "vm 'rt-a': wfi: \"native\" needs pinned pCPUs: pCPU 1 is shared, where Keel traps \
         WFI to give the pCPU to another vCPU",
    );
}

#[test]
fn rule_18_pmu_owners_may_share_a_pcpu() {
    // Two VMs that own the PMU on one shared pCPU: each vCPU's PMU is switched with it (the
    // hypervisor's arch::pmu), so the configuration is accepted under every shared policy.
    let path = Path::new(FIXTURES).join("pmu-owners-share-a-pcpu.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    for policy in ["round-robin", "fixed-priority", "edf"] {
        let text = text.replace("\"round-robin\"", &format!("\"{policy}\""));
        let system = parse_str(&text, &path, &guest_image)
            .unwrap_or_else(|error| panic!("policy {policy}: {error}"));
        assert!(system.vms[0].pmu && system.vms[1].pmu);
        assert_eq!(system.vms[0].pcpus, [2, 1]);
        assert_eq!(system.vms[1].pcpus, [1]);
    }
}

// ---- Rule 19: real-time tasks ----------------------------------------------------------------

#[test]
fn rule_19_tasks_on_a_pinned_pcpu() {
    assert_rejected(
        "tasks-on-pinned.toml",
        "vm 'rt-a': tasks: pCPU 1 is pinned (its one vCPU runs whenever it is ready), but tasks \
         are vCPUs with reservations: every pCPU of a VM with tasks must be 'edf' or \
         'fixed-priority'",
    );
}

#[test]
fn rule_19_tasks_on_a_round_robin_pcpu() {
    assert_rejected(
        "tasks-on-round-robin.toml",
        "vm 'be': tasks: pCPU 3 is shared by round robin, but tasks are vCPUs with \
         reservations: every pCPU of a VM with tasks must be 'edf' or 'fixed-priority'",
    );
}

#[test]
fn rule_19_max_out_of_range() {
    assert_rejected(
        "tasks-max-range.toml",
        "vm 'rt-a': tasks.max: 7 is outside 1..=6",
    );
    let rt_a = "max = 3, utilisation";
    for max in ["0", "-1", "256"] {
        assert_eq!(
            valid_tasks_with(rt_a, &format!("max = {max}, utilisation")).unwrap_err(),
            format!(
                "tests/fixtures/valid-tasks.toml: vm 'rt-a': tasks.max: {max} is outside 1..=6"
            )
        );
    }
}

#[test]
fn rule_19_tasks_and_vcpus_above_the_maximum() {
    assert_rejected(
        "tasks-max-vcpus.toml",
        "vm 'rt-b': tasks.max: 3 vCPUs and 6 tasks make 9 vCPUs, above Keel's maximum of 8 per \
         VM (each task runs as a vCPU of the VM)",
    );
}

#[test]
fn rule_19_utilisation_without_percent() {
    assert_rejected(
        "tasks-utilisation-no-unit.toml",
        "vm 'rt-a': tasks.utilisation: '12.5' has no '%' (write e.g. \"60%\" or \"12.5%\")",
    );
    assert_eq!(
        valid_tasks_with("\"12.5%\"", "\"0.125\"").unwrap_err(),
        "tests/fixtures/valid-tasks.toml: vm 'rt-a': tasks.utilisation: '0.125' has no '%' \
         (write e.g. \"60%\" or \"12.5%\")"
    );
}

#[test]
fn rule_19_utilisation_with_another_unit() {
    assert_rejected(
        "tasks-utilisation-unknown-unit.toml",
        "vm 'rt-a': tasks.utilisation: '12.5 percent' has the unit 'percent', not '%' \
         (write e.g. \"60%\" or \"12.5%\")",
    );
}

#[test]
fn rule_19_utilisation_not_a_number() {
    assert_rejected(
        "tasks-utilisation-not-a-number.toml",
        "vm 'rt-a': tasks.utilisation: 'an eighth' is not a percentage \
         (write e.g. \"60%\" or \"12.5%\")",
    );
}

#[test]
fn rule_19_utilisation_too_precise() {
    assert_rejected(
        "tasks-utilisation-too-precise.toml",
        "vm 'rt-a': tasks.utilisation: '12.34567%' has more than 4 decimal places \
         (a share is a whole number of parts per million)",
    );
}

#[test]
fn rule_19_utilisation_above_100_percent() {
    assert_rejected(
        "tasks-utilisation-above-100.toml",
        "vm 'rt-a': tasks.utilisation: '125%' is above 100%",
    );
}

#[test]
fn rule_19_utilisation_zero() {
    assert_rejected(
        "tasks-utilisation-zero.toml",
        "vm 'rt-a': tasks.utilisation: must be above 0",
    );
}

#[test]
fn rule_19_utilisation_of_the_wrong_type() {
    assert_rejected(
        "tasks-utilisation-wrong-type.toml",
        "33:34: invalid type: boolean `true`, expected a percentage: a string like \"60%\" \
         or \"12.5%\"",
    );
}

#[test]
fn rule_19_utilisation_missing() {
    assert_rejected(
        "tasks-missing-utilisation.toml",
        "33:9: missing field `utilisation`",
    );
}

#[test]
fn rule_19_unknown_key() {
    assert_rejected(
        "tasks-unknown-key.toml",
        "33:43: unknown field `manager`, expected one of `max`, `utilisation`, `managers`",
    );
}

#[test]
fn rule_19_manager_names_no_vm() {
    assert_rejected(
        "tasks-manager-unknown.toml",
        "vm 'rt-a': tasks.managers: no VM is named 'rt-c'",
    );
}

#[test]
fn rule_19_manager_is_the_vm_itself() {
    assert_rejected(
        "tasks-manager-itself.toml",
        "vm 'rt-a': tasks.managers: 'rt-a' is this VM, which always manages its own tasks: \
         list the other VMs that may",
    );
}

#[test]
fn rule_19_manager_listed_twice() {
    assert_rejected(
        "tasks-manager-twice.toml",
        "vm 'rt-a': tasks.managers: 'be' is listed twice",
    );
}

// ---- Rule 20: message queues -------------------------------------------------------------------

#[test]
fn rule_20_depth_out_of_range() {
    assert_rejected(
        "messages-depth-range.toml",
        "vm 'rt-a': messages.depth: 300 is outside 1..=256",
    );
    for depth in ["0", "-1", "65536"] {
        assert_eq!(
            valid_messages_with("depth = 8", &format!("depth = {depth}")).unwrap_err(),
            format!(
                "tests/fixtures/valid-messages.toml: vm 'rt-a': messages.depth: {depth} is \
                 outside 1..=256"
            )
        );
    }
    valid_messages_with("depth = 8", "depth = 256").expect("the deepest queue is allowed");
}

#[test]
fn rule_20_size_out_of_range() {
    assert_rejected(
        "messages-size-range.toml",
        "vm 'rt-a': messages.size: 5000 is outside 1..=4096 bytes",
    );
    for size in ["0", "-256", "4097"] {
        assert_eq!(
            valid_messages_with("size = 256", &format!("size = {size}")).unwrap_err(),
            format!(
                "tests/fixtures/valid-messages.toml: vm 'rt-a': messages.size: {size} is \
                 outside 1..=4096 bytes"
            )
        );
    }
    valid_messages_with("size = 256", "size = 4096").expect("a 4 KiB message is allowed");
}

#[test]
fn rule_20_interrupt_is_a_ppi() {
    assert_rejected(
        "messages-interrupt-ppi.toml",
        "vm 'rt-a': messages.interrupt: 27 is a PPI (16..=31), which Keel keeps for the timers \
         and the GIC maintenance interrupt: give an SGI (0..=15) or an SPI (32..=127)",
    );
    for intid in ["16", "31"] {
        assert_eq!(
            valid_messages_with("interrupt = 9", &format!("interrupt = {intid}")).unwrap_err(),
            format!(
                "tests/fixtures/valid-messages.toml: vm 'rt-a': messages.interrupt: {intid} is \
                 a PPI (16..=31), which Keel keeps for the timers and the GIC maintenance \
                 interrupt: give an SGI (0..=15) or an SPI (32..=127)"
            )
        );
    }
    for intid in ["0", "15", "32", "127"] {
        let system = valid_messages_with("interrupt = 9", &format!("interrupt = {intid}"))
            .unwrap_or_else(|error| panic!("interrupt {intid} refused: {error}"));
        assert_eq!(
            system.vms[0].messages.as_ref().unwrap().intid.to_string(),
            intid
        );
    }
}

#[test]
fn rule_20_interrupt_not_implemented() {
    assert_rejected(
        "messages-interrupt-range.toml",
        "vm 'rt-a': messages.interrupt: 128 is no interrupt Keel's vGIC implements: give an SGI \
         (0..=15) or an SPI (32..=127)",
    );
    for intid in ["-1", "1020", "4294967305"] {
        assert_eq!(
            valid_messages_with("interrupt = 9", &format!("interrupt = {intid}")).unwrap_err(),
            format!(
                "tests/fixtures/valid-messages.toml: vm 'rt-a': messages.interrupt: {intid} is \
                 no interrupt Keel's vGIC implements: give an SGI (0..=15) or an SPI (32..=127)"
            )
        );
    }
}

#[test]
fn rule_20_interrupt_is_the_consoles() {
    assert_rejected(
        "messages-interrupt-console.toml",
        "vm 'rt-a': messages.interrupt: 33 is the console's interrupt (the PL011's SPI): give \
         another SGI (0..=15) or SPI (32..=127)",
    );
}

#[test]
fn rule_20_no_sender() {
    assert_rejected(
        "messages-from-empty.toml",
        "vm 'rt-a': messages.from: must name at least one VM (or the VM must manage one, in \
         its `health.managers`): with no sender, its queues would stay empty",
    );
}

#[test]
fn rule_20_sender_names_no_vm() {
    assert_rejected(
        "messages-from-unknown.toml",
        "vm 'rt-a': messages.from: no VM is named 'rt-c'",
    );
}

#[test]
fn rule_20_sender_listed_twice() {
    assert_rejected(
        "messages-from-twice.toml",
        "vm 'rt-a': messages.from: 'be' is listed twice",
    );
}

#[test]
fn rule_20_unknown_key() {
    assert_rejected(
        "messages-unknown-key.toml",
        "34:52: unknown field `senders`, expected one of `depth`, `size`, `interrupt`, `from`",
    );
}

#[test]
fn rule_20_senders_missing() {
    assert_rejected("messages-missing-from.toml", "34:12: missing field `from`");
}

#[test]
fn rule_20_pool_above_the_limit() {
    assert_rejected(
        "messages-pool-too-large.toml",
        "vm 'be': messages: the message queues take 1049344 bytes in all, above Keel's 1048576",
    );
}

// ---- Rule 21: shared-memory channels ------------------------------------------------------------

/// `valid-channels.toml` with each `(old, new)` of `replacements` made, compiled.
fn valid_channels_with_all(replacements: &[(&str, &str)]) -> Result<System, String> {
    let path = Path::new(FIXTURES).join("valid-channels.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (old, new) in replacements {
        assert_eq!(text.matches(old).count(), 1, "{old:?}");
        text = text.replace(old, new);
    }
    parse_str(&text, &path, &guest_image).map_err(|error| error.to_string())
}

#[test]
fn channels_resolve_members_as_vm_ids_in_the_order_written() {
    let system = load_fixture("valid-channels.toml");
    let member = |vm, ipa, writable| ChannelMember { vm, ipa, writable };
    assert_eq!(
        system.channels,
        [
            Channel {
                name: "telemetry".into(),
                phys: 0x5f00_0000,
                size: 0x1_0000,
                intid: 10,
                members: vec![member(0, 0x7000_0000, true), member(1, 0x7000_0000, false)],
            },
            Channel {
                name: "commands".into(),
                phys: 0x5f01_0000,
                size: 0x2000,
                intid: 48,
                members: vec![
                    member(1, 0x7001_0000, true),
                    member(0, 0x6000_0000, false),
                    member(2, 0x4800_0000, true),
                ],
            },
        ]
    );
    let of = |vm| -> Vec<&str> {
        system
            .channels_of(vm)
            .map(|(channel, _)| channel.name.as_str())
            .collect()
    };
    assert_eq!(of(0), ["telemetry", "commands"]);
    assert_eq!(of(2), ["commands"]);
    assert!(load_fixture("valid.toml").channels.is_empty());
}

#[test]
fn channels_are_emitted_as_channel_descriptions() {
    let system = load_fixture("valid-channels.toml");
    assert_emits(
        &system,
        &[
            "name: \"telemetry\",\n            phys: ::keel_core::addr::PhysAddr(0x5f000000),\n            \
             size: 0x10000,\n            intid: 10,",
            "members: &[::keel_core::system::ChannelMember { vm: 1, \
             ipa: ::keel_core::addr::GuestPhysAddr(0x70010000), writable: true }, \
             ::keel_core::system::ChannelMember { vm: 0, \
             ipa: ::keel_core::addr::GuestPhysAddr(0x60000000), writable: false }, \
             ::keel_core::system::ChannelMember { vm: 2, \
             ipa: ::keel_core::addr::GuestPhysAddr(0x48000000), writable: true }],",
        ],
    );
}

#[test]
fn channels_may_share_an_interrupt_and_use_any_sgi_or_implemented_spi() {
    let system = valid_channels_with_all(&[("interrupt = 10", "interrupt = 48")]).unwrap();
    assert_eq!(system.channels[0].intid, system.channels[1].intid);
    for intid in ["0", "15", "32", "127"] {
        let system =
            valid_channels_with_all(&[("interrupt = 48", &format!("interrupt = {intid}"))])
                .unwrap_or_else(|error| panic!("interrupt {intid} refused: {error}"));
        assert_eq!(system.channels[1].intid.to_string(), intid);
    }
    // The console's SPI is free when no member has the console.
    let system = valid_channels_with_all(&[
        (
            "pcpus = [2]\ndevices = [\"console\"]",
            "pcpus = [2]\ndevices = []",
        ),
        (
            "    { vm = \"rt\", ipa = 0x6000_0000, access = \"ro\" },\n",
            "",
        ),
        ("interrupt = 48", "interrupt = 33"),
    ])
    .unwrap();
    assert_eq!(system.channels[1].intid, 33);
}

#[test]
fn rule_21_too_many_channels() {
    // (Not `assert_rejected`: the message begins with a digit, as a TOML error's line does.)
    let path = Path::new(FIXTURES).join("channels-too-many.toml");
    assert_eq!(
        load(&path, &guest_image).unwrap_err().to_string(),
        "tests/fixtures/channels-too-many.toml: 17 [[channel]] tables exceed Keel's maximum of \
         16 channels"
    );
}

#[test]
fn rule_21_empty_name() {
    assert_rejected(
        "channels-empty-name.toml",
        "channel #1: name: must not be empty",
    );
}

#[test]
fn rule_21_name_not_a_device_tree_node_name() {
    assert_rejected(
        "channels-name-not-a-node-name.toml",
        "channel 'commands to rt': name: 'commands to rt' is not a device-tree node name (a \
         letter, then letters, digits or , . _ + -; at most 31 characters): the VMs' device \
         trees describe the channel under it",
    );
    for name in ["2way", "a@b", "thirty-two-characters-long-name!"] {
        assert!(
            valid_channels_with_all(&[("name = \"commands\"", &format!("name = {name:?}"))])
                .is_err(),
            "{name}"
        );
    }
    let longest = "a".repeat(31);
    valid_channels_with_all(&[("name = \"commands\"", &format!("name = {longest:?}"))])
        .expect("31 characters are allowed");
    valid_channels_with_all(&[("name = \"commands\"", "name = \"Cmd,v1.2_x+y-z\"")])
        .expect("every allowed character");
}

#[test]
fn rule_21_duplicate_name() {
    assert_rejected(
        "channels-duplicate-name.toml",
        "channel 'telemetry': name: used by two channels (#0 and #1)",
    );
}

#[test]
fn rule_21_memory_shape() {
    assert_rejected(
        "channels-memory-unaligned.toml",
        "channel 'commands': memory: base 0x5f010800 is not 4 KiB aligned",
    );
    assert_rejected(
        "channels-memory-size-zero.toml",
        "channel 'commands': memory: size is zero",
    );
    assert_eq!(
        valid_channels_with_all(&[("size = \"8K\"", "size = 0x2200")]).unwrap_err(),
        "tests/fixtures/valid-channels.toml: channel 'commands': memory: size 0x2200 is not 4 KiB \
         aligned"
    );
    assert_eq!(
        valid_channels_with_all(&[("size = \"8K\"", "size = \"0xFFFFFFFFF0000000\"")]).unwrap_err(),
        "tests/fixtures/valid-channels.toml: channel 'commands': memory: 0x5f010000 + \
         0xfffffffff0000000 wraps past the end of the 64-bit address space"
    );
}

#[test]
fn rule_21_memory_outside_ram() {
    assert_rejected(
        "channels-memory-outside-ram.toml",
        "channel 'telemetry': memory: 0x80000000..0x80010000 is outside RAM 0x40000000..0x80000000",
    );
}

#[test]
fn rule_21_memory_overlaps_the_hypervisor() {
    assert_rejected(
        "channels-memory-overlaps-hypervisor.toml",
        "channel 'telemetry': memory: 0x41ff0000..0x42000000 overlaps the hypervisor region \
         0x40000000..0x42000000",
    );
}

#[test]
fn rule_21_memory_overlaps_a_vms_memory_or_flash() {
    assert_rejected(
        "channels-memory-overlaps-vm.toml",
        "channel 'telemetry': memory: 0x50ff8000..0x51008000 overlaps vm 'rt' memory \
         0x50000000..0x51000000",
    );
    assert_rejected(
        "channels-memory-overlaps-flash.toml",
        "channel 'commands': memory: 0x541ff000..0x54201000 overlaps vm 'fw' flash \
         0x54000000..0x54200000",
    );
}

#[test]
fn rule_21_memory_overlaps_another_channel() {
    assert_rejected(
        "channels-memory-overlaps-channel.toml",
        "channel 'commands': memory: 0x5f00f000..0x5f011000 overlaps channel 'telemetry' memory \
         0x5f000000..0x5f010000",
    );
}

#[test]
fn rule_21_interrupt_is_a_ppi() {
    assert_rejected(
        "channels-interrupt-ppi.toml",
        "channel 'telemetry': interrupt: 27 is a PPI (16..=31), which Keel keeps for the timers \
         and the GIC maintenance interrupt: give an SGI (0..=15) or an SPI (32..=127)",
    );
}

#[test]
fn rule_21_interrupt_not_implemented() {
    assert_rejected(
        "channels-interrupt-range.toml",
        "channel 'commands': interrupt: 128 is no interrupt Keel's vGIC implements: give an SGI \
         (0..=15) or an SPI (32..=127)",
    );
    for intid in ["-1", "1020"] {
        assert_eq!(
            valid_channels_with_all(&[("interrupt = 48", &format!("interrupt = {intid}"))])
                .unwrap_err(),
            format!(
                "tests/fixtures/valid-channels.toml: channel 'commands': interrupt: {intid} is \
                 no interrupt Keel's vGIC implements: give an SGI (0..=15) or an SPI (32..=127)"
            )
        );
    }
}

#[test]
fn rule_21_interrupt_is_a_members_console() {
    assert_rejected(
        "channels-interrupt-console.toml",
        "channel 'commands': interrupt: 33 is the console's interrupt (the PL011's SPI) in member \
         vm 'linux': give another SGI (0..=15) or SPI (32..=127)",
    );
}

#[test]
fn rule_21_interrupt_is_a_members_message_interrupt() {
    assert_rejected(
        "channels-interrupt-messages.toml",
        "channel 'telemetry': interrupt: 9 is the message interrupt of member vm 'rt': give \
         another SGI (0..=15) or SPI (32..=127)",
    );
}

#[test]
fn rule_21_fewer_than_two_vms() {
    assert_rejected(
        "channels-one-vm.toml",
        "channel 'telemetry': vms: names 1 VM: a channel joins at least two",
    );
    assert_eq!(
        valid_channels_with_all(&[(
            "vms = [\n    { vm = \"rt\", ipa = 0x7000_0000, access = \"rw\" },\n    \
             { vm = \"linux\", ipa = 0x7000_0000, access = \"ro\" },\n]",
            "vms = []"
        )])
        .unwrap_err(),
        "tests/fixtures/valid-channels.toml: channel 'telemetry': vms: names 0 VMs: a channel \
         joins at least two"
    );
}

#[test]
fn rule_21_unknown_vm() {
    assert_rejected(
        "channels-vm-unknown.toml",
        "channel 'commands': vms: no VM is named 'rtos'",
    );
}

#[test]
fn rule_21_vm_listed_twice() {
    assert_rejected(
        "channels-vm-twice.toml",
        "channel 'commands': vms: 'linux' is listed twice",
    );
}

#[test]
fn rule_21_unknown_access() {
    assert_rejected(
        "channels-access.toml",
        "channel 'commands' vm 'fw': access: unknown access 'wo' (expected 'rw' or 'ro')",
    );
}

#[test]
fn rule_21_window_unaligned() {
    assert_rejected(
        "channels-ipa-unaligned.toml",
        "channel 'commands' vm 'rt': ipa: address 0x60000200 is not 4 KiB aligned",
    );
}

#[test]
fn rule_21_window_over_the_members_memory_or_flash() {
    assert_rejected(
        "channels-ipa-over-memory.toml",
        "channel 'commands' vm 'rt': ipa: window 0x40fff000..0x41001000 overlaps its memory \
         0x40000000..0x41000000",
    );
    assert_rejected(
        "channels-ipa-over-flash.toml",
        "channel 'commands' vm 'fw': ipa: window 0x1ff000..0x201000 overlaps its flash \
         0x0..0x200000",
    );
}

#[test]
fn rule_21_window_over_another_window_of_the_member() {
    assert_rejected(
        "channels-ipa-over-window.toml",
        "channel 'commands' vm 'linux': ipa: window 0x7000f000..0x70011000 overlaps its window \
         0x70000000..0x70010000 of channel 'telemetry'",
    );
    // Different VMs may see channels at the same addresses.
    let system = valid_channels_with_all(&[(
        "{ vm = \"fw\", ipa = 0x4800_0000",
        "{ vm = \"fw\", ipa = 0x7000_0000",
    )])
    .unwrap();
    assert_eq!(system.channels[1].members[2].ipa, 0x7000_0000);
}

#[test]
fn rule_21_window_over_the_emulated_devices() {
    assert_rejected(
        "channels-ipa-devices.toml",
        "channel 'commands' vm 'fw': ipa: window 0x9000000..0x9002000 overlaps the emulated \
         device window 0x8000000..0xa001000 (GIC, PL011, virtio)",
    );
}

#[test]
fn rule_21_window_beyond_the_address_space() {
    assert_rejected(
        "channels-ipa-beyond.toml",
        "channel 'commands' vm 'fw': ipa: window 0x7ffffff000..0x8000001000 extends past the \
         39-bit guest-physical address space",
    );
}

#[test]
fn rule_21_unknown_key_or_missing_field() {
    assert_rejected(
        "channels-unknown-key.toml",
        "43:1: unknown field `doorbell`, expected one of `name`, `memory`, `interrupt`, `vms`",
    );
    assert_rejected(
        "channels-member-unknown-key.toml",
        "46:52: unknown field `cached`, expected one of `vm`, `ipa`, `access`",
    );
    assert_rejected("channels-missing-vms.toml", "30:1: missing field `vms`");
}

// Rule 22: a VM's `virtio_console` names another VM it takes messages from, which takes
// messages from it, and the VM's message interrupt is not the console's SPI.

#[test]
fn rule_22_virtio_console_is_accepted_and_emitted() {
    let system = load_fixture("valid-virtio.toml");
    let be = system.vms.iter().find(|vm| vm.name == "be").unwrap();
    assert_eq!(be.virtio_console, Some(0));
    assert!(system
        .vms
        .iter()
        .all(|vm| vm.name == "be" || vm.virtio_console.is_none()));
    let rust = emitted(&system);
    assert!(rust.contains("virtio_console: Some(0),"), "{rust}");
}

#[test]
fn rule_22_virtio_peer_names_no_vm() {
    assert_rejected(
        "virtio-peer-unknown.toml",
        "vm 'be': virtio_console.peer: no VM is named 'rt-z'",
    );
}

#[test]
fn rule_22_virtio_peer_is_itself() {
    assert_rejected(
        "virtio-peer-itself.toml",
        "vm 'be': virtio_console.peer: 'be' is this VM: a virtio console's peer is another VM",
    );
}

#[test]
fn rule_22_virtio_input_needs_messages_from_the_peer() {
    assert_rejected(
        "virtio-input-not-allowed.toml",
        "vm 'be': virtio_console.peer: the console's input comes as messages from 'rt-b': this \
         VM's messages.from must list it",
    );
}

#[test]
fn rule_22_virtio_output_needs_the_peer_to_take_messages() {
    assert_rejected(
        "virtio-output-not-allowed.toml",
        "vm 'be': virtio_console.peer: the console's output goes as messages to 'rt-a', whose \
         messages table must list this VM in its from",
    );
}

#[test]
fn rule_22_message_interrupt_is_not_the_virtio_spi() {
    assert_rejected(
        "virtio-interrupt.toml",
        "vm 'be': messages.interrupt: 48 is the virtio console's interrupt: give another SGI \
         (0..=15) or SPI (32..=127)",
    );
}

// ---- Board devices given to VMs ([[vm.passthrough]]) -------------------------------------

/// The board of the passthrough rules: `passthrough/board.dts`, or `board-smmu.dts` for a
/// machine with an SMMU, or `zcu102.dts` for the ZCU102, compiled with dtc (once per run each).
fn passthrough_board(board: &keel_core::board::BoardDesc, smmu: bool) -> Result<Vec<u8>, String> {
    static BLOBS: [std::sync::OnceLock<Vec<u8>>; 3] = [
        std::sync::OnceLock::new(),
        std::sync::OnceLock::new(),
        std::sync::OnceLock::new(),
    ];
    let (slot, name) = match (board.name, smmu) {
        ("zcu102", _) => (2, "zcu102.dts"),
        (_, true) => (1, "board-smmu.dts"),
        (_, false) => (0, "board.dts"),
    };
    let blob = BLOBS[slot].get_or_init(|| {
        let output = std::process::Command::new("dtc")
            .args(["-I", "dts", "-O", "dtb"])
            .arg(Path::new(FIXTURES).join("passthrough").join(name))
            .output()
            .unwrap_or_else(|error| {
                panic!("dtc (Debian package device-tree-compiler) cannot start: {error}")
            });
        assert!(
            output.status.success(),
            "dtc: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        output.stdout
    });
    Ok(blob.clone())
}

/// `passthrough/valid.toml` with each `(old, new)` replaced, compiled against the board.
fn passthrough_with_all(replacements: &[(&str, &str)]) -> Result<System, String> {
    let path = Path::new(FIXTURES).join("passthrough/valid.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (old, new) in replacements {
        assert_eq!(text.matches(old).count(), 1, "{old:?}");
        text = text.replace(old, new);
    }
    keel_core::config::parse_str_with_board(&text, &path, &guest_image, &passthrough_board)
        .map_err(|error| error.to_string())
}

/// `passthrough/valid.toml` with `old` replaced by `new`, compiled against the board.
fn passthrough_with(old: &str, new: &str) -> Result<System, String> {
    passthrough_with_all(&[(old, new)])
}

/// Asserts the change is refused with `message` after the file's path.
fn assert_passthrough_refused(result: Result<System, String>, message: &str) {
    let path = Path::new(FIXTURES).join("passthrough/valid.toml");
    assert_eq!(
        result.map(|_| ()),
        Err(format!("{}: {message}", path.display()))
    );
}

const PL031: &str = "path = \"/pl031@9010000\"";

#[test]
fn passthrough_resolves_registers_interrupts_and_the_node() {
    use keel_core::addr::{GuestPhysAddr, MemoryRegion, PhysAddr};
    use keel_core::config::DeviceInterrupt;
    let system = passthrough_with_all(&[]).unwrap();
    let devices = &system.vms[0].passthrough;
    assert_eq!(devices.len(), 2);
    let (rtc, gpio) = (&devices[0], &devices[1]);
    assert_eq!(rtc.path, "/pl031@9010000");
    assert_eq!(
        rtc.regions,
        [MemoryRegion {
            ipa: GuestPhysAddr(0x0901_0000),
            phys: PhysAddr(0x0901_0000),
            size: 0x1000
        }]
    );
    assert_eq!(
        rtc.interrupts,
        [DeviceInterrupt {
            intid: 34,
            level: true
        }]
    );
    assert_eq!(rtc.node.name, "pl031@9010000");
    assert_eq!(rtc.node.clocks, [24_000_000]);
    assert!(rtc.node.children.is_empty());
    assert!(!rtc.unisolated_dma);
    let names: Vec<&str> = rtc
        .node
        .properties
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    // The board's clocks and phandles are not copied (the VM's tree has its own clock).
    assert_eq!(names, ["clock-names", "interrupts", "reg", "compatible"]);
    // Moved with `ipa`: the VM sees it there, its node named and its reg written for it.
    assert_eq!(gpio.regions[0].ipa, GuestPhysAddr(0x0c03_0000));
    assert_eq!(gpio.regions[0].phys, PhysAddr(0x0903_0000));
    assert_eq!(gpio.node.name, "pl061@c030000");
    let reg = &gpio
        .node
        .properties
        .iter()
        .find(|(n, _)| n == "reg")
        .unwrap()
        .1;
    assert_eq!(
        reg.as_slice(),
        [0, 0, 0, 0, 0x0c, 0x03, 0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0]
    );
    assert!(system.vms[1].passthrough.is_empty());
    // Emitted for the hypervisor.
    let source = emitted(&system);
    assert!(source.contains(
        "::keel_core::system::AssignedDevice { path: \"/pl031@9010000\", regions: &[::keel_core::addr::MemoryRegion { ipa: ::keel_core::addr::GuestPhysAddr(0x9010000), phys: ::keel_core::addr::PhysAddr(0x9010000), size: 0x1000 }], interrupts: &[::keel_core::system::AssignedInterrupt { intid: 34, level: true }], streams: &[] }"
    ));
    syn::parse_file(&source).expect("emitted Rust parses");
}

#[test]
fn passthrough_needs_the_boards_device_tree() {
    let path = Path::new(FIXTURES).join("passthrough/valid.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        parse_str(&text, &path, &guest_image)
            .map(|_| ())
            .map_err(|error| error.to_string()),
        Err(format!(
            "{}: vm 'rtc': passthrough: the board's device tree cannot be read: no board device \
             tree was given to the configuration compiler",
            path.display()
        ))
    );
}

#[test]
fn passthrough_path_names_a_node_under_the_root() {
    assert_passthrough_refused(
        passthrough_with(PL031, "path = \"pl031@9010000\""),
        "vm 'rtc': passthrough: 'pl031@9010000' is not a node directly under the root \
         ('/name@address')",
    );
    assert_passthrough_refused(
        passthrough_with(PL031, "path = \"/intc@8000000/its@8080000\""),
        "vm 'rtc': passthrough: '/intc@8000000/its@8080000' is not a node directly under the \
         root ('/name@address')",
    );
}

#[test]
fn passthrough_path_is_in_the_board() {
    assert_passthrough_refused(
        passthrough_with(PL031, "path = \"/pl031@9000000\""),
        "vm 'rtc': passthrough: '/pl031@9000000' is not in the device tree of board qemu-virt",
    );
    // The unit address is part of the name.
    assert_passthrough_refused(
        passthrough_with(PL031, "path = \"/pl031\""),
        "vm 'rtc': passthrough: '/pl031' is not in the device tree of board qemu-virt",
    );
}

#[test]
fn passthrough_lists_a_device_once() {
    assert_passthrough_refused(
        passthrough_with(
            "path = \"/pl061@9030000\"\nipa = 0x0c03_0000",
            "path = \"/pl031@9010000\"",
        ),
        "vm 'rtc': passthrough: '/pl031@9010000' is listed twice",
    );
}

#[test]
fn passthrough_refuses_keels_own_devices() {
    for (path, what) in [
        ("/intc@8000000", "the interrupt controller"),
        ("/pl011@9000000", "its console's UART"),
        ("/timer", "the architected timer"),
        ("/psci", "PSCI"),
        ("/memory@40000000", "RAM"),
    ] {
        assert_passthrough_refused(
            passthrough_with(PL031, &format!("path = \"{path}\"")),
            &format!("vm 'rtc': passthrough: '{path}' is Keel's own ({what})"),
        );
    }
}

#[test]
fn passthrough_needs_registers() {
    assert_passthrough_refused(
        passthrough_with(PL031, "path = \"/apb-pclk\""),
        "vm 'rtc': passthrough: '/apb-pclk' has no registers (reg) to map",
    );
}

#[test]
fn passthrough_registers_are_whole_pages() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/pl-bus@a0000000/timer@6800\""),
        "vm 'rt': passthrough: '/axi/pl-bus@a0000000/timer@6800' region 0xa0006800..0xa0006900 \
         is not 4 KiB aligned (stage 2 maps whole pages)",
    );
    assert_passthrough_refused(
        passthrough_with("ipa = 0x0c03_0000", "ipa = 0x0c03_0800"),
        "vm 'rtc': passthrough: '/pl061@9030000' region 0xc030800..0xc031800 is not 4 KiB \
         aligned (stage 2 maps whole pages)",
    );
}

#[test]
fn passthrough_register_page_is_the_devices_alone() {
    // The RTC's 256 bytes are mapped with the rest of their page, which no other node has
    // (passthrough_reaches_devices_under_buses); these two timers share one.
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/pl-bus@a0000000/timer@6000\""),
        "vm 'rt': passthrough: '/axi/pl-bus@a0000000/timer@6000' region 0xa0006000..0xa0006100 \
         is not a whole page, and the rest of its page 0xa0006000..0xa0007000 holds registers \
         of '/axi/pl-bus@a0000000/timer@6800' (stage 2 maps whole pages)",
    );
}

#[test]
fn system_ram_is_inside_the_boards_memory() {
    // A board's devices are never in its RAM: `[system] ram` over them is refused as RAM the
    // board does not have, before any device is given to a VM.
    assert_passthrough_refused(
        passthrough_with(
            "ram = { base = 0x4000_0000, size = \"1G\" }",
            "ram = { base = 0x0, size = \"2G\" }",
        ),
        "system: board: qemu-virt: ram 0x0..0x80000000 is not inside one of its memory banks \
         (0x40000000..0x80000000)",
    );
}

#[test]
fn system_hypervisor_is_2_mib_aligned() {
    assert_passthrough_refused(
        passthrough_with(
            "hypervisor = { base = 0x4000_0000, size = \"32M\" }",
            "hypervisor = { base = 0x4010_0000, size = \"32M\" }",
        ),
        "system: hypervisor: base 0x40100000 is not 2 MiB aligned: Keel's image is linked at \
         base + 2 MiB, where the loader puts an arm64 Image",
    );
}

#[test]
fn system_pcpus_are_the_boards() {
    assert_passthrough_refused(
        passthrough_with("pcpus = 3", "pcpus = 9"),
        "system: board: qemu-virt: pcpus = 9, but it has 8 CPUs",
    );
}

#[test]
fn system_board_is_one_keel_knows() {
    assert_passthrough_refused(
        passthrough_with(
            "name = \"passthrough\"",
            "name = \"passthrough\"\nboard = \"zcu104\"",
        ),
        "system: board: unknown board 'zcu104' (Keel knows qemu-virt, qemu-virt-gicv2, zcu102, \
         rpi4b)",
    );
}

#[test]
fn system_board_has_the_gic_keel_drives_on_it() {
    assert_passthrough_refused(
        passthrough_with(
            "name = \"passthrough\"",
            "name = \"passthrough\"\nboard = \"qemu-virt-gicv2\"",
        ),
        "system: board: qemu-virt-gicv2: its device tree has no GICv2 (compatible arm,gic-400 or \
         arm,cortex-a15-gic or arm,cortex-a7-gic), the interrupt controller Keel drives on it",
    );
}

#[test]
fn passthrough_registers_fit_the_guest_physical_space() {
    assert_passthrough_refused(
        passthrough_with("ipa = 0x0c03_0000", "ipa = 0x80_0000_0000"),
        "vm 'rtc': passthrough: '/pl061@9030000' at 0x8000000000..0x8000001000 lies beyond the \
         39-bit guest-physical space",
    );
}

#[test]
fn passthrough_registers_are_clear_of_what_the_vm_sees() {
    for (ipa, what) in [
        ("0x4000_0000", "its memory 0x40000000..0x41000000"),
        ("0x0900_0000", "the emulated PL011 0x9000000..0x9001000"),
        (
            "0x0800_0000",
            "the emulated GIC distributor 0x8000000..0x8010000",
        ),
        (
            "0x080a_0000",
            "the emulated GIC redistributors 0x80a0000..0x80c0000",
        ),
        (
            "0x0901_0000",
            "the registers of '/pl031@9010000' at 0x9010000..0x9011000",
        ),
    ] {
        let pl061 = format!("pl061@9030000' at {}", {
            let value = u64::from_str_radix(&ipa[2..].replace('_', ""), 16).unwrap();
            format!("{value:#x}..{:#x}", value + 0x1000)
        });
        assert_passthrough_refused(
            passthrough_with("ipa = 0x0c03_0000", &format!("ipa = {ipa}")),
            &format!("vm 'rtc': passthrough: '/{pl061} overlaps {what}"),
        );
    }
}

#[test]
fn passthrough_registers_are_clear_of_the_vms_sp805() {
    let with_watchdog = (
        "devices = [\"console\"]\n\n[[vm.passthrough]]",
        "devices = [\"console\", \"watchdog\"]\n\n[vm.health]\nwatchdog = { action = \"stop\" }\n\n[[vm.passthrough]]",
    );
    assert!(passthrough_with_all(&[with_watchdog]).is_ok());
    assert_passthrough_refused(
        passthrough_with_all(&[with_watchdog, ("ipa = 0x0c03_0000", "ipa = 0x0b00_0000")]),
        "vm 'rtc': passthrough: '/pl061@9030000' at 0xb000000..0xb001000 overlaps the emulated \
         SP805 0xb000000..0xb001000",
    );
}

#[test]
fn passthrough_gives_a_device_to_one_vm() {
    assert_passthrough_refused(
        passthrough_with(
            "devices = [\"console\"]\n\n[[channel]]",
            "devices = [\"console\"]\npassthrough = [{ path = \"/pl031@9010000\" }]\n\n[[channel]]",
        ),
        "vm 'other': passthrough: '/pl031@9010000' is already given to vm 'rtc'",
    );
}

#[test]
fn passthrough_interrupts_are_spis_keel_can_forward() {
    for (path, why) in [
        (
            "/ppi-device@9100000",
            "PPI 5 (a private interrupt of each CPU; only SPIs are forwarded)",
        ),
        (
            "/high-spi@9110000",
            "INTID 144 is beyond the 128 interrupts of Keel's virtual GIC",
        ),
        (
            "/falling-edge@9120000",
            "INTID 64 has trigger type 2 (the GIC takes level-high (4) or edge-rising (1))",
        ),
    ] {
        assert_passthrough_refused(
            passthrough_with(PL031, &format!("path = \"{path}\"")),
            &format!("vm 'rtc': passthrough: '{path}' has an interrupt Keel cannot forward: {why}"),
        );
    }
}

#[test]
fn passthrough_interrupts_are_the_vms_alone() {
    assert_passthrough_refused(
        passthrough_with(
            "devices = [\"console\"]\n\n[[vm.passthrough]]",
            "devices = [\"console\"]\nmessages = { depth = 4, size = 64, interrupt = 34, from = [\"other\"] }\n\n[[vm.passthrough]]",
        ),
        "vm 'rtc': passthrough: '/pl031@9010000' interrupt 34 is already its message interrupt",
    );
}

#[test]
fn passthrough_clock_is_fixed_or_given_a_rate() {
    // A clock is named by its clock-names entry, or else by its position.
    assert_passthrough_refused(
        passthrough_with(PL031, "path = \"/pll-clocked@9130000\""),
        "vm 'rtc': passthrough: '/pll-clocked@9130000': clock '0' comes from '/pl061@9030000' \
         (arm,pl061), not a fixed clock: give the rate it runs at on the board with clocks = { 0 \
         = \"<frequency>\" } in its [[vm.passthrough]] table (e.g. \"100MHz\"), and the VM's \
         device tree gets a fixed clock of that rate",
    );
    assert!(passthrough_with(
        PL031,
        "path = \"/pll-clocked@9130000\"\nclocks = { 0 = \"1MHz\" }"
    )
    .is_ok());
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GEM_CLOCKS, ""),
        "vm 'linux': passthrough: '/axi/ethernet@ff0e0000': clock 'pclk' comes from \
         '/firmware/zynqmp-firmware/clock-controller' (xlnx,zynqmp-clk), not a fixed clock: give \
         the rate it runs at on the board with clocks = { pclk = \"<frequency>\" } in its \
         [[vm.passthrough]] table (e.g. \"100MHz\"), and the VM's device tree gets a fixed \
         clock of that rate",
    );
}

#[test]
fn passthrough_clock_rates_name_the_devices_clocks() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(
            "tsu_clk = \"250MHz\"",
            "tsu_clk = \"250MHz\", ref_clk = \"1MHz\"",
        ),
        "vm 'linux': passthrough: '/axi/ethernet@ff0e0000': clocks.ref_clk: it has no clock of \
         that name (its clocks: pclk, hclk, tx_clk, rx_clk, tsu_clk)",
    );
    assert_passthrough_refused_on_zcu102(
        zcu102_with(
            "path = \"/axi/rtc@ffa60000\"",
            "path = \"/axi/rtc@ffa60000\"\nclocks = { \"rtc.clk\" = \"32.768kHz\" }",
        ),
        "vm 'linux': passthrough: '/axi/rtc@ffa60000': clocks.\"rtc.clk\": it has no clock of \
         that name (it has no clocks)",
    );
}

#[test]
fn passthrough_clock_rates_are_frequencies() {
    for (rate, why) in [
        (
            "\"100\"",
            "'100' has no unit (write e.g. \"100MHz\" or \"32.768kHz\")",
        ),
        (
            "100",
            "'100' has no unit (write e.g. \"100MHz\" or \"32.768kHz\")",
        ),
        (
            "\"100 mhz\"",
            "'100 mhz' has the unit 'mhz', not Hz, kHz, MHz or GHz (write e.g. \"100MHz\" or \
             \"32.768kHz\")",
        ),
        (
            "\"fast\"",
            "'fast' is not a frequency (write e.g. \"100MHz\" or \"32.768kHz\")",
        ),
        ("\"0.5Hz\"", "'0.5Hz' is not a whole number of hertz"),
        (
            "\"5GHz\"",
            "'5GHz' is not between 1 Hz and 4294967295 Hz (a fixed clock's clock-frequency is \
             one 32-bit cell)",
        ),
    ] {
        assert_passthrough_refused_on_zcu102(
            zcu102_with("pclk = \"100MHz\"", &format!("pclk = {rate}")),
            &format!("vm 'linux': passthrough: '/axi/ethernet@ff0e0000': clocks.pclk: {why}"),
        );
    }
}

#[test]
fn passthrough_refuses_dma_masters_without_an_smmu() {
    let unguarded = |path: &str, what: &str| {
        format!(
            "'{path}' can master DMA ({what}) and no SMMU Keel drives guards it: its DMA would \
             reach all of physical memory, Keel's and the other VMs' included (a VM mapped 1:1 \
             may accept that with unisolated_dma = true)"
        )
    };
    for (path, what) in [
        ("/pcie@10000000", "a PCI host bridge"),
        ("/behind-iommu@9140000", "the board puts it behind an IOMMU"),
        (
            "/fw-cfg@9020000",
            "its DMA is coherent with the CPUs (dma-coherent)",
        ),
    ] {
        assert_passthrough_refused(
            passthrough_with(PL031, &format!("path = \"{path}\"")),
            &format!("vm 'rtc': passthrough: {}", unguarded(path, what)),
        );
    }
    assert_passthrough_refused_on_zcu102(
        zcu102_with("unisolated_dma = true\n", ""),
        &format!(
            "vm 'linux': passthrough: {}",
            unguarded(
                "/axi/ethernet@ff0e0000",
                "the board puts it behind the IOMMU '/axi/iommu@fd800000' (arm,mmu-500)"
            )
        ),
    );
    for (path, what) in [
        (
            "/axi/dma-controller@ffa80000",
            "a DMA controller (#dma-cells)",
        ),
        (
            "/axi/pl-bus@a0000000/ethernet@8000",
            "a known bus master (cdns,macb)",
        ),
        (
            "/axi/pl-bus@a0000000/iommu@9000",
            "an IOMMU (its table walks read memory)",
        ),
    ] {
        assert_passthrough_refused_on_zcu102(
            zcu102_with(GPIO, &format!("path = \"{path}\"")),
            &format!("vm 'rt': passthrough: {}", unguarded(path, what)),
        );
    }
}

#[test]
fn passthrough_unisolated_dma_needs_a_vm_mapped_one_to_one() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with("ipa = 0x4000_0000\n", "ipa = 0x6000_0000\n"),
        "vm 'linux': passthrough: '/axi/ethernet@ff0e0000': unisolated_dma = true needs the VM \
         mapped 1:1, and its memory at ipa 0x60000000 is at physical 0x40000000: the device's \
         DMA addresses would be IPAs, which the hardware takes for physical addresses",
    );
    // A device the compiler does not take for a DMA master may be declared one: the same rule.
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, &format!("{GPIO}\nunisolated_dma = true")),
        "vm 'rt': passthrough: '/axi/pl-bus@a0000000/gpio@3000': unisolated_dma = true needs \
         the VM mapped 1:1, and its memory at ipa 0x40000000 is at physical 0x50000000: the \
         device's DMA addresses would be IPAs, which the hardware takes for physical addresses",
    );
    // Flash at IPA 0 is mapped 1:1 only if it is at physical 0 too.
    assert_passthrough_refused_on_zcu102(
        zcu102_with(
            "ipa = 0x4000_0000\n",
            "ipa = 0x4000_0000\nflash = { base = 0x3000_0000, size = \"16M\" }\n",
        ),
        "vm 'linux': passthrough: '/axi/ethernet@ff0e0000': unisolated_dma = true needs the VM \
         mapped 1:1, and its flash at ipa 0x0 is at physical 0x30000000: the device's DMA \
         addresses would be IPAs, which the hardware takes for physical addresses",
    );
}

#[test]
fn passthrough_unisolated_dma_is_not_for_a_device_the_smmu_guards() {
    assert_passthrough_refused(
        smmu_with(PL031, "path = \"/pcie@10000000\"\nunisolated_dma = true"),
        "vm 'rtc': passthrough: '/pcie@10000000': unisolated_dma = true, but the SMMU Keel \
         drives guards its DMA (remove unisolated_dma)",
    );
}

#[test]
fn channel_interrupt_is_not_a_members_device_interrupt() {
    assert_passthrough_refused(
        passthrough_with("interrupt = 40", "interrupt = 34"),
        "channel 'shared': interrupt: 34 is the interrupt of '/pl031@9010000', given to member \
         vm 'rtc': give another SGI (0..=15) or SPI (32..=127)",
    );
}

#[test]
fn channel_window_is_clear_of_a_members_device() {
    assert_passthrough_refused(
        passthrough_with("ipa = 0x0c03_0000", "ipa = 0x6000_0000"),
        "channel 'shared' vm 'rtc': ipa: window 0x60000000..0x60010000 overlaps the registers \
         of '/pl061@9030000' at 0x60000000..0x60001000",
    );
}

/// `passthrough/valid.toml` with `[system] iommu = "smmuv3"` and `old` replaced by `new`.
fn smmu_with(old: &str, new: &str) -> Result<System, String> {
    passthrough_with_all(&[
        ("pcpus = 3\n", "pcpus = 3\niommu = \"smmuv3\"\n"),
        (old, new),
    ])
}

#[test]
fn iommu_names_the_boards_smmu() {
    let system = smmu_with(PL031, "path = \"/pcie@10000000\"").unwrap();
    let iommu = system.iommu.as_ref().unwrap();
    assert_eq!(
        (iommu.path.as_str(), iommu.phys, iommu.size),
        ("/smmuv3@9050000", 0x0905_0000, 0x2_0000)
    );
    assert_eq!((iommu.event_intid, iommu.gerror_intid), (106, 109));
    let bridge = &system.vms[0].passthrough[0];
    // ECAM, then the I/O and 32-bit windows (the 64-bit one lies beyond the IPA space).
    let regions: Vec<(u64, u64)> = bridge
        .regions
        .iter()
        .map(|region| (region.ipa.0, region.size))
        .collect();
    assert_eq!(
        regions,
        [
            (0x40_1000_0000, 0x1000_0000),
            (0x3eff_0000, 0x1_0000),
            (0x1000_0000, 0x2eff_0000)
        ]
    );
    let intids: Vec<(u32, bool)> = bridge
        .interrupts
        .iter()
        .map(|interrupt| (interrupt.intid, interrupt.level))
        .collect();
    assert_eq!(intids, [(35, true), (36, true), (37, true), (38, true)]);
    // Requester ID = stream ID: the bridge's iommu-map, every bus behind it (all 16-bit
    // streams, which Keel's two-level stream table covers).
    assert_eq!(bridge.streams, [(0, 0xffff)]);
    // Keel's pools of tables: each VM's stage-2 allowance of 32; the SMMU's stage 1 only for
    // the VM whose device masters DMA, its allowance of 4.
    let stage2 = format!(
        "pub const STAGE2_TABLES: usize = {};\n",
        32 * system.vms.len()
    );
    assert_emits(&system, &[&stage2, "pub const SMMU_TABLES: usize = 4;\n"]);
    let property = |name: &str| {
        &bridge
            .node
            .properties
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .1
    };
    // Two windows kept of three, 7 cells each; 16 map entries of 10 cells, the parent the
    // VM's GIC.
    assert_eq!(property("ranges").len(), 2 * 7 * 4);
    let map = property("interrupt-map");
    assert_eq!(map.len(), 16 * 10 * 4);
    assert!(map
        .chunks_exact(40)
        .all(|entry| entry[16..20] == 1u32.to_be_bytes()));
    for dropped in ["iommu-map", "msi-map", "phandle"] {
        assert!(bridge.node.properties.iter().all(|(n, _)| n != dropped));
    }
}

#[test]
fn iommu_is_smmuv3() {
    assert_passthrough_refused(
        passthrough_with("pcpus = 3\n", "pcpus = 3\niommu = \"smmuv2\"\n"),
        "system: iommu: unknown IOMMU 'smmuv2' (expected 'smmuv3')",
    );
}

#[test]
fn iommu_needs_an_smmu_on_the_board() {
    let path = Path::new(FIXTURES).join("passthrough/valid.toml");
    let text = std::fs::read_to_string(&path)
        .unwrap()
        .replace("pcpus = 3\n", "pcpus = 3\niommu = \"smmuv3\"\n");
    let without_smmu =
        |board: &'static keel_core::board::BoardDesc, _smmu: bool| passthrough_board(board, false);
    assert_passthrough_refused(
        keel_core::config::parse_str_with_board(&text, &path, &guest_image, &without_smmu)
            .map_err(|error| error.to_string()),
        "system: iommu: board qemu-virt has no SMMUv3 (its device tree has no arm,smmu-v3 node)",
    );
}

#[test]
fn passthrough_streams_are_one_vms() {
    assert_passthrough_refused(
        passthrough_with_all(&[
            ("pcpus = 3\n", "pcpus = 3\niommu = \"smmuv3\"\n"),
            (PL031, "path = \"/pcie@10000000\""),
            (
                "devices = [\"console\"]\n\n[[channel]]",
                "devices = [\"console\"]\npassthrough = [{ path = \"/behind-iommu@9140000\" }]\n\n[[channel]]",
            ),
        ]),
        "vm 'other': passthrough: '/behind-iommu@9140000' streams 8..=8 are already vm 'rtc''s",
    );
}

#[test]
fn passthrough_streams_are_in_keels_stream_table() {
    assert_passthrough_refused(
        smmu_with(PL031, "path = \"/high-stream@9150000\""),
        "vm 'rtc': passthrough: '/high-stream@9150000' masters DMA only with streams from \
         65552, beyond the 65536 Keel's stream table covers",
    );
    // Stream 300 (a requester ID on bus 1) is covered, as the bridge's 0-0xffff are.
    let system = smmu_with(PL031, "path = \"/bus-one@9160000\"").unwrap();
    assert_eq!(system.vms[0].passthrough[0].streams, [(300, 300)]);
    let system = smmu_with(PL031, "path = \"/pcie@10000000\"").unwrap();
    assert_eq!(system.vms[0].passthrough[0].streams, [(0, 0xffff)]);
}

#[test]
fn passthrough_streams_fit_keels_level2_stream_arrays() {
    // Single streams in five blocks of 256: an array each, one more than Keel has.
    let paths = [
        "/behind-iommu@9140000",
        "/bus-one@9160000",
        "/bus-two@9170000",
        "/bus-three@9180000",
        "/bus-four@9190000",
    ];
    let entries: Vec<String> = paths.iter().map(|p| format!("path = \"{p}\"")).collect();
    let four = entries[..4].join("\n\n[[vm.passthrough]]\n");
    assert!(smmu_with(PL031, &four).is_ok());
    assert_passthrough_refused(
        smmu_with(PL031, &entries.join("\n\n[[vm.passthrough]]\n")),
        "vm 'rtc': passthrough: '/bus-four@9190000''s streams would make the VMs' streams need 5 \
         level-2 stream table arrays, and Keel has 4 (one per VM owning whole blocks of 256 \
         streams, one per block split between owners)",
    );
}

#[test]
fn passthrough_streams_fit_keels_stream_ranges() {
    // 32 single streams in one block of 256 (one array): as many ranges as Keel takes.
    let many = "path = \"/many-streams@91a0000\"";
    let system = smmu_with(PL031, many).unwrap();
    assert_eq!(system.vms[0].passthrough[0].streams.len(), 32);
    // One more, in the same block: a range Keel's driver would have no room for.
    assert_passthrough_refused(
        smmu_with(
            PL031,
            &format!("{many}\n\n[[vm.passthrough]]\npath = \"/one-more-stream@91b0000\""),
        ),
        "vm 'rtc': passthrough: '/one-more-stream@91b0000''s streams would make the VMs' \
         devices 33 stream ranges (an iommu-map entry or an iommus stream each), and Keel takes \
         32",
    );
}

#[test]
fn passthrough_bridge_stays_where_the_board_has_it() {
    assert_passthrough_refused(
        passthrough_with_all(&[
            ("pcpus = 3\n", "pcpus = 3\niommu = \"smmuv3\"\n"),
            (PL031, "path = \"/pcie@10000000\"\nipa = 0x1000_0000"),
        ]),
        "vm 'rtc': passthrough: '/pcie@10000000': 'ipa' cannot move a node with 'ranges' (its \
         windows stay where the board has them)",
    );
}

// ---- The ZCU102's devices: under the /axi bus, with firmware clocks, DMA without an SMMU --

/// `passthrough/zcu102.toml` with each `(old, new)` replaced, compiled against the ZCU102.
fn zcu102_with_all(replacements: &[(&str, &str)]) -> Result<System, String> {
    let path = Path::new(FIXTURES).join("passthrough/zcu102.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (old, new) in replacements {
        assert_eq!(text.matches(old).count(), 1, "{old:?}");
        text = text.replace(old, new);
    }
    keel_core::config::parse_str_with_board(&text, &path, &guest_image, &passthrough_board)
        .map_err(|error| error.to_string())
}

/// `passthrough/zcu102.toml` with `old` replaced by `new`, compiled against the ZCU102.
fn zcu102_with(old: &str, new: &str) -> Result<System, String> {
    zcu102_with_all(&[(old, new)])
}

/// Asserts the change to `zcu102.toml` is refused with `message` after the file's path.
fn assert_passthrough_refused_on_zcu102(result: Result<System, String>, message: &str) {
    let path = Path::new(FIXTURES).join("passthrough/zcu102.toml");
    assert_eq!(
        result.map(|_| ()),
        Err(format!("{}: {message}", path.display()))
    );
}

/// The real-time partition's device in `zcu102.toml`: the entry the ZCU102 tests change.
const GPIO: &str = "path = \"/axi/pl-bus@a0000000/gpio@3000\"";
/// The rates `zcu102.toml` gives GEM3's firmware clocks.
const GEM_CLOCKS: &str = "clocks = { pclk = \"100MHz\", hclk = \"125MHz\", tx_clk = \"125MHz\", \
                          rx_clk = \"125MHz\", tsu_clk = \"250MHz\" }\n";

/// The value of property `name` of `node`.
fn property<'n>(node: &'n keel_core::config::DeviceNode, name: &str) -> &'n [u8] {
    &node
        .properties
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("{} has no {name}", node.name))
        .1
}

#[test]
fn passthrough_reaches_devices_under_buses() {
    use keel_core::addr::{GuestPhysAddr, MemoryRegion, PhysAddr};
    let system = zcu102_with_all(&[]).unwrap();
    let linux = &system.vms[0];
    let (rtc, gem) = (&linux.passthrough[0], &linux.passthrough[1]);
    // The RTC's 256 bytes under /axi (identity ranges): its page mapped, its reg as the
    // board's, its node at the VM's top level.
    assert_eq!(
        rtc.regions,
        [MemoryRegion {
            ipa: GuestPhysAddr(0xffa6_0000),
            phys: PhysAddr(0xffa6_0000),
            size: 0x1000
        }]
    );
    assert_eq!(rtc.node.name, "rtc@ffa60000");
    assert_eq!(
        property(&rtc.node, "reg"),
        [0, 0, 0, 0, 0xff, 0xa6, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]
    );
    let intids: Vec<u32> = rtc.interrupts.iter().map(|i| i.intid).collect();
    assert_eq!(intids, [58, 59]);
    let names = |node: &keel_core::config::DeviceNode| -> Vec<String> {
        node.properties.iter().map(|(n, _)| n.clone()).collect()
    };
    assert_eq!(
        names(&rtc.node),
        [
            "compatible",
            "status",
            "reg",
            "interrupts",
            "interrupt-names",
            "calibration"
        ]
    );
    assert!(rtc.node.clocks.is_empty() && rtc.streams.is_empty());
    // GEM3: its one SPI once, no SMMU streams (its DMA accepted unisolated), its firmware
    // clocks at the rates given, its board plumbing left out, its PHY kept and renumbered.
    assert_eq!(gem.node.name, "ethernet@ff0e0000");
    assert_eq!(gem.regions[0].phys, PhysAddr(0xff0e_0000));
    let intids: Vec<u32> = gem.interrupts.iter().map(|i| i.intid).collect();
    assert_eq!(intids, [95]);
    assert!(gem.unisolated_dma && gem.streams.is_empty());
    assert_eq!(
        gem.node.clocks,
        [
            100_000_000,
            125_000_000,
            125_000_000,
            125_000_000,
            250_000_000
        ]
    );
    assert_eq!(
        names(&gem.node),
        [
            "compatible",
            "status",
            "interrupts",
            "reg",
            "clock-names",
            "#address-cells",
            "#size-cells",
            "phy-handle",
            "phy-mode"
        ]
    );
    assert_eq!(property(&gem.node, "phy-handle"), 0x1000u32.to_be_bytes());
    let phy = &gem.node.children[0];
    assert_eq!(phy.name, "ethernet-phy@c");
    assert_eq!(
        names(phy),
        [
            "reg",
            "ti,rx-internal-delay",
            "ti,tx-internal-delay",
            "ti,fifo-depth",
            "ti,dp83867-rxctrl-strap-quirk",
            "phandle"
        ]
    );
    assert_eq!(property(phy, "phandle"), 0x1000u32.to_be_bytes());
    // A bus that translates (its 0x3000 is the CPUs' 0xa0003000), inside /axi; its fixed clock
    // copied from the board.
    let gpio = &system.vms[1].passthrough[0];
    assert_eq!(gpio.regions[0].phys, PhysAddr(0xa000_3000));
    assert_eq!(gpio.regions[0].ipa, GuestPhysAddr(0xa000_3000));
    assert_eq!(gpio.node.name, "gpio@a0003000");
    assert_eq!(gpio.node.clocks, [27_000_000]);
    assert_eq!(gpio.interrupts[0].intid, 121);
    // `ipa` moves a device under a bus as any other.
    let moved = zcu102_with(GPIO, &format!("{GPIO}\nipa = 0x0c00_0000")).unwrap();
    assert_eq!(moved.vms[1].passthrough[0].node.name, "gpio@c000000");
}

#[test]
fn passthrough_under_a_node_that_is_not_a_bus_is_refused() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/ethernet@ff0e0000/ethernet-phy@c\""),
        "vm 'rt': passthrough: '/axi/ethernet@ff0e0000/ethernet-phy@c' is not a node directly \
         under the root ('/name@address')",
    );
}

#[test]
fn passthrough_bus_maps_its_children() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/no-ranges-bus/device@1000\""),
        "vm 'rt': passthrough: '/axi/no-ranges-bus/device@1000': its bus '/axi/no-ranges-bus' \
         has no 'ranges', so its registers are not at addresses the CPUs see",
    );
}

#[test]
fn passthrough_registers_are_inside_the_buses_ranges() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/pl-bus@a0000000/beyond@200000\""),
        "vm 'rt': passthrough: '/axi/pl-bus@a0000000/beyond@200000' region 0x200000..0x201000 \
         (in bus '/axi/pl-bus@a0000000''s addresses) is outside that bus's 'ranges'",
    );
}

#[test]
fn passthrough_of_a_device_the_board_lacks_says_so() {
    // QEMU virt's PCI host bridge on the ZCU102.
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/pcie@10000000\""),
        "vm 'rt': passthrough: '/pcie@10000000' is not in the device tree of board zcu102",
    );
}

#[test]
fn passthrough_device_is_enabled_on_the_board() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/ethernet@ff0b0000\""),
        "vm 'rt': passthrough: '/axi/ethernet@ff0b0000' is disabled in the board's device tree \
         (status = \"disabled\"): the board does not wire it up, or keeps it for its firmware",
    );
}

#[test]
fn passthrough_refuses_keels_own_devices_under_buses() {
    for (path, what) in [
        (
            "/axi/interrupt-controller@f9010000",
            "the interrupt controller",
        ),
        // stdout-path = "serial0:115200n8", serial0 = "/axi/serial@ff000000".
        ("/axi/serial@ff000000", "its console's UART"),
    ] {
        assert_passthrough_refused_on_zcu102(
            zcu102_with(GPIO, &format!("path = \"{path}\"")),
            &format!("vm 'rt': passthrough: '{path}' is Keel's own ({what})"),
        );
    }
}

#[test]
fn passthrough_node_refers_to_nothing_outside_the_device() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/pl-bus@a0000000/sensor@7000\""),
        "vm 'rt': passthrough: '/axi/pl-bus@a0000000/sensor@7000': it has 'io-channels', a \
         reference to '/axi/gpio@ff0a0000' outside the device, which the VM's device tree \
         cannot have",
    );
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/pl-bus@a0000000/mac@4000\""),
        "vm 'rt': passthrough: '/axi/pl-bus@a0000000/mac@4000': its child 'ethernet-phy@1' has \
         'reset-gpios', a reference to '/axi/gpio@ff0a0000' outside the device, which the VM's \
         device tree cannot have",
    );
}

#[test]
fn passthrough_child_nodes_have_no_interrupts() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with(GPIO, "path = \"/axi/pl-bus@a0000000/mac@5000\""),
        "vm 'rt': passthrough: '/axi/pl-bus@a0000000/mac@5000': its child 'ethernet-phy@2' has \
         interrupts, which Keel does not forward (only the device's own)",
    );
}

#[test]
fn passthrough_survives_any_board_tree() {
    // The board's device tree is input too: every byte of the ZCU102's flipped, and every
    // cell made 0xffffffff, one at a time, is refused or accepted, never a panic.
    let path = Path::new(FIXTURES).join("passthrough/zcu102.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let blob = passthrough_board(keel_core::board::board("zcu102").unwrap(), false).unwrap();
    let mut accepted = 0;
    let mutants = (0..blob.len())
        .map(|offset| (offset, None))
        .chain((0..blob.len() / 4).map(|cell| (cell * 4, Some(u32::MAX))));
    for (offset, cell) in mutants {
        let mut mutant = blob.clone();
        match cell {
            None => mutant[offset] ^= 0xff,
            Some(value) => mutant[offset..offset + 4].copy_from_slice(&value.to_be_bytes()),
        }
        let board = |_: &'static keel_core::board::BoardDesc, _: bool| Ok(mutant.clone());
        if keel_core::config::parse_str_with_board(&text, &path, &guest_image, &board).is_ok() {
            accepted += 1;
        }
    }
    assert!(accepted > 0, "some mutants only change what no rule reads");
}

#[test]
fn iommu_is_one_the_board_has() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with("pcpus = 4\n", "pcpus = 4\niommu = \"smmuv3\"\n"),
        "system: iommu: board zcu102 has no SMMUv3 (its device tree has no arm,smmu-v3 node); it \
         has '/axi/iommu@fd800000' (arm,mmu-500), an IOMMU Keel does not drive",
    );
}

// ---- Keel's trace ------------------------------------------------------------------------

#[test]
fn trace_sizes_each_pcpus_ring_and_names_its_reader() {
    let system = load_fixture("trace-valid.toml");
    assert_eq!(system.trace_bytes, 256 << 10);
    assert!(system.vms[0].trace_reader);
    assert_eq!(
        load_fixture("valid.toml").trace_bytes,
        0,
        "no trace unless asked"
    );
}

#[test]
fn trace_ring_is_a_power_of_two() {
    assert_rejected(
        "trace-size-not-power-of-two.toml",
        "system: trace.size: 98304 bytes is not a power of two between 4096 and 67108864",
    );
}

#[test]
fn trace_rings_fit_in_half_of_keels_region() {
    assert_rejected(
        "trace-rings-too-large.toml",
        "system: trace.size: the trace rings take 16777344 bytes (2 pCPUs, each ring with its 64-byte header), above half of Keel's region (16777216)",
    );
}

// ---- Cache colouring -------------------------------------------------------------------------

/// `valid-colours.toml` with each `(old, new)` of `replacements` made, compiled against `board`.
fn colours_on_board(
    replacements: &[(&str, &str)],
    board: keel_core::config::BoardTree,
) -> Result<System, String> {
    let path = Path::new(FIXTURES).join("valid-colours.toml");
    let mut text = std::fs::read_to_string(&path).unwrap();
    for (old, new) in replacements {
        assert_eq!(text.matches(old).count(), 1, "{old:?}");
        text = text.replace(old, new);
    }
    keel_core::config::parse_str_with_board(&text, &path, &guest_image, board)
        .map_err(|error| error.to_string())
}

/// `valid-colours.toml` with each `(old, new)` of `replacements` made, compiled without a
/// board device tree.
fn colours_with_all(replacements: &[(&str, &str)]) -> Result<System, String> {
    colours_on_board(replacements, &keel_core::config::no_board_tree)
}

/// Asserts the change to `valid-colours.toml` is refused with `message` after the file's path
/// (and `: `, or `:` before a TOML error's line and column).
fn assert_colours_refused(result: Result<System, String>, message: &str) {
    let separator = if message.starts_with(|c: char| c.is_ascii_digit()) {
        ":"
    } else {
        ": "
    };
    assert_eq!(
        result.map(|_| ()),
        Err(format!(
            "tests/fixtures/valid-colours.toml{separator}{message}"
        ))
    );
}

/// `valid-colours.toml`'s `[system] llc`: without it the geometry comes from the board.
const LLC: &str = "llc = { size = \"1M\", ways = 16, line = 64 }\n";

/// The changes that take every VM of `valid-colours.toml` out of colouring (rt-b moved off
/// rt-a's memory, which they no longer interleave in).
const UNCOLOURED: [(&str, &str); 4] = [
    ("colours = \"0-3\"\ncolours_exclusive = true\n", ""),
    ("colours = \"4-7\"\n", ""),
    ("colours = \"8-15\"\n", ""),
    (
        "base = 0x4800_0000, size = \"16M\" }\npcpus = [2]",
        "base = 0x4900_0000, size = \"16M\" }\npcpus = [2]",
    ),
];

/// `passthrough/board.dts` (QEMU `virt`'s nodes) with `caches` added under `/cpus`, after the
/// CPUs, compiled with dtc.
fn board_with_caches(caches: &str) -> Vec<u8> {
    use std::io::Write;
    let source =
        std::fs::read_to_string(Path::new(FIXTURES).join("passthrough/board.dts")).unwrap();
    let end_of_cpus = "\t};\n\n\tpsci {\n";
    assert_eq!(source.matches(end_of_cpus).count(), 1);
    let source = source.replace(end_of_cpus, &format!("{caches}{end_of_cpus}"));
    let mut dtc = std::process::Command::new("dtc")
        .args(["-I", "dts", "-O", "dtb", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| {
            panic!("dtc (Debian package device-tree-compiler) cannot start: {error}")
        });
    dtc.stdin
        .take()
        .unwrap()
        .write_all(source.as_bytes())
        .unwrap();
    let output = dtc.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "dtc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

/// `valid-colours.toml` without its `[system] llc`, each `(old, new)` of `replacements` made,
/// compiled against QEMU `virt`'s tree with `caches` under `/cpus`.
fn colours_with_board_caches(
    caches: &str,
    replacements: &[(&str, &str)],
) -> Result<System, String> {
    let blob = board_with_caches(caches);
    let board = move |_: &'static keel_core::board::BoardDesc, _: bool| Ok(blob.clone());
    let mut all = vec![(LLC, "")];
    all.extend_from_slice(replacements);
    colours_on_board(&all, &board)
}

/// A Cortex-A72-like cluster's level-2 cache, 512 KiB and 16-way (`size` bytes and `sets` as
/// given), under `/cpus`.
fn l2_cache(size: u32, sets: &str) -> String {
    format!(
        "\t\tl2-cache {{\n\t\t\tcompatible = \"cache\";\n\t\t\tcache-level = <2>;\n\
         \t\t\tcache-unified;\n\t\t\tcache-size = <{size:#x}>;\n{sets}\
         \t\t\tcache-line-size = <64>;\n\t\t}};\n"
    )
}

#[test]
fn coloured_vms_get_their_colours_and_interleave_in_one_range() {
    let system = load_fixture("valid-colours.toml");
    assert_eq!(
        system.llc,
        Some(keel_core::colour::CacheGeometry {
            size: 1 << 20,
            ways: 16,
            line: 64
        })
    );
    let [rt_a, rt_b, linux] = &system.vms[..] else {
        panic!("three VMs");
    };
    assert_eq!(
        (
            rt_a.colours.mask,
            rt_a.colours.count,
            rt_a.colours_exclusive
        ),
        (0xf, 16, true)
    );
    assert_eq!(
        (
            rt_b.colours.mask,
            rt_b.colours.count,
            rt_b.colours_exclusive
        ),
        (0xf0, 16, false)
    );
    assert_eq!(linux.colours.mask, 0xff00);
    // The guest's RAM keeps its size; its frames span four times as much (twice for Linux).
    assert_eq!((rt_a.phys, rt_a.size), (0x4800_0000, 16 << 20));
    assert_eq!(rt_a.span(), (64 << 20) - 12 * 4096);
    assert_eq!(linux.span(), 128 << 20);
    assert_eq!(
        load_fixture("valid.toml").llc,
        None,
        "no geometry unless given"
    );
}

#[test]
fn coloured_vms_are_emitted_with_their_colours_and_page_tables() {
    let system = load_fixture("valid-colours.toml");
    assert_emits(
        &system,
        &[
            "colours: ::keel_core::colour::Colours { mask: 0xf, count: 16 },",
            "colours: ::keel_core::colour::Colours { mask: 0xf0, count: 16 },",
            "colours: ::keel_core::colour::Colours { mask: 0xff00, count: 16 },",
            // Each 16 MiB: 8 + 1 level-3 and 1 + 1 level-2 tables; 64 MiB: 32 + 1 and 1 + 1.
            "pub const COLOURED_TABLES: usize = 57;",
        ],
    );
}

#[test]
fn colour_report_gives_each_vms_share_of_the_cache() {
    assert_eq!(
        keel_core::config::colour_report(&load_fixture("valid-colours.toml")),
        [
            "vm 'rt-a': colours 0-3 (exclusive): 4 of 16 colours, 256 KiB of the 1 MiB LLC; \
             16 MiB in [0x48000000, 0x4bff4000)",
            "vm 'rt-b': colours 4-7: 4 of 16 colours, 256 KiB of the 1 MiB LLC; 16 MiB in \
             [0x48000000, 0x4bff8000)",
            "vm 'linux': colours 8-15: 8 of 16 colours, 512 KiB of the 1 MiB LLC; 64 MiB in \
             [0x50000000, 0x58000000)",
        ]
    );
    let uncoloured_linux = colours_with_all(&[
        ("colours_exclusive = true\n", ""),
        ("colours = \"8-15\"\n", ""),
    ])
    .unwrap();
    assert_eq!(
        keel_core::config::colour_report(&uncoloured_linux)[2],
        "vm 'linux': all 16 colours, the whole 1 MiB LLC; 64 MiB in [0x50000000, 0x54000000)"
    );
    // Without a coloured VM, nothing to report (and no line changes in a build).
    assert!(keel_core::config::colour_report(&load_fixture("valid.toml")).is_empty());
    let none_coloured = colours_with_all(&UNCOLOURED).unwrap();
    assert!(none_coloured.llc.is_some());
    assert!(keel_core::config::colour_report(&none_coloured).is_empty());
    // Keel's share first, when it is coloured, with or without coloured VMs (a region of
    // 64 MiB for one colour of 16).
    let keel = keel_coloured("14-15", &[]).unwrap();
    let report = keel_core::config::colour_report(&keel);
    assert_eq!(report.len(), 4);
    assert_eq!(
        report[0],
        "Keel: colours 14-15: 2 of 16 colours, 128 KiB of the 1 MiB LLC; its image and data in \
         frames of [0x41000000, 0x42000000)"
    );
    let only_keel = keel_coloured(
        "15",
        &[
            &UNCOLOURED[..],
            &[(
                "hypervisor = { base = 0x4000_0000, size = \"32M\" }",
                "hypervisor = { base = 0x4000_0000, size = \"64M\" }",
            )],
        ]
        .concat(),
    )
    .unwrap();
    assert_eq!(
        keel_core::config::colour_report(&only_keel),
        [
            "Keel: colours 15: 1 of 16 colours, 64 KiB of the 1 MiB LLC; its image and data in \
             frames of [0x42000000, 0x44000000)",
            "vm 'rt-a': all 16 colours, the whole 1 MiB LLC; 16 MiB in [0x48000000, 0x49000000)",
            "vm 'rt-b': all 16 colours, the whole 1 MiB LLC; 16 MiB in [0x49000000, 0x4a000000)",
            "vm 'linux': all 16 colours, the whole 1 MiB LLC; 64 MiB in [0x50000000, 0x54000000)",
        ]
    );
}

#[test]
fn colouring_geometry_comes_from_the_boards_highest_unified_cache() {
    // A level-2 cache per cluster and a level-3 cache (its line given as a block size): the
    // level 3 is the last level, 2 MiB of 16 ways, so 32 colours.
    let l3 = "\t\tl3-cache {\n\t\t\tcompatible = \"cache\";\n\t\t\tcache-level = <3>;\n\
              \t\t\tcache-unified;\n\t\t\tcache-size = <0x200000>;\n\t\t\tcache-sets = <2048>;\n\
              \t\t\tcache-block-size = <64>;\n\t\t};\n";
    let caches = format!("{}{l3}", l2_cache(0x8_0000, "\t\t\tcache-sets = <512>;\n"));
    let system = colours_with_board_caches(&caches, &[]).unwrap();
    let l3_geometry = keel_core::colour::CacheGeometry {
        size: 2 << 20,
        ways: 16,
        line: 64,
    };
    assert_eq!(system.llc, Some(l3_geometry));
    assert_eq!(system.vms[0].colours.count, 32);
    // [system] llc wins over the board's.
    let given =
        colours_with_board_caches(&caches, &[("pcpus = 4\n", &format!("pcpus = 4\n{LLC}"))])
            .unwrap();
    assert_eq!(given.llc.map(|llc| llc.size), Some(1 << 20));
}

#[test]
fn colouring_needs_the_caches_geometry() {
    let give = "give [system] llc = { size = \"1M\", ways = 16, line = 64 } with the cache's own \
                size, ways and line size";
    assert_colours_refused(
        colours_with_all(&[(LLC, "")]),
        &format!(
            "vm 'rt-a': colours: colouring needs the last-level cache's geometry: the \
             configuration gives no [system] llc, and board qemu-virt's device tree cannot be \
             read (no board device tree was given to the configuration compiler): {give}"
        ),
    );
    // QEMU virt's tree describes no cache.
    assert_colours_refused(
        colours_on_board(&[(LLC, "")], &passthrough_board),
        &format!(
            "vm 'rt-a': colours: colouring needs the last-level cache's geometry: the \
             configuration gives no [system] llc, and board qemu-virt's device tree has no \
             unified level-2 or level-3 cache node (compatible \"cache\", cache-unified): {give}"
        ),
    );
    assert_colours_refused(
        colours_with_board_caches(&l2_cache(0x10_0000, ""), &[]),
        &format!(
            "vm 'rt-a': colours: colouring needs the last-level cache's geometry: the \
             configuration gives no [system] llc, and board qemu-virt's device tree gives its \
             cache node '/cpus/l2-cache' no cache-sets: {give}"
        ),
    );
    assert_colours_refused(
        colours_with_board_caches(&l2_cache(0x10_0000, "\t\t\tcache-sets = <1000>;\n"), &[]),
        &format!(
            "vm 'rt-a': colours: colouring needs the last-level cache's geometry: the \
             configuration gives no [system] llc, and board qemu-virt's device tree gives its \
             cache node '/cpus/l2-cache' a cache-size of 1048576 bytes, not a whole number of \
             ways of cache-sets 1000 × cache-line-size 64: {give}"
        ),
    );
    // A system without colours needs no geometry.
    let uncoloured = colours_with_all(&[&[(LLC, "")], &UNCOLOURED[..]].concat()).unwrap();
    assert_eq!(uncoloured.llc, None);
}

#[test]
fn colouring_geometry_is_one_keel_can_colour() {
    assert_colours_refused(
        colours_with_all(&[("ways = 16", "ways = 12")]),
        "system: llc: a cache of 1 MiB, 12 ways and 64-byte lines cannot be coloured: size, \
         ways and line must be powers of two",
    );
    assert_colours_refused(
        colours_with_all(&[("size = \"1M\", ways", "size = \"32M\", ways")]),
        "system: llc: a cache of 32 MiB, 16 ways and 64-byte lines cannot be coloured: more \
         than 64 colours (a way larger than 256 KiB)",
    );
    // 1.5 MiB of 12 ways, from the board's tree.
    assert_colours_refused(
        colours_with_board_caches(&l2_cache(0x18_0000, "\t\t\tcache-sets = <2048>;\n"), &[]),
        "vm 'rt-a': colours: board qemu-virt's device tree gives the last-level cache at \
         '/cpus/l2-cache' as 1536 KiB, 12 ways and 64-byte lines, which cannot be coloured: \
         size, ways and line must be powers of two",
    );
}

#[test]
fn colours_are_a_list_of_the_caches_colours() {
    assert_colours_refused(
        colours_with_all(&[("colours = \"0-3\"", "colours = \"0-16\"")]),
        "vm 'rt-a': colours: \"0-16\": colour 16 is not one of the cache's 16 (0-15)",
    );
    assert_colours_refused(
        colours_with_all(&[("colours = \"0-3\"", "colours = \"0-3;8\"")]),
        "vm 'rt-a': colours: \"0-3;8\": not a list of colours and ranges such as \"0-3,8\"",
    );
    assert_colours_refused(
        colours_with_all(&[("colours = \"4-7\"", "colours = 4")]),
        "24:11: invalid type: integer `4`, expected a string",
    );
}

#[test]
fn colours_exclusive_needs_colours() {
    assert_colours_refused(
        colours_with_all(&[("colours = \"4-7\"", "colours_exclusive = true")]),
        "vm 'rt-b': colours_exclusive: needs colours: a VM without colours uses every colour of \
         the cache",
    );
}

#[test]
fn coloured_vm_has_no_flash() {
    assert_colours_refused(
        colours_with_all(&[(
            "colours = \"4-7\"",
            "colours = \"4-7\"\nflash = { base = 0x6000_0000, size = \"16M\" }",
        )]),
        "vm 'rt-b': flash: flash is not coloured: a VM with colours has no flash",
    );
}

#[test]
fn coloured_vm_is_not_mapped_one_to_one() {
    assert_colours_refused(
        colours_with_all(&[("colours = \"0-3\"", "colours = \"0-3\"\nipa = 0x4800_0000")]),
        "vm 'rt-a': ipa: 0x48000000 is its memory's base, as for a VM mapped 1:1, but its \
         memory is coloured: its IPAs are no longer its physical addresses (guest page i is the \
         i-th frame of its colours), so nothing may rely on them being equal",
    );
}

#[test]
fn coloured_memory_starts_at_a_period_of_the_colours() {
    assert_colours_refused(
        colours_with_all(&[(
            "base = 0x4800_0000, size = \"16M\" }\ncolours = \"0-3\"",
            "base = 0x4800_1000, size = \"16M\" }\ncolours = \"0-3\"",
        )]),
        "vm 'rt-a': memory: base 0x48001000 is not aligned to 0x10000 (64 KiB: a period of the \
         cache's 16 colours, so that its first frame has colour 0)",
    );
}

#[test]
fn coloured_memory_spans_inside_ram() {
    // 64 MiB in 8 of 16 colours spans 128 MiB: it fits exactly below RAM's end...
    let fits = colours_with_all(&[("base = 0x5000_0000", "base = 0x7800_0000")]).unwrap();
    assert_eq!(fits.vms[2].phys + fits.vms[2].span(), 0x8000_0000);
    // ...but not 64 MiB higher, where the same memory uncoloured would.
    assert_colours_refused(
        colours_with_all(&[("base = 0x5000_0000", "base = 0x7c00_0000")]),
        "vm 'linux': memory: 64 MiB in colours 8-15 spans to 0x84000000, past RAM's end at \
         0x80000000: more memory than its colours can hold inside the RAM given",
    );
    assert!(colours_with_all(&[
        (
            "base = 0x5000_0000, size = \"64M\" }\ncolours = \"8-15\"",
            "base = 0x7c00_0000, size = \"64M\" }"
        ),
        ("colours_exclusive = true\n", ""),
    ])
    .is_ok());
}

#[test]
fn coloured_spans_are_clear_of_keel_and_of_uncoloured_memory() {
    assert_colours_refused(
        colours_with_all(&[
            (
                "hypervisor = { base = 0x4000_0000",
                "hypervisor = { base = 0x7e00_0000",
            ),
            ("base = 0x5000_0000", "base = 0x7800_0000"),
        ]),
        "vm 'linux': memory: 0x78000000..0x80000000 overlaps the hypervisor region \
         0x7e000000..0x80000000",
    );
    assert_colours_refused(
        colours_with_all(&[
            ("colours_exclusive = true\n", ""),
            (
                "base = 0x5000_0000, size = \"64M\" }\ncolours = \"8-15\"",
                "base = 0x4a00_0000, size = \"64M\" }",
            ),
        ]),
        "vm 'linux': memory: 0x4a000000..0x4e000000 overlaps vm 'rt-a' memory \
         0x48000000..0x4bff4000",
    );
    // A channel in a coloured span, past the VM's own 16 MiB.
    assert_colours_refused(
        colours_with_all(&[(
            "pcpus = [3]\n",
            "pcpus = [3]\n[[channel]]\nname = \"c\"\nmemory = { base = 0x4a00_0000, size = \"64K\" }\n\
             interrupt = 40\nvms = [{ vm = \"rt-a\", ipa = 0x6000_0000, access = \"rw\" }, \
             { vm = \"rt-b\", ipa = 0x6000_0000, access = \"rw\" }]\n",
        )]),
        "channel 'c': memory: 0x4a000000..0x4a010000 overlaps vm 'rt-a' memory \
         0x48000000..0x4bff4000",
    );
}

#[test]
fn coloured_spans_overlap_only_with_disjoint_colours() {
    assert_colours_refused(
        colours_with_all(&[
            ("colours_exclusive = true\n", ""),
            ("colours = \"4-7\"", "colours = \"3-7\""),
        ]),
        "vm 'rt-b': memory: span 0x48000000..0x4b334000 overlaps vm 'rt-a' memory span \
         0x48000000..0x4bff4000, and both use colour 3: coloured VMs share a range only with \
         disjoint colours",
    );
}

#[test]
fn exclusive_colours_are_one_vms() {
    // The later VM takes a colour of an exclusive one...
    assert_colours_refused(
        colours_with_all(&[("colours = \"4-7\"", "colours = \"2-7\"")]),
        "vm 'rt-b': colours: shares colours 2-3 with vm 'rt-a', which keeps its colours its own \
         (colours_exclusive = true)",
    );
    // ...or is exclusive itself.
    assert_colours_refused(
        colours_with_all(&[
            ("colours_exclusive = true\n", ""),
            (
                "colours = \"4-7\"",
                "colours = \"3-7\"\ncolours_exclusive = true",
            ),
        ]),
        "vm 'rt-b': colours_exclusive: vm 'rt-a' also uses colour 3, and this VM keeps its \
         colours its own (colours_exclusive = true)",
    );
    // Disjoint colours in one range are fine beside an exclusive VM (the fixture).
    assert!(colours_with_all(&[]).is_ok());
}

#[test]
fn an_uncoloured_vm_uses_every_colour() {
    assert_colours_refused(
        colours_with_all(&[("colours = \"8-15\"\n", "")]),
        "vm 'linux': colours: none given, so the VM uses all 16 colours, and vm 'rt-a' keeps \
         colours 0-3 its own (colours_exclusive = true)",
    );
    assert_colours_refused(
        colours_with_all(&[
            (
                "memory = { base = 0x4800_0000, size = \"16M\" }\ncolours = \"0-3\"\n\
                 colours_exclusive = true\n",
                "memory = { base = 0x6000_0000, size = \"16M\" }\n",
            ),
            (
                "colours = \"8-15\"",
                "colours = \"8-15\"\ncolours_exclusive = true",
            ),
        ]),
        "vm 'linux': colours_exclusive: vm 'rt-a' has no colours, so it uses all 16 colours, \
         this VM's colours 8-15 included",
    );
}

/// `valid-colours.toml` with Keel coloured `colours` (`[system] hypervisor_colours`) and each
/// `(old, new)` of `replacements` made.
fn keel_coloured(colours: &str, replacements: &[(&str, &str)]) -> Result<System, String> {
    let line = format!("{LLC}hypervisor_colours = \"{colours}\"\n");
    let mut all = vec![(LLC, line.as_str())];
    all.extend_from_slice(replacements);
    colours_with_all(&all)
}

#[test]
fn keel_is_coloured_with_its_own_colours() {
    // 2 MiB of colours 14-15 in the upper 16 MiB of Keel's 32 MiB, shared with linux's 8-15.
    let system = keel_coloured("14-15", &[]).unwrap();
    assert_eq!(
        system.hypervisor_colours,
        keel_core::colour::Colours {
            mask: 0xc000,
            count: 16
        }
    );
    assert_emits(
        &system,
        &[
            // Stage 2: three VMs' allowances of 32 and their 57 page tables; no DMA.
            "pub const COLOURED_TABLES: usize = 57;\npub const STAGE2_TABLES: usize = 153;\n\
           pub const SMMU_TABLES: usize = 0;\n\
           pub const KEEL_COLOURS: ::keel_core::colour::Colours = \
           ::keel_core::colour::Colours { mask: 0xc000, count: 16 };\n\
           pub const KEEL_REGION: (u64, u64) = (0x40000000, 0x2000000);\n",
        ],
    );
    // Without the key, Keel is not coloured.
    let plain = load_fixture("valid.toml");
    assert_eq!(plain.hypervisor_colours, keel_core::colour::Colours::NONE);
    assert_emits(
        &plain,
        &["pub const KEEL_COLOURS: ::keel_core::colour::Colours = \
           ::keel_core::colour::Colours { mask: 0x0, count: 0 };\n"],
    );
    // VMs without colours share Keel's, as they share every colour.
    assert!(keel_coloured("14-15", &UNCOLOURED).is_ok());
}

#[test]
fn keels_colours_need_the_caches_geometry() {
    let give = "give [system] llc = { size = \"1M\", ways = 16, line = 64 } with the cache's own \
                size, ways and line size";
    assert_colours_refused(
        colours_with_all(&[(LLC, "hypervisor_colours = \"15\"\n")]),
        &format!(
            "system: hypervisor_colours: colouring needs the last-level cache's geometry: the \
             configuration gives no [system] llc, and board qemu-virt's device tree cannot be \
             read (no board device tree was given to the configuration compiler): {give}"
        ),
    );
    // 1.5 MiB of 12 ways, from the board's tree: Keel's colours are refused before any VM's.
    assert_colours_refused(
        colours_with_board_caches(
            &l2_cache(0x18_0000, "\t\t\tcache-sets = <2048>;\n"),
            &[("pcpus = 4\n", "pcpus = 4\nhypervisor_colours = \"15\"\n")],
        ),
        "system: hypervisor_colours: board qemu-virt's device tree gives the last-level cache \
         at '/cpus/l2-cache' as 1536 KiB, 12 ways and 64-byte lines, which cannot be coloured: \
         size, ways and line must be powers of two",
    );
}

#[test]
fn keels_colours_are_a_list_of_the_caches_colours() {
    assert_colours_refused(
        keel_coloured("0-16", &[]),
        "system: hypervisor_colours: \"0-16\": colour 16 is not one of the cache's 16 (0-15)",
    );
    assert_colours_refused(
        keel_coloured("", &[]),
        "system: hypervisor_colours: \"\": no colours",
    );
}

#[test]
fn keels_colours_hold_its_copy_in_the_upper_half_of_its_region() {
    // One colour of 16 in the upper 16 MiB: 256 frames, 1 MiB.
    assert_colours_refused(
        keel_coloured("15", &[]),
        "system: hypervisor_colours: 1 MiB of colour 15 in the upper half of the hypervisor \
         region 0x40000000..0x42000000 (from 0x41000000 to its end) is less than the 2 MiB \
         Keel's image, data and stacks are copied to: give a larger hypervisor region or more \
         colours",
    );
    // A region twice as large holds 2 MiB of it, exactly enough.
    let larger = keel_coloured(
        "15",
        &[(
            "hypervisor = { base = 0x4000_0000, size = \"32M\" }",
            "hypervisor = { base = 0x4000_0000, size = \"64M\" }",
        )],
    )
    .unwrap();
    assert_eq!(
        keel_core::colour::keel_frames(
            larger.hypervisor_base,
            larger.hypervisor_size,
            larger.hypervisor_colours
        ),
        (0x4200_0000, 2 << 20)
    );
}

#[test]
fn an_exclusive_vm_shares_no_colour_with_keel() {
    assert_colours_refused(
        keel_coloured("2-3,14-15", &[]),
        "vm 'rt-a': colours: shares colours 2-3 with Keel (system.hypervisor_colours), and \
         keeps its colours its own (colours_exclusive = true)",
    );
    assert_colours_refused(
        keel_coloured("3,14", &[]),
        "vm 'rt-a': colours: shares colour 3 with Keel (system.hypervisor_colours), and keeps \
         its colours its own (colours_exclusive = true)",
    );
    // rt-b shares 4-5 with Keel, and linux 14-15: neither keeps its colours its own.
    assert!(keel_coloured("4-5,14-15", &[]).is_ok());
}

#[test]
fn coloured_vm_gives_no_device_unisolated_dma() {
    assert_passthrough_refused_on_zcu102(
        zcu102_with_all(&[
            ("pcpus = 4\n", &format!("pcpus = 4\n{LLC}")),
            (
                "ipa = 0x4000_0000\n",
                "ipa = 0x8000_0000\ncolours = \"0-7\"\n",
            ),
        ]),
        "vm 'linux': passthrough: '/axi/ethernet@ff0e0000': unisolated_dma = true needs the VM \
         mapped 1:1, but its memory is coloured: its IPAs are no longer its physical addresses \
         (guest page i is the i-th frame of its colours), so the device's DMA would miss its \
         memory",
    );
}
