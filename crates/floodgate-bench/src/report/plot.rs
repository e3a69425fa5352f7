//! `--plot PATH.svg`: admitted and denied per 100 ms as stacked bars (with errors above them and a
//! shaded interval when a scenario adds an [`Overlay`], as `outage` does), and for throughput runs
//! the latency distribution (value at each percentile, log-scaled), written as plain SVG.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use floodgate_replay::plot::escape;

use super::math::Timeline;

const WIDTH: f64 = 960.0;
const PANEL: f64 = 260.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 70.0;

/// What a scenario adds to the timeline panel.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    /// A shaded interval behind the bars (a fault).
    pub band: Option<Band>,
    /// Errors per bucket of the timeline (same width), stacked above admitted and denied.
    pub errors: Option<Vec<u64>>,
}

/// A shaded interval of the timeline, in milliseconds from its start.
#[derive(Debug, Clone)]
pub struct Band {
    /// Where it starts.
    pub from_ms: f64,
    /// Where it ends.
    pub to_ms: f64,
    /// What it was (`Redis paused`).
    pub label: String,
}

const ADMITTED: &str = "#2e9e44";
const DENIED: &str = "#d64541";
const ERRORS: &str = "#f0a030";

/// The SVG document for `title`, a timeline with its `overlay`, and (optionally) a latency
/// histogram in nanoseconds.
pub fn svg(title: &str, timeline: &Timeline, latency: Option<&Histogram<u64>>, overlay: &Overlay) -> String {
    let panels = if latency.is_some_and(|h| !h.is_empty()) { 2.0 } else { 1.0 };
    let height = TOP + panels * PANEL + (panels - 1.0) * GAP + 50.0;
    let mut s = String::new();
    let _ = write!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{LEFT}" y="22" font-size="15" font-weight="bold">{}</text>
"##,
        escape(title)
    );
    timeline_panel(&mut s, timeline, overlay, TOP);
    if let Some(h) = latency.filter(|h| !h.is_empty()) {
        latency_panel(&mut s, h, TOP + PANEL + GAP);
    }
    s.push_str("</svg>\n");
    s
}

fn timeline_panel(s: &mut String, t: &Timeline, overlay: &Overlay, y0: f64) {
    let plot_w = WIDTH - LEFT - RIGHT;
    let errors = overlay.errors.as_deref().unwrap_or_default();
    let errors_at = |i: usize| errors.get(i).copied().unwrap_or(0);
    let n = t.buckets.len().max(errors.len()).max(1);
    let peak =
        (0..n).map(|i| t.buckets.get(i).map_or(0, |b| b[0] + b[1]) + errors_at(i)).max().unwrap_or(0).max(1);
    let bar_w = plot_w / n as f64;
    let y_of = |v: u64| y0 + PANEL - PANEL * v as f64 / peak as f64;
    if let Some(band) = &overlay.band {
        let x_of = |ms: f64| LEFT + (ms / t.bucket_ms.max(1) as f64 * bar_w).clamp(0.0, plot_w);
        let (x1, x2) = (x_of(band.from_ms), x_of(band.to_ms));
        let _ = writeln!(
            s,
            r##"<rect x="{x1:.2}" y="{y0:.2}" width="{:.2}" height="{PANEL:.2}" fill="#9aa5b1" fill-opacity="0.25"/><text x="{:.2}" y="{:.2}" fill="#555">{}</text>"##,
            (x2 - x1).max(1.0),
            x1 + 4.0,
            y0 + 14.0,
            escape(&band.label)
        );
    }
    axes(s, y0, &format!("requests per {} ms", t.bucket_ms));
    let w = (bar_w * 0.9).max(0.5);
    for i in 0..n {
        let [admitted, denied] = t.buckets.get(i).copied().unwrap_or([0, 0]);
        let x = LEFT + i as f64 * bar_w;
        // Stacked from the axis up: admitted, denied, errors.
        let mut below = 0;
        for (value, color) in [(admitted, ADMITTED), (denied, DENIED), (errors_at(i), ERRORS)] {
            if value > 0 || color == ADMITTED {
                let (top, bottom) = (y_of(below + value), y_of(below));
                let _ = writeln!(
                    s,
                    r##"<rect x="{x:.2}" y="{top:.2}" width="{w:.2}" height="{:.2}" fill="{color}"/>"##,
                    bottom - top
                );
            }
            below += value;
        }
    }
    // y ticks: 0, peak/2, peak; x ticks: five times.
    for v in [0, peak / 2, peak] {
        let _ = writeln!(
            s,
            r#"<text x="{:.0}" y="{:.1}" text-anchor="end">{v}</text>"#,
            LEFT - 6.0,
            y_of(v) + 4.0
        );
    }
    let span_s = (n as u64 * t.bucket_ms) as f64 / 1000.0;
    for k in 0..=4 {
        let x = LEFT + plot_w * f64::from(k) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{x:.0}" y="{:.0}" text-anchor="middle">{:.1} s</text>"#,
            y0 + PANEL + 18.0,
            span_s * f64::from(k) / 4.0
        );
    }
    let mut legend = vec![("admitted", ADMITTED), ("denied", DENIED)];
    if overlay.errors.is_some() {
        legend.push(("errors", ERRORS));
    }
    for (k, (name, color)) in legend.iter().enumerate() {
        let x = WIDTH - 80.0 * (legend.len() - k) as f64 - 30.0;
        let _ = write!(
            s,
            r##"<rect x="{x:.0}" y="{:.0}" width="10" height="10" fill="{color}"/><text x="{:.0}" y="{:.0}">{name}</text>"##,
            y0 - 14.0,
            x + 14.0,
            y0 - 5.0
        );
    }
    s.push('\n');
}

