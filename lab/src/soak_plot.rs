//! The soak's plot, as SVG: acquisitions per second with the nemesis's faults shaded, and
//! the fencing tokens over time.
//!
//! Written directly rather than with a plotting crate: `plotters` places text by measuring
//! it with a font backend (fontconfig, or a font file shipped with us), which a plot of a few
//! hundred lines, boxes and labels does not need; an SVG's text is laid out by its viewer.

use std::fmt::Write as _;

/// What the plot shows, in seconds since the soak's window opened.
pub(crate) struct PlotData<'a> {
    pub(crate) title: &'a str,
    pub(crate) seconds: f64,
    /// Acquisitions in each whole second of the window.
    pub(crate) per_second: Vec<u64>,
    /// (kind, from, to) of each fault.
    pub(crate) faults: Vec<(&'a str, f64, f64)>,
    /// The kinds of fault the nemesis drew from, for the legend.
    pub(crate) kinds: &'a [&'a str],
    /// (when acquired, token) of the holds that carry one, in acquisition order.
    pub(crate) tokens: Vec<(f64, u64)>,
}

const WIDTH: f64 = 1200.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const PANEL: f64 = 220.0;
const TOP: f64 = 70.0;
const GAP: f64 = 60.0;

fn color(kind: &str) -> &'static str {
    match kind {
        "kill" => "#d62728",
        "pause" => "#ff7f0e",
        "jump" | "jump2" | "jump3" => "#2ca02c",
        "cut" => "#1f77b4",
        _ => "#9467bd",
    }
}

/// The SVG document.
pub(crate) fn svg(data: &PlotData<'_>) -> String {
    let height = TOP + 2.0 * PANEL + GAP + 50.0;
    let plot_w = WIDTH - LEFT - RIGHT;
    let seconds = data.seconds.max(1.0);
    let x = |t: f64| LEFT + plot_w * (t / seconds).clamp(0.0, 1.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="24" font-size="15">{}</text>"#,
        escape(data.title)
    );
    // Legend, under the title.
    let mut lx = LEFT;
    for &kind in data.kinds {
        let _ = writeln!(
            out,
            r#"<rect x="{lx}" y="32" width="12" height="10" fill="{}" fill-opacity="0.25"/><text x="{}" y="41">{kind}</text>"#,
            color(kind),
            lx + 16.0
        );
        lx += 80.0;
    }
    let rate_max = data.per_second.iter().copied().max().unwrap_or(1).max(1) as f64;
    let token_min = data.tokens.first().map_or(0, |t| t.1) as f64;
    let token_max = data.tokens.iter().map(|t| t.1).max().unwrap_or(1) as f64;
    let panels = [
        (TOP, "acquisitions per second", rate_max, 0.0),
        (
            TOP + PANEL + GAP,
            "fencing token of each hold",
            token_max,
            token_min,
        ),
    ];
    for (top, label, max, min) in panels {
        let bottom = top + PANEL;
        for (kind, from, to) in &data.faults {
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{top}" width="{:.1}" height="{PANEL}" fill="{}" fill-opacity="0.18"/>"#,
                x(*from),
                (x(*to) - x(*from)).max(0.5),
                color(kind)
            );
        }
        let _ = writeln!(
            out,
            r##"<rect x="{LEFT}" y="{top}" width="{plot_w}" height="{PANEL}" fill="none" stroke="#444"/>"##
        );
        let _ = writeln!(out, r#"<text x="{LEFT}" y="{}" >{label}</text>"#, top - 6.0);
        for i in 0..=4 {
            let value = min + (max - min) * f64::from(i) / 4.0;
            let y = bottom - PANEL * f64::from(i) / 4.0;
            let _ = writeln!(
                out,
                r##"<text x="{}" y="{:.1}" text-anchor="end">{value:.0}</text><line x1="{LEFT}" x2="{}" y1="{y:.1}" y2="{y:.1}" stroke="#ddd"/>"##,
                LEFT - 6.0,
                y + 4.0,
                WIDTH - RIGHT
            );
        }
        for i in 0..=10 {
            let t = seconds * f64::from(i) / 10.0;
            let _ = writeln!(
                out,
                r#"<text x="{:.1}" y="{}" text-anchor="middle">{t:.0} s</text>"#,
                x(t),
                bottom + 16.0
            );
        }
    }
    let scale = |value: f64, top: f64, max: f64, min: f64| {
        let span = (max - min).max(1.0);
        top + PANEL - PANEL * ((value - min) / span).clamp(0.0, 1.0)
    };
    let rates: Vec<String> = data
        .per_second
        .iter()
        .enumerate()
        .map(|(s, n)| {
            format!(
                "{:.1},{:.1}",
                x(s as f64 + 0.5),
                scale(*n as f64, TOP, rate_max, 0.0)
            )
        })
        .collect();
    let _ = writeln!(
        out,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="1.2" points="{}"/>"##,
        rates.join(" ")
    );
    // At most about two points per horizontal pixel.
    let step = (data.tokens.len() / 2400).max(1);
    let tokens: Vec<String> = data
        .tokens
        .iter()
        .step_by(step)
        .map(|(t, token)| {
            format!(
                "{:.1},{:.1}",
                x(*t),
                scale(*token as f64, TOP + PANEL + GAP, token_max, token_min)
            )
        })
        .collect();
    let _ = writeln!(
        out,
        r##"<polyline fill="none" stroke="#2ca02c" stroke-width="1.2" points="{}"/>"##,
        tokens.join(" ")
    );
    out.push_str("</svg>\n");
    out
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
