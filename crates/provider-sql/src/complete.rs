//! Completion: schema and table names for the built-in templates, and a named query's
//! parameters from their `enum` or the column their `from` names.

use mcpr_core::{Completion, CompletionRequest, Result};

use crate::provider::Inner;
use crate::query::table_ref;

/// Completion values per answer.
const COMPLETE_LIMIT: usize = 100;

impl Inner {
    /// The values that complete `req`'s argument.
    pub(crate) async fn complete(&self, req: CompletionRequest) -> Result<Completion> {
        let inner = self;
        let t = &inner.templates[mcpr_core::template_index(&inner.templates, &req.template)?];
        // Only the built-in table templates complete table names; a query variable called
        // `table` completes from its enum like any other.
        let builtin = [
            "sql-table:",
            "sql-schema:",
            "sql-schema-table:",
            "sql-schema-schema:",
        ]
        .iter()
        .any(|p| t.name.starts_with(p));
        if builtin && req.argument == "schema" {
            let (values, total) = inner
                .engine
                .schemas_with_prefix(req.value.clone(), COMPLETE_LIMIT)
                .await?;
            return Ok(Completion {
                has_more: total as usize > values.len(),
                values,
                total: Some(total),
            });
        }
        if builtin && req.argument == "table" {
            let schema = req.context.get("schema").cloned();
            let (values, total) = inner
                .engine
                .tables_with_prefix(schema, req.value.clone(), COMPLETE_LIMIT)
                .await?;
            return Ok(Completion {
                has_more: total as usize > values.len(),
                values,
                total: Some(total),
            });
        }
        let q = inner.queries.iter().find(|c| c.query.uri == req.template);
        let spec = q.and_then(|c| c.query.params.get(&req.argument));
        if let Some((table, column)) = spec.and_then(|s| s.complete_from.clone()) {
            let t = table_ref(inner.engine.as_ref(), &table);
            let (mut values, more) = inner
                .engine
                .distinct_values(t, column, req.value.clone(), COMPLETE_LIMIT)
                .await?;
            // Offer only what the parameter's own checks would accept.
            if let Some(allowed) = spec.and_then(|s| s.allowed.as_ref()) {
                values.retain(|v| allowed.contains(v));
            }
            if let Some(re) = q.and_then(|c| c.patterns.get(&req.argument)) {
                values.retain(|v| re.is_match(v));
            }
            return Ok(Completion {
                total: (!more).then_some(values.len() as u32),
                values,
                has_more: more,
            });
        }
        let allowed = spec.and_then(|s| s.allowed.clone()).unwrap_or_default();
        let values: Vec<String> = allowed
            .into_iter()
            .filter(|v| v.starts_with(&req.value))
            .collect();
        let total = values.len() as u32;
        Ok(Completion {
            has_more: values.len() > COMPLETE_LIMIT,
            values: values.into_iter().take(COMPLETE_LIMIT).collect(),
            total: Some(total),
        })
    }
}
