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
