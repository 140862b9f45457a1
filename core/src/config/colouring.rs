//! The colouring rules: the last-level cache's geometry (`[system] llc`, or the board's device
//! tree through `board_cache`), Keel's own colours (`[system] hypervisor_colours`), each
//! `[[vm]]`'s `colours` and `colours_exclusive`, and the physical span a coloured VM's memory
//! then takes ([`crate::colour`]); and [`colour_report`], Keel's and each VM's share of the
//! cache. Each refusal is a [`ColourProblem`].
//!
//! Keel's coloured copy (its image, data and stacks) takes the frames of its colours in the
//! upper half of its own region ([`keel_frames`]), which no VM's memory overlaps; an exclusive
//! VM may not share its colours, other VMs may.
//!
//! A coloured VM's guest RAM keeps its size, but its frames are those of its colours from its
//! memory's base on, so its memory spans more of the physical space than its size: that span
//! is what must lie inside RAM and clear of Keel, of the other VMs and of the channels. Two
//! coloured VMs whose colours are disjoint never share a frame, so their spans may overlap.

use super::board::Board;
use super::board_cache::{last_level_cache as board_last_level_cache, BoardCache};
use super::colour_problem::ColourProblem;
use super::error::{AddressRange, ConfigErrorKind, Problem, Subject};
use super::model::{System, Vm, DEFAULT_IPA};
use super::passthrough_problem::PassthroughProblem;
use super::schema::{SystemTable, VmTable};
use super::size::format_size;
use crate::colour::{keel_frames, CacheGeometry, Colours, KEEL_COLOURED_MIN_BYTES};

/// The last-level cache's geometry as the VMs' colours need it, or why there is none (shown
/// at the first VM with colours: a system without any needs none).
pub(super) type Llc = Result<CacheGeometry, ColourProblem>;

/// A colouring rule's refusal as a [`Problem`].
fn refuse(problem: ColourProblem) -> Problem {
    Problem::Colour(Box::new(problem))
}

/// The last-level cache: `[system] llc` if given (refused here if Keel cannot colour it), else
/// the board's, as its device tree describes it.
pub(super) fn last_level_cache(
    system: &SystemTable,
    board: &mut Board,
) -> Result<Llc, ConfigErrorKind> {
    if let Some(table) = &system.llc {
        let geometry = CacheGeometry {
            size: table.size.0,
            ways: table.ways,
            line: table.line,
        };
        return match geometry.problem() {
            Some(problem) => Err(ConfigErrorKind::Invalid {
                subject: Subject::System,
                field: "llc",
                problem: refuse(ColourProblem::Geometry {
                    geometry,
                    node: None,
                    problem,
                }),
            }),
            None => Ok(Ok(geometry)),
        };
    }
    let board_name = board.desc().name;
    let no_geometry = |why: String| ColourProblem::NoGeometry {
        board: board_name,
        why,
    };
    let fdt = match board.tree() {
        Ok(fdt) => fdt,
        Err(PassthroughProblem::BoardTree { error }) => {
            return Ok(Err(no_geometry(format!("cannot be read ({error})"))))
        }
        Err(problem) => return Ok(Err(no_geometry(format!("cannot be read ({problem})")))),
    };
    Ok(match board_last_level_cache(&fdt) {
        Ok(BoardCache { path, geometry }) => match geometry.problem() {
            Some(problem) => Err(ColourProblem::Geometry {
                geometry,
                node: Some((board_name, path)),
                problem,
            }),
            None => Ok(geometry),
        },
        Err(why) => Err(no_geometry(why)),
    })
}

/// `[system] hypervisor_colours` ([`Colours::NONE`] without it) with the cache's geometry
/// (`llc`) and Keel's region (`hypervisor`): a list of the cache's colours whose frames in the
/// region's upper half ([`keel_frames`]) hold at least [`KEEL_COLOURED_MIN_BYTES`].
pub(super) fn check_hypervisor_colours(
    system: &SystemTable,
    hypervisor: AddressRange,
    llc: &Llc,
) -> Result<Colours, ConfigErrorKind> {
    let Some(text) = &system.hypervisor_colours else {
        return Ok(Colours::NONE);
    };
    let at = |problem: ColourProblem| ConfigErrorKind::Invalid {
        subject: Subject::System,
        field: "hypervisor_colours",
        problem: refuse(problem),
    };
    let geometry = llc.clone().map_err(at)?;
    let colours = Colours::parse(text, geometry.colours()).map_err(|error| {
        at(ColourProblem::List {
            text: text.clone(),
            error,
        })
    })?;
    let (frames_base, capacity) = keel_frames(hypervisor.start, hypervisor.size(), colours);
    if capacity < KEEL_COLOURED_MIN_BYTES {
        return Err(at(ColourProblem::KeelTooFewFrames {
            colours,
            capacity,
            region: hypervisor,
            frames_base,
            min: KEEL_COLOURED_MIN_BYTES,
        }));
    }
    Ok(colours)
}

