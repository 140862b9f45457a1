//! The report's lines (the format is described in the crate's documentation, `lib.rs`).
#![forbid(unsafe_code)]

use keel_core::colour::CacheGeometry;

use crate::model::{Counts, Model};

/// The first line: the cache's geometry.
pub fn header(geometry: &CacheGeometry) -> String {
    format!(
        "llc size={} ways={} line={} sets={} colours={}\n",
        geometry.size,
        geometry.ways,
        geometry.line,
        geometry.sets(),
        geometry.colours()
    )
}

/// The lines of one interval: each vCPU's counted lookups in it.
pub fn interval(counts: &[Counts]) -> String {
    counts
        .iter()
        .enumerate()
        .map(|(vcpu, counts)| {
            format!(
                "llc interval vcpu={vcpu} accesses={} misses={}\n",
                counts.accesses(),
                counts.misses
            )
        })
        .collect()
}

/// The summary written at exit: a line per vCPU, then a line per named range.
pub fn summary(model: &Model) -> String {
    let mut text = String::new();
    for (index, vcpu) in model.vcpus().iter().enumerate() {
        text += &format!(
            "llc vcpu={index} {} colours={} excluded={} excluded_misses={}\n",
            counts(&vcpu.counted),
            model.colours_of(vcpu),
            vcpu.excluded.accesses(),
            vcpu.excluded.misses
        );
    }
    for (named, range_counts) in model.ranges() {
        text += &format!("llc range={} {}\n", named.name, counts(range_counts));
    }
    text
}

/// `accesses=A hits=H misses=M misses_per_1000=X.XXX`.
fn counts(counts: &Counts) -> String {
    format!(
        "accesses={} hits={} misses={} misses_per_1000={:.3}",
        counts.accesses(),
        counts.hits,
        counts.misses,
        counts.misses_per_1000()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::Settings;

    #[test]
    fn the_report_reads_as_documented() {
        let settings = Settings::parse([
            "size=1048576",
            "ways=16",
            "line=64",
            "range=vm0:0x40000000-0x40004000",
            "exclude=0x40100000-0x40101000",
        ])
        .unwrap();
        assert_eq!(
            header(&settings.geometry),
            "llc size=1048576 ways=16 line=64 sets=1024 colours=16\n"
        );
        let mut model = Model::new(&settings, 2);
        for address in [0x4000_0000, 0x4000_0000, 0x4000_3000, 0x4000_8000] {
            model.access(0, address, 8);
        }
        model.access(0, 0x4010_0000, 4);
        assert_eq!(
            summary(&model),
            "llc vcpu=0 accesses=4 hits=1 misses=3 misses_per_1000=750.000 colours=0,3,8 \
             excluded=1 excluded_misses=1\n\
             llc vcpu=1 accesses=0 hits=0 misses=0 misses_per_1000=0.000 colours=none \
             excluded=0 excluded_misses=0\n\
             llc range=vm0 accesses=3 hits=1 misses=2 misses_per_1000=666.667\n"
        );
        assert_eq!(
            interval(&[Counts { hits: 2, misses: 1 }, Counts::default()]),
            "llc interval vcpu=0 accesses=3 misses=1\nllc interval vcpu=1 accesses=0 misses=0\n"
        );
    }
}
