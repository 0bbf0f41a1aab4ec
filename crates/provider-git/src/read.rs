//! `resources/read`: blobs (text or bytes, size-checked from the object header before
//! inflating), trees as JSON directory listings, commits, path histories, symlinks and
//! submodules, each as documented in `docs.md`.

use gix::ObjectId;
use mcpr_core::{Contents, ContentsBody, Error, Limit, ReadLimits, ResourceUri, Result};
use serde_json::{Map, Value, json};

use crate::history::history;
use crate::provider::Inner;
use crate::repo::{CommitInfo, Entry, Kind, Person, rfc3339};
use crate::uri::{GitUri, Query, TreePath, commit_uri, encode_name, path_uri};

/// The most entries one directory read returns; beyond, it says `truncated` and gives the
/// URI of the next block.
pub(crate) const DIR_READ_MAX: usize = 1000;

/// The key of the provider's extra facts in a content's `_meta`.
const META_KEY: &str = "io.github.mcp-resources/git";

/// MIME type from the file name's extension, when it has a known one.
pub(crate) fn mime_by_extension(path: &[u8]) -> Option<&'static str> {
    mcpr_core::mime::by_extension(path)
}

fn person_json(p: &Person) -> Value {
    json!({ "name": p.name, "email": p.email, "date": rfc3339(p.seconds) })
}

/// A JSON document the provider wrote (commit, directory, history), held to the same read
/// limit as a blob: a commit message or a history of long ones can be any size.
fn json_doc(uri: &str, body: String, limits: &ReadLimits) -> Result<Vec<Contents>> {
    if body.len() as u64 > limits.max_bytes {
        return Err(Error::too_large(
            uri,
            "the JSON document",
            Some(body.len() as u64),
            Limit::read(limits.max_bytes),
            None,
        ));
    }
    Ok(text(uri, "application/json", body))
}

fn text(uri: &str, mime: &str, body: String) -> Vec<Contents> {
    vec![Contents {
        uri: uri.to_owned(),
        mime_type: Some(mime.to_owned()),
        body: ContentsBody::Text(body),
        meta: None,
    }]
}

/// Serve a read of `target` (already parsed from `uri`).
pub(crate) fn read(
    inner: &Inner,
    uri: &ResourceUri,
    target: &GitUri,
    limits: &ReadLimits,
) -> Result<Vec<Contents>> {
    let u = uri.as_str();
    // A denied path is not found whatever the ref, before anything is looked up.
    if target.path.as_ref().is_some_and(|p| inner.denied(p)) {
        return Err(Error::not_found(u));
    }
    let h = inner.repo.handle();
    let commit = inner
        .repo
        .resolve_rev(&h, &target.rev)
        .map_err(|e| e.with_uri(u))?
        .ok_or_else(|| Error::not_found(u))?;
    if let Query::History { after, limit } = target.query {
        let doc = read_history(inner, &h, u, target, commit, after, limit)?;
        return json_doc(u, doc, limits);
    }
    let Some(path) = &target.path else {
        let info = inner.repo.commit(&h, commit).map_err(|e| e.with_uri(u))?;
        return json_doc(u, commit_json(inner, u, &target.rev, &info), limits);
    };
    let (root, _, _) = inner
        .repo
        .commit_links(&h, commit)
        .map_err(|e| e.with_uri(u))?;
    let entry = inner
        .repo
        .entry_at(&h, root, path)
        .map_err(|e| e.with_uri(u))?
        .ok_or_else(|| Error::not_found(u))?;
    if entry.kind != Kind::Tree && matches!(target.query, Query::DirAfter(_)) {
        return Err(Error::invalid_params(
            "`after` continues a directory read; this URI names a file",
        )
        .with_uri(u));
    }
    match entry.kind {
        Kind::Tree => {
            let after = match &target.query {
                Query::DirAfter(a) => Some(a.as_slice()),
                _ => None,
            };
            let doc = dir_json(inner, &h, u, &target.rev, commit, path, &entry, after)
                .map_err(|e| e.with_uri(u))?;
            json_doc(u, doc, limits)
        }
        Kind::Blob | Kind::Exec | Kind::Link => {
            let size = inner.repo.size(&h, entry.id).map_err(|e| e.with_uri(u))?;
            if size > limits.max_bytes {
                return Err(Error::too_large(
                    u,
                    "the file",
                    Some(size),
                    Limit::read(limits.max_bytes),
                    None,
                ));
            }
            let bytes = inner.repo.blob(&h, entry.id).map_err(|e| e.with_uri(u))?;
            Ok(vec![blob_contents(u, path, &entry, bytes)])
        }
        Kind::Submodule => {
            let url = submodule_url(inner, &h, root, path);
            let mut doc = Map::new();
            doc.insert("uri".into(), u.into());
            doc.insert("type".into(), "submodule".into());
            doc.insert("path".into(), path.display().into());
            doc.insert("commit".into(), entry.id.to_string().into());
            if let Some(url) = url {
                doc.insert("url".into(), url.into());
            }
            json_doc(u, Value::Object(doc).to_string(), limits)
        }
    }
}

