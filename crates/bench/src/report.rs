//! The results: one row per measured figure with its comparison and target, printed as one
//! table and written as JSON and Markdown.

use std::fmt::Write as _;

/// One figure.
#[derive(Clone)]
pub struct Row {
    /// What was measured (scenario).
    pub scenario: String,
    /// Who did the work: `mcp-resources`, `echo floor`, or a peer.
    pub subject: String,
    /// Which figure.
    pub metric: String,
    /// The measured value; `None` when the row did not run (`note` says why).
    pub value: Option<f64>,
    /// The unit of `value`.
    pub unit: &'static str,
    /// The figure against the floor or a peer, when it has one.
    pub compare: String,
    /// The target this row must meet (see docs/performance.md), when there is one.
    pub target: String,
    /// Whether the target is met.
    pub met: Option<bool>,
    /// Equivalent work, conditions, or why it did not run.
    pub note: String,
}

impl Row {
    /// A measured row.
    pub fn new(
        scenario: &str,
        subject: &str,
        metric: &str,
        value: f64,
        unit: &'static str,
    ) -> Self {
        Self {
            scenario: scenario.into(),
            subject: subject.into(),
            metric: metric.into(),
            value: Some(value),
            unit,
            compare: String::new(),
            target: String::new(),
            met: None,
            note: String::new(),
        }
    }

    /// A row that could not run, and why.
    pub fn skipped(scenario: &str, subject: &str, why: String) -> Self {
        Self {
            scenario: scenario.into(),
            subject: subject.into(),
            metric: "-".into(),
            value: None,
            unit: "",
            compare: String::new(),
            target: String::new(),
            met: None,
            note: why,
        }
    }

    /// Attach a comparison.
    pub fn compare(mut self, c: String) -> Self {
        self.compare = c;
        self
    }

    /// Attach a target and whether it is met.
    pub fn target(mut self, t: &str, met: bool) -> Self {
        self.target = t.into();
        self.met = Some(met);
        self
    }

    /// Attach a note.
    pub fn note(mut self, n: &str) -> Self {
        self.note = n.into();
        self
    }
}

/// The target the build under test holds against the baseline build (`--baseline`).
pub const BEFORE_TARGET: &str = "≥ 100 % of before";

/// The build under test against the baseline build on a figure where more is better (req/s,
/// MB/s), both measured in the same alternating rounds: `after / before` in %, held to
/// [`BEFORE_TARGET`] when `held` (a figure shown beside a held one is not). `rounds` holds the two figures of each round, when the run kept them:
/// their ratios' range says how far the machine moved the comparison during the run, which a
/// reader needs to tell a 2 % loss from noise. A baseline that measured nothing is a missed
/// target, not a met one.
pub fn after_before(
    scenario: &str,
    metric: &str,
    after: f64,
    before: f64,
    unit: &str,
    rounds: &[(f64, f64)],
    held: bool,
) -> Row {
    let metric = format!("ours / before, {metric}");
    if !(before > 0.0 && before.is_finite() && after.is_finite()) {
        let mut r = Row::skipped(
            scenario,
            "mcp-resources",
            format!("the baseline measured {before} {unit}: nothing to compare with"),
        );
        r.metric = metric;
        return if held {
            r.target(BEFORE_TARGET, false)
        } else {
            r
        };
    }
    let share = 100.0 * after / before;
    let mut compare = format!(
        "ours {} {unit}, before {} {unit}",
        fmt_value(after),
        fmt_value(before)
    );
    let each: Vec<f64> = rounds
        .iter()
        .filter(|(a, b)| *b > 0.0 && b.is_finite() && a.is_finite())
        .map(|(a, b)| 100.0 * a / b)
        .collect();
    if each.len() > 1 {
        let lo = each.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = each.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let won = each.iter().filter(|&&r| r >= 100.0).count();
        let _ = write!(
            compare,
            "; per round {lo:.0}–{hi:.0} %, ≥ 100 % in {won} of {}",
            each.len()
        );
    }
    let r = Row::new(scenario, "mcp-resources", &metric, share, "%").compare(compare);
    if held {
        r.target(BEFORE_TARGET, after >= before)
    } else {
        r
    }
}

