//! Layer 1 of read-only in depth: a parse-level pre-filter. Only one pure `SELECT` (or
//! `WITH … SELECT`) gets through; everything else is refused before SQLite sees it.
//!
//! This layer gives clear errors early (config queries are checked at load). It is not the
//! only line: the connection itself is read-only and its authorizer denies every write,
//! `ATTACH` and extension loading (see `conn.rs`), so a parser gap cannot become a write.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use mcpr_core::{Error, Result};
use sqlparser::ast::{Expr, Query, SetExpr, Statement, Value, Visit, Visitor};
use sqlparser::dialect::SQLiteDialect;
use sqlparser::parser::Parser;

/// Functions refused by name even inside a SELECT: they reach outside the database.
const DENIED_FUNCTIONS: &[&str] = &[
    "load_extension",
    "readfile",
    "writefile",
    "edit",
    "fts3_tokenizer",
];

/// Check that `sql` is exactly one read-only query. Returns the names of its `:name`
/// placeholders (without the colon).
pub(crate) fn check_read_only(sql: &str) -> Result<BTreeSet<String>> {
    let refuse = |why: &str| Error::invalid_params(format!("SQL refused: {why}"));
    let statements = Parser::parse_sql(&SQLiteDialect {}, sql)
        .map_err(|e| refuse(&format!("it does not parse ({e})")))?;
    let [statement] = statements.as_slice() else {
        return Err(refuse(&format!(
            "exactly one statement is allowed, found {}",
            statements.len()
        )));
    };
    if !matches!(statement, Statement::Query(_)) {
        return Err(refuse("only SELECT (or WITH … SELECT) is allowed"));
    }
    let mut check = Check::default();
    if let ControlFlow::Break(why) = statement.visit(&mut check) {
        return Err(refuse(&why));
    }
    Ok(check.placeholders)
}

#[derive(Default)]
struct Check {
    statements: usize,
    placeholders: BTreeSet<String>,
}

impl Visitor for Check {
    type Break = String;

    fn pre_visit_statement(&mut self, _: &Statement) -> ControlFlow<String> {
        // The first is the top-level query; any other is DML nested in a CTE or subquery.
        self.statements += 1;
        if self.statements > 1 {
            return ControlFlow::Break(
                "a data-modifying statement inside the query (writable CTE) is not allowed".into(),
            );
        }
        ControlFlow::Continue(())
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<String> {
        if !query.locks.is_empty() {
            return ControlFlow::Break("locking clauses (FOR UPDATE/SHARE) are not allowed".into());
        }
        body_is_pure(&query.body)
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
        match expr {
            Expr::Function(f) => {
                let name = f.name.to_string().to_ascii_lowercase();
                let last = name.rsplit('.').next().unwrap_or(&name).trim_matches('"');
                if DENIED_FUNCTIONS.contains(&last) {
                    return ControlFlow::Break(format!("function {last}() is not allowed"));
                }
            }
            Expr::Value(v) => {
                if let Value::Placeholder(p) = &v.value {
                    match p.strip_prefix(':') {
                        Some(n) if !n.is_empty() => {
                            self.placeholders.insert(n.to_owned());
                        }
                        _ => {
                            return ControlFlow::Break(format!(
                                "placeholder {p} is not allowed; use :name"
                            ));
                        }
                    }
                }
            }
            _ => {}
        }
        ControlFlow::Continue(())
    }
}

/// A query body may only be selects combined by set operations; nested `Query` bodies are
/// visited on their own.
fn body_is_pure(body: &SetExpr) -> ControlFlow<String> {
    match body {
        SetExpr::Select(select) => {
            if select.into.is_some() {
                return ControlFlow::Break("SELECT … INTO is not allowed".into());
            }
            ControlFlow::Continue(())
        }
        SetExpr::SetOperation { left, right, .. } => {
            body_is_pure(left)?;
            body_is_pure(right)
        }
        SetExpr::Query(_) | SetExpr::Values(_) => ControlFlow::Continue(()),
        SetExpr::Insert(_) | SetExpr::Update(_) | SetExpr::Delete(_) | SetExpr::Merge(_) => {
            ControlFlow::Break("only SELECT (or WITH … SELECT) is allowed".into())
        }
        SetExpr::Table(_) => ControlFlow::Break("TABLE statements are not allowed".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::check_read_only;

    fn refused(sql: &str) -> String {
        check_read_only(sql).expect_err(sql).message
    }

    #[test]
    fn plain_selects_pass_and_report_placeholders() {
        let p = check_read_only("select id, name from users where status = :status and id > :min")
            .unwrap();
        assert_eq!(p.into_iter().collect::<Vec<_>>(), ["min", "status"]);
        check_read_only("WITH a AS (SELECT 1 AS x) SELECT x FROM a UNION ALL SELECT 2").unwrap();
        check_read_only("select * from t where id in (select id from u);").unwrap();
    }

    #[test]
    fn refuses_everything_else() {
        for (sql, why) in [
            ("COMMIT; DELETE FROM users", "exactly one statement"),
            ("select 1; select 2", "exactly one statement"),
            ("", "exactly one statement"),
            ("DELETE FROM users", "only SELECT"),
            ("INSERT INTO users VALUES (1)", "only SELECT"),
            ("UPDATE users SET name = 'x'", "only SELECT"),
            ("ATTACH DATABASE '/tmp/x.db' AS x", "only SELECT"),
            ("PRAGMA writable_schema = 1", "only SELECT"),
            (
                "WITH d AS (DELETE FROM users RETURNING *) SELECT * FROM d",
                "refused",
            ),
            ("WITH x AS (SELECT 1) DELETE FROM users", "only SELECT"),
            ("SELECT * INTO backup FROM users", "INTO"),
            ("SELECT * FROM users FOR UPDATE", "refused"),
            ("SELECT load_extension('/tmp/evil.so')", "load_extension"),
            ("SELECT * FROM users WHERE id = ?", "placeholder"),
            ("SELECT * FROM users WHERE id = ?1", "placeholder"),
            ("SELEC nonsense", "does not parse"),
        ] {
            let msg = refused(sql);
            assert!(msg.starts_with("SQL refused: "), "{sql}: {msg}");
            assert!(msg.contains(why), "{sql}: {msg} should mention {why:?}");
        }
    }
}