/// A blob or a symlink as content. A symlink is never followed: its content is the target
/// path it stores, typed `inode/symlink`.
fn blob_contents(uri: &str, path: &TreePath, entry: &Entry, bytes: Vec<u8>) -> Contents {
    let (mime, meta) = if entry.kind == Kind::Link {
        let mut m = Map::new();
        m.insert(
            META_KEY.into(),
            json!({ "type": "symlink", "target": String::from_utf8_lossy(&bytes) }),
        );
        ("inode/symlink", Some(m))
    } else {
        let mime = mcpr_core::mime::of_contents(path.as_bytes(), &bytes);
        (mime, None)
    };
    let body = match String::from_utf8(bytes) {
        Ok(s) => ContentsBody::Text(s),
        Err(e) => ContentsBody::Blob(e.into_bytes()),
    };
    Contents {
        uri: uri.to_owned(),
        mime_type: Some(mime.to_owned()),
        body,
        meta,
    }
}

/// The JSON document a commit reads as.
pub(crate) fn commit_json(inner: &Inner, uri: &str, rev: &str, c: &CommitInfo) -> String {
    let base = inner.bases.canonical();
    let parents: Vec<Value> = c
        .parents
        .iter()
        .map(|p| json!({ "id": p.to_string(), "uri": commit_uri(base, &p.to_string()) }))
        .collect();
    json!({
        "uri": uri,
        "ref": rev,
        "id": c.id.to_string(),
        "tree": c.tree.to_string(),
        "files": path_uri(base, rev, &TreePath::root()),
        "parents": parents,
        "author": person_json(&c.author),
        "committer": person_json(&c.committer),
        "summary": c.summary(),
        "message": c.message,
    })
    .to_string()
}

/// A tree as a JSON directory listing, at most [`DIR_READ_MAX`] entries after `after`.
#[allow(clippy::too_many_arguments)]
fn dir_json(
    inner: &Inner,
    h: &gix::Repository,
    uri: &str,
    rev: &str,
    commit: ObjectId,
    path: &TreePath,
    entry: &Entry,
    after: Option<&[u8]>,
) -> Result<String> {
    let base = inner.bases.canonical();
    let tree = inner.repo.tree(h, entry.id)?;
    // Entries are in git's order; `after` is a name, which may have been a tree or not.
    let start = after.map_or(0, |a| {
        tree.iter()
            .position(|e| e.name.as_slice() == a)
            .map_or_else(
                || {
                    tree.partition_point(|e| {
                        crate::repo::git_order(&e.name, e.kind == Kind::Tree, a, false).is_le()
                    })
                },
                |i| i + 1,
            )
    });
    let mut entries = Vec::new();
    let mut truncated = false;
    let mut last: Option<&[u8]> = None;
    for e in &tree[start.min(tree.len())..] {
        if !crate::uri::valid_component(&e.name)
            || inner.entry_denied(&path.join(&e.name), e.kind == Kind::Tree)
        {
            continue;
        }
        if entries.len() == DIR_READ_MAX {
            truncated = true;
            break;
        }
        let child = path.join(&e.name);
        let mut obj = Map::new();
        obj.insert("name".into(), String::from_utf8_lossy(&e.name).into());
        obj.insert("uri".into(), path_uri(base, rev, &child).into());
        obj.insert("type".into(), e.kind.label().into());
        obj.insert("mode".into(), e.kind.mode().into());
        obj.insert("id".into(), e.id.to_string().into());
        if matches!(e.kind, Kind::Blob | Kind::Exec | Kind::Link) {
            obj.insert("size".into(), inner.repo.size(h, e.id)?.into());
        }
        entries.push(Value::Object(obj));
        last = Some(&e.name);
    }
    let mut doc = Map::new();
    doc.insert("uri".into(), uri.into());
    doc.insert("ref".into(), rev.into());
    doc.insert("commit".into(), commit.to_string().into());
    doc.insert("path".into(), path.display().into());
    doc.insert("entries".into(), entries.into());
    doc.insert("truncated".into(), truncated.into());
    if truncated && let Some(name) = last {
        let next = format!("{}?after={}", path_uri(base, rev, path), encode_name(name));
        doc.insert("next".into(), next.into());
    }
    Ok(Value::Object(doc).to_string())
}

