//! The SSRF guard: which addresses a mount may connect to, and the DNS resolver that hands
//! reqwest exactly the addresses it checked.
//!
//! reqwest resolves a host name through [`reqwest::dns::Resolve`] once per connection and
//! connects to what it gets back, so refusing there leaves no window between the check and
//! the connect (no DNS rebinding). reqwest skips the resolver for IP literals, so those are
//! checked by [`check_host`] before every request, redirects included.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// Looks host names up. The default is the system resolver; tests map names to loopback.
#[async_trait]
pub trait HostResolver: Send + Sync + 'static {
    /// The addresses of `host`.
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>>;
}

/// The operating system's resolver (getaddrinfo on tokio's blocking pool).
#[derive(Debug, Default)]
pub struct SystemResolver;

#[async_trait]
impl HostResolver for SystemResolver {
    async fn lookup(&self, host: &str) -> std::io::Result<Vec<IpAddr>> {
        Ok(tokio::net::lookup_host((host, 0))
            .await?
            .map(|a| a.ip())
            .collect())
    }
}

/// Why a host was refused: it resolved only to addresses the mount may not reach.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) host: String,
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} resolves to a loopback, private, link-local or other non-public address, which this mount may not reach (allow_private = false)",
            self.host
        )
    }
}

impl std::error::Error for Refused {}

/// Which addresses a mount may connect to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Policy {
    /// `allow_private = true`: any address.
    pub(crate) allow_private: bool,
    /// Non-public addresses allowed all the same; set only programmatically
    /// ([`crate::HttpProvider::with_network`]), never from configuration.
    pub(crate) exempt: Vec<IpAddr>,
}

impl Policy {
    pub(crate) fn permits(&self, ip: IpAddr) -> bool {
        self.allow_private || is_public(ip) || self.exempt.contains(&ip)
    }
}

/// The resolver given to reqwest: look up, drop forbidden addresses, fail when none is left.
pub(crate) struct Guarded {
    pub(crate) inner: Arc<dyn HostResolver>,
    pub(crate) policy: Policy,
}

impl Resolve for Guarded {
    fn resolve(&self, name: Name) -> Resolving {
        let inner = self.inner.clone();
        let policy = self.policy.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let ips = inner.lookup(&host).await?;
            let ok: Vec<SocketAddr> = ips
                .into_iter()
                .filter(|ip| policy.permits(*ip))
                .map(|ip| SocketAddr::new(ip, 0))
                .collect();
            if ok.is_empty() {
                tracing::debug!(host = %host, "refused: no public address");
                return Err(Box::new(Refused { host }) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(ok.into_iter()) as Addrs)
        })
    }
}

/// Whether an IP literal host may be connected to; `Err` says why not.
pub(crate) fn check_host(url: &reqwest::Url, policy: &Policy) -> Result<(), Refused> {
    let ip = match url.host() {
        Some(url::Host::Ipv4(v4)) => IpAddr::V4(v4),
        Some(url::Host::Ipv6(v6)) => IpAddr::V6(v6),
        _ => return Ok(()),
    };
    if policy.permits(ip) {
        Ok(())
    } else {
        Err(Refused {
            host: url.host_str().unwrap_or_default().to_owned(),
        })
    }
}