/// Format a value for the table: few significant digits, no false precision.
pub fn fmt_value(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

fn cells(r: &Row) -> [String; 7] {
    [
        r.scenario.clone(),
        r.subject.clone(),
        r.metric.clone(),
        r.value.map_or_else(
            || "not run".into(),
            |v| format!("{} {}", fmt_value(v), r.unit),
        ),
        r.compare.clone(),
        r.target.clone(),
        match r.met {
            Some(true) => "met".into(),
            Some(false) => "MISSED".into(),
            None => String::new(),
        },
    ]
}

const HEAD: [&str; 7] = [
    "scenario",
    "server",
    "metric",
    "value",
    "comparison",
    "target",
    "",
];

/// The plain-text table, with the notes numbered underneath.
pub fn table(rows: &[Row]) -> String {
    let (body, notes) = with_notes(rows);
    let mut w = HEAD.map(|h| h.chars().count());
    for c in &body {
        for (i, s) in c.iter().enumerate() {
            w[i] = w[i].max(s.chars().count());
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, c: &[String]| {
        for (i, s) in c.iter().enumerate() {
            let pad = w[i] - s.chars().count();
            let _ = write!(out, "{s}{}  ", " ".repeat(pad));
        }
        out.truncate(out.trim_end().len());
        out.push('\n');
    };
    line(&mut out, &HEAD.map(String::from));
    line(&mut out, &w.map(|n| "-".repeat(n)));
    for c in &body {
        line(&mut out, c);
    }
    out.push_str(&notes);
    out
}

/// The Markdown table.
pub fn markdown(rows: &[Row]) -> String {
    let (body, notes) = with_notes(rows);
    let mut out = format!("| {} |\n|{}\n", HEAD.join(" | "), "---|".repeat(HEAD.len()));
    for c in &body {
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out.push('\n');
    for l in notes.lines() {
        let _ = writeln!(out, "{l}  ");
    }
    out
}

/// Cells with the notes replaced by numbered references (identical notes share a number).
fn with_notes(rows: &[Row]) -> (Vec<[String; 7]>, String) {
    let mut notes: Vec<String> = Vec::new();
    let body = rows
        .iter()
        .map(|r| {
            let mut c = cells(r);
            if !r.note.is_empty() {
                let n = match notes.iter().position(|x| *x == r.note) {
                    Some(i) => i + 1,
                    None => {
                        notes.push(r.note.clone());
                        notes.len()
                    }
                };
                c[2] = format!("{} [{n}]", c[2]);
            }
            c
        })
        .collect();
    let mut text = String::new();
    for (i, n) in notes.iter().enumerate() {
        let _ = writeln!(text, "[{}] {n}", i + 1);
    }
    (body, text)
}

/// The rows as JSON.
pub fn json(rows: &[Row], machine: serde_json::Value) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "scenario": r.scenario,
                "server": r.subject,
                "metric": r.metric,
                "value": r.value,
                "unit": r.unit,
                "comparison": r.compare,
                "target": r.target,
                "met": r.met,
                "note": r.note,
            })
        })
        .collect();
    serde_json::json!({ "machine": machine, "rows": rows })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn after_before_holds_ours_to_the_baseline() {
        let r = after_before("s", "throughput", 101.0, 100.0, "req/s", &[], true);
        assert_eq!(r.metric, "ours / before, throughput");
        assert_eq!(r.subject, "mcp-resources");
        assert_eq!(r.value, Some(101.0));
        assert_eq!(r.unit, "%");
        assert_eq!(r.target, BEFORE_TARGET);
        assert_eq!(r.met, Some(true));
        assert_eq!(r.compare, "ours 101 req/s, before 100 req/s");
        // Equal is as fast as before; a hair slower is not.
        assert_eq!(
            after_before("s", "m", 5.0, 5.0, "", &[], true).met,
            Some(true)
        );
        let slower = after_before("s", "m", 98.0, 100.0, "MB/s", &[], true);
        assert_eq!((slower.value, slower.met), (Some(98.0), Some(false)));
        assert!(table(&[slower]).contains("MISSED"));
    }

    #[test]
    fn after_before_gives_the_spread_of_the_rounds() {
        let rounds = [(90.0, 100.0), (110.0, 100.0), (100.0, 100.0), (5.0, 0.0)];
        let r = after_before("s", "m", 100.0, 100.0, "req/s", &rounds, true);
        // The round whose baseline measured nothing is left out of the spread.
        assert!(
            r.compare
                .ends_with("; per round 90–110 %, ≥ 100 % in 2 of 3"),
            "{}",
            r.compare
        );
        // One round is no spread.
        let one = after_before("s", "m", 100.0, 100.0, "req/s", &[(100.0, 100.0)], true);
        assert!(!one.compare.contains("per round"), "{}", one.compare);
    }

    #[test]
    fn a_baseline_that_measured_nothing_misses_the_target() {
        for before in [0.0, f64::NAN, f64::INFINITY] {
            let r = after_before("s", "m", 100.0, before, "req/s", &[], true);
            assert_eq!(r.value, None);
            assert_eq!(r.met, Some(false), "before = {before}");
            assert_eq!(r.metric, "ours / before, m");
            assert!(r.note.contains("nothing to compare with"), "{}", r.note);
        }
    }

    #[test]
    fn a_figure_not_held_has_no_target() {
        let r = after_before("s", "m", 50.0, 100.0, "req/s", &[], false);
        assert_eq!((r.value, r.met, r.target.as_str()), (Some(50.0), None, ""));
        assert!(!table(&[r]).contains("MISSED"));
        let r = after_before("s", "m", 50.0, 0.0, "req/s", &[], false);
        assert_eq!((r.value, r.met), (None, None));
    }
}