/// A VM's colours (`colours`, exclusive or not) against Keel's (`keel`): an exclusive VM shares
/// none of them. A VM without colours, or one that does not keep its own, may use Keel's, as
/// Keel may use every colour of a VM without colours. Returns the field at fault and why.
pub(super) fn check_beside_keel(
    colours: Colours,
    exclusive: bool,
    keel: Colours,
) -> Result<(), (&'static str, Problem)> {
    let common = Colours {
        mask: colours.common(&keel),
        count: colours.count,
    };
    if exclusive && !common.is_empty() {
        return Err((
            "colours",
            refuse(ColourProblem::ExclusiveSharesWithKeel { common }),
        ));
    }
    Ok(())
}

/// A `[[vm]]`'s colours ([`Colours::NONE`] without `colours`) with the cache's geometry
/// (`llc`): a list of the cache's colours; `colours_exclusive` only with colours; no flash; its
/// memory's base aligned to a period of the colours; not mapped 1:1. Returns the colours, or
/// the field at fault and why.
pub(super) fn check_colours(
    table: &VmTable,
    llc: &Llc,
) -> Result<Colours, (&'static str, Problem)> {
    let Some(text) = &table.colours else {
        if table.colours_exclusive {
            return Err((
                "colours_exclusive",
                refuse(ColourProblem::ExclusiveWithoutColours),
            ));
        }
        return Ok(Colours::NONE);
    };
    let geometry = llc
        .clone()
        .map_err(|problem| ("colours", refuse(problem)))?;
    let colours = Colours::parse(text, geometry.colours()).map_err(|error| {
        (
            "colours",
            refuse(ColourProblem::List {
                text: text.clone(),
                error,
            }),
        )
    })?;
    if table.flash.is_some() {
        return Err(("flash", refuse(ColourProblem::Flash)));
    }
    let base = table.memory.base;
    if !base.is_multiple_of(colours.period_bytes()) {
        return Err((
            "memory",
            refuse(ColourProblem::BaseUnaligned { base, colours }),
        ));
    }
    let ipa = table.ipa.unwrap_or(DEFAULT_IPA);
    if ipa == base {
        return Err(("ipa", refuse(ColourProblem::OneToOne { ipa })));
    }
    Ok(colours)
}

/// A VM's colours (`colours`, exclusive or not) against the `earlier` VMs': no two share a
/// colour when either keeps its colours exclusive, and a VM without colours uses them all.
/// Returns the field at fault and why.
pub(super) fn check_exclusive(
    colours: Colours,
    exclusive: bool,
    earlier: &[Vm],
) -> Result<(), (&'static str, Problem)> {
    for other in earlier {
        if !exclusive && !other.colours_exclusive {
            continue;
        }
        let name = other.name.clone();
        // `colours_exclusive` needs colours (`check_colours`): one of the two is coloured.
        let refusal = match (colours.is_coloured(), other.colours.is_coloured()) {
            (true, true) => {
                let common = Colours {
                    mask: colours.common(&other.colours),
                    count: colours.count,
                };
                if common.is_empty() {
                    continue;
                }
                if other.colours_exclusive {
                    (
                        "colours",
                        ColourProblem::TakenByExclusive {
                            other: name,
                            common,
                        },
                    )
                } else {
                    (
                        "colours_exclusive",
                        ColourProblem::ExclusiveShared {
                            other: name,
                            common,
                        },
                    )
                }
            }
            (false, true) => (
                "colours",
                ColourProblem::UncolouredBesideExclusive {
                    other: name,
                    colours: other.colours,
                },
            ),
            (true, false) => (
                "colours_exclusive",
                ColourProblem::ExclusiveBesideUncoloured {
                    other: name,
                    colours,
                },
            ),
            (false, false) => continue,
        };
        return Err((refusal.0, refuse(refusal.1)));
    }
    Ok(())
}

