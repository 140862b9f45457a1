//! The benchmarks' plots, written as PNG and SVG with plotters under `target/keel/plots/`:
//! latency histograms (a panel per vCPU or task) and the M5150 overhead against VMs and quantum;
//! and the check that a plot was written whole, which the test command makes.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use keel_core::histogram::{Bucket, Distribution};
use plotters::coord::Shift;
use plotters::prelude::*;

use crate::Result;

/// Debian's DejaVu Sans (package `fonts-dejavu-core`, installed by `setup::ensure_tools`):
/// plotters draws text with a font it is given, and panics on text without one.
pub const FONT_FILE: &str = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf";
/// The family every text style here names, registered as [`FONT_FILE`].
const FONT: &str = "sans-serif";
/// QEMU `virt`'s counter runs at 62.5 MHz: guests' samples are whole multiples of 16 ns.
const COUNTER_TICK_NS: u64 = 16;
/// Pixels of one histogram panel.
const PANEL: (u32, u32) = (640, 360);
/// The bars' colour (a blue of matplotlib's palette, readable in print).
const BAR: RGBColor = RGBColor(31, 119, 180);

/// Where the benchmarks write their plots: `target/keel/plots`.
pub fn directory() -> PathBuf {
    crate::image::output_dir().join("plots")
}

/// Registers [`FONT_FILE`] with plotters, once.
fn register_font() -> Result<()> {
    static REGISTERED: OnceLock<Result<()>> = OnceLock::new();
    REGISTERED
        .get_or_init(|| {
            let bytes = std::fs::read(FONT_FILE).map_err(|e| {
                format!("{FONT_FILE}: {e} (Debian package fonts-dejavu-core; `cargo xtask test` or `bench` installs it as root)")
            })?;
            // plotters keeps the font for the rest of the process.
            let bytes: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            plotters::style::register_font(FONT, FontStyle::Normal, bytes)
                .map_err(|_| format!("{FONT_FILE}: not a font plotters can read"))
        })
        .clone()
}

/// `value` with a comma between thousands, as the README writes figures: `12,345`.
pub fn thousands(value: u64) -> String {
    let digits = value.to_string();
    let mut text = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index).is_multiple_of(3) {
            text.push(',');
        }
        text.push(digit);
    }
    text
}

/// A bucket's values in ns: its one value when it is one counter tick wide, else its range.
fn shown(bucket: Bucket) -> String {
    if bucket.high - bucket.low <= COUNTER_TICK_NS {
        format!("{} ns", thousands(bucket.low))
    } else {
        format!("{}-{} ns", thousands(bucket.low), thousands(bucket.high))
    }
}

/// A distribution in one line: samples, median, 99th percentile (p99) and maximum (each the
/// bucket it falls in).
pub fn summary(distribution: &Distribution) -> String {
    let at = |q: f64| distribution.quantile(q).map_or("-".into(), shown);
    format!(
        "n = {}, median {}, p99 {}, max {}",
        thousands(distribution.total()),
        at(0.5),
        at(0.99),
        at(1.0)
    )
}

/// One histogram of a plot.
pub struct Panel<'a> {
    /// What was measured where (the panel's caption).
    pub title: String,
    pub distribution: &'a Distribution,
}

/// One line of an XY chart, with the figure a paper gives for it, drawn dashed.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
    pub reference: Option<(String, f64)>,
}

/// The two files of a plot.
#[derive(Clone, Debug)]
pub struct Plot {
    pub png: PathBuf,
    pub svg: PathBuf,
}

/// Draws a plot twice, as `<stem>.png` and `<stem>.svg` in `directory`, with `draw` (called
/// once with a bitmap and once with an SVG drawing area of `size` pixels).
macro_rules! both_backends {
    ($directory:expr, $stem:expr, $size:expr, |$area:ident| $draw:expr) => {{
        register_font()?;
        let directory: &Path = $directory;
        std::fs::create_dir_all(directory).map_err(|e| format!("{}: {e}", directory.display()))?;
        let plot = Plot {
            png: directory.join(format!("{}.png", $stem)),
            svg: directory.join(format!("{}.svg", $stem)),
        };
        {
            let $area = BitMapBackend::new(&plot.png, $size).into_drawing_area();
            $draw.map_err(|e| format!("{}: {e}", plot.png.display()))?;
            $area
                .present()
                .map_err(|e| format!("{}: {e}", plot.png.display()))?;
        }
        {
            let $area = SVGBackend::new(&plot.svg, $size).into_drawing_area();
            $draw.map_err(|e| format!("{}: {e}", plot.svg.display()))?;
            $area
                .present()
                .map_err(|e| format!("{}: {e}", plot.svg.display()))?;
        }
        Ok(plot)
    }};
}

