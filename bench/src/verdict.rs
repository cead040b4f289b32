//! Target verdicts: a figure of a run held against a bound, usually a
//! multiple of a baseline measured in the same run.
//!
//! Each verdict is written into the report as three keys,
//! `target_<name>_met` (1 or 0), `target_<name>_value` (the figure) and
//! `target_<name>_bound` (what it was held against), and as one line of the
//! summary a benchmark prints last.
//!
//! A figure or bound of 0 (or one that is not finite) means it was not
//! measured, and the verdict is then not met: no figure a target is set on
//! is legitimately 0.

use crate::report::Report;

/// Which side of its bound a figure must fall on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// The figure must be at most this (latency, CPU).
    AtMost(f64),
    /// The figure must be at least this (throughput, a ratio to a baseline).
    AtLeast(f64),
}

impl Bound {
    fn limit(self) -> f64 {
        match self {
            Self::AtMost(limit) | Self::AtLeast(limit) => limit,
        }
    }
}

/// One target checked in one run.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The key stem: the report gets `target_<name>_met` and friends.
    pub name: String,
    /// What is compared with what, in the report's keys, for the summary
    /// line (`single_c1_p50_us vs 3 x baseline_fdatasync_cpu_us`).
    pub compares: String,
    /// The figure.
    pub value: f64,
    /// Its bound.
    pub bound: Bound,
}

impl Verdict {
    /// `value` must be at most `bound`.
    pub fn at_most(name: &str, compares: &str, value: f64, bound: f64) -> Self {
        Self::new(name, compares, value, Bound::AtMost(bound))
    }

    /// `value` must be at least `bound`.
    pub fn at_least(name: &str, compares: &str, value: f64, bound: f64) -> Self {
        Self::new(name, compares, value, Bound::AtLeast(bound))
    }

    fn new(name: &str, compares: &str, value: f64, bound: Bound) -> Self {
        Self {
            name: name.to_string(),
            compares: compares.to_string(),
            value,
            bound,
        }
    }

    /// Whether both numbers were measured and the figure is on the right
    /// side of its bound.
    pub fn met(&self) -> bool {
        let measured = |x: f64| x.is_finite() && x > 0.0;
        if !measured(self.value) || !measured(self.bound.limit()) {
            return false;
        }
        match self.bound {
            Bound::AtMost(limit) => self.value <= limit,
            Bound::AtLeast(limit) => self.value >= limit,
        }
    }

    /// Sets `target_<name>_met`, `target_<name>_value` and
    /// `target_<name>_bound`.
    pub fn record(&self, report: &mut Report) {
        let key = |suffix: &str| format!("target_{}_{suffix}", self.name);
        report
            .set(&key("met"), f64::from(u8::from(self.met())))
            .set(&key("value"), self.value)
            .set(&key("bound"), self.bound.limit());
    }

    /// One line for a person: the figure, the bound, met or not.
    pub fn summary(&self) -> String {
        let (relation, limit) = match self.bound {
            Bound::AtMost(limit) => ("<=", limit),
            Bound::AtLeast(limit) => (">=", limit),
        };
        format!(
            "target {}: {} (bound {relation} {}; {}): {}",
            self.name,
            figure(self.value),
            figure(limit),
            self.compares,
            if self.met() { "met" } else { "NOT met" },
        )
    }
}

/// Records every verdict in `report`.
pub fn record_all(report: &mut Report, verdicts: &[Verdict]) {
    for verdict in verdicts {
        verdict.record(report);
    }
}

/// Prints one summary line per verdict on standard output.
pub fn print_summary(verdicts: &[Verdict]) {
    for verdict in verdicts {
        println!("{}", verdict.summary());
    }
}

/// A figure with as many decimals as its size needs to be read.
fn figure(value: f64) -> String {
    match value.abs() {
        size if size >= 100.0 => format!("{value:.0}"),
        size if size >= 1.0 => format!("{value:.1}"),
        _ => format!("{value:.3}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bound_is_inclusive_on_either_side() {
        assert!(Verdict::at_most("a", "", 20.0, 20.0).met());
        assert!(!Verdict::at_most("a", "", 20.1, 20.0).met());
        assert!(Verdict::at_least("b", "", 0.45, 0.45).met());
        assert!(!Verdict::at_least("b", "", 0.44, 0.45).met());
    }

    #[test]
    fn an_unmeasured_figure_or_bound_is_not_met() {
        assert!(!Verdict::at_most("cpu", "", 0.0, 20.0).met());
        assert!(!Verdict::at_least("rate", "", 5.0, 0.0).met());
        assert!(!Verdict::at_most("p50", "", f64::NAN, 20.0).met());
    }

    #[test]
    fn record_sets_the_verdict_and_both_numbers() {
        let mut report = Report::new("unit");
        Verdict::at_least("rate", "x vs y", 90.0, 100.0).record(&mut report);
        assert_eq!(report.get("target_rate_met"), Some(0.0));
        assert_eq!(report.get("target_rate_value"), Some(90.0));
        assert_eq!(report.get("target_rate_bound"), Some(100.0));
    }

    #[test]
    fn summary_names_value_bound_and_outcome() {
        let line = Verdict::at_most("cpu_c64", "cpu vs 20", 12.4, 20.0).summary();
        assert_eq!(line, "target cpu_c64: 12.4 (bound <= 20.0; cpu vs 20): met");
    }
}
