//! The SQL pre-filter of each dialect on any text: no panic, and a statement it admits is
//! one read-only statement to SQLite's own parser (a second, independent parse), when
//! SQLite can prepare it at all (other dialects' syntax it cannot is skipped).

#![no_main]

use std::cell::RefCell;

use libfuzzer_sys::fuzz_target;
use mcpr_provider_sql::fuzzing::{Engine, check_read_only};
use rusqlite::fallible_iterator::FallibleIterator as _;

thread_local! {
    static DB: RefCell<rusqlite::Connection> = RefCell::new(database());
}

/// A database with tables the corpus names, so SQLite can prepare what they reference.
fn database() -> rusqlite::Connection {
    let c = rusqlite::Connection::open_in_memory().expect("in-memory SQLite");
    c.execute_batch(
        "CREATE TABLE t(a, b, c);
         CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, email TEXT, age INTEGER);
         CREATE TABLE orders(id INTEGER PRIMARY KEY, user_id INTEGER, total REAL, status TEXT);
         CREATE TABLE items(id INTEGER PRIMARY KEY, name TEXT, price REAL, qty INTEGER);
         CREATE VIEW v AS SELECT a, b FROM t;",
    )
    .expect("schema");
    c
}

fuzz_target!(|sql: &str| {
    for engine in [Engine::Sqlite, Engine::Postgres, Engine::MySql] {
        let Ok(_names) = check_read_only(sql, engine) else {
            continue;
        };
        DB.with(|db| {
            let db = db.borrow();
            // Statement by statement, as SQLite splits the text; an error (a table SQLite
            // does not have, another dialect's syntax) ends the comparison.
            let mut batch = rusqlite::Batch::new(&db, sql);
            let mut count = 0;
            while let Ok(Some(stmt)) = batch.next() {
                count += 1;
                assert!(
                    stmt.readonly(),
                    "{engine:?} admitted a statement SQLite says writes: {sql:?}"
                );
                assert!(
                    count == 1,
                    "{engine:?} admitted more than one statement: {sql:?}"
                );
            }
        });
    }
});
