//! `bundle --redact`: host names, addresses (IPv4, IPv6, MAC), mail addresses and user names
//! replaced the same way in every file (`host-1`, `192.0.2.1`, `2001:db8::1`,
//! `00:00:5e:00:53:01`, `mail-1@example.com`, `user-1`), so the bundle can be posted publicly
//! and still be read: a host keeps one name across the logs, an address one address.

#[path = "redact_net.rs"]
mod net;

use regex::Regex;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct Redactor {
    hosts: BTreeMap<String, String>,
    users: BTreeMap<String, String>,
    net: net::Addresses,
}

/// How many of each were replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub hosts: usize,
    pub addresses: usize,
    pub mails: usize,
    pub users: usize,
}

fn home() -> &'static Regex {
    static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(&R, r"/(?:home|Users)/([A-Za-z0-9._-]+)")
}

/// Names that are words of the tool and its logs before they are host names: replacing them
/// would garble every file, and a host so called says nothing about the site.
const COMMON: [&str; 8] = [
    "localhost",
    "(none)",
    "ncclprobe",
    "nccl",
    "gpu",
    "node",
    "host",
    "user",
];

/// Whether `c` continues a name: a match next to one is inside another word.
fn name_char(c: char, short: bool) -> bool {
    c.is_alphanumeric() || c == '_' || (short && (c == '-' || c == '.'))
}

/// `text` with `from` replaced by `to` where it stands as a whole word. A short name (under 3
/// characters, `vm`) is a word only between characters that cannot be part of a host name, so
/// `kvm`, `vm-2` and `vm.max_map_count` keep theirs.
fn replace_words(text: &str, from: &str, to: &str) -> String {
    let short = from.chars().count() < 3;
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for (at, _) in text.match_indices(from) {
        if at < last {
            continue;
        }
        let before = text[..at].chars().next_back();
        let after = text[at + from.len()..].chars().next();
        if before.is_some_and(|c| name_char(c, short)) || after.is_some_and(|c| name_char(c, short))
        {
            continue;
        }
        out.push_str(&text[last..at]);
        out.push_str(to);
        last = at + from.len();
    }
    out.push_str(&text[last..]);
    out
}

impl Redactor {
    /// A host name to replace (this machine's, one a log or a launcher variable names); short
    /// names and their fully qualified forms are both replaced, each as a whole word.
    pub fn host(&mut self, name: &str) {
        let name = name.trim();
        if name.is_empty()
            || COMMON.contains(&name.to_ascii_lowercase().as_str())
            || name.parse::<std::net::IpAddr>().is_ok()
            || self.is_replacement(name)
        {
            return;
        }
        let n = self.hosts.len() + 1;
        self.hosts
            .entry(name.to_string())
            .or_insert(format!("host-{n}"));
    }

    pub fn user(&mut self, name: &str) {
        if name.len() < 3 || matches!(name, "root" | "user") || self.is_replacement(name) {
            return;
        }
        let n = self.users.len() + 1;
        self.users
            .entry(name.to_string())
            .or_insert(format!("user-{n}"));
    }

    /// Whether `text` is one of the replacements handed out: redacted text is left as it is.
    fn is_replacement(&self, text: &str) -> bool {
        self.hosts.values().any(|v| v == text) || self.users.values().any(|v| v == text)
    }

    pub fn counts(&self) -> Counts {
        Counts {
            hosts: self.hosts.len(),
            addresses: self.net.addresses(),
            mails: self.net.mails(),
            users: self.users.len(),
        }
    }

    /// The names to replace, longest first (an FQDN before its short form).
    fn names(&self) -> Vec<(String, String)> {
        let mut names: Vec<(String, String)> = self
            .hosts
            .iter()
            .chain(self.users.iter())
            .map(|(a, b)| (a.clone(), b.clone()))
            .collect();
        names.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
        names
    }

    pub fn redact(&mut self, text: &str) -> String {
        // Mail addresses first: once their host is replaced they no longer read as mail.
        let mut out = self.net.mails_in(text);
        let seen_users: Vec<String> = home()
            .captures_iter(&out)
            .map(|c| c[1].to_string())
            .collect();
        for u in seen_users {
            self.user(&u);
        }
        for (from, to) in self.names() {
            if out.contains(from.as_str()) {
                out = replace_words(&out, &from, &to);
            }
        }
        self.net.addresses_in(&out)
    }

    /// A file's name (`ncclDebug.%h.%p`): as text, then each dot-separated part that is a
    /// known name, however short.
    pub fn redact_file_name(&mut self, name: &str) -> String {
        let named = self.redact(name);
        named
            .split('.')
            .map(|part| {
                self.hosts
                    .get(part)
                    .or_else(|| self.users.get(part))
                    .map_or(part, String::as_str)
            })
            .collect::<Vec<_>>()
            .join(".")
    }

