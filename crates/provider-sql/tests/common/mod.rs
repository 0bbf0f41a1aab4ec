//! What the live PostgreSQL and MariaDB/MySQL tests share: a database per test (`db`),
//! reading through the provider, the named queries both configure, change events, a TCP
//! proxy that makes a database appear, and the list positions the suite must see refused.

#![allow(dead_code)]

pub mod db;

use std::collections::BTreeMap;
use std::time::Duration;

use mcpr_core::{ChangeEvent, ContentsBody, Provider, ReadLimits, ResourceUri};
use mcpr_provider_sql::{NamedQuery, ParamSpec, ParamType, SqlProvider};
use serde_json::Value;

pub fn text(v: Value) -> Vec<u8> {
    v.to_string().into_bytes()
}

pub async fn read(p: &SqlProvider, uri: &str) -> mcpr_core::Result<Value> {
    let c = read_raw(p, uri).await?;
    Ok(serde_json::from_str(&c).unwrap())
}

pub async fn read_raw(p: &SqlProvider, uri: &str) -> mcpr_core::Result<String> {
    let c = p
        .read(
            &ResourceUri::parse(uri).unwrap(),
            &ReadLimits {
                max_bytes: 64 << 20,
            },
        )
        .await?
        .contents;
    let ContentsBody::Text(t) = &c[0].body else {
        panic!("db:// results are text")
    };
    Ok(t.clone())
}

pub fn queries(prefix: &str) -> Vec<NamedQuery> {
    vec![
        NamedQuery {
            uri: format!("db://{prefix}/active/list"),
            sql: "select id, name from users where status = 'active' order by id".into(),
            params: BTreeMap::new(),
            description: None,
        },
        NamedQuery {
            uri: format!("db://{prefix}/{{status}}/list"),
            sql: "select id, name from users where status = :status order by id".into(),
            params: BTreeMap::from([(
                "status".into(),
                ParamSpec {
                    kind: ParamType::Text,
                    allowed: None,
                    pattern: Some("[a-z]+".into()),
                    complete_from: Some(("users".into(), "status".into())),
                },
            )]),
            description: Some("users by status".into()),
        },
        NamedQuery {
            uri: format!("db://{prefix}/by-id/{{id}}"),
            sql: "select name from users where id = :id".into(),
            params: BTreeMap::from([(
                "id".into(),
                ParamSpec {
                    kind: ParamType::Integer,
                    ..Default::default()
                },
            )]),
            description: None,
        },
    ]
}

// ---------------------------------------------------------------------------------------
// PostgreSQL

/// List positions every SQL mount must refuse: a position is a section byte (0 overview,
/// 1 rows, 2 schema, 3 named query) and its key (`schema NUL name`, or a query index).
pub fn sql_malformed_positions() -> Vec<Vec<u8>> {
    let mut v = mcpr_testkit::default_malformed_positions();
    v.extend([
        b"\x04".to_vec(),
        b"\x01no-nul".to_vec(),
        b"\x01\xff\0users".to_vec(),
        b"\x03abc".to_vec(),
        b"\x03\xff".to_vec(),
        b"\x03-1".to_vec(),
    ]);
    v
}

pub fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

pub async fn next_update(
    rx: &mut tokio::sync::broadcast::Receiver<ChangeEvent>,
    within: Duration,
) -> Option<String> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Ok(ChangeEvent::Updated { uri })) => return Some(uri),
            Ok(Ok(_)) => continue,
            _ => return None,
        }
    }
}

/// Forward `from` on loopback to `to`, so a test can make a database appear.
pub async fn proxy(from: u16, to: u16) -> tokio::task::JoinHandle<()> {
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", from))
        .await
        .unwrap();
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}
