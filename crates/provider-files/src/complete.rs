//! `completion/complete` for the path-like arguments of this mount's templates: suggest the
//! entries of the directory being typed, honouring the deny, hidden and ignore rules.
//!
//! A completion scans the directory once without collecting it: names are filtered as they
//! come and only the first [`MAX_VALUES`] are kept (a bounded heap), so a directory of 200k
//! entries costs a hundred strings per call, not 200k. The provider also bounds how many
//! scans run at once.

use mcpr_core::template::{Operator, Part};
use mcpr_core::{Completion, CompletionRequest, Error, Result, UriTemplate};
use percent_encoding::percent_decode_str;

use crate::list::{Kind, Smallest, open_dir_checked, shows_entry, visit_raw};
use crate::path::encode_component;
use crate::provider::Inner;
use crate::rules::stack_for;

/// The most values one completion returns (the protocol's limit).
const MAX_VALUES: usize = 100;

/// Complete argument `req.argument` of `template`.
pub(crate) fn complete(
    inner: &Inner,
    template: &UriTemplate,
    req: &CompletionRequest,
) -> Result<Completion> {
    let parts = template.parts();
    let Some(pos) = parts
        .iter()
        .position(|p| matches!(p, Part::Expr(e) if e.vars.iter().any(|v| v.name == req.argument)))
    else {
        return Err(Error::invalid_params(format!(
            "template {} has no argument `{}`; it has {}",
            template.as_str(),
            req.argument,
            template.variables().join(", ")
        )));
    };
    let Part::Expr(expr) = &parts[pos] else {
        unreachable!("position matched an expression")
    };
    // Only path-shaped arguments name files; query arguments (offset, head, ...) are numbers.
    let multi_segment = match expr.op {
        Operator::Reserved => true,
        Operator::Simple | Operator::Path => false,
        _ => return Ok(Completion::default()),
    };
    if !multi_segment && req.value.contains('/') {
        return Ok(Completion::default());
    }

    // The URI text up to the argument: literals as written, earlier expressions expanded
    // from the context the client sent.
    let mut typed = String::new();
    for part in &parts[..pos] {
        match part {
            Part::Literal(l) => typed.push_str(l),
            Part::Expr(_) => {
                let sub = UriTemplate::parse(&render(part))
                    .map_err(|e| Error::internal(e.to_string()))?;
                typed.push_str(&sub.expand(&req.context));
            }
        }
    }
    if expr.op == Operator::Path {
        typed.push('/');
    }
    for (i, seg) in req.value.split('/').enumerate() {
        if i > 0 {
            typed.push('/');
        }
        typed.push_str(&encode_component(seg.as_bytes()));
    }
    // The literal right after the argument, up to a `/`, must end the entry's name.
    let (suffix, dirs_only) = match parts.get(pos + 1) {
        Some(Part::Literal(l)) => {
            let seg = l.split('/').next().unwrap_or("");
            (seg.to_owned(), l[seg.len()..].starts_with('/'))
        }
        _ => (String::new(), false),
    };

    let Some(slash) = typed.rfind('/') else {
        return Ok(Completion::default());
    };
    let (dir_uri, name_prefix_enc) = typed.split_at(slash);
    let name_prefix: Vec<u8> = percent_decode_str(&name_prefix_enc[1..]).collect();
    // The directory is listed at its real path, so a symlink to a denied directory reveals
    // nothing: `cfg -> .ssh` must not complete to `cfg/known_hosts`.
    let Some(typed_dir) = inner.root_uri.decode(dir_uri) else {
        return Ok(Completion::default());
    };
    let Some(dir) = inner.resolve_links(&typed_dir) else {
        return Ok(Completion::default());
    };
    if inner.rules.is_denied(&typed_dir, true) || inner.rules.is_denied(&dir, true) {
        return Ok(Completion::default());
    }
    let ignores = stack_for(&inner.root, &dir, inner.rules.respect_gitignore);
    // Listed through a handle whose real path is checked: a directory swapped for a link to
    // a denied one since it was resolved is refused, not listed.
    let Ok(handle) = open_dir_checked(inner, &dir) else {
        return Ok(Completion::default());
    };

    let value_dir = match req.value.rfind('/') {
        Some(i) => &req.value[..=i],
        None => "",
    };
    let value_last_len = req.value.len() - value_dir.len();
    // Bytes of the entry name that come from the template's literal, not from the value.
    let literal_len = name_prefix.len().saturating_sub(value_last_len);
    // (name, value): the first names in byte order, as a sorted listing would give them.
    let mut first: Smallest<(Vec<u8>, String)> = Smallest::new(MAX_VALUES);
    let mut total = 0u32;
    let scanned = visit_raw(&handle, |name, kind| {
        // Cheapest tests first: most names of a large directory fail the typed prefix.
        if !name.starts_with(&name_prefix) || !name.ends_with(suffix.as_bytes()) {
            return;
        }
        if !suffix.is_empty() && name.len() < literal_len + suffix.len() {
            return;
        }
        let child = dir.join(name);
        if !shows_entry(inner, Some(&ignores), &child, name, kind) {
            return;
        }
        // Only what could be read is offered: no FIFOs or sockets, no links leading out of
        // the root or to denied entries.
        let is_dir = match kind {
            Kind::Dir => true,
            Kind::File => false,
            Kind::Other => return,
            Kind::Symlink => match inner.resolve_links(&child) {
                Some(real)
                    if !inner.rules.is_denied(&real, false)
                        && !inner.rules.is_denied(&real, true) =>
                {
                    match inner.root.metadata(real.as_path()) {
                        Ok(m) if m.is_dir() => true,
                        Ok(m) if m.is_file() => false,
                        _ => return,
                    }
                }
                _ => return,
            },
        };
        if dirs_only && !is_dir {
            return;
        }
        let core = &name[literal_len..name.len() - suffix.len()];
        let Ok(core) = std::str::from_utf8(core) else {
            return;
        };
        total += 1;
        if first.would_drop(|(max, _)| max.as_slice() <= name) {
            return;
        }
        let tail = if is_dir && multi_segment && suffix.is_empty() {
            "/"
        } else {
            ""
        };
        first.push((name.to_vec(), format!("{value_dir}{core}{tail}")));
    });
    if scanned.is_err() {
        return Ok(Completion::default());
    }
    let values: Vec<String> = first.into_sorted().into_iter().map(|(_, v)| v).collect();
    Ok(Completion {
        has_more: total as usize > values.len(),
        total: Some(total),
        values,
    })
}