/// Writes `<stem>.png` and `<stem>.svg` in `directory`: `title` over `panels` in a grid of
/// `columns`, each a histogram of its distribution in ns (samples on a log scale, so that a
/// single late sample shows beside thousands).
pub fn histograms(
    directory: &Path,
    stem: &str,
    title: &str,
    columns: usize,
    panels: &[Panel<'_>],
) -> Result<Plot> {
    let columns = columns.clamp(1, panels.len().max(1));
    let rows = panels.len().div_ceil(columns).max(1);
    let size = (
        PANEL.0 * columns as u32,
        PANEL.1 * rows as u32 + TITLE_HEIGHT,
    );
    both_backends!(directory, stem, size, |area| draw_histograms(
        &area, title, rows, columns, panels
    ))
}

/// A benchmark's histograms: plotted as `<stem>` in [`directory`], each panel's summary and
/// the plot's files printed.
pub fn publish_histograms(
    stem: &str,
    title: &str,
    columns: usize,
    panels: &[Panel<'_>],
) -> Result<Plot> {
    let plot = histograms(&directory(), stem, title, columns, panels)?;
    println!("{title}:");
    for panel in panels {
        println!("  {}: {}", panel.title, summary(panel.distribution));
    }
    println!("  plot: {} and .png", plot.svg.display());
    Ok(plot)
}

/// Pixels above the panels for a plot's title.
const TITLE_HEIGHT: u32 = 40;

fn draw_histograms<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    rows: usize,
    columns: usize,
    panels: &[Panel<'_>],
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    area.fill(&WHITE)?;
    let (top, rest) = area.split_vertically(TITLE_HEIGHT);
    top.titled(title, (FONT, 22))?;
    for (panel, cell) in panels.iter().zip(rest.split_evenly((rows, columns))) {
        draw_histogram(&cell, panel)?;
    }
    Ok(())
}

fn draw_histogram<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel<'_>,
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let distribution = panel.distribution;
    let bins = uniform_bins(distribution);
    let (Some(first), Some(last)) = (bins.bins.first(), bins.bins.last()) else {
        area.titled(&format!("{}: no samples", panel.title), (FONT, 16))?;
        return Ok(());
    };
    let (low, high) = (first.0 as f64, (last.0 + bins.width) as f64);
    let pad = ((high - low) * 0.05).max(4.0 * COUNTER_TICK_NS as f64);
    let x_range = (low - pad).max(0.0)..high + pad;
    let most = bins.bins.iter().map(|b| b.1).max().unwrap_or(1);
    // Bars start below one sample, so that a bucket of one shows on the log scale.
    let floor = 0.5;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, (FONT, 16))
        .margin(12)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range.clone(), (floor..most as f64 * 2.0).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(6)
        .x_label_formatter(&|x| thousands(x.max(0.0).round() as u64))
        .y_label_formatter(&|y| thousands(y.round() as u64))
        .x_desc(format!("ns ({})", summary(distribution)))
        .y_desc(format!("samples per {} ns", thousands(bins.width)))
        .label_style((FONT, 12))
        .axis_desc_style((FONT, 12))
        .draw()?;
    // At least a 400th of the axis wide, so that a bucket one tick wide shows on a wide axis.
    let narrowest = (x_range.end - x_range.start) / 400.0;
    // A gap of a tenth of a bin between neighbours, so that two bars read as two.
    let gap = bins.width as f64 / 20.0;
    chart.draw_series(bins.bins.iter().map(|&(low, count)| {
        let left = low as f64 + gap;
        let right = ((low + bins.width) as f64 - gap).max(left + narrowest);
        Rectangle::new([(left, floor), (right, count as f64)], BAR.filled())
    }))?;
    Ok(())
}

