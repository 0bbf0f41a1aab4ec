//! Named queries: each checked and compiled at load (URI form, the pre-filter, parameters
//! on both sides, and against the database once it answers), then matched and bound per read.

use std::collections::BTreeMap;

use mcpr_core::{Error, ResourceUri, Result, UriTemplate};
use regex_automata::meta::Regex;

use crate::config::{NamedQuery, ParamSpec, ParamType, SqlConfig};
use crate::engine::{Engine, Param, TableRef};
use crate::guard;
use crate::provider::Inner;

/// Typed values for a query's `:name` placeholders.
type Binds = Vec<(String, Param)>;

/// A named query, checked and compiled at load.
pub(crate) struct Compiled {
    pub(crate) query: NamedQuery,
    /// `None` for a fixed URI.
    pub(crate) template: Option<UriTemplate>,
    pub(crate) patterns: BTreeMap<String, Regex>,
}

/// Check one named query at load: URI form, pre-filter, and parameters on both sides.
pub(crate) fn compile(mount: &str, q: &NamedQuery, dialect: guard::Engine) -> Result<Compiled> {
    let bad = |why: String| Error::invalid_params(format!("query {}: {why}", q.uri));
    if !q.uri.starts_with("db://") || q.uri.contains('?') || q.uri.contains('#') {
        return Err(bad(
            "the URI must start with db:// and have no query or fragment".into(),
        ));
    }
    let own = format!("db://{mount}");
    if q.uri == own
        || q.uri.starts_with(&format!("{own}/tables"))
        || q.uri.starts_with(&format!("{own}/schemas"))
    {
        return Err(bad(format!(
            "the URI collides with the table URIs of mount {mount:?}"
        )));
    }
    let placeholders = guard::check_read_only(&q.sql, dialect).map_err(|e| bad(e.message))?;
    let template = if q.uri.contains('{') {
        let t = UriTemplate::parse(&q.uri).map_err(|e| bad(format!("bad template: {e}")))?;
        let simple = t.parts().iter().all(|p| match p {
            mcpr_core::template::Part::Literal(_) => true,
            mcpr_core::template::Part::Expr(e) => {
                e.op == mcpr_core::template::Operator::Simple && e.vars.len() == 1
            }
        });
        if !simple {
            return Err(bad(
                "only simple one-variable {name} expressions are allowed".into(),
            ));
        }
        Some(t)
    } else {
        None
    };
    let vars: std::collections::BTreeSet<String> = template
        .as_ref()
        .map(|t| t.variables().into_iter().map(str::to_owned).collect())
        .unwrap_or_default();
    if vars != placeholders {
        return Err(bad(format!(
            "the URI variables {vars:?} and the SQL placeholders {placeholders:?} must be the same"
        )));
    }
    if let Some(extra) = q.params.keys().find(|k| !vars.contains(*k)) {
        return Err(bad(format!("params.{extra} names no URI variable")));
    }
    let mut patterns = BTreeMap::new();
    for (name, spec) in &q.params {
        if let Some(p) = &spec.pattern {
            let re = Regex::new(&format!("^(?:{p})$"))
                .map_err(|e| bad(format!("params.{name}.pattern: {e}")))?;
            patterns.insert(name.clone(), re);
        }
        if spec.kind == ParamType::Integer
            && let Some(v) = spec
                .allowed
                .iter()
                .flatten()
                .find(|v| v.parse::<i64>().is_err())
        {
            return Err(bad(format!(
                "params.{name}: enum value {v:?} is not an integer"
            )));
        }
    }
    Ok(Compiled {
        query: q.clone(),
        template,
        patterns,
    })
}

/// Check and type one parameter value; the message says what was expected.
fn check_param(
    uri: &str,
    name: &str,
    value: &str,
    spec: &ParamSpec,
    re: Option<&Regex>,
) -> Result<Param> {
    let bad = |why: String| {
        Error::invalid_params(format!("query {uri}: parameter {name} = {value:?} {why}"))
    };
    if let Some(allowed) = &spec.allowed
        && !allowed.iter().any(|a| a == value)
    {
        return Err(bad(format!("is not one of {allowed:?}")));
    }
    if let Some(re) = re
        && !re.is_match(value)
    {
        return Err(bad(format!(
            "does not match the pattern {:?}",
            spec.pattern.as_deref().unwrap_or_default()
        )));
    }
    match spec.kind {
        ParamType::Text => Ok(Param::Text(value.to_owned())),
        ParamType::Integer => value
            .parse::<i64>()
            .map(Param::Integer)
            .map_err(|_| bad("is not an integer".into())),
    }
}

/// The checks that need the database: every named query prepares, and every `from` column
/// of a parameter exists.
pub(crate) async fn check_against_db(engine: &dyn Engine, config: &SqlConfig) -> Result<()> {
    engine.ping().await?;
    for q in &config.queries {
        engine.check_query(&q.uri, &q.sql).await?;
        for (name, spec) in &q.params {
            if let Some((table, column)) = &spec.complete_from {
                let t = table_ref(engine, table);
                if !engine.has_column(t, column.clone()).await? {
                    return Err(Error::invalid_params(format!(
                        "query {}: params.{name}.from names {table}.{column}, which is not a column this mount can read",
                        q.uri
                    )));
                }
            }
        }
    }
    Ok(())
}

/// A `table` or `schema.table` from config as a table reference.
pub(crate) fn table_ref(engine: &dyn Engine, spec: &str) -> TableRef {
    match engine.default_schema() {
        Some(default) => match spec.split_once('.') {
            Some((s, t)) => TableRef {
                schema: Some(s.to_owned()),
                name: t.to_owned(),
            },
            None => TableRef {
                schema: Some(default.to_owned()),
                name: spec.to_owned(),
            },
        },
        None => TableRef {
            schema: None,
            name: spec.to_owned(),
        },
    }
}

impl Inner {
    /// The named query `uri` addresses, with its checked, typed bindings.
    pub(crate) fn match_query(&self, uri: &ResourceUri) -> Result<Option<(usize, Binds)>> {
        let path = uri.without_query();
        // A fixed URI wins over a template that also matches it.
        if let Some(i) = self
            .queries
            .iter()
            .position(|c| c.template.is_none() && c.query.uri == path)
        {
            return Ok(Some((i, Vec::new())));
        }
        for (i, c) in self.queries.iter().enumerate() {
            let Some(t) = &c.template else { continue };
            let Some(vars) = t.matches(path) else {
                continue;
            };
            let mut binds = Vec::new();
            for (name, value) in vars {
                let spec = c.query.params.get(&name).cloned().unwrap_or_default();
                binds.push((
                    name.clone(),
                    check_param(&c.query.uri, &name, &value, &spec, c.patterns.get(&name))?,
                ));
            }
            return Ok(Some((i, binds)));
        }
        Ok(None)
    }
}
