//! The one way a URL that may hold secrets is shown: in `Debug`, labels, logs and errors.
//!
//! A URL's secrets sit in two places: the user information (`user:password@`, or a token
//! alone as in `https://ghp_x@github.com`) and the query (`?password=…`, `?sslmode=…&
//! sslpassword=…`, `?token=…`). [`redact_url`] replaces the first with `***@` (the reader
//! learns that credentials were given, never what they are) and drops the second and the
//! fragment. [`redact_urls_in`] applies it to every URL inside a message that came from
//! elsewhere (a provider's error shown on `/readyz`).

/// `url` for display: user information replaced by `***@`, query and fragment dropped
/// (`postgres://app:pw@db:5432/app?sslmode=require` is `postgres://***@db:5432/app`).
///
/// A list of URLs separated by commas (NATS's `nats_url` takes one) is cleaned URL by URL,
/// a comma inside a password not splitting it (see [`split_urls`]). A value without
/// `scheme://` is not a URL this can take apart (a key-value connection string may hold
/// `password=` anywhere): it is shown as `(unparsable URL)`.
pub fn redact_url(url: &str) -> String {
    split_urls(url)
        .into_iter()
        .map(|one| redact_one(one.trim()))
        .collect::<Vec<_>>()
        .join(",")
}

/// The URLs of a comma-separated list. A comma starts another URL only where a scheme
/// follows it (`,nats://`), so a comma inside a password does not split the URL (and leave
/// part of the password outside the user information that is taken out).
pub fn split_urls(url: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    for (i, _) in url.match_indices(',') {
        let next = url[i + 1..].trim_start();
        let scheme = next
            .find("://")
            .filter(|&n| n > 0 && next[..n].chars().all(|c| c.is_ascii_alphanumeric()));
        if scheme.is_some() {
            out.push(&url[start..i]);
            start = i + 1;
        }
    }
    out.push(&url[start..]);
    out
}

/// The byte range of the user information of `url` (`user:pass@`, the `@` included), when
/// it has one: from `://` to the last `@` that a host follows (a name or `[…]` address, an
/// optional `:port`, then the end or a `/`, `?` or `#`).
///
/// It is not cut at the first `/`, `?` or `#` as a URL parser would: a password holding one
/// (base64 ones hold `/`) would then leave its first part in what is shown as the host, and
/// the rest in the path. An `@` further on that a host follows (`/user@example.com`, rare in
/// the URLs this is for) hides more than the user information: a URL shown with too much
/// hidden is better than a password shown.
pub fn userinfo_span(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let rest = &url[start..];
    rest.match_indices('@')
        .rev()
        .map(|(at, _)| at)
        .find(|&at| host_follows(&rest[at + 1..]))
        .map(|at| start..start + at + 1)
}

/// Whether `text` starts with a host: a name (letters, digits, `-._~%`) or a bracketed
/// address, an optional `:port` of digits, then the end or a `/`, `?` or `#`.
fn host_follows(text: &str) -> bool {
    let end = text.find(['/', '?', '#']).unwrap_or(text.len());
    let authority = &text[..end];
    let (host_ok, port) = match authority.strip_prefix('[') {
        Some(bracketed) => match bracketed.split_once(']') {
            Some((address, after)) => (
                address
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || matches!(c, ':' | '.' | '%')),
                match after.strip_prefix(':') {
                    Some(p) => Some(p),
                    None if after.is_empty() => None,
                    None => return false,
                },
            ),
            None => return false,
        },
        None => {
            let (host, port) = match authority.split_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            };
            (
                host.chars()
                    .all(|c| c.is_alphanumeric() || matches!(c, '-' | '.' | '_' | '~' | '%')),
                port,
            )
        }
    };
    host_ok && port.is_none_or(|p| p.chars().all(|c| c.is_ascii_digit()))
}

fn redact_one(url: &str) -> String {
    let Some((scheme, _)) = url.split_once("://") else {
        return "(unparsable URL)".into();
    };
    // Everything up to the end of the user information goes first: a `?` or `#` inside a
    // password must not be taken for the start of the query, nor the rest of it kept.
    let (masked, after) = match userinfo_span(url) {
        Some(span) => ("***@", &url[span.end..]),
        None => ("", &url[scheme.len() + 3..]),
    };
    let end = after.find(['?', '#']).unwrap_or(after.len());
    format!("{scheme}://{masked}{}", &after[..end])
}