/// A distribution in bins of one width, as a histogram is drawn.
struct UniformBins {
    /// Width of every bin (ns).
    width: u64,
    /// `(low, count)` of each bin with samples, lowest first.
    bins: Vec<(u64, u64)>,
}

/// `distribution` in bins as wide as its widest bucket. Buckets are about 3 % of their values
/// wide (see `keel_core::histogram`): drawn as they are, a spread over several powers of two
/// would look denser at its high end, where buckets are wider. Each bucket's width is a power
/// of two ticks and its low bound a multiple of it, so every bucket falls in one bin.
fn uniform_bins(distribution: &Distribution) -> UniformBins {
    let width = distribution
        .buckets
        .iter()
        .map(|b| b.high - b.low)
        .max()
        .unwrap_or(1)
        .max(1);
    let mut bins: Vec<(u64, u64)> = Vec::new();
    for bucket in &distribution.buckets {
        let low = bucket.low / width * width;
        match bins.last_mut() {
            Some(last) if last.0 == low => last.1 += bucket.count,
            _ => bins.push((low, bucket.count)),
        }
    }
    UniformBins { width, bins }
}

/// The lines' colours: matplotlib's first three (blue, orange, green), told apart in print.
const LINE_COLOURS: [RGBColor; 3] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
];

/// Writes `<stem>.png` and `<stem>.svg` in `directory`: `series` as lines of points over
/// `x_label` (whole numbers) and `y_label` on a log scale (figures far apart, as Keel's and a
/// paper's, both readable), each with its reference figure dashed in its colour. A value at
/// or below zero, which a log scale cannot show, is an error naming it.
pub fn lines(
    directory: &Path,
    stem: &str,
    title: &str,
    (x_label, y_label): (&str, &str),
    series: &[Series],
) -> Result<Plot> {
    for line in series {
        let reference = line.reference.iter().map(|r| r.1);
        let mut values = line.points.iter().map(|p| p.1).chain(reference);
        if let Some(value) = values.find(|&y| y <= 0.0 || !y.is_finite()) {
            return Err(format!(
                "plot '{stem}': series '{}' has the value {value}, which a log scale cannot show",
                line.label
            ));
        }
    }
    both_backends!(directory, stem, (900, 560), |area| draw_lines(
        &area, title, x_label, y_label, series
    ))
}

fn draw_lines<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> std::result::Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    area.fill(&WHITE)?;
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let x_max = xs.fold(1.0, f64::max);
    let ys = || {
        series.iter().flat_map(|s| {
            s.points
                .iter()
                .map(|p| p.1)
                .chain(s.reference.iter().map(|r| r.1))
        })
    };
    let y_max = ys().fold(f64::MIN_POSITIVE, f64::max) * 2.0;
    // Just below a power of ten: plotters labels a log axis from the first power of ten it
    // finds at or above the axis's start (which rounding may put a decade up from the start).
    let y_min = 10f64.powf(ys().fold(y_max, f64::min).log10().floor()) * 0.999;
    let x_range = 0.0..x_max + 1.0;
    let mut chart = ChartBuilder::on(area)
        .caption(title, (FONT, 20))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(64)
        .build_cartesian_2d(x_range.clone(), (y_min..y_max).log_scale())?;
    chart
        .configure_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(x_max as usize + 2)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| {
            let decimals = (-y.log10().floor()).max(0.0) as usize;
            format!("{y:.decimals$}")
        })
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style((FONT, 13))
        .axis_desc_style((FONT, 14))
        .draw()?;
    for (index, line) in series.iter().enumerate() {
        let colour = LINE_COLOURS[index % LINE_COLOURS.len()].to_rgba();
        chart
            .draw_series(
                LineSeries::new(line.points.iter().copied(), colour.stroke_width(2)).point_size(4),
            )?
            .label(&line.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
        if let Some((label, value)) = &line.reference {
            chart
                .draw_series(DashedLineSeries::new(
                    [(x_range.start, *value), (x_range.end, *value)],
                    6,
                    4,
                    colour.stroke_width(1),
                ))?
                .label(label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(1))
                });
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::MiddleRight)
        .label_font((FONT, 13))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Checks that `plot` was written whole: a PNG (its signature and header chunk, RFC 2083 3.1
/// and 4.1.1) and an SVG that parses as XML with an `<svg>` root and shows `label` in a text element.
/// Returns a line saying what was checked.
pub fn check(plot: &Plot, label: &str) -> Result<String> {
    let png = std::fs::read(&plot.png).map_err(|e| format!("{}: {e}", plot.png.display()))?;
    const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];
    if !png.starts_with(&PNG_SIGNATURE) || png.get(12..16) != Some(b"IHDR") {
        return Err(format!(
            "{}: not a PNG file ({} bytes: no PNG signature and header chunk)",
            plot.png.display(),
            png.len()
        ));
    }
    let svg =
        std::fs::read_to_string(&plot.svg).map_err(|e| format!("{}: {e}", plot.svg.display()))?;
    let document = roxmltree::Document::parse(&svg)
        .map_err(|e| format!("{}: not well-formed XML: {e}", plot.svg.display()))?;
    let root = document.root_element();
    if root.tag_name().name() != "svg" {
        return Err(format!(
            "{}: its root element is <{}>, not <svg>",
            plot.svg.display(),
            root.tag_name().name()
        ));
    }
    let texts: Vec<String> = root
        .descendants()
        .filter(|node| node.tag_name().name() == "text")
        .map(|node| node.text().unwrap_or_default().to_string())
        .collect();
    if !texts.iter().any(|text| text.contains(label)) {
        return Err(format!(
            "{}: no text element shows '{label}' ({} text elements)",
            plot.svg.display(),
            texts.len()
        ));
    }
    Ok(format!(
        "{} ({} bytes) and {} ({} bytes, {} text elements)",
        plot.png.display(),
        png.len(),
        plot.svg.display(),
        svg.len(),
        texts.len()
    ))
}

