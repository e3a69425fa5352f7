//! `--plot PATH.svg` for `replay`, written as plain SVG:
//!
//! - **would-deny over time**: one line per rule (with `--compare`, policy B's rules dashed);
//! - **per-key peaks against the limit**, one panel per rule: how many keys peaked at each value
//!   (the rule's own algorithm, log-scaled counts), the rule's limit as a red line (B's, with
//!   `--compare`, blue) and with `--suggest` the suggested limit as a dashed green line. Keys right
//!   of the red line are the ones the limit refuses at least once.

use std::fmt::Write as _;

use crate::Outcome;
use crate::report::{PolicyReport, ReplayReport};
use crate::suggest::Peaks;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 200.0;
const TIMELINE: f64 = 240.0;
const PEAKS: f64 = 170.0;
const GAP: f64 = 64.0;
const TOP: f64 = 64.0;
/// The most rules drawn as peak panels.
const MAX_PANELS: usize = 8;

const COLORS: [&str; 8] =
    ["#d64541", "#2f6fb5", "#2e9e44", "#f0a030", "#8e44ad", "#16a0a0", "#7f8c8d", "#c0392b"];

/// `text` made safe inside SVG markup (an element's text or an attribute's value).
pub fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// A round step for an axis reaching `max` with about `n` ticks.
fn step(max: f64, n: f64) -> f64 {
    let raw = (max / n).max(1e-9);
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * p).find(|s| *s >= raw).unwrap_or(10.0 * p)
}

/// The SVG of `report` (and the keys' peaks of `outcome`).
pub fn svg(report: &ReplayReport, outcome: &Outcome) -> String {
    let (a, b) = match report {
        ReplayReport::One(r) => (r, None),
        ReplayReport::Two(c) => (&c.a, Some(&c.b)),
    };
    let empty = Vec::new();
    let peaks_a = outcome.peaks.first().unwrap_or(&empty);
    let peaks_b = outcome.peaks.get(1);
    let panels: Vec<&Peaks> = peaks_a.iter().filter(|p| !p.families.is_empty()).take(MAX_PANELS).collect();
    let height = TOP + TIMELINE + GAP + panels.len() as f64 * (PEAKS + GAP);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let title = format!(
        "floodgate-bench replay — {} requests from {}, {} refused ({:.2} %)",
        a.requests,
        a.start.as_deref().unwrap_or("-"),
        a.denied,
        a.denied_share * 100.0
    );
    let _ = writeln!(s, r#"<text x="{LEFT}" y="24" font-size="15">{}</text>"#, escape(&title));
    timeline(&mut s, a, b, TOP);
    for (i, p) in panels.iter().enumerate() {
        let y0 = TOP + TIMELINE + GAP + i as f64 * (PEAKS + GAP);
        let suggested = a
            .suggest
            .as_ref()
            .and_then(|rows| rows.iter().find(|r| r.rule == p.rule && r.current).map(|r| r.limit));
        let b_limit = peaks_b
            .and_then(|pb| pb.iter().find(|q| q.rule == p.rule))
            .map(|q| q.limit.capacity())
            .filter(|_| b.is_some());
        peaks_panel(&mut s, p, suggested, b_limit, y0);
    }
    s.push_str("</svg>\n");
    s
}

fn timeline(s: &mut String, a: &PolicyReport, b: Option<&PolicyReport>, y0: f64) {
    let w = WIDTH - LEFT - RIGHT;
    let mut series: Vec<(String, &[u64], bool)> = Vec::new();
    for r in &a.rules {
        let name = if b.is_some() { format!("A: {}", r.name) } else { r.name.clone() };
        series.push((name, &r.over_time.counts, false));
    }
    if let Some(b) = b {
        for r in &b.rules {
            series.push((format!("B: {}", r.name), &r.over_time.counts, true));
        }
    }
    let bucket = a.rules.first().map_or(1, |r| r.over_time.bucket_s);
    let n = series.iter().map(|(_, c, _)| c.len()).max().unwrap_or(1).max(1);
    let max = series.iter().flat_map(|(_, c, _)| c.iter()).copied().max().unwrap_or(0).max(1) as f64;
    let ystep = step(max, 5.0);
    let ymax = (max / ystep).ceil() * ystep;
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{}" font-size="13">would-deny per {bucket} s, per rule</text>"#,
        y0 - 8.0
    );
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{y0}" width="{w}" height="{TIMELINE}" fill="none" stroke="#999"/>"##
    );
    let mut tick = 0.0;
    while tick <= ymax + 1e-9 {
        let y = y0 + TIMELINE - tick / ymax * TIMELINE;
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{tick}</text>"##,
            LEFT + w,
            LEFT - 6.0,
            y + 4.0
        );
        tick += ystep;
    }
    let span_s = n as f64 * bucket as f64;
    let (unit, div) = if span_s > 7200.0 {
        ("h", 3600.0)
    } else if span_s > 120.0 {
        ("min", 60.0)
    } else {
        ("s", 1.0)
    };
    let xstep = step(span_s / div, 8.0);
    let mut t = 0.0;
    while t <= span_s / div + 1e-9 {
        let x = LEFT + t * div / span_s * w;
        let _ = writeln!(
            s,
            r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{t}</text>"#,
            y0 + TIMELINE + 16.0
        );
        t += xstep;
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{unit} from the log's start</text>"#,
        LEFT + w / 2.0,
        y0 + TIMELINE + 34.0
    );
    for (i, (name, counts, dashed)) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut points = String::new();
        for (j, c) in counts.iter().enumerate() {
            let x = LEFT + (j as f64 + 0.5) / n as f64 * w;
            let y = y0 + TIMELINE - *c as f64 / ymax * TIMELINE;
            let _ = write!(points, "{x:.1},{y:.1} ");
        }
        let dash = if *dashed { r#" stroke-dasharray="6 4""# } else { "" };
        let _ = writeln!(
            s,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="1.6"{dash}/>"#,
            points.trim_end()
        );
        let ly = y0 + 14.0 + i as f64 * 18.0;
        let lx = LEFT + w + 12.0;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(name)
        );
    }
}