fn latency_panel(s: &mut String, h: &Histogram<u64>, y0: f64) {
    let plot_w = WIDTH - LEFT - RIGHT;
    axes(s, y0, "latency (log scale) at percentile");
    // x: percentile on a "nines" scale, 0 → 50 %, 1 → 90 %, 2 → 99 %, 3 → 99.9 %, 4 → 99.99 %.
    let nines = |q: f64| -(1.0 - q).log10() - std::f64::consts::LOG10_2;
    let max_x = nines(0.9999);
    let lo = (h.min().max(1) as f64).log10().floor();
    let hi = (h.max().max(1) as f64).log10().ceil().max(lo + 1.0);
    let y_of = |ns: f64| y0 + PANEL - PANEL * (ns.max(1.0).log10() - lo) / (hi - lo);
    let mut points = String::new();
    for i in 0..=200 {
        let x = max_x * f64::from(i) / 200.0;
        let q = 1.0 - 10f64.powf(-(x + std::f64::consts::LOG10_2));
        let v = h.value_at_quantile(q.clamp(0.0, 1.0)) as f64;
        let _ = write!(points, "{:.1},{:.1} ", LEFT + plot_w * x / max_x, y_of(v));
    }
    let _ = writeln!(s, r##"<polyline points="{points}" fill="none" stroke="#2c6fbb" stroke-width="2"/>"##);
    for q in [0.5, 0.9, 0.99, 0.999, 0.9999] {
        let x = LEFT + plot_w * nines(q) / max_x;
        let _ = writeln!(
            s,
            r#"<text x="{x:.0}" y="{:.0}" text-anchor="middle">p{}</text>"#,
            y0 + PANEL + 18.0,
            q * 100.0
        );
    }
    let mut e = lo;
    while e <= hi {
        let label = super::human_us(10f64.powf(e) / 1000.0);
        let _ = writeln!(
            s,
            r#"<text x="{:.0}" y="{:.1}" text-anchor="end">{label}</text>"#,
            LEFT - 6.0,
            y_of(10f64.powf(e)) + 4.0
        );
        e += 1.0;
    }
}

fn axes(s: &mut String, y0: f64, label: &str) {
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{y0}" x2="{LEFT}" y2="{:.0}" stroke="#333"/><line x1="{LEFT}" y1="{:.0}" x2="{:.0}" y2="{:.0}" stroke="#333"/><text x="{LEFT}" y="{:.0}" fill="#555">{}</text>"##,
        y0 + PANEL,
        y0 + PANEL,
        WIDTH - RIGHT,
        y0 + PANEL,
        y0 - 4.0,
        escape(label)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_svg_has_one_bar_pair_per_bucket_and_a_latency_curve() {
        let mut t = Timeline::new(100);
        t.record(0, true);
        t.record(150, false);
        t.record(150, true);
        let mut h = crate::report::math::latency_histogram();
        for ns in [1_000, 2_000, 50_000] {
            h.record(ns).unwrap();
        }
        let doc = svg("a <b> & c", &t, Some(&h), &Overlay::default());
        assert!(doc.starts_with("<svg") && doc.trim_end().ends_with("</svg>"));
        assert_eq!(doc.matches(r##"fill="#2e9e44"/>"##).count(), 3); // 2 bars + legend
        assert_eq!(doc.matches(r##"fill="#d64541"/>"##).count(), 2); // 1 bar + legend
        assert_eq!(doc.matches(ERRORS).count(), 0);
        assert!(doc.contains("<polyline") && doc.contains("a &lt;b&gt; &amp; c"));
        assert!(!svg("t", &t, None, &Overlay::default()).contains("<polyline"));
    }

    #[test]
    fn an_overlay_shades_its_band_and_stacks_errors_above_the_decisions() {
        let mut t = Timeline::new(100);
        t.record(0, true);
        t.record(350, true);
        let overlay = Overlay {
            band: Some(Band { from_ms: 100.0, to_ms: 300.0, label: "Redis paused".into() }),
            // Errors in buckets 1 and 2 only (the band), none recorded in the timeline there.
            errors: Some(vec![0, 7, 5]),
        };
        let doc = svg("outage", &t, None, &overlay);
        assert_eq!(doc.matches(r##"fill="#f0a030"/>"##).count(), 3); // 2 bars + legend
        // Four buckets over 870 px: the band spans buckets 1 and 2, from x = 70 + 217.5.
        assert!(doc.contains(r##"<rect x="287.50" y="40.00" width="435.00""##), "{doc}");
        assert!(doc.contains(">Redis paused</text>"));
        // The tallest stack (7 errors) sets the scale.
        assert!(doc.contains(r#">7</text>"#));
    }
}
