//! How the lab reports what it measured: the spread of a sample of durations (nearest-rank
//! p50, p99 and the max), durations in the unit that reads best, and a target's verdict. One
//! place for the bench and the contention run.

use std::time::Duration;

use serde_json::{Value, json};

/// p50, p99 and max of some durations.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Spread {
    pub(crate) p50: Duration,
    pub(crate) p99: Duration,
    pub(crate) max: Duration,
}

impl Spread {
    pub(crate) fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            let last = samples.len().saturating_sub(1);
            // Nearest rank; the float only picks an index.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let i = ((last as f64) * q).round() as usize;
            samples.get(i).copied().unwrap_or_default()
        };
        Self {
            p50: at(0.5),
            p99: at(0.99),
            max: samples.last().copied().unwrap_or_default(),
        }
    }

    pub(crate) fn to_json(self) -> Value {
        json!({"p50_us": us(self.p50), "p99_us": us(self.p99), "max_us": us(self.max)})
    }

    pub(crate) fn row(self, label: &str) -> String {
        format!(
            "  {label:<38} {:>10} {:>10} {:>10}",
            show(self.p50),
            show(self.p99),
            show(self.max)
        )
    }
}

/// Where the running text goes: stdout, or stderr when stdout carries the JSON figures.
///
/// Write errors are ignored: a closed pipe (`redquorum-lab bench | head -2`) must not panic
/// the run before it stops the masters it started (`println!` did, and left them running).
pub(crate) fn sayer(as_json: bool) -> impl Fn(String) {
    use std::io::Write;
    move |mut line: String| {
        line.push('\n');
        let _ = if as_json {
            std::io::stderr().lock().write_all(line.as_bytes())
        } else {
            std::io::stdout().lock().write_all(line.as_bytes())
        };
    }
}

pub(crate) fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub(crate) fn show(d: Duration) -> String {
    if d < Duration::from_millis(10) {
        format!("{:.0} µs", us(d))
    } else {
        format!("{:.1} ms", ms(d))
    }
}

pub(crate) fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_picks_nearest_ranks() {
        let samples: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        let s = Spread::of(samples);
        assert_eq!(s.p50, Duration::from_millis(51));
        assert_eq!(s.p99, Duration::from_millis(99));
        assert_eq!(s.max, Duration::from_millis(100));
        let empty = Spread::of(Vec::new());
        assert_eq!(empty.max, Duration::ZERO);
    }
}