fn peaks_panel(s: &mut String, p: &Peaks, suggested: Option<u64>, b_limit: Option<u64>, y0: f64) {
    let w = WIDTH - LEFT - RIGHT;
    let own = p.limit.algorithm_name();
    let Some((_, peaks)) = p.families.iter().find(|(f, _)| f.name() == own).or_else(|| p.families.first())
    else {
        return;
    };
    let limit = p.limit.capacity();
    let max_peak = peaks.last().copied().unwrap_or(0);
    let xmax =
        [max_peak, limit, suggested.unwrap_or(0), b_limit.unwrap_or(0)].into_iter().max().unwrap_or(1).max(1);
    let xmax = (xmax as f64 * 1.05).ceil().max(2.0);
    let bins = (xmax as usize).min(80);
    let width = xmax / bins as f64;
    let mut counts = vec![0u64; bins];
    for v in peaks {
        let b = ((*v as f64) / width).floor() as usize;
        counts[b.min(bins - 1)] += 1;
    }
    let ymax = counts.iter().copied().max().unwrap_or(1).max(1) as f64;
    let scale = |c: u64| (1.0 + c as f64).log10() / (1.0 + ymax).log10() * PEAKS;
    let over = peaks.iter().filter(|v| **v > limit).count();
    let _ = writeln!(
        s,
        r#"<text x="{LEFT}" y="{}" font-size="13">{}: per-key peak ({own}, requests per window) — {} keys, {over} above the limit</text>"#,
        y0 - 8.0,
        escape(&p.rule),
        peaks.len()
    );
    let _ = writeln!(
        s,
        r##"<rect x="{LEFT}" y="{y0}" width="{w}" height="{PEAKS}" fill="none" stroke="#999"/>"##
    );
    for (i, c) in counts.iter().enumerate().filter(|(_, c)| **c > 0) {
        let h = scale(*c);
        let x = LEFT + i as f64 / bins as f64 * w;
        let _ = writeln!(
            s,
            r##"<rect x="{x:.1}" y="{:.1}" width="{:.1}" height="{h:.1}" fill="#7f8c8d"><title>{c} keys</title></rect>"##,
            y0 + PEAKS - h,
            (w / bins as f64 - 1.0).max(1.0)
        );
    }
    for c in [1u64, 10, 100, 1000, 10_000, 100_000, 1_000_000].into_iter().filter(|c| (*c as f64) <= ymax) {
        let y = y0 + PEAKS - scale(c);
        let _ = writeln!(s, r#"<text x="{}" y="{:.1}" text-anchor="end">{c}</text>"#, LEFT - 6.0, y + 4.0);
    }
    let xstep = step(xmax, 10.0);
    let mut t = 0.0;
    while t <= xmax + 1e-9 {
        let x = LEFT + t / xmax * w;
        let _ =
            writeln!(s, r#"<text x="{x:.1}" y="{:.1}" text-anchor="middle">{t}</text>"#, y0 + PEAKS + 16.0);
        t += xstep;
    }
    let mut legend = 0.0;
    let mut mark = |value: u64, color: &str, dash: &str, label: String| {
        let x = LEFT + (value as f64 + 0.5) / xmax * w;
        let _ = writeln!(
            s,
            r#"<line x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{}" stroke="{color}" stroke-width="2"{dash}/>"#,
            y0 + PEAKS
        );
        let lx = LEFT + w + 12.0;
        let ly = y0 + 14.0 + legend;
        let _ = writeln!(
            s,
            r#"<line x1="{lx}" x2="{}" y1="{ly}" y2="{ly}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
            lx + 22.0,
            lx + 28.0,
            ly + 4.0,
            escape(&label)
        );
        legend += 18.0;
    };
    mark(limit, "#d64541", "", format!("limit {limit}"));
    if let Some(l) = b_limit {
        mark(l, "#2f6fb5", "", format!("B's limit {l}"));
    }
    if let Some(l) = suggested {
        mark(l, "#2e9e44", r#" stroke-dasharray="6 4""#, format!("suggested {l}"));
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">peak (keys per bar, log scale)</text>"#,
        LEFT + w / 2.0,
        y0 + PEAKS + 34.0
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_steps_are_round() {
        assert_eq!(step(100.0, 5.0), 20.0);
        assert_eq!(step(7.0, 5.0), 2.0);
        assert_eq!(step(1.0, 5.0), 0.2);
        assert_eq!(step(12_345.0, 10.0), 2000.0);
    }

    #[test]
    fn text_is_escaped() {
        assert_eq!(escape("a<b & \"c\">"), "a&lt;b &amp; &quot;c&quot;&gt;");
    }
}
