//! `completion/complete` for the path-like arguments of this mount's templates: suggest the
//! entries of the directory being typed, honouring the deny, hidden and ignore rules.

use mcpr_core::template::{Operator, Part};
use mcpr_core::{Completion, CompletionRequest, Error, Result, UriTemplate};
use percent_encoding::percent_decode_str;

use crate::list::{Kind, read_entries};
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
    let Ok(entries) = read_entries(inner, &dir, Some(&ignores)) else {
        return Ok(Completion::default());
    };

    let value_dir = match req.value.rfind('/') {
        Some(i) => &req.value[..=i],
        None => "",
    };
    let value_last_len = req.value.len() - value_dir.len();
    // Bytes of the entry name that come from the template's literal, not from the value.
    let literal_len = name_prefix.len().saturating_sub(value_last_len);
    let mut values = Vec::new();
    let mut total = 0u32;
    for e in &entries {
        if !e.name.starts_with(&name_prefix) || !e.name.ends_with(suffix.as_bytes()) {
            continue;
        }
        // Only what could be read is offered: no FIFOs or sockets, no links leading out of
        // the root or to denied entries.
        let is_dir = match e.kind {
            Kind::Dir => true,
            Kind::File => false,
            Kind::Other => continue,
            Kind::Symlink => match inner.resolve_links(&dir.join(&e.name)) {
                Some(real)
                    if !inner.rules.is_denied(&real, false)
                        && !inner.rules.is_denied(&real, true) =>
                {
                    match inner.root.metadata(real.as_path()) {
                        Ok(m) if m.is_dir() => true,
                        Ok(m) if m.is_file() => false,
                        _ => continue,
                    }
                }
                _ => continue,
            },
        };
        if dirs_only && !is_dir {
            continue;
        }
        if !suffix.is_empty() && e.name.len() < literal_len + suffix.len() {
            continue;
        }
        let core = &e.name[literal_len..e.name.len() - suffix.len()];
        let Ok(core) = std::str::from_utf8(core) else {
            continue;
        };
        total += 1;
        if values.len() < MAX_VALUES {
            let tail = if is_dir && multi_segment && suffix.is_empty() {
                "/"
            } else {
                ""
            };
            values.push(format!("{value_dir}{core}{tail}"));
        }
    }
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
