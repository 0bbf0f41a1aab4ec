//! `completion/complete`: ref names for `ref`, and the entries of the directory being typed
//! for `path`, at the ref the client has already chosen (or the default ref).

use mcpr_core::{Completion, CompletionRequest, Error, Result};

use crate::provider::Inner;
use crate::repo::{Kind, Repo};
use crate::uri::{TreePath, valid_component};

/// The most values one completion returns (the protocol's limit).
const MAX_VALUES: usize = 100;

/// Complete `req.argument`; the caller checked the template is one of this mount's.
pub(crate) fn complete(
    inner: &Inner,
    variables: &[String],
    req: &CompletionRequest,
) -> Result<Completion> {
    if !variables.iter().any(|v| v == &req.argument) {
        return Err(Error::invalid_params(format!(
            "template {} has no argument `{}`; it has {}",
            req.template,
            req.argument,
            variables.join(", ")
        )));
    }
    let candidates = match req.argument.as_str() {
        "ref" => complete_ref(inner, &req.value)?,
        "path" => complete_path(inner, req)?,
        // `history`, `after` and `limit` are flags, commit ids and numbers: nothing to offer.
        _ => Vec::new(),
    };
    let total = candidates.len();
    let mut values = candidates;
    values.truncate(MAX_VALUES);
    Ok(Completion {
        has_more: total > values.len(),
        total: Some(u32::try_from(total).unwrap_or(u32::MAX)),
        values,
    })
}

/// `HEAD` and every branch and tag, spelled as a URI would (short unless shadowed), that
/// start with what was typed.
fn complete_ref(inner: &Inner, typed: &str) -> Result<Vec<String>> {
    let h = inner.repo.handle();
    let refs = inner.repo.branches_and_tags(&h)?;
    let all = inner.repo.all_ref_names(&h)?;
    let hex_len = Repo::hex_len(&h);
    let mut out: Vec<String> = std::iter::once("HEAD".to_owned())
        .chain(
            refs.iter()
                .map(|(full, _)| inner.repo.uri_rev(full, &all, hex_len)),
        )
        .filter(|r| r.starts_with(typed))
        .collect();
    out.sort_unstable();
    out.dedup();
    Ok(out)
}

/// Entries of the directory being typed, at the ref from the context (or the default ref).
/// Directories end in `/` so the next completion continues inside them.
fn complete_path(inner: &Inner, req: &CompletionRequest) -> Result<Vec<String>> {
    let h = inner.repo.handle();
    let rev = match req.context.get("ref") {
        Some(r) => r.clone(),
        None => inner
            .repo
            .default_rev(&h, inner.config.default_ref.as_deref()),
    };
    // An unknown ref or an ambiguous abbreviation has nothing to complete.
    let Ok(Some(commit)) = inner.repo.resolve_rev(&h, &rev) else {
        return Ok(Vec::new());
    };
    let (dir_part, prefix) = match req.value.rfind('/') {
        Some(i) => req.value.split_at(i + 1),
        None => ("", req.value.as_str()),
    };
    let Some(dir) = TreePath::from_bytes(dir_part.trim_end_matches('/').as_bytes()) else {
        return Ok(Vec::new());
    };
    // Inside a denied directory there is nothing to complete, as in one that does not exist.
    if inner.denied(&dir) {
        return Ok(Vec::new());
    }
    let (root, _, _) = inner.repo.commit_links(&h, commit)?;
    let Some(entry) = inner.repo.entry_at(&h, root, &dir)? else {
        return Ok(Vec::new());
    };
    if entry.kind != Kind::Tree {
        return Ok(Vec::new());
    }
    let tree = inner.repo.tree(&h, entry.id)?;
    let mut out = Vec::new();
    for e in tree.iter() {
        if !valid_component(&e.name)
            || !e.name.starts_with(prefix.as_bytes())
            || inner.entry_denied(&dir.join(&e.name), e.kind == Kind::Tree)
        {
            continue;
        }
        let Ok(name) = std::str::from_utf8(&e.name) else {
            continue;
        };
        let slash = if e.kind == Kind::Tree { "/" } else { "" };
        out.push(format!("{dir_part}{name}{slash}"));
    }
    Ok(out)
}