/// One expression back as template text, so it can be expanded on its own.
fn render(part: &Part) -> String {
    let Part::Expr(e) = part else {
        return String::new();
    };
    let op = match e.op {
        Operator::Simple => "",
        Operator::Reserved => "+",
        Operator::Fragment => "#",
        Operator::Label => ".",
        Operator::Path => "/",
        Operator::PathParam => ";",
        Operator::Query => "?",
        Operator::QueryCont => "&",
    };
    let vars: Vec<String> = e
        .vars
        .iter()
        .map(|v| {
            let mut s = v.name.clone();
            if let Some(p) = v.prefix {
                s.push_str(&format!(":{p}"));
            }
            if v.explode {
                s.push('*');
            }
            s
        })
        .collect();
    format!("{{{op}{}}}", vars.join(","))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use mcpr_core::{Provider, ReadLimits, ResourceUri};

    use super::*;
    use crate::config::FilesConfig;
    use crate::provider::{DIR_SCANS, FilesProvider};

    /// Whole-directory scans (completions, directory reads) had no
    /// concurrency bound, so 200 pipelined completions of a huge directory ran at once. Only
    /// `DIR_SCANS` run now; the rest wait for a permit, and file reads need none.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn directory_scans_wait_for_a_permit() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::fs::write(root.join("d/alpha.txt"), "a").unwrap();
        let provider = FilesProvider::new(FilesConfig::new(&root)).unwrap();
        let req = CompletionRequest {
            template: provider.templates()[0].uri_template.clone(),
            argument: "path".into(),
            value: "d/al".into(),
            context: Default::default(),
        };
        let dir_uri = ResourceUri::parse(&crate::encode_path_uri(&root.join("d"))).unwrap();
        let file_uri =
            ResourceUri::parse(&crate::encode_path_uri(&root.join("d/alpha.txt"))).unwrap();
        let limits = ReadLimits { max_bytes: 1 << 20 };
        let scans = provider.inner_for_tests().scans.clone();
        let mut held: Vec<_> = (0..DIR_SCANS)
            .map(|_| scans.clone().try_acquire_owned().unwrap())
            .collect();
        assert!(
            tokio::time::timeout(Duration::from_millis(300), provider.complete(req.clone()))
                .await
                .is_err(),
            "a completion ran with every scan permit taken"
        );
        assert!(
            tokio::time::timeout(Duration::from_millis(300), provider.read(&dir_uri, &limits))
                .await
                .is_err(),
            "a directory read ran with every scan permit taken"
        );
        provider.read(&file_uri, &limits).await.unwrap();
        held.pop();
        let c = tokio::time::timeout(Duration::from_secs(5), provider.complete(req))
            .await
            .expect("a completion waits only until a permit is free")
            .unwrap();
        assert_eq!(c.values, ["d/alpha.txt"]);
        drop(held);
        assert_eq!(scans.available_permits(), DIR_SCANS);
    }
}
