//! The listing of one database: its overview, then each table's rows and schema, then the
//! fixed named queries, resumed by a position whose first byte says which section it is in.

use mcpr_core::{Error, ErrorKind, Page, PageRequest, ResourceMeta, Result};

use crate::engine::TableRef;
use crate::provider::Inner;
use crate::render::JSON;

/// A list position: section byte, then a table position or a query index.
fn position(section: u8, tail: &[u8]) -> Vec<u8> {
    let mut p = vec![section];
    p.extend_from_slice(tail);
    p
}

const SEC_OVERVIEW: u8 = 0;
const SEC_TABLE: u8 = 1;
const SEC_SCHEMA: u8 = 2;
const SEC_QUERY: u8 = 3;

impl Inner {
    /// One page of the listing.
    pub(crate) async fn list(&self, page: PageRequest) -> Result<Page<ResourceMeta>> {
        let inner = self;
        let schemas = inner.engine.default_schema().is_some();
        let limit = page.limit.max(1);
        let bad = || {
            Error::new(
                ErrorKind::InvalidCursor,
                "list cursor does not name a position",
            )
        };
        let (section, tail) = match page.after.as_deref() {
            None => (None, &[][..]),
            Some([s, tail @ ..]) if *s <= SEC_QUERY => (Some(*s), tail),
            Some(_) => return Err(bad()),
        };
        let name = inner.config.name.clone();
        let mut items: Vec<(Vec<u8>, ResourceMeta)> = Vec::new();
        if section.is_none() {
            items.push((
                position(SEC_OVERVIEW, b""),
                ResourceMeta {
                    uri: format!("db://{name}"),
                    name: name.clone(),
                    title: Some(format!("Database {name}")),
                    description: Some("Tables and views with row estimates".into()),
                    mime_type: Some(JSON.into()),
                    ..Default::default()
                },
            ));
        }
        if items.len() <= limit && section.is_none_or(|s| s < SEC_QUERY) {
            let after = match section {
                Some(SEC_TABLE | SEC_SCHEMA) => {
                    Some(TableRef::from_position(tail, schemas).ok_or_else(bad)?)
                }
                _ => None,
            };
            // After a table's rows entry, its schema entry comes next.
            let inclusive = section == Some(SEC_TABLE);
            // A database that is down fails the page rather than listing it without its
            // tables as if it had none: the server then leaves this mount out of the listing
            // and says so (`_meta`, log, metric), and goes on with the other mounts.
            let tables = inner.engine.tables(after, inclusive, limit + 1).await?;
            for t in tables {
                let base = inner.table_uri(&t);
                let pos = t.position();
                let shown = inner.shown(&t);
                let skip_rows =
                    inclusive && page.after.as_deref() == Some(&position(SEC_TABLE, &pos)[..]);
                if !skip_rows {
                    items.push((
                        position(SEC_TABLE, &pos),
                        ResourceMeta {
                            uri: base.clone(),
                            name: shown.clone(),
                            title: Some(format!("Rows of {shown}")),
                            description: Some(format!(
                                "Rows of {shown}, {} per page",
                                inner.config.page_size
                            )),
                            mime_type: Some(JSON.into()),
                            ..Default::default()
                        },
                    ));
                }
                items.push((
                    position(SEC_SCHEMA, &pos),
                    ResourceMeta {
                        uri: format!("{base}/schema"),
                        name: format!("{shown} schema"),
                        title: Some(format!("Schema of {shown}")),
                        description: Some("Columns, keys and indexes".into()),
                        mime_type: Some(JSON.into()),
                        ..Default::default()
                    },
                ));
                if items.len() > limit {
                    break;
                }
            }
        }
        if items.len() <= limit {
            let first = match section {
                Some(SEC_QUERY) => {
                    let s = std::str::from_utf8(tail).map_err(|_| bad())?;
                    s.parse::<usize>().map_err(|_| bad())? + 1
                }
                _ => 0,
            };
            for (i, c) in inner.queries.iter().enumerate().skip(first) {
                if c.template.is_some() {
                    continue;
                }
                items.push((
                    position(SEC_QUERY, i.to_string().as_bytes()),
                    ResourceMeta {
                        uri: c.query.uri.clone(),
                        name: c.query.uri.clone(),
                        title: Some(format!("Named query {}", c.query.uri)),
                        description: c.query.description.clone(),
                        mime_type: Some(JSON.into()),
                        ..Default::default()
                    },
                ));
                if items.len() > limit {
                    break;
                }
            }
        }
        Ok(Page::from_lookahead(items, limit))
    }
}
