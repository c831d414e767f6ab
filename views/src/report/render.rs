//! The report's forms: the JSON document, the CSV of the function table, and the text table
//! `evenflush report` prints.

use super::*;

impl Report {
    /// The JSON form: `functions`, `partners`, `ranks`, `suspensions` and the rest.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::to_value(self).unwrap_or_default();
        if let Some(obj) = v.as_object_mut()
            && let Some(ranks) = obj.remove("ranks_table")
        {
            obj.insert("world_size".into(), serde_json::json!(self.ranks));
            obj.insert("ranks".into(), ranks);
        }
        v
    }

    /// The function table as CSV, one line per function with its histogram bins as columns.
    pub fn to_csv(&self) -> String {
        use std::fmt::Write;
        let mut o = String::from(
            "name,count,total_s,min_s,max_s,mean_s,bytes_total,bytes_min,bytes_max,bytes_mean,handle_with_care",
        );
        for label in &self.size_bins {
            let _ = write!(o, ",send_{label}");
        }
        for label in &self.size_bins {
            let _ = write!(o, ",recv_{label}");
        }
        o.push('\n');
        for f in &self.functions {
            let _ = write!(
                o,
                "{},{},{:e},{:e},{:e},{:e},{},{},{},{},{}",
                f.name,
                f.count,
                f.total_s,
                f.min_s,
                f.max_s,
                f.mean_s,
                f.bytes_total,
                f.bytes_min,
                f.bytes_max,
                f.bytes_mean,
                f.handle_with_care
            );
            for c in f.histogram {
                let _ = write!(o, ",{c}");
            }
            let recv = f.recv_histogram.unwrap_or([0; SIZE_BINS]);
            for c in recv {
                let _ = write!(o, ",{c}");
            }
            o.push('\n');
        }
        o
    }

    /// The human-readable tables.
    pub fn render_table(&self) -> String {
        use std::fmt::Write;
        let mut o = String::new();
        let _ = writeln!(o, "profile of    {} ({} ranks)", self.source, self.ranks);
        if let Some(w) = &self.window {
            let _ = writeln!(
                o,
                "{}: calls whose start lies in it; {} messages crossing its edge; {} sends to ranks \
                 outside it not in the partners",
                w.window, w.messages_crossing, w.sends_to_ranks_outside
            );
        }
        let _ = writeln!(
            o,
            "recorder cost {:.3} µs per call typical (median), {:.3} µs mean; '!' marks functions whose mean time is within 3x the typical cost",
            self.recorder_typical_cost_s * 1e6,
            self.recorder_mean_cost_s * 1e6
        );
        let _ = writeln!(
            o,
            "\n{:<26} {:>9} {:>11} {:>10} {:>10} {:>10} {:>13} {:>9} {:>9} {:>10}",
            "function",
            "calls",
            "total s",
            "min µs",
            "mean µs",
            "max µs",
            "bytes",
            "min B",
            "max B",
            "mean B"
        );
        for f in &self.functions {
            let _ = writeln!(
                o,
                "{:<26} {:>9} {:>11.6} {:>10.2} {:>10.2} {:>10.2} {:>13} {:>9} {:>9} {:>10.1}",
                format!("{}{}", if f.handle_with_care { "!" } else { "" }, f.name),
                f.count,
                f.total_s,
                f.min_s * 1e6,
                f.mean_s * 1e6,
                f.max_s * 1e6,
                f.bytes_total,
                f.bytes_min,
                f.bytes_max,
                f.bytes_mean
            );
        }
        let _ = writeln!(
            o,
            "\nmessage sizes (calls per bin; bin 0 = 0-1 B, bin k = [2^k, 2^(k+1)) B, last >= 8 MiB)"
        );
        let used: Vec<usize> = (0..SIZE_BINS)
            .filter(|&k| {
                self.functions
                    .iter()
                    .any(|f| f.histogram[k] > 0 || f.recv_histogram.is_some_and(|h| h[k] > 0))
            })
            .collect();
        let _ = write!(o, "{:<31}", "function");
        for &k in &used {
            let _ = write!(o, " {:>8}", self.size_bins[k]);
        }
        o.push('\n');
        for f in &self.functions {
            if f.histogram.iter().any(|&c| c > 0) {
                let _ = write!(o, "{:<31}", format!("{} (call)", f.name));
                for &k in &used {
                    let _ = write!(o, " {:>8}", f.histogram[k]);
                }
                o.push('\n');
            }
            if let Some(h) = f.recv_histogram {
                let _ = write!(o, "{:<31}", format!("{} (received)", f.name));
                for &k in &used {
                    let _ = write!(o, " {:>8}", h[k]);
                }
                o.push('\n');
            }
        }
        let n = self.ranks as usize;
        if !self.partners.pairs.is_empty() && n <= MATRIX_MAX_RANKS {
            let _ = writeln!(
                o,
                "\npartners: point-to-point messages (bytes) from row rank to column rank"
            );
            let _ = write!(o, "{:>6}", "");
            for j in 0..n {
                let _ = write!(o, " {j:>14}");
            }
            o.push('\n');
            for i in 0..n as u32 {
                let _ = write!(o, "{i:>6}");
                for j in 0..n as u32 {
                    let c = self.partners.get(i, j);
                    let cell = if c.messages == 0 {
                        "-".to_string()
                    } else {
                        format!("{} ({})", c.messages, c.bytes)
                    };
                    let _ = write!(o, " {cell:>14}");
                }
                o.push('\n');
            }
        } else if !self.partners.pairs.is_empty() {
            let _ = writeln!(
                o,
                "\npartners: {n} ranks, {} pairs exchanged point-to-point messages ({} messages); the {} heaviest by bytes (all pairs in --json):",
                self.partners.pairs.len(),
                self.partners.total_messages(),
                TOP_PAIRS.min(self.partners.pairs.len())
            );
            let _ = writeln!(
                o,
                "{:>8} {:>8} {:>12} {:>16}",
                "from", "to", "messages", "bytes"
            );
            for p in self.partners.top(TOP_PAIRS) {
                let _ = writeln!(
                    o,
                    "{:>8} {:>8} {:>12} {:>16}",
                    p.source, p.dest, p.messages, p.bytes
                );
            }
        }
        let _ = writeln!(
            o,
            "\n{:>6} {:>9} {:>12} {:>12} {:>12} {:>7} {:>12}",
            "rank", "calls", "span s", "MPI s", "outside s", "MPI %", "suspended s"
        );
        let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.6}"));
        for r in &self.ranks_table {
            let _ = writeln!(
                o,
                "{:>6} {:>9} {:>12} {:>12.6} {:>12} {:>7} {:>12.6}",
                r.rank,
                r.calls,
                opt(r.span_s),
                r.mpi_s,
                opt(r.outside_s),
                r.mpi_fraction
                    .map_or("-".to_string(), |f| format!("{:.1}", f * 100.0)),
                r.suspended_s
            );
        }
        if let Some(imb) = self.mpi_imbalance {
            let _ = writeln!(o, "MPI time imbalance (max / mean over ranks): {imb:.3}");
        }
        if !self.suspensions.is_empty() {
            let _ = writeln!(
                o,
                "\n{:>6} {:>10} {:>8} {:>12} {:>12} {:>10} {:>12} {:>11}",
                "susp",
                "Z ms",
                "flushed",
                "raw bytes",
                "stored",
                "write ms",
                "overshoot µs",
                "longest ms"
            );
            for s in &self.suspensions {
                let _ = writeln!(
                    o,
                    "{:>6} {:>10.3} {:>8} {:>12} {:>12} {:>10.3} {:>12.1} {:>11.3}",
                    s.seq,
                    s.z_s * 1e3,
                    if s.flushed {
                        format!("{} rk", s.ranks_flushed)
                    } else {
                        "no".into()
                    },
                    s.bytes_raw,
                    s.bytes_stored,
                    s.max_write_s * 1e3,
                    s.max_overshoot_s * 1e6,
                    s.max_length_s * 1e3
                );
            }
        }
        if let Some(m) = &self.memory {
            o.push('\n');
            o.push_str(&m.render());
        }
        for w in &self.warnings {
            let _ = writeln!(o, "warning: {w}");
        }
        o
    }
}
