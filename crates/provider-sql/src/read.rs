//! Reads: a named query's rows, the overview, a table's or view's schema, or one page of
//! its rows, each under the mount's byte limit.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use mcpr_core::{Contents, ContentsBody, Error, ErrorKind, ResourceUri, Result};
use serde_json::{Map, Value, json};

use crate::engine::{ObjectKind, PageArgs, RowPage, TableRef, byte_limit};
use crate::provider::Inner;
use crate::render::JSON;
use crate::uri::Target;

/// Objects per overview block.
const OVERVIEW_BLOCK: usize = 1000;

impl Inner {
    /// The overview document.
    async fn overview(&self, cursor: Option<String>) -> Result<Value> {
        let name = &self.config.name;
        let after = match cursor {
            Some(raw) => Some(
                URL_SAFE_NO_PAD
                    .decode(&raw)
                    .ok()
                    .and_then(|p| {
                        TableRef::from_position(&p, self.engine.default_schema().is_some())
                    })
                    .ok_or_else(|| {
                        Error::invalid_params(format!("cursor {raw:?} is not an overview cursor"))
                    })?,
            ),
            None => None,
        };
        let mut objects = self.engine.objects(after, OVERVIEW_BLOCK + 1).await?;
        let more = objects.len() > OVERVIEW_BLOCK;
        objects.truncate(OVERVIEW_BLOCK);
        let next = match (more, objects.last()) {
            (true, Some(last)) => json!(format!(
                "db://{name}?cursor={}",
                URL_SAFE_NO_PAD.encode(last.table.position())
            )),
            _ => Value::Null,
        };
        let items: Vec<Value> = objects
            .iter()
            .map(|o| {
                let base = self.table_uri(&o.table);
                let mut m = Map::new();
                m.insert("name".into(), json!(o.table.name));
                if let Some(s) = &o.table.schema {
                    m.insert("schema".into(), json!(s));
                }
                m.insert("type".into(), json!(o.kind.as_str()));
                m.insert("uri".into(), json!(base));
                m.insert("schema_uri".into(), json!(format!("{base}/schema")));
                m.insert("row_estimate".into(), json!(o.row_estimate));
                m.insert("row_estimate_source".into(), json!(o.estimate_source));
                Value::Object(m)
            })
            .collect();
        Ok(json!({
            "database": name,
            "engine": self.config.kind.as_str(),
            "objects": items,
            "next": next,
        }))
    }

    /// Read `uri` as the provider serves it: one text item, JSON or CSV.
    pub(crate) async fn read(&self, uri: &ResourceUri, max_bytes: u64) -> Result<Contents> {
        let max_bytes = max_bytes.min(self.config.max_bytes);
        let (text, mime, meta) = if let Some((i, binds)) = self.match_query(uri)? {
            if uri.query().is_some() {
                return Err(Error::invalid_params(
                    "named queries take no query parameters",
                ));
            }
            let q = &self.queries[i].query;
            let rows = self
                .engine
                .run_query(
                    q.uri.clone(),
                    q.sql.clone(),
                    binds,
                    self.config.max_rows,
                    max_bytes,
                )
                .await?;
            let doc = json!({
                "query": q.uri,
                "columns": rows.columns,
                "row_count": rows.rows.len(),
                "max_rows": self.config.max_rows,
                "rows": rows.rows,
            });
            (doc.to_string(), JSON, None)
        } else {
            match crate::uri::parse(&self.config.name, uri)? {
                Target::Overview { cursor } => {
                    (self.overview(cursor).await?.to_string(), JSON, None)
                }
                Target::Schema { schema, table } => {
                    let t = self
                        .resolve(schema, table)
                        .ok_or_else(|| Error::not_found(uri.as_str()))?;
                    let kind = self
                        .engine
                        .object_kind(t.clone())
                        .await?
                        .ok_or_else(|| Error::not_found(uri.as_str()))?;
                    (self.engine.schema(t, kind).await?.to_string(), JSON, None)
                }
                Target::Table {
                    schema,
                    table,
                    cursor,
                    format,
                } => {
                    let t = self
                        .resolve(schema, table)
                        .ok_or_else(|| Error::not_found(uri.as_str()))?;
                    let page = match self.engine.object_kind(t.clone()).await? {
                        Some(ObjectKind::Table) => {
                            self.engine
                                .table_page(PageArgs {
                                    uri: uri.as_str().to_owned(),
                                    table: t.clone(),
                                    cursor,
                                    page_size: self.config.page_size,
                                    max_bytes,
                                })
                                .await?
                        }
                        Some(ObjectKind::View) => {
                            self.view_page(uri, &t, cursor, max_bytes).await?
                        }
                        None => return Err(Error::not_found(uri.as_str())),
                    };
                    self.render_page(uri, &t, page, format)
                }
            }
        };
        if text.len() as u64 > max_bytes {
            return Err(Error::too_large(
                uri.as_str(),
                "the document",
                Some(text.len() as u64),
                byte_limit(max_bytes),
                None,
            ));
        }
        Ok(Contents {
            uri: uri.as_str().to_owned(),
            mime_type: Some(mime.into()),
            body: ContentsBody::Text(text),
            meta,
        })
    }

    /// One page of a view: ordered by every column, resumed by position (the cursor is the
    /// offset). Deep pages cost the rows before them, which is why tables use keys instead.
    async fn view_page(
        &self,
        uri: &ResourceUri,
        t: &TableRef,
        cursor: Option<String>,
        max_bytes: u64,
    ) -> Result<RowPage> {
        let offset = match cursor.as_deref() {
            None => 0,
            Some(raw) => crate::engine::decode_key_cursor(raw, 1)?[0]
                .as_u64()
                .ok_or_else(|| {
                    Error::invalid_params(format!("cursor {raw:?} is not a cursor of this view"))
                })?,
        };
        let size = self.config.page_size;
        let sql = self.engine.view_sql(t.clone(), size + 1, offset).await?;
        let mut rows = self
            .engine
            .run_query(
                uri.without_query().to_owned(),
                sql,
                Vec::new(),
                size + 1,
                max_bytes,
            )
            .await
            .map_err(|e| {
                if e.kind == ErrorKind::TooLarge {
                    Error::too_large(
                        uri.as_str(),
                        &format!("a page of {size} rows of view {}", self.shown(t)),
                        None,
                        byte_limit(max_bytes),
                        Some("lower page_size"),
                    )
                } else {
                    e
                }
            })?;
        let more = rows.rows.len() > size;
        rows.rows.truncate(size);
        Ok(RowPage {
            columns: rows.columns,
            next_cursor: more
                .then(|| crate::engine::encode_key_cursor(&[Value::from(offset + size as u64)])),
            rows: rows.rows,
        })
    }
}
