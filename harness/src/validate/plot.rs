//! `validate --png`: every run as a dot, pair by pair, against the untraced noise band, so that a
//! reader sees at a glance whether the reconstructed times fall among the untraced ones.

use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;

use super::Validation;

pub const WIDTH: u32 = 1000;
pub const HEIGHT: u32 = 600;
const FAMILY: &str = "sans-serif";

/// One kind of run: where its dots sit beside the pair's x, and how they look.
struct Kind {
    label: &'static str,
    offset: f64,
    colour: RGBColor,
    value: fn(&super::Pair) -> f64,
}

const KINDS: [Kind; 5] = [
    Kind {
        label: "untraced",
        offset: -0.24,
        colour: RGBColor(0, 0, 0),
        value: |p| p.untraced_s,
    },
    Kind {
        label: "traced T(G')",
        offset: -0.12,
        colour: RGBColor(214, 39, 40),
        value: |p| p.traced_s,
    },
    Kind {
        label: "T(G+): DP' removed",
        offset: 0.0,
        colour: RGBColor(255, 127, 14),
        value: |p| p.reconstructed_plus_s,
    },
    Kind {
        label: "T(G): DP' and DP subtracted",
        offset: 0.12,
        colour: RGBColor(31, 119, 180),
        value: |p| p.reconstructed_s,
    },
    Kind {
        label: "T(G): replayed",
        offset: 0.24,
        colour: RGBColor(44, 160, 44),
        value: |p| p.reconstructed_replay_s,
    },
];

/// Draws `v` into the PNG `path`.
pub fn draw(v: &Validation, path: &Path) -> Result<()> {
    views::export::timeline::register_font()?;
    let pairs = v.pairs.len().max(1) as f64;
    let (band_low, band_high) = (
        v.untraced_median_s * (1.0 - v.untraced_spread),
        v.untraced_median_s * (1.0 + v.untraced_spread),
    );
    let values = v
        .pairs
        .iter()
        .flat_map(|p| KINDS.iter().map(move |k| (k.value)(p)))
        .chain([band_low, band_high])
        .filter(|x| x.is_finite());
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    let (lo, hi) = if lo.is_finite() && hi > lo {
        // Room above the dots for the legend, which would otherwise hide the highest of them.
        let range = hi - lo;
        ((lo - 0.1 * range).max(0.0), hi + 0.6 * range)
    } else {
        (0.0, hi.max(1.0))
    };

    let root = BitMapBackend::new(path, (WIDTH, HEIGHT)).into_drawing_area();
    root.fill(&WHITE)?;
    let e = &v.reconstructed;
    let caption = format!(
        "{} pairs ({}): T(G) {:+.2} % of untraced (95 % CI {:+.2} .. {:+.2} %), noise floor {:.2} %",
        v.reps,
        v.mpi,
        100.0 * e.error,
        100.0 * e.ci_low,
        100.0 * e.ci_high,
        100.0 * v.untraced_spread
    );
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, (FAMILY, 20))
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.5..pairs + 0.5, lo..hi)?;
    chart
        .configure_mesh()
        .x_desc("pair (untraced run, traced run), in the order run")
        .y_desc("s, end of MPI_Init to start of MPI_Finalize")
        .x_labels(v.pairs.len().clamp(1, 20))
        .x_label_formatter(&|x| format!("{x:.0}"))
        .label_style((FAMILY, 14))
        .axis_desc_style((FAMILY, 15))
        .draw()?;

    let band = RGBColor(150, 150, 150);
    chart
        .draw_series([Rectangle::new(
            [(0.5, band_low), (pairs + 0.5, band_high)],
            band.mix(0.25).filled(),
        )])?
        .label(format!(
            "untraced median ± noise floor ({:.2} %)",
            100.0 * v.untraced_spread
        ))
        .legend(move |(x, y)| {
            Rectangle::new([(x, y - 6), (x + 20, y + 6)], band.mix(0.4).filled())
        });
    chart.draw_series(DashedLineSeries::new(
        [
            (0.5, v.untraced_median_s),
            (pairs + 0.5, v.untraced_median_s),
        ],
        8,
        6,
        BLACK.mix(0.6).stroke_width(1),
    ))?;

    for k in &KINDS {
        let colour = k.colour;
        let dots = v.pairs.iter().enumerate().map(|(i, p)| {
            Circle::new(
                ((i + 1) as f64 + k.offset, (k.value)(p)),
                5,
                colour.filled(),
            )
        });
        chart
            .draw_series(dots)?
            .label(k.label)
            .legend(move |(x, y)| Circle::new((x + 10, y), 5, colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .label_font((FAMILY, 14))
        .draw()?;
    root.present()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Error, Pair, Validation};
    use super::*;

    /// Width and height from a PNG's IHDR chunk, after checking the signature.
    fn png_size(bytes: &[u8]) -> Option<(u32, u32)> {
        let signature = b"\x89PNG\r\n\x1a\n";
        if bytes.len() < 24 || &bytes[..8] != signature || &bytes[12..16] != b"IHDR" {
            return None;
        }
        let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        Some((be(16), be(20)))
    }

    #[test]
    fn draws_every_run_into_a_png() {
        let pair = |u: f64, t: f64| Pair {
            untraced_s: u,
            traced_s: t,
            reconstructed_plus_s: t - 0.02,
            reconstructed_s: t - 0.03,
            reconstructed_causal_s: t - 0.025,
            reconstructed_replay_s: t - 0.028,
            dp_prime_s: 0.02,
            dp_s: 0.01,
            dp_reads_s: 0.001,
            flushes: 4,
            cpus_per_rank: 1,
            unreliable: Vec::new(),
        };
        let e = |m: f64| Error {
            median_s: m,
            error: m - 1.0,
            ci_low: m - 1.01,
            ci_high: m - 0.99,
            within_noise: false,
        };
        let v = Validation {
            command: vec!["mpirun".into()],
            mpi: "openmpi",
            reps: 3,
            definition: super::super::DEFINITION,
            untraced_median_s: 1.0,
            untraced_spread: 0.01,
            traced: e(1.03),
            reconstructed_plus: e(1.01),
            reconstructed: e(1.0),
            reconstructed_causal: e(1.0),
            reconstructed_replay: e(1.0),
            dp_prime_median_s: 0.02,
            dp_median_s: 0.01,
            dp_reads_median_s: 0.001,
            reads_share: 0.001,
            flushes_median: 4,
            cpus_per_rank: 1,
            unreliable: Vec::new(),
            pairs: vec![pair(1.0, 1.03), pair(0.99, 1.04), pair(1.01, 1.03)],
        };
        let path = std::env::temp_dir().join(format!("evenflush-plot-{}.png", std::process::id()));
        draw(&v, &path).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(png_size(&bytes), Some((WIDTH, HEIGHT)));
        std::fs::remove_file(&path).unwrap();
    }
}