    /// The replacements handed out so far, for tests of consistency.
    #[cfg(test)]
    fn replacements(&self) -> std::collections::BTreeSet<String> {
        self.hosts
            .values()
            .chain(self.users.values())
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn names_and_addresses_are_replaced_the_same_way_everywhere() {
        let mut r = Redactor::default();
        r.host("gpu-node-17.cluster.example.com");
        r.host("gpu-node-17");
        let a = r.redact("gpu-node-17:1234:1240 [0] NCCL INFO NET/Socket : Using [0]eth0:10.4.5.6<0>\nBootstrap : Using ib0:10.4.5.6<0> and 10.4.5.7; loopback 127.0.0.1\n");
        assert!(!a.contains("gpu-node-17") && !a.contains("10.4.5"), "{a}");
        assert!(
            a.contains("host-") && a.contains("192.0.2.1<0>") && a.contains("192.0.2.2"),
            "{a}"
        );
        assert!(a.contains("127.0.0.1"));
        let b = r.redact("ssh gpu-node-17.cluster.example.com; cat /home/alice/.nccl.conf; NCCL version 2.28.3+cuda12.8");
        assert!(
            !b.contains("alice") && b.contains("/home/user-1/.nccl.conf"),
            "{b}"
        );
        assert!(!b.contains("example.com"), "{b}");
        // Versions with dots are not addresses.
        assert!(b.contains("2.28.3+cuda12.8"), "{b}");
        // The same address gets the same replacement later.
        assert!(r.redact("peer 10.4.5.6").contains("192.0.2.1"));
        let c = r.counts();
        assert_eq!((c.hosts, c.addresses, c.users), (2, 2, 1));
        // Redacting redacted text again changes nothing.
        assert_eq!(r.redact(&b), b);
        assert_eq!(r.replacements().len(), 3);
    }

    /// D10: a host called `vm` is replaced where it stands as a word, not inside `kvm`,
    /// `vm-2` or the sysctl `vm.max_map_count`; in a file name, as a dot-separated part.
    #[test]
    fn a_short_host_is_replaced_as_a_whole_word_only() {
        let mut r = Redactor::default();
        r.host("vm");
        let a = r.redact("vm:123:456 [0] NCCL INFO Bootstrap; ssh vm; kvm vm-2 vm.max_map_count");
        assert_eq!(
            a,
            "host-1:123:456 [0] NCCL INFO Bootstrap; ssh host-1; kvm vm-2 vm.max_map_count"
        );
        assert_eq!(
            r.redact_file_name("ncclDebug.vm.1234"),
            "ncclDebug.host-1.1234"
        );
    }

    /// D10: past 254 addresses the replacements go on in the other documentation ranges, then
    /// in 10.x, each address its own; text already redacted is left as it is.
    #[test]
    fn every_address_of_many_keeps_its_own_replacement() {
        let mut r = Redactor::default();
        let text: String = (0..1000)
            .map(|i| format!("172.16.{}.{} ", i / 250, 1 + i % 250))
            .collect();
        let out = r.redact(&text);
        let words: Vec<&str> = out.split_whitespace().collect();
        let distinct: BTreeSet<&str> = words.iter().copied().collect();
        assert_eq!(distinct.len(), 1000);
        assert_eq!(words[253], "192.0.2.254");
        assert_eq!(words[254], "198.51.100.1");
        assert_eq!(words[508], "203.0.113.1");
        assert_eq!(words[762], "10.0.0.1");
        assert_eq!(r.redact(&out), out);
    }

    /// D10: IPv6 and MAC addresses and mail addresses, each replaced consistently; what only
    /// looks like them (a time, a PCI address, a C++ path, loopback) is left.
    #[test]
    fn ipv6_mac_and_mail_addresses_are_replaced() {
        let mut r = Redactor::default();
        let a = r.redact(
            "alice@corp.example fe80::1ff:fe23:4567:890a%ib0 2001:db8:85a3::8a2e:370:7334 \
             00:1a:2b:3c:4d:5e at 12:34:56, bus 0000:3b:00.0, std::fs, ::1 and ::ffff:10.1.2.3",
        );
        for gone in [
            "alice",
            "corp.example",
            "fe80::1ff",
            "85a3",
            "00:1a:2b",
            "10.1.2.3",
        ] {
            assert!(!a.contains(gone), "{gone} in {a}");
        }
        assert!(
            a.starts_with("mail-1@example.com 2001:db8::1%ib0 2001:db8::2 00:00:5e:00:53:01"),
            "{a}"
        );
        for kept in [
            "12:34:56",
            "0000:3b:00.0",
            "std::fs",
            "::1 ",
            "::ffff:192.0.2.1",
        ] {
            assert!(a.contains(kept), "{kept} in {a}");
        }
        let again = r.redact("fe80::1ff:fe23:4567:890a 00:1A:2B:3C:4D:5E alice@corp.example");
        assert_eq!(again, "2001:db8::1 00:00:5e:00:53:01 mail-1@example.com");
        let c = r.counts();
        assert_eq!((c.addresses, c.mails), (4, 1));
        // The summary's own legend is no address.
        assert_eq!(r.redact("mail-N@example.com"), "mail-N@example.com");
        assert_eq!(r.redact(&a), a);
    }
}
