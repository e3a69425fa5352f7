//! `--plot PATH.svg`: admitted and denied per 100 ms as stacked bars, and for throughput runs the
//! latency distribution (value at each percentile, log-scaled), written as plain SVG.

use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::math::Timeline;

const WIDTH: f64 = 960.0;
const PANEL: f64 = 260.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 40.0;
const GAP: f64 = 70.0;

/// The SVG document for `title`, a timeline and (optionally) a latency histogram in nanoseconds.
pub fn svg(title: &str, timeline: &Timeline, latency: Option<&Histogram<u64>>) -> String {
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
    timeline_panel(&mut s, timeline, TOP);
    if let Some(h) = latency.filter(|h| !h.is_empty()) {
        latency_panel(&mut s, h, TOP + PANEL + GAP);
    }
    s.push_str("</svg>\n");
    s
}

fn timeline_panel(s: &mut String, t: &Timeline, y0: f64) {
    let plot_w = WIDTH - LEFT - RIGHT;
    let n = t.buckets.len().max(1);
    let peak = t.buckets.iter().map(|b| b[0] + b[1]).max().unwrap_or(0).max(1);
    let bar_w = plot_w / n as f64;
    let y_of = |v: u64| y0 + PANEL - PANEL * v as f64 / peak as f64;
    axes(s, y0, &format!("requests per {} ms", t.bucket_ms));
    for (i, [admitted, denied]) in t.buckets.iter().enumerate() {
        let x = LEFT + i as f64 * bar_w;
        let w = (bar_w * 0.9).max(0.5);
        let ya = y_of(*admitted);
        let _ = writeln!(
            s,
            r##"<rect x="{x:.2}" y="{ya:.2}" width="{w:.2}" height="{:.2}" fill="#2e9e44"/>"##,
            y0 + PANEL - ya
        );
        if *denied > 0 {
            let yd = y_of(admitted + denied);
            let _ = writeln!(
                s,
                r##"<rect x="{x:.2}" y="{yd:.2}" width="{w:.2}" height="{:.2}" fill="#d64541"/>"##,
                ya - yd
            );
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
    let _ = writeln!(
        s,
        r##"<rect x="{:.0}" y="{:.0}" width="10" height="10" fill="#2e9e44"/><text x="{:.0}" y="{:.0}">admitted</text><rect x="{:.0}" y="{:.0}" width="10" height="10" fill="#d64541"/><text x="{:.0}" y="{:.0}">denied</text>"##,
        WIDTH - 190.0,
        y0 - 14.0,
        WIDTH - 176.0,
        y0 - 5.0,
        WIDTH - 110.0,
        y0 - 14.0,
        WIDTH - 96.0,
        y0 - 5.0
    );
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
        let label = crate::report::human_us(10f64.powf(e) / 1000.0);
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

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
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
        let mut h = crate::math::latency_histogram();
        for ns in [1_000, 2_000, 50_000] {
            h.record(ns).unwrap();
        }
        let doc = svg("a <b> & c", &t, Some(&h));
        assert!(doc.starts_with("<svg") && doc.trim_end().ends_with("</svg>"));
        assert_eq!(doc.matches(r##"fill="#2e9e44"/>"##).count(), 3); // 2 bars + legend
        assert_eq!(doc.matches(r##"fill="#d64541"/>"##).count(), 2); // 1 bar + legend
        assert!(doc.contains("<polyline") && doc.contains("a &lt;b&gt; &amp; c"));
        assert!(!svg("t", &t, None).contains("<polyline"));
    }
}