#[cfg(test)]
mod tests {
    use keel_core::histogram::{Collector, Histogram, Line, Printer};

    use super::*;

    /// A directory of its own under the system's temporary directory, removed when dropped.
    struct TemporaryDirectory(PathBuf);

    impl TemporaryDirectory {
        fn new(name: &str) -> Self {
            let path =
                std::env::temp_dir().join(format!("keel-plots-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            Self(path)
        }
    }

    impl Drop for TemporaryDirectory {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// `values` recorded, printed as a guest prints them and read back.
    fn distribution(values: impl IntoIterator<Item = u64>) -> Distribution {
        let histogram = Histogram::new();
        for value in values {
            histogram.record(value);
        }
        let (mut printer, mut line) = (Printer::new(62_500_000), Line::new());
        let mut collector = Collector::new();
        while printer.next_line(&histogram, "test", &mut line) {
            collector.feed(line.as_str()).unwrap();
        }
        collector.get("test").unwrap().clone()
    }

    #[test]
    fn a_histogram_plot_is_a_png_and_an_svg_showing_its_labels() {
        let directory = TemporaryDirectory::new("histograms");
        // Ticks of 16 ns: most at 992 ns, a tail, one far outlier.
        let tight = distribution((0..1000).map(|i| 62 + u64::from(i % 50 == 0)).chain([400]));
        // From exact buckets into ones 16 ticks wide: drawn in bins of 256 ns.
        let wide = distribution((0..300).map(|i| 70 + i * 30));
        let empty = Distribution::default();
        let panels = [
            Panel {
                title: "tight with an outlier".into(),
                distribution: &tight,
            },
            Panel {
                title: "wide".into(),
                distribution: &wide,
            },
            Panel {
                title: "nothing measured".into(),
                distribution: &empty,
            },
        ];
        let plot = histograms(
            &directory.0,
            "switches",
            "Switch cost (test data)",
            2,
            &panels,
        )
        .unwrap();
        assert_eq!(plot.png, directory.0.join("switches.png"));
        assert_eq!(plot.svg, directory.0.join("switches.svg"));
        for label in [
            "Switch cost (test data)",
            "tight with an outlier",
            "nothing measured: no samples",
            "n = 1,001, median 992 ns, p99 1,008 ns, max 6,400 ns",
        ] {
            check(&plot, label).unwrap();
        }
        assert!(check(&plot, "a label nobody drew")
            .unwrap_err()
            .contains("no text element shows 'a label nobody drew'"));
        let png = image_size(&plot.png);
        assert_eq!(png, (2 * PANEL.0, 2 * PANEL.1 + TITLE_HEIGHT));
    }

    /// Width and height from a PNG's IHDR chunk (RFC 2083 4.1.1), which follows the signature.
    fn image_size(path: &Path) -> (u32, u32) {
        let bytes = std::fs::read(path).unwrap();
        assert_eq!(&bytes[12..16], b"IHDR");
        let word = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        (word(16), word(20))
    }

    #[test]
    fn a_line_chart_is_a_png_and_an_svg_with_its_legend() {
        let directory = TemporaryDirectory::new("lines");
        let series = [1.0, 5.0]
            .iter()
            .map(|&quantum| Series {
                label: format!("{quantum} ms quantum"),
                points: [1.0, 2.0, 4.0, 8.0]
                    .iter()
                    .map(|&vms| (vms, 1.5 / quantum + vms * 0.01))
                    .collect(),
                reference: Some((format!("paper, {quantum} ms"), 1.74 / quantum)),
            })
            .collect::<Vec<_>>();
        let plot = lines(
            &directory.0,
            "overhead",
            "Overhead (test data)",
            ("VMs", "overhead (%)"),
            &series,
        )
        .unwrap();
        for label in ["Overhead (test data)", "5 ms quantum", "paper, 1 ms", "VMs"] {
            check(&plot, label).unwrap();
        }
        assert_eq!(image_size(&plot.png), (900, 560));
        let zero = [Series {
            label: "flat".into(),
            points: vec![(1.0, 0.5), (2.0, 0.0)],
            reference: None,
        }];
        assert_eq!(
            lines(&directory.0, "zero", "z", ("x", "y"), &zero).unwrap_err(),
            "plot 'zero': series 'flat' has the value 0, which a log scale cannot show"
        );
    }

    #[test]
    fn a_truncated_or_foreign_file_fails_the_check_with_its_name() {
        let directory = TemporaryDirectory::new("broken");
        let plot = Plot {
            png: directory.0.join("broken.png"),
            svg: directory.0.join("broken.svg"),
        };
        std::fs::write(&plot.png, b"\x89PNG\r\n\x1a\n").unwrap();
        std::fs::write(&plot.svg, "<svg><text>x</text></svg>").unwrap();
        assert!(check(&plot, "x")
            .unwrap_err()
            .contains("broken.png: not a PNG"));
        std::fs::write(&plot.png, b"\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR").unwrap();
        assert!(check(&plot, "x").is_ok());
        std::fs::write(&plot.svg, "<svg><text>x</text>").unwrap();
        assert!(check(&plot, "x")
            .unwrap_err()
            .contains("broken.svg: not well-formed XML"));
        std::fs::write(&plot.svg, "<html><text>x</text></html>").unwrap();
        assert!(check(&plot, "x")
            .unwrap_err()
            .contains("its root element is <html>, not <svg>"));
        std::fs::remove_file(&plot.svg).unwrap();
        assert!(check(&plot, "x").unwrap_err().contains("broken.svg: "));
    }

    #[test]
    fn buckets_are_drawn_in_bins_of_the_widest_ones_width() {
        // 62 and 63 ticks: one tick (16 ns) wide; 4,000 ticks: 4 ticks (64 ns) wide.
        let bins = uniform_bins(&distribution([62, 62, 63, 4000, 4001]));
        assert_eq!(bins.width, 64);
        assert_eq!(bins.bins, [(960, 3), (64_000, 2)]);
        let bins = uniform_bins(&distribution([8, 9, 9]));
        assert_eq!(bins.width, 16);
        assert_eq!(bins.bins, [(128, 1), (144, 2)]);
        assert!(uniform_bins(&Distribution::default()).bins.is_empty());
    }

    #[test]
    fn summaries_show_one_tick_buckets_as_values_and_wider_ones_as_ranges() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(12_345_678), "12,345,678");
        let d = distribution([8, 8, 8, 2000]);
        assert_eq!(
            summary(&d),
            "n = 4, median 128 ns, p99 32,000-32,032 ns, max 32,000-32,032 ns"
        );
        assert_eq!(
            summary(&Distribution::default()),
            "n = 0, median -, p99 -, max -"
        );
    }
}