/// The submodule's URL as `.gitmodules` at the same commit records it, when it does.
fn submodule_url(
    inner: &Inner,
    h: &gix::Repository,
    root: ObjectId,
    path: &TreePath,
) -> Option<String> {
    let e = inner
        .repo
        .entry_at(h, root, &TreePath::from_bytes(b".gitmodules")?)
        .ok()??;
    if e.kind != Kind::Blob || inner.repo.size(h, e.id).ok()? > 1 << 20 {
        return None;
    }
    let text = String::from_utf8(inner.repo.blob(h, e.id).ok()?).ok()?;
    // A small reading of git-config syntax: `path = …` and `url = …` per
    // `[submodule "…"]` section, which is all .gitmodules uses in practice.
    let want = path.display();
    let (mut cur_path, mut cur_url): (Option<String>, Option<String>) = (None, None);
    let mut found = None;
    let mut flush = |p: &mut Option<String>, u: &mut Option<String>| {
        if p.as_deref() == Some(want.as_str()) && found.is_none() {
            found = u.take();
        }
        *p = None;
        *u = None;
    };
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            flush(&mut cur_path, &mut cur_url);
        } else if let Some((k, v)) = line.split_once('=') {
            let v = v.trim().trim_matches('"').to_owned();
            match k.trim() {
                "path" => cur_path = Some(v),
                "url" => cur_url = Some(v),
                _ => {}
            }
        }
    }
    flush(&mut cur_path, &mut cur_url);
    found
}

/// One page of a path's (or the ref's) first-parent history as JSON.
fn read_history(
    inner: &Inner,
    h: &gix::Repository,
    uri: &str,
    target: &GitUri,
    commit: ObjectId,
    after: Option<ObjectId>,
    limit: usize,
) -> Result<String> {
    let base = inner.bases.canonical();
    let path = target.path.as_ref();
    if let Some(p) = path {
        // The path must exist at the ref: history of nothing is not found, like a read.
        let (root, _, _) = inner
            .repo
            .commit_links(h, commit)
            .map_err(|e| e.with_uri(uri))?;
        if inner
            .repo
            .entry_at(h, root, p)
            .map_err(|e| e.with_uri(uri))?
            .is_none()
        {
            return Err(Error::not_found(uri));
        }
    }
    let page = history(inner, h, commit, path, after, limit)
        .map_err(|e| e.with_uri(uri))?
        .ok_or_else(|| {
            Error::invalid_params("`after` does not name a commit of this repository").with_uri(uri)
        })?;
    let commits: Vec<Value> = page
        .commits
        .iter()
        .map(|c| {
            let id = c.id.to_string();
            let mut o = Map::new();
            o.insert("id".into(), id.clone().into());
            o.insert("uri".into(), commit_uri(base, &id).into());
            if let Some(p) = path {
                o.insert("at".into(), path_uri(base, &id, p).into());
            }
            o.insert("summary".into(), c.summary().into());
            o.insert("author".into(), person_json(&c.author));
            o.insert("date".into(), rfc3339(c.committer.seconds).into());
            Value::Object(o)
        })
        .collect();
    let mut doc = Map::new();
    doc.insert("uri".into(), uri.into());
    doc.insert("ref".into(), target.rev.clone().into());
    doc.insert("commit".into(), commit.to_string().into());
    doc.insert(
        "path".into(),
        path.map_or(Value::Null, |p| p.display().into()),
    );
    doc.insert("commits".into(), commits.into());
    doc.insert("scanned".into(), page.scanned.into());
    if let Some(last) = page.resume_after {
        let this = match path {
            Some(p) => path_uri(base, &target.rev, p),
            None => commit_uri(base, &target.rev),
        };
        doc.insert(
            "next".into(),
            format!("{this}?history&after={last}&limit={limit}").into(),
        );
    }
    Ok(Value::Object(doc).to_string())
}