/// `text` with every `scheme://…` URL in it passed through [`redact_url`], and on one
/// line. For messages that came from elsewhere (a provider's error shown on `/readyz`, in
/// `_meta` or in the log): providers keep secrets out of their errors, and this is the
/// second line of that defence. A URL ends at a blank or a quote.
pub fn redact_urls_in(text: &str) -> String {
    let ends = |c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '`' | '<' | '>');
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        // The scheme: the letters, digits, `+`, `-` and `.` right before `://`.
        let scheme_len = rest[..i]
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
            .count();
        let start = i - scheme_len;
        let end = rest[i..].find(ends).map_or(rest.len(), |n| i + n);
        out.push_str(&rest[..start]);
        if scheme_len == 0 {
            // `://` with no scheme before it is no URL: keep it and look further.
            out.push_str(&rest[start..i + 3]);
            rest = &rest[i + 3..];
            continue;
        }
        out.push_str(&redact_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_information_is_masked_and_the_query_dropped() {
        assert_eq!(
            redact_url("postgres://app:s3cr%40t@db.example:5432/app?sslmode=require&password=x"),
            "postgres://***@db.example:5432/app"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1/test"),
            "mysql://***@127.0.0.1/test"
        );
        assert_eq!(
            redact_url("https://api.example/v1?token=abc#frag"),
            "https://api.example/v1"
        );
        assert_eq!(redact_url("sqlite://./a.db"), "sqlite://./a.db");
        assert_eq!(redact_url("nats://h:4222"), "nats://h:4222");
        // A key-value connection string may hold a password anywhere: nothing of it shows.
        assert_eq!(redact_url("host=db password=x"), "(unparsable URL)");
    }

    #[test]
    fn an_at_or_a_comma_in_a_password_stays_hidden() {
        // The last `@` of the authority ends the user information; an `@` in the path is
        // not user information.
        assert_eq!(redact_url("nats://u:p@ss@h:1"), "nats://***@h:1");
        // An `@` in the path that a host follows hides the path too: too much hidden, never
        // too little.
        assert_eq!(redact_url("tls://tok@h/x@y"), "tls://***@y");
        assert_eq!(redact_url("tls://tok@h/x@y!"), "tls://***@h/x@y!");
        assert_eq!(
            redact_url("https://example.com/a@b:c"),
            "https://example.com/a@b:c"
        );
        assert_eq!(redact_url("nats://u:pa,ss@h:1"), "nats://***@h:1");
        assert_eq!(
            redact_url("nats://u:pa,ss@h:1,nats://b:2"),
            "nats://***@h:1,nats://b:2"
        );
    }

    #[test]
    fn a_slash_question_mark_or_hash_in_a_password_stays_hidden() {
        // Base64 passwords hold `/` (and `+`, `=`): all of it is masked, in one URL or a
        // list of them, whatever follows the host.
        for (url, shown) in [
            (
                "nats://app:a/b+c=@127.0.0.1:4222",
                "nats://***@127.0.0.1:4222",
            ),
            ("nats://app:a/b+c=@nats.example", "nats://***@nats.example"),
            ("nats://a/b/c@h:1/x?y=1", "nats://***@h:1/x"),
            ("nats://tok/en==@[::1]:4222", "nats://***@[::1]:4222"),
            (
                "postgres://u:p?ss@db/app?sslmode=require",
                "postgres://***@db/app",
            ),
            ("postgres://u:p#ss@db/app", "postgres://***@db/app"),
            (
                "nats://u:x/y@a:1,nats://v:z/w@b:2",
                "nats://***@a:1,nats://***@b:2",
            ),
        ] {
            let got = redact_url(url);
            assert_eq!(got, shown, "{url}");
            for secret in ["a/b", "b+c", "tok/en", "p?ss", "p#ss", "x/y", "z/w"] {
                assert!(!got.contains(secret), "{url} shown as {got}");
            }
        }
        let u = "nats://app:a/b@h:1";
        assert_eq!(&u[userinfo_span(u).unwrap()], "app:a/b@");
        assert_eq!(
            redact_urls_in("cannot use NATS at nats://app:a/b@h:1 now"),
            "cannot use NATS at nats://***@h:1 now"
        );
    }

    #[test]
    fn a_list_of_urls_is_cleaned_url_by_url() {
        assert_eq!(
            redact_url("nats://a:1,nats://u:pw@b:2,tls://t0k@c"),
            "nats://a:1,nats://***@b:2,tls://***@c"
        );
        assert_eq!(
            split_urls("tls://t0ken@a:1, nats://b:2"),
            vec!["tls://t0ken@a:1", " nats://b:2"]
        );
        assert_eq!(
            redact_url("tls://t0ken@a:1, nats://b:2"),
            "tls://***@a:1,nats://b:2"
        );
    }

    #[test]
    fn urls_inside_a_message_are_redacted_and_it_is_one_line() {
        assert_eq!(
            redact_urls_in("cannot reach postgres://app:hunter2@db:5432/x\nretrying"),
            "cannot reach postgres://***@db:5432/x retrying"
        );
        assert_eq!(
            redact_urls_in("GET \"https://h/x?api_key=s3cret\" failed: 401"),
            "GET \"https://h/x\" failed: 401"
        );
        // A token alone is a secret too.
        assert_eq!(
            redact_urls_in("see https://ghp_tok@github.com/a and more"),
            "see https://***@github.com/a and more"
        );
        for kept in [
            "s3 endpoint http://127.0.0.1:9000 for bucket `b` cannot be reached",
            "https://example.com/a@b:c",
            "no url here",
            "odd :// text",
        ] {
            assert_eq!(redact_urls_in(kept), kept);
        }
    }

    #[test]
    fn userinfo_spans() {
        let u = "https://a:b@h/x@y!";
        assert_eq!(&u[userinfo_span(u).unwrap()], "a:b@");
        assert_eq!(userinfo_span("https://h/x@y:z"), None);
        assert_eq!(userinfo_span("https://h/x"), None);
    }
}