/// Whether `ip` is a public unicast address: not loopback, private (RFC 1918, unique-local),
/// link-local (169.254.169.254 among them), CGNAT, multicast, broadcast, reserved or
/// unspecified, nor an IPv6 form that embeds one of those (IPv4-mapped, IPv4-compatible,
/// IPv4-translated, NAT64 64:ff9b::/96, 6to4); local-use NAT64 (64:ff9b:1::/48), Teredo
/// (2001::/32), documentation (2001:db8::/32) and discard-only (100::/64) addresses are never
/// public.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, _, _] = ip.octets();
    !(a == 0                                    // "this network", 0.0.0.0
        || a == 10                              // RFC 1918
        || a == 127                             // loopback
        || (a == 100 && (64..128).contains(&b)) // CGNAT 100.64/10
        || (a == 169 && b == 254)               // link-local, cloud metadata
        || (a == 172 && (16..32).contains(&b))  // RFC 1918
        || (a == 192 && b == 168)               // RFC 1918
        || (a == 192 && b == 0 && ip.octets()[2] == 0) // IETF protocol assignments
        || (a == 198 && (b == 18 || b == 19))   // benchmarking
        || a >= 224) // multicast 224/4, reserved 240/4, broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    if ip.is_unspecified() || ip.is_loopback() {
        return false;
    }
    // The IPv4 address in segments `hi`, `lo`.
    let v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    // IPv4-mapped ::ffff:a.b.c.d and IPv4-compatible ::a.b.c.d: the embedded address decides.
    if s[..5] == [0; 5] && (s[5] == 0xffff || s[5] == 0) {
        return is_public_v4(v4(s[6], s[7]));
    }
    // IPv4-translated ::ffff:0:a.b.c.d (SIIT, RFC 2765) reaches the embedded address too.
    if s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 {
        return is_public_v4(v4(s[6], s[7]));
    }
    // NAT64 64:ff9b::/96 reaches the embedded IPv4 address.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        return is_public_v4(v4(s[6], s[7]));
    }
    // Local-use NAT64 64:ff9b:1::/48 (RFC 8215) translates into the operator's own network,
    // where the IPv4 address sits wherever its prefix length puts it: never public.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2] == 1 {
        return false;
    }
    // 6to4 2002:a.b.c.d::/48 tunnels to the embedded IPv4 address.
    if s[0] == 0x2002 {
        return is_public_v4(v4(s[1], s[2]));
    }
    // Teredo 2001::/32 tunnels through a relay to an IPv4 client (its address inverted in the
    // last 32 bits) behind a NAT: where it lands is not the address's to say. Refused.
    if s[0] == 0x2001 && s[1] == 0 {
        return false;
    }
    !((s[0] & 0xfe00) == 0xfc00      // unique-local fc00::/7
        || (s[0] & 0xffc0) == 0xfe80 // link-local fe80::/10
        || (s[0] & 0xffc0) == 0xfec0 // site-local (deprecated) fec0::/10
        || (s[0] & 0xff00) == 0xff00 // multicast
        || (s[0] == 0x2001 && s[1] == 0xdb8) // documentation 2001:db8::/32
        || (s[0] == 0x100 && s[1..4] == [0; 3])) // discard-only 100::/64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_addresses() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "255.255.255.255",
            "0.0.0.0",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(!is_public(ip), "{a} must be refused");
        }
    }

    /// The IPv6 forms that carry an IPv4 address are judged by it (private and loopback ones
    /// refused, public ones allowed), or refused when where they lead is not theirs to say.
    #[test]
    fn ipv6_forms_embedding_ipv4_follow_the_embedded_address() {
        for a in [
            // IPv4-translated (SIIT) of loopback, metadata, RFC 1918.
            "::ffff:0:127.0.0.1",
            "::ffff:0:169.254.169.254",
            "::ffff:0:10.0.0.1",
            // NAT64 well-known prefix with private addresses.
            "64:ff9b::10.0.0.1",
            "64:ff9b::192.168.1.1",
            "64:ff9b::127.0.0.1",
            // Local-use NAT64, whatever it embeds.
            "64:ff9b:1::8.8.8.8",
            "64:ff9b:1:a9fe:a9fe::",
            // 6to4 of private addresses.
            "2002:c0a8:101::1",
            "2002:a00:1::1",
            "2002:a9fe:a9fe::1",
            // Teredo, documentation, discard-only.
            "2001:0:4136:e378:8000:63bf:3fff:fdd2",
            "2001::1",
            "2001:db8::1",
            "100::1",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(!is_public(ip), "{a} must be refused");
        }
        for a in [
            "93.184.216.34",
            "8.8.8.8",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "::ffff:0:8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
            "2001:4860:4860::8888",
        ] {
            let ip: IpAddr = a.parse().unwrap();
            assert!(is_public(ip), "{a} is public");
        }
    }

    #[test]
    fn ip_literals_in_urls() {
        for u in [
            "http://127.0.0.1/",
            "http://[::1]/",
            "http://[::ffff:7f00:1]/",
            "http://2130706433/",
            "http://0x7f.1/",
            "http://169.254.169.254/latest/meta-data/",
            "http://[::ffff:0:a9fe:a9fe]/latest/meta-data/",
            "http://[64:ff9b:1::a00:1]/",
            "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
        ] {
            let url = reqwest::Url::parse(u).unwrap();
            let closed = Policy::default();
            assert!(check_host(&url, &closed).is_err(), "{u} must be refused");
            let open = Policy {
                allow_private: true,
                exempt: Vec::new(),
            };
            assert!(check_host(&url, &open).is_ok());
        }
        let url = reqwest::Url::parse("https://example.com/").unwrap();
        assert!(check_host(&url, &Policy::default()).is_ok());
    }
}
