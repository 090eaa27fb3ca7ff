//! `bundle --redact`: host names, IP addresses and user names replaced the same way in every
//! file (`host-1`, `192.0.2.1`, `user-1`), so the bundle can be posted publicly and still be
//! read: a host keeps one name across the logs, an address one address.

use regex::Regex;
use std::collections::BTreeMap;

#[derive(Default)]
pub struct Redactor {
    hosts: BTreeMap<String, String>,
    users: BTreeMap<String, String>,
    addresses: BTreeMap<String, String>,
}

fn ipv4() -> &'static Regex {
    static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(
        &R,
        r"\b(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b",
    )
}

fn home() -> &'static Regex {
    static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(&R, r"/(?:home|Users)/([A-Za-z0-9._-]+)")
}

impl Redactor {
    /// Host names to replace (this machine's, and those the logs name); short names and their
    /// fully qualified forms are both replaced.
    pub fn host(&mut self, name: &str) {
        let name = name.trim();
        // Too short or too common to replace safely inside other words (a machine may be
        // called after the tool it runs).
        let common = [
            "localhost",
            "(none)",
            "vm",
            "ncclprobe",
            "nccl",
            "gpu",
            "node",
            "host",
            "user",
        ];
        if name.len() < 3 || common.contains(&name.to_ascii_lowercase().as_str()) {
            return;
        }
        let n = self.hosts.len() + 1;
        self.hosts
            .entry(name.to_string())
            .or_insert(format!("host-{n}"));
    }

    pub fn user(&mut self, name: &str) {
        if name.len() < 3 || matches!(name, "root" | "user") {
            return;
        }
        let n = self.users.len() + 1;
        self.users
            .entry(name.to_string())
            .or_insert(format!("user-{n}"));
    }

    /// How many of each were replaced: (hosts, addresses, users).
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.hosts.len(), self.addresses.len(), self.users.len())
    }

    pub fn redact(&mut self, text: &str) -> String {
        // Users in home paths first, then the names known, longest first (an FQDN before its
        // short form).
        let mut seen_users = Vec::new();
        for c in home().captures_iter(text) {
            seen_users.push(c[1].to_string());
        }
        for u in seen_users {
            self.user(&u);
        }
        let mut out = text.to_string();
        let mut names: Vec<(String, String)> = self
            .hosts
            .iter()
            .chain(self.users.iter())
            .map(|(a, b)| (a.clone(), b.clone()))
            .collect();
        names.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
        for (from, to) in names {
            let word = Regex::new(&format!(r"\b{}\b", regex::escape(&from)));
            if let Ok(re) = word {
                out = re.replace_all(&out, to.as_str()).into_owned();
            }
        }
        let addresses = &mut self.addresses;
        ipv4()
            .replace_all(&out, |c: &regex::Captures| {
                let ip = &c[0];
                // Loopback and unspecified addresses say nothing about the site.
                if ip.starts_with("127.") || ip == "0.0.0.0" {
                    return ip.to_string();
                }
                let n = addresses.len() + 1;
                addresses
                    .entry(ip.to_string())
                    .or_insert_with(|| format!("192.0.2.{}", n.min(254)))
                    .clone()
            })
            .into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(r.counts(), (2, 2, 1));
    }
}
