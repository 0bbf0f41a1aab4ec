//! Layer 1 of read-only in depth: a parse-level pre-filter. Only one pure `SELECT` (or
//! `WITH … SELECT`) gets through; everything else is refused before the database sees it.
//!
//! This layer gives clear errors early (config queries are checked at load). It is not the
//! only line: SQLite connections are read-only with an authorizer (`conn.rs`), PostgreSQL and
//! MySQL statements run in `READ ONLY` transactions that are rolled back (`pg.rs`,
//! `mysql.rs`), so a parser gap cannot become a write. It also turns `:name` placeholders
//! into each engine's own form, token by token, so no value is ever spliced into SQL text.

use std::collections::BTreeSet;
use std::ops::ControlFlow;

use mcpr_core::{Error, Result};
use sqlparser::ast::{Expr, ObjectName, Query, SetExpr, Statement, Value, Visit, Visitor};
use sqlparser::dialect::{Dialect, MySqlDialect, PostgreSqlDialect, SQLiteDialect};
use sqlparser::parser::{Parser, ParserError};
use sqlparser::tokenizer::{Token, TokenWithSpan, Tokenizer, Whitespace};

/// The SQL dialect a mount speaks: how its queries are parsed and how placeholders look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL and MariaDB.
    MySql,
}

impl Engine {
    fn dialect(self) -> Box<dyn Dialect> {
        match self {
            Engine::Sqlite => Box::new(SQLiteDialect {}),
            Engine::Postgres => Box::new(PostgreSqlDialect {}),
            Engine::MySql => Box::new(MySqlDialect {}),
        }
    }

    /// Name prefixes refused like [`Engine::denied_functions`]: whole families (every
    /// `dblink*`, every `*_to_xml*` that runs a query or reads a table, every large-object,
    /// server-file and advisory-lock function), so a member missing from the list, or added
    /// by a later release, is refused too.
    fn denied_prefixes(self) -> &'static [&'static str] {
        match self {
            Engine::Sqlite => &[],
            Engine::Postgres => &[
                "dblink",
                "query_to_xml",
                "table_to_xml",
                "cursor_to_xml",
                "schema_to_xml",
                "database_to_xml",
                "crosstab",
                "lo_",
                "pg_read_",
                "pg_ls_",
                "pg_file_",
                "pg_stat_reset",
                "pg_advisory",
                "pg_try_advisory",
                "pg_create_",
                "pg_drop_",
                "pg_replication_origin",
                "pg_logical_",
            ],
            Engine::MySql => &["sys_"],
        }
    }

    /// Functions (and relations) refused by name even inside a SELECT: they reach outside
    /// the database (server files, programs, other connections), show its configuration or
    /// credentials, take locks that outlive the transaction, or run SQL text of their own,
    /// which this filter could not see. Names are compared as the server resolves them:
    /// case-folded and with `U&"…"` escapes decoded ([`name_forms`]).
    fn denied_functions(self) -> &'static [&'static str] {
        match self {
            Engine::Sqlite => &[
                "load_extension",
                "readfile",
                "writefile",
                "edit",
                "fts3_tokenizer",
            ],
            Engine::Postgres => &[
                "pg_read_file",
                "pg_read_binary_file",
                "pg_ls_dir",
                "pg_stat_file",
                "pg_ls_logdir",
                "pg_ls_waldir",
                "pg_ls_tmpdir",
                "pg_ls_archive_statusdir",
                "pg_ls_logicalsnapdir",
                "pg_ls_logicalmapdir",
                "pg_ls_replslotdir",
                "lo_import",
                "lo_export",
                "lo_create",
                "lo_creat",
                "lo_unlink",
                "lo_open",
                "lo_put",
                "lo_get",
                "lo_from_bytea",
                "lo_truncate",
                "loread",
                "lowrite",
                "dblink",
                "dblink_exec",
                "dblink_connect",
                "dblink_open",
                "dblink_send_query",
                "query_to_xml",
                "query_to_xml_and_xmlschema",
                "query_to_xmlschema",
                "cursor_to_xml",
                "cursor_to_xmlschema",
                "database_to_xml",
                "database_to_xmlschema",
                "database_to_xml_and_xmlschema",
                "schema_to_xml",
                "schema_to_xmlschema",
                "schema_to_xml_and_xmlschema",
                "table_to_xml",
                "table_to_xmlschema",
                "table_to_xml_and_xmlschema",
                // Run the SQL text they are given (text search statistics and rewriting,
                // tablefunc's pivots and trees).
                "ts_stat",
                "ts_rewrite",
                "crosstab",
                "crosstab2",
                "crosstab3",
                "crosstab4",
                "connectby",
                "pg_read_server_files",
                "pg_execute_server_program",
                // Server configuration and credential files, as views.
                "pg_hba_file_rules",
                "pg_ident_file_mappings",
                "pg_file_settings",
                "pg_authid",
                "pg_shadow",
                "pg_user_mapping",
                "pg_user_mappings",
                "pg_largeobject",
                "pg_config",
                "set_config",
                "pg_terminate_backend",
                "pg_cancel_backend",
                "pg_reload_conf",
                "pg_rotate_logfile",
                "pg_file_write",
                "pg_file_rename",
                "pg_file_unlink",
                "pg_file_sync",
                "pg_notify",
                "pg_logical_emit_message",
                "pg_switch_wal",
                "pg_create_restore_point",
                "pg_promote",
                "pg_advisory_lock",
                "pg_advisory_lock_shared",
                "pg_try_advisory_lock",
                "pg_try_advisory_lock_shared",
                "pg_advisory_xact_lock",
                "pg_advisory_xact_lock_shared",
                "pg_try_advisory_xact_lock",
                "pg_try_advisory_xact_lock_shared",
                "pg_stat_reset",
                "pg_stat_reset_shared",
                "pg_stat_reset_single_table_counters",
                "pg_stat_reset_single_function_counters",
                "pg_stat_reset_slru",
                "pg_stat_reset_replication_slot",
                "pg_create_logical_replication_slot",
                "pg_create_physical_replication_slot",
                "pg_drop_replication_slot",
                "pg_replication_origin_create",
                "pg_import_system_collations",
                "txid_current",
                "pg_current_xact_id",
                "nextval",
                "setval",
            ],
            Engine::MySql => &[
                "load_file",
                "get_lock",
                "release_lock",
                "release_all_locks",
                "is_free_lock",
                "is_used_lock",
                "master_pos_wait",
                "source_pos_wait",
                "master_gtid_wait",
                "sys_exec",
                "sys_eval",
                "lastval",
                "nextval",
                "setval",
            ],
        }
    }
}

