//! Where a mount without keys gets its credentials, through the process environment as a
//! deployment sets it: container credentials (EKS Pod Identity's
//! `AWS_CONTAINER_CREDENTIALS_FULL_URI` + token file, served here by a real HTTP server on
//! loopback), a profile's `credential_process` in `~/.aws/config` (a real script), and
//! `AWS_ENDPOINT_URL_S3` / `AWS_ENDPOINT_URL` never moving a mount off its configured endpoint.
//!
//! The environment is the process's, and this workspace forbids `unsafe` (`set_var`): each
//! case runs this test binary again as a child with its own environment, running one
//! `#[ignore]`d test that does the listing; the parent checks what the child did.

mod common;

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{create_bucket, put, unique_bucket, writer};
use mcpr_core::{ContentsBody, PageRequest, Provider, ReadLimits, ResourceUri};
use mcpr_provider_s3::{S3Config, S3Provider};
use mcpr_testkit::moto::moto;

/// Run the ignored test `name` in a child process with `env` on top of a cleared AWS
/// environment and `HOME` = `home`; its output when it fails.
fn run_child(name: &str, home: &Path, env: &[(&str, String)]) -> Result<String, String> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    for (k, _) in std::env::vars() {
        if k.starts_with("AWS_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", home);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("run the child test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && text.contains("1 passed") {
        Ok(text)
    } else {
        Err(text)
    }
}

fn scratch(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("mcpr-s3-cred-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A bucket with one object, on the shared moto; its endpoint and name.
async fn bucket() -> Option<(String, String)> {
    let m = moto()?;
    let bucket = unique_bucket("cred");
    create_bucket(&m.endpoint(), &bucket).await;
    put(&writer(&m.endpoint(), &bucket), "hello.txt", b"hi").await;
    Some((m.endpoint(), bucket))
}

/// The child's half: a mount of `MCPR_TEST_BUCKET` at `MCPR_TEST_ENDPOINT` with no keys in
/// its config lists that bucket.
#[tokio::test]
#[ignore = "run by the tests below in a child process with their own environment"]
async fn child_lists_without_configured_keys() {
    let endpoint = std::env::var("MCPR_TEST_ENDPOINT").unwrap();
    let bucket = std::env::var("MCPR_TEST_BUCKET").unwrap();
    let mut c = S3Config::new(&bucket, "us-east-1");
    c.endpoint = Some(endpoint);
    c.allow_http = true;
    let p = S3Provider::new(c).await.unwrap();
    let page = p
        .list(PageRequest {
            after: None,
            limit: 10,
        })
        .await
        .unwrap_or_else(|e| panic!("CHILD-ERROR {e}"));
    let names: Vec<&str> = page.items.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, ["hello.txt"]);
    // Reads go through object_store's own client: the same endpoint and credentials.
    let c = p
        .read(
            &ResourceUri::parse(&page.items[0].uri).unwrap(),
            &ReadLimits { max_bytes: 1024 },
        )
        .await
        .unwrap_or_else(|e| panic!("CHILD-ERROR {e}"))
        .contents;
    assert!(matches!(&c[0].body, ContentsBody::Text(t) if t == "hi"));
}

/// A loopback credentials endpoint in EKS Pod Identity's shape; it records the
/// `Authorization` header of each request.
fn credentials_server() -> (String, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1/credentials", l.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for conn in l.incoming().take(20) {
            let Ok(mut s) = conn else { continue };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut auth = String::new();
            loop {
                let mut line = String::new();
                if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(v) = line.to_ascii_lowercase().strip_prefix("authorization:") {
                    auth = v.trim().to_owned();
                }
            }
            log.lock().unwrap().push(auth);
            let body = r#"{"AccessKeyId":"AKIACONTAINER0000001","SecretAccessKey":"containerSecret","Token":"containerToken","Expiration":"2099-01-01T00:00:00Z"}"#;
            let _ = write!(
                s,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.read(&mut [0u8; 1]);
        }
    });
    (url, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_credentials_are_used_and_endpoint_variables_ignored() {
    let Some((endpoint, bucket)) = bucket().await else {
        return;
    };
    let home = scratch("container");
    let token = home.join("eks-token");
    std::fs::write(&token, "pod-identity-token").unwrap();
    let (url, seen) = credentials_server();
    let dead = format!("http://127.0.0.1:{}", mcpr_testkit::moto::free_port());
    let out = run_child(
        "child_lists_without_configured_keys",
        &home,
        &[
            ("MCPR_TEST_ENDPOINT", endpoint.clone()),
            ("MCPR_TEST_BUCKET", bucket.clone()),
            ("AWS_CONTAINER_CREDENTIALS_FULL_URI", url),
            (
                "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
                token.display().to_string(),
            ),
            // Both would send the mount to a port nothing listens on.
            ("AWS_ENDPOINT_URL_S3", dead.clone()),
            ("AWS_ENDPOINT_URL", dead),
        ],
    );
    if let Err(text) = out {
        panic!("the child failed:\n{text}");
    }
    let seen = seen.lock().unwrap();
    assert!(
        !seen.is_empty() && seen.iter().all(|a| a == "pod-identity-token"),
        "the credentials endpoint was asked, with the token file's token: {seen:?}"
    );
    let _ = std::fs::remove_dir_all(&home);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_credential_process_is_run() {
    let Some((endpoint, bucket)) = bucket().await else {
        return;
    };
    let home = scratch("process");
    let aws = home.join(".aws");
    std::fs::create_dir_all(&aws).unwrap();
    let runs = home.join("runs");
    let script = home.join("creds.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nprintf '%s' '{{\"Version\": 1, \"AccessKeyId\": \"AKIAPROCESS000000001\", \"SecretAccessKey\": \"processSecret\"}}'\n",
            runs.display()
        ),
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[default]\nregion = eu-west-1\n\n[profile reports]\nregion = us-east-1\ncredential_process = sh '{}' reports\n",
            script.display()
        ),
    )
    .unwrap();
    let env = [
        ("MCPR_TEST_ENDPOINT", endpoint.clone()),
        ("MCPR_TEST_BUCKET", bucket.clone()),
        ("AWS_PROFILE", "reports".to_owned()),
    ];
    if let Err(text) = run_child("child_lists_without_configured_keys", &home, &env) {
        panic!("the child failed:\n{text}");
    }
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(ran.trim(), "reports", "the profile's process ran once");
    // A process that fails is a clear error, with nothing it printed.
    std::fs::write(&script, "#!/bin/sh\necho AKIALEAKED; exit 2\n").unwrap();
    let text = run_child("child_lists_without_configured_keys", &home, &env)
        .expect_err("a failing credential_process cannot list");
    assert!(
        text.contains("CHILD-ERROR") && text.contains("credential_process failed"),
        "{text}"
    );
    assert!(!text.contains("AKIALEAKED"), "{text}");
    let _ = std::fs::remove_dir_all(&home);
}
