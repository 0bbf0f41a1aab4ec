//! What the network-namespace tests share (partition.rs, cut_upstreams.rs): running `ip`,
//! whether this process may build namespaces at all, a guard that deletes the namespaces a
//! test made however it ends (and, when made, those a killed process left), veth pairs
//! between namespaces, and a link cut with `ip link set DEV down` and healed with `up`. The
//! kernel here has no `sch_netem`, so an outage is a cut: TCP sees no reset, only silence.

#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// A missing prerequisite: SKIPPED (the test passes), or a failure under `CI=true`.
pub fn absent(what: &str, e: impl std::fmt::Display) {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{what} is required under CI=true and could not be used: {e}");
    }
    eprintln!("SKIPPED: {what} is not available here ({e})");
}

/// `ip ARGS`; its stderr as the error.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Whether this process may build namespaces: root, and `ip netns` works.
pub fn namespaces_usable() -> Result<(), String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        })
        .unwrap_or_default();
    if uid != "0" {
        return Err(format!("not root (uid {uid})"));
    }
    ip(&["netns", "list"])
}

/// The namespaces of one test run, named `PREFIX-PID-NAME` so that runs never collide and
/// the leftovers of a killed run can be told by their process id. Dropping it deletes them,
/// which takes every veth with them (a pair dies with either end).
pub struct Namespaces {
    prefix: &'static str,
    made: Vec<String>,
}

impl Namespaces {
    /// None made yet; those of earlier runs whose process is gone (killed before their
    /// guard ran) are deleted now.
    pub fn new(prefix: &'static str) -> Self {
        if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let name = line.split_whitespace().next().unwrap_or("");
                let Some(rest) = name.strip_prefix(&format!("{prefix}-")) else {
                    continue;
                };
                let pid = rest.split('-').next().unwrap_or("");
                if !pid.is_empty() && !Path::new(&format!("/proc/{pid}")).exists() {
                    let _ = ip(&["netns", "del", name]);
                }
            }
        }
        Self {
            prefix,
            made: Vec::new(),
        }
    }

    /// The full name of this run's namespace `name`.
    pub fn name(&self, name: &str) -> String {
        format!("{}-{}-{name}", self.prefix, std::process::id())
    }

    /// Namespace `name` made, its loopback up: its full name.
    pub fn add(&mut self, name: &str) -> Result<String, String> {
        let ns = self.name(name);
        ip(&["netns", "add", &ns])?;
        self.made.push(ns.clone());
        ip(&["-n", &ns, "link", "set", "lo", "up"])?;
        Ok(ns)
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for ns in &self.made {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}

/// One end of a veth pair: its device name, its namespace (`None`: the test's own) and its
/// address with prefix length (`10.1.2.3/24`).
pub struct End<'a> {
    pub dev: &'a str,
    pub ns: Option<&'a str>,
    pub addr: &'a str,
}

/// A veth pair between `a` and `b`, addressed and up.
pub fn veth(a: End, b: End) -> Result<(), String> {
    ip(&["link", "add", a.dev, "type", "veth", "peer", "name", b.dev])?;
    for end in [&a, &b] {
        if let Some(ns) = end.ns {
            ip(&["link", "set", end.dev, "netns", ns])?;
        }
    }
    for end in [&a, &b] {
        ip(&in_ns(end.ns, &["addr", "add", end.addr, "dev", end.dev]))?;
        ip(&in_ns(end.ns, &["link", "set", end.dev, "up"]))?;
    }
    Ok(())
}

/// Cut (`up` false) or heal device `dev` of namespace `ns` (`None`: the test's own). Cut at
/// one end, the other end loses its carrier and its packets are dropped without a word.
pub fn set_link(ns: Option<&str>, dev: &str, up: bool) {
    ip(&in_ns(
        ns,
        &["link", "set", dev, if up { "up" } else { "down" }],
    ))
    .unwrap();
}

fn in_ns<'a>(ns: Option<&'a str>, args: &[&'a str]) -> Vec<&'a str> {
    let mut all = match ns {
        Some(ns) => vec!["-n", ns],
        None => Vec::new(),
    };
    all.extend_from_slice(args);
    all
}