/// How deep sqlparser may recurse into one statement (see `check_read_only`).
const MAX_NESTING: usize = 32;
/// How deep parentheses and square brackets may nest in one statement (see `check_read_only`).
const MAX_BRACKETS: usize = 16;

/// Check that `sql` is exactly one read-only query. Returns the names of its `:name`
/// placeholders (without the colon).
pub fn check_read_only(sql: &str, engine: Engine) -> Result<BTreeSet<String>> {
    let refuse = |why: &str| Error::invalid_params(format!("SQL refused: {why}"));
    let dialect = engine.dialect();
    let tokens = Tokenizer::new(dialect.as_ref(), sql)
        .tokenize()
        .map_err(|e| refuse(&format!("it does not tokenize ({e})")))?;
    // MySQL runs the text of `/*! … */` and `/*M! … */` comments as SQL; sqlparser sees a
    // comment. Refused on every engine: such a comment has no business in a named query.
    for t in &tokens {
        if let Token::Whitespace(Whitespace::MultiLineComment(c)) = t
            && (c.starts_with('!') || c.starts_with("M!"))
        {
            return Err(refuse("executable comments (/*! … */) are not allowed"));
        }
    }
    // `U&"…" UESCAPE '!'` picks its own escape character, so the name it spells cannot be
    // decoded reliably from the identifier alone.
    if engine == Engine::Postgres
        && tokens.iter().any(
            |t| matches!(t, Token::Word(w) if w.quote_style.is_none() && w.value.eq_ignore_ascii_case("uescape")),
        )
    {
        return Err(refuse("UESCAPE is not allowed"));
    }
    // Brackets counted from the tokens first: within the recursion limit below, sqlparser's
    // backtracking still grows exponentially with their depth (a second fuzz finding, 110
    // bytes of `CAST(TA(C(…` and `[((`, parsed for over 10 s at a limit of 32).
    let mut depth = 0usize;
    for t in &tokens {
        match t {
            Token::LParen | Token::LBracket => {
                depth += 1;
                if depth > MAX_BRACKETS {
                    return Err(refuse(&format!(
                        "it nests brackets deeper than the limit of {MAX_BRACKETS}"
                    )));
                }
            }
            Token::RParen | Token::RBracket => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    // sqlparser backtracks at each opening parenthesis (a subquery, else an expression), so
    // its time grows exponentially with the depth it may recurse to: at its default of 50 a
    // 290-byte statement of nested parentheses parsed for minutes (a sql_guard fuzz finding,
    // regression test `fuzz_deep_nesting_is_refused_quickly`). A named query needs far less.
    let statements = Parser::new(dialect.as_ref())
        .with_recursion_limit(MAX_NESTING)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| match e {
            ParserError::RecursionLimitExceeded => refuse(&format!(
                "it nests deeper than the limit of {MAX_NESTING} levels (expressions, parentheses, subqueries)"
            )),
            e => refuse(&format!("it does not parse ({e})")),
        })?;
    let [statement] = statements.as_slice() else {
        return Err(refuse(&format!(
            "exactly one statement is allowed, found {}",
            statements.len()
        )));
    };
    if !matches!(statement, Statement::Query(_)) {
        return Err(refuse("only SELECT (or WITH … SELECT) is allowed"));
    }
    let mut check = Check {
        denied: engine.denied_functions(),
        prefixes: engine.denied_prefixes(),
        statements: 0,
        placeholders: BTreeSet::new(),
    };
    if let ControlFlow::Break(why) = statement.visit(&mut check) {
        return Err(refuse(&why));
    }
    Ok(check.placeholders)
}

struct Check {
    denied: &'static [&'static str],
    prefixes: &'static [&'static str],
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

    fn pre_visit_relation(&mut self, relation: &ObjectName) -> ControlFlow<String> {
        // Table-valued functions in FROM are relations to the visitor; a table that shares a
        // denied function's name is refused too, which is the safe side.
        self.refuse_denied(relation)
    }

    fn pre_visit_query(&mut self, query: &Query) -> ControlFlow<String> {
        if !query.locks.is_empty() {
            return ControlFlow::Break("locking clauses (FOR UPDATE/SHARE) are not allowed".into());
        }
        body_is_pure(&query.body)
    }

    fn pre_visit_expr(&mut self, expr: &Expr) -> ControlFlow<String> {
        match expr {
            Expr::Function(f) => self.refuse_denied(&f.name)?,
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

impl Check {
    /// Refuses `name` when its last part (the function or relation itself, whatever schema
    /// qualifies it) is denied in any form the server could resolve it to.
    fn refuse_denied(&self, name: &ObjectName) -> ControlFlow<String> {
        let Some(last) = name.0.last().and_then(|p| p.as_ident()) else {
            return ControlFlow::Continue(());
        };
        for form in name_forms(&last.value) {
            let hit = self.denied.contains(&form.as_str())
                || self.prefixes.iter().any(|p| form.starts_with(p));
            if hit {
                return ControlFlow::Break(format!("function or relation {form}() is not allowed"));
            }
        }
        ControlFlow::Continue(())
    }
}

/// The names an identifier can stand for, lower-cased: as written (an unquoted name is
/// case-folded by every engine; a quoted one is compared folded too, the safe side), and,
/// when it holds a backslash, with PostgreSQL's `U&"…"` escapes decoded (`\005f` is `_`,
/// `\+00005f` too, `\\` a backslash). sqlparser reads `U&"x"` as `U & "x"`, so the quoted
/// part arrives here still escaped; decoding every quoted name that has a backslash refuses
/// a name that only looks like an escape, which is the safe side.
fn name_forms(value: &str) -> Vec<String> {
    let mut forms = vec![value.to_lowercase()];
    if value.contains('\\') {
        forms.push(decode_unicode_escapes(value).to_lowercase());
    }
    forms
}

/// PostgreSQL's `U&` escapes with the default escape character: `\XXXX`, `\+XXXXXX`, `\\`.
/// Anything else is kept as written.
fn decode_unicode_escapes(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('\\') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (digits, skip) = if let Some(long) = after.strip_prefix('+') {
            (long.get(..6), 7)
        } else {
            (after.get(..4), 4)
        };
        if let Some(escaped) = after.strip_prefix('\\') {
            out.push('\\');
            rest = escaped;
            continue;
        }
        match digits
            .filter(|d| d.bytes().all(|b| b.is_ascii_hexdigit()))
            .and_then(|d| u32::from_str_radix(d, 16).ok())
            .and_then(char::from_u32)
        {
            Some(c) => {
                out.push(c);
                rest = &after[skip..];
            }
            None => {
                out.push('\\');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
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

/// How an engine writes a bound parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Placeholders {
    /// `$1`, `$2`, … (PostgreSQL); a name used twice is one number.
    Numbered,
    /// `?` (MySQL); a name used twice is bound twice.
    Positional,
}

/// Rewrite the `:name` placeholders of a checked query for an engine. Returns the new text
/// and, for each bound slot in order, the parameter name to bind there. Only placeholder
/// tokens change: string literals, quoted identifiers and comments are copied byte for byte.
pub(crate) fn rewrite_placeholders(
    sql: &str,
    engine: Engine,
    style: Placeholders,
) -> Result<(String, Vec<String>)> {
    let dialect = engine.dialect();
    let tokens = Tokenizer::new(dialect.as_ref(), sql)
        .tokenize_with_location()
        .map_err(|e| Error::invalid_params(format!("SQL refused: it does not tokenize ({e})")))?;
    let offsets = LineOffsets::new(sql);
    let mut out = String::with_capacity(sql.len() + 8);
    let mut slots: Vec<String> = Vec::new();
    let mut copied = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        // `:name` is one Placeholder token in some dialects, Colon + Word in others.
        let found = match &tokens[i].token {
            Token::Placeholder(p) if p.starts_with(':') && p.len() > 1 => {
                Some((p[1..].to_owned(), i, i))
            }
            Token::Colon => match tokens.get(i + 1) {
                Some(TokenWithSpan {
                    token: Token::Word(w),
                    span,
                }) if w.quote_style.is_none() && span.start == tokens[i].span.end => {
                    Some((w.value.clone(), i, i + 1))
                }
                _ => None,
            },
            _ => None,
        };
        let Some((name, first, last)) = found else {
            i += 1;
            continue;
        };
        let start = offsets.byte(sql, tokens[first].span.start);
        let end = offsets.byte(sql, tokens[last].span.end);
        out.push_str(&sql[copied..start]);
        match style {
            Placeholders::Numbered => {
                let n = match slots.iter().position(|s| *s == name) {
                    Some(p) => p + 1,
                    None => {
                        slots.push(name);
                        slots.len()
                    }
                };
                out.push_str(&format!("${n}"));
            }
            Placeholders::Positional => {
                slots.push(name);
                out.push('?');
            }
        }
        copied = end;
        i = last + 1;
    }
    out.push_str(&sql[copied..]);
    Ok((out, slots))
}

/// Byte offsets of line starts, to turn tokenizer locations (line, char column) into bytes.
struct LineOffsets(Vec<usize>);

impl LineOffsets {
    fn new(sql: &str) -> Self {
        let mut v = vec![0];
        v.extend(sql.match_indices('\n').map(|(i, _)| i + 1));
        Self(v)
    }

    fn byte(&self, sql: &str, at: sqlparser::tokenizer::Location) -> usize {
        let line_start = self
            .0
            .get((at.line as usize).saturating_sub(1))
            .copied()
            .unwrap_or(sql.len());
        let col = (at.column as usize).saturating_sub(1);
        sql[line_start..]
            .char_indices()
            .nth(col)
            .map_or(sql.len(), |(b, _)| line_start + b)
    }
}

#[cfg(test)]
mod tests {
    use super::{Engine, Placeholders, check_read_only, rewrite_placeholders};

    fn refused(sql: &str) -> String {
        check_read_only(sql, Engine::Sqlite).expect_err(sql).message
    }

    /// A sql_guard fuzz finding: sqlparser's backtracking over nested parentheses took
    /// minutes on this 290-byte text under PostgreSQL's dialect at the default recursion
    /// limit. Now every engine refuses it at once (the test would hang otherwise).
    #[test]
    fn fuzz_deep_nesting_is_refused_quickly() {
        let sql = "SELECT databasma*true, tue,htc(true,h%ma(ta(bgsma(true, tue,hthtr2ue(S((TABL((asma*true, tue,htc(tzue,h%ma(ttrue, tue,htc(true,h%ma(ta(bgsma(true, tue,hthtr2ue(S((TABL((asma*true, tue,htc(tzue,h%ma(te(bgsma(true, tuee(bgsma(true, tue,hthtr2ue(S((TABL((((((ma(tr((((ma(true, 4ue,htruete, '')";
        for engine in [Engine::Sqlite, Engine::Postgres, Engine::MySql] {
            let e = check_read_only(sql, engine).expect_err(sql).message;
            assert!(e.starts_with("SQL refused: "), "{engine:?}: {e}");
        }
        // The second finding, slow within the recursion limit: refused by the bracket count.
        let sql = "SELECT CAST(TA(C(TA(CAST(TA(C(TA(CAST(T(TA(C(TA(CAST(TA(C(TA(CAST(TA[((((WIT((([((Am\u{0}\u{0}\u{0}A[(=(((WITHa((WI[ (S>>(";
        for engine in [Engine::Sqlite, Engine::Postgres, Engine::MySql] {
            let e = check_read_only(sql, engine).expect_err(sql).message;
            assert!(e.starts_with("SQL refused: "), "{engine:?}: {e}");
        }
        let deep = format!("SELECT {}1{}", "(".repeat(40), ")".repeat(40));
        let e = refused(&deep);
        assert!(e.contains("brackets deeper than the limit of 16"), "{e}");
        let deep = format!("SELECT {}1", "- ".repeat(40));
        let e = refused(&deep);
        assert!(e.contains("deeper than the limit of 32 levels"), "{e}");
        // What a named query plausibly needs still passes: subqueries five deep, each with
        // an expression of its own.
        let mut q = "SELECT a FROM t WHERE (a + 1) * 2 > 3".to_owned();
        for _ in 0..5 {
            q = format!("SELECT a FROM t WHERE a IN ({q}) AND (b = 1 OR (c = 2 AND a > 0))");
        }
        for engine in [Engine::Sqlite, Engine::Postgres, Engine::MySql] {
            check_read_only(&q, engine).unwrap_or_else(|e| panic!("{engine:?}: {}", e.message));
        }
    }

    #[test]
    fn placeholders_are_rewritten_token_by_token() {
        let sql =
            "select ':x' as lit, \":y\" from t -- :z\nwhere a = :a and b = :b::int and c = :a";
        let (pg, slots) =
            rewrite_placeholders(sql, Engine::Postgres, Placeholders::Numbered).unwrap();
        assert_eq!(
            pg,
            "select ':x' as lit, \":y\" from t -- :z\nwhere a = $1 and b = $2::int and c = $1"
        );
        assert_eq!(slots, ["a", "b"]);
        let sql = "select 'é:x', `:q` from t where a = :a and b = :b or c = :a";
        let (my, slots) =
            rewrite_placeholders(sql, Engine::MySql, Placeholders::Positional).unwrap();
        assert_eq!(
            my,
            "select 'é:x', `:q` from t where a = ? and b = ? or c = ?"
        );
        assert_eq!(slots, ["a", "b", "a"]);
    }

    #[test]
    fn engine_specific_refusals() {
        for (engine, sql, why) in [
            (
                Engine::MySql,
                "SELECT 1 /*! ; DELETE FROM t */",
                "executable comments",
            ),
            (
                Engine::MySql,
                "SELECT 1 /*M!100000 ; DROP TABLE t */",
                "executable comments",
            ),
            (
                Engine::Postgres,
                "SELECT pg_read_file('/etc/passwd')",
                "pg_read_file",
            ),
            (
                Engine::Postgres,
                "SELECT lo_import('/etc/passwd')",
                "lo_import",
            ),
            (
                Engine::Postgres,
                "COPY (SELECT 1) TO PROGRAM 'touch /tmp/x'",
                "only SELECT",
            ),
            (
                Engine::Postgres,
                "SET default_transaction_read_only = off",
                "only SELECT",
            ),
            (
                Engine::Postgres,
                "SELECT * FROM query_to_xml('delete from t', true, true, '')",
                "query_to_xml",
            ),
            (
                Engine::Postgres,
                "SELECT set_config('transaction_read_only', 'off', true)",
                "set_config",
            ),
            (Engine::Postgres, "SELECT * FROM t FOR UPDATE", "locking"),
            (
                Engine::Postgres,
                "WITH d AS (DELETE FROM t RETURNING *) SELECT * FROM d",
                "refused",
            ),
            (
                Engine::MySql,
                "SELECT load_file('/etc/passwd')",
                "load_file",
            ),
            (Engine::MySql, "SELECT get_lock('x', 1)", "get_lock"),
            (
                Engine::MySql,
                "SELECT * FROM t INTO OUTFILE '/tmp/x'",
                "refused",
            ),
        ] {
            let msg = check_read_only(sql, engine).expect_err(sql).message;
            assert!(msg.contains(why), "{sql}: {msg} should mention {why:?}");
        }
        check_read_only("SELECT pg_sleep(1)", Engine::Postgres).unwrap();
        check_read_only(
            "SELECT to_tsvector('a b') AS v, lower(x) FROM t",
            Engine::Postgres,
        )
        .unwrap();
        check_read_only("SELECT \"Users\".id FROM \"Users\"", Engine::Postgres).unwrap();
        check_read_only(
            "select id from \"we\"\"ird\" where s = :s::text",
            Engine::Postgres,
        )
        .unwrap();
        check_read_only("select `id` from `t` where s = :s", Engine::MySql).unwrap();
    }

    /// Issue #20 item 8: the gaps a powerful role could reach from a configured query.
    #[test]
    fn sql_prefilter_compares_normalised_names_and_refuses_nested_sql() {
        for (sql, why) in [
            (
                r#"SELECT U&"pg\005fread_file"('/etc/passwd')"#,
                "pg_read_file",
            ),
            (
                r#"SELECT U&"pg\+00005fread_file"('/etc/passwd')"#,
                "pg_read_file",
            ),
            (
                r#"SELECT pg_catalog.U&"PG\005FREAD\005FFILE"('x')"#,
                "pg_read_file",
            ),
            (
                r#"SELECT U&"pg!005fread_file" UESCAPE '!' ('/etc/passwd')"#,
                "refused",
            ),
            ("SELECT PG_READ_FILE('/etc/passwd')", "pg_read_file"),
            (r#"SELECT "pg_read_file"('/etc/passwd')"#, "pg_read_file"),
            (
                "SELECT * FROM ts_stat('select to_tsvector(secret) from t')",
                "ts_stat",
            ),
            ("SELECT ts_stat('select 1')", "ts_stat"),
            ("SELECT ts_rewrite('a'::tsquery, 'select 1')", "ts_rewrite"),
            ("SELECT * FROM pg_hba_file_rules", "pg_hba_file_rules"),
            (
                "SELECT * FROM pg_catalog.pg_file_settings",
                "pg_file_settings",
            ),
            ("SELECT * FROM \"pg_authid\"", "pg_authid"),
            ("SELECT table_to_xml('t', true, true, '')", "table_to_xml"),
            (
                "SELECT database_to_xmlschema(true, true, '')",
                "database_to_xmlschema",
            ),
            (
                "SELECT schema_to_xml('public', true, true, '')",
                "schema_to_xml",
            ),
            ("SELECT dblink_get_result('c')", "dblink_get_result"),
            ("SELECT * FROM crosstab('select 1')", "crosstab"),
            ("SELECT lo_export(1, '/tmp/x')", "lo_export"),
            (
                "SELECT pg_read_binary_file('/etc/passwd')",
                "pg_read_binary_file",
            ),
        ] {
            let msg = check_read_only(sql, Engine::Postgres)
                .expect_err(sql)
                .message;
            assert!(msg.contains(why), "{sql}: {msg} should mention {why:?}");
        }
        assert_eq!(super::decode_unicode_escapes(r"a\005fb\\c\zz"), r"a_b\c\zz");
    }

    #[test]
    fn plain_selects_pass_and_report_placeholders() {
        let p = check_read_only(
            "select id, name from users where status = :status and id > :min",
            Engine::Sqlite,
        )
        .unwrap();
        assert_eq!(p.into_iter().collect::<Vec<_>>(), ["min", "status"]);
        check_read_only(
            "WITH a AS (SELECT 1 AS x) SELECT x FROM a UNION ALL SELECT 2",
            Engine::Sqlite,
        )
        .unwrap();
        check_read_only(
            "select * from t where id in (select id from u);",
            Engine::Sqlite,
        )
        .unwrap();
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