/// The physical range a VM's memory (`memory`: its base and its guest RAM's size) takes with
/// `colours`: the memory itself if it is not coloured, else the span of its colours' frames,
/// which ends inside `ram` if it starts there (a span that starts outside is refused as any
/// range outside RAM).
pub(super) fn span(
    memory: AddressRange,
    colours: Colours,
    ram: AddressRange,
) -> Result<AddressRange, Problem> {
    if !colours.is_coloured() {
        return Ok(memory);
    }
    let bytes = colours.span(memory.size()).unwrap_or(memory.size());
    let span = AddressRange {
        start: memory.start,
        end: memory.start.saturating_add(bytes),
    };
    let starts_in_ram = ram.start <= span.start && span.start < ram.end;
    if starts_in_ram && span.end > ram.end {
        return Err(refuse(ColourProblem::BeyondRam {
            size: memory.size(),
            colours,
            end: span.end,
            ram_end: ram.end,
        }));
    }
    Ok(span)
}

/// Whether a coloured VM's span (`range`, coloured `colours`) may overlap an earlier coloured
/// VM's (`other`'s `other_range`, coloured `other_colours`): only if their colours are
/// disjoint, so that they interleave frame by frame.
pub(super) fn check_interleaved(
    (range, colours): (AddressRange, Colours),
    other: &str,
    (other_range, other_colours): (AddressRange, Colours),
) -> Result<(), Problem> {
    let common = colours.common(&other_colours);
    if common == 0 {
        return Ok(());
    }
    Err(refuse(ColourProblem::SpansShareColours {
        range,
        other: other.to_string(),
        other_range,
        common: Colours {
            mask: common,
            count: colours.count,
        },
    }))
}

/// One line on Keel's share of the last-level cache if it is coloured, then one line per VM on
/// its share, if Keel or some VM is coloured (none otherwise): Keel's colours, the part of the
/// cache they are and the frames its copy takes (`Keel: colours 15: 1 of 16 colours, 64 KiB
/// of the 1 MiB LLC; its image and data in frames of [0x41000000, 0x42000000)`); a coloured
/// VM's colours, the part of the cache they are, its memory and the physical span it takes
/// (`vm 'rt': colours 0-3: 4 of 16 colours, 256 KiB of the 1 MiB LLC; 16 MiB in [0x48000000,
/// 0x4bff4000)`); an uncoloured VM's `all 16 colours`.
pub fn colour_report(system: &System) -> Vec<String> {
    let Some(llc) = system.llc else {
        return Vec::new();
    };
    let keel = system.hypervisor_colours;
    if !keel.is_coloured() && !system.vms.iter().any(|vm| vm.colours.is_coloured()) {
        return Vec::new();
    }
    let count = llc.colours();
    let share = |colours: &Colours| {
        format!(
            "{} of {count} colours, {} of the {} LLC",
            colours.len(),
            format_size(llc.size / u64::from(count) * u64::from(colours.len())),
            format_size(llc.size)
        )
    };
    let keel_line = keel.is_coloured().then(|| {
        let (frames_base, _) = keel_frames(system.hypervisor_base, system.hypervisor_size, keel);
        format!(
            "Keel: colours {keel}: {}; its image and data in frames of [{frames_base:#x}, {:#x})",
            share(&keel),
            system.hypervisor_base + system.hypervisor_size
        )
    });
    let vm_lines = system.vms.iter().map(|vm| {
        let memory = format!(
            "{} in [{:#x}, {:#x})",
            format_size(vm.size),
            vm.phys,
            vm.phys + vm.span()
        );
        if !vm.colours.is_coloured() {
            return format!(
                "vm '{}': all {count} colours, the whole {} LLC; {memory}",
                vm.name,
                format_size(llc.size)
            );
        }
        let exclusive = if vm.colours_exclusive {
            " (exclusive)"
        } else {
            ""
        };
        format!(
            "vm '{}': colours {}{exclusive}: {}; {memory}",
            vm.name,
            vm.colours,
            share(&vm.colours)
        )
    });
    keel_line.into_iter().chain(vm_lines).collect()
}
