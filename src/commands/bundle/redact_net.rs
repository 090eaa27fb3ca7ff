//! The addresses `--redact` replaces, each consistently and each its own: IPv4 in the
//! documentation ranges (192.0.2.0/24, then 198.51.100.0/24 and 203.0.113.0/24, then 10.x),
//! IPv6 in 2001:db8::/32, MAC in the documentation block 00:00:5e:00:53:xx, mail as
//! `mail-N@example.com`. A replacement seen again (text redacted twice) is left as it is.

use regex::Regex;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr};

#[derive(Default)]
pub struct Addresses {
    v4: BTreeMap<Ipv4Addr, Ipv4Addr>,
    v6: BTreeMap<Ipv6Addr, Ipv6Addr>,
    macs: BTreeMap<String, String>,
    mails: BTreeMap<String, String>,
    /// Every replacement handed out.
    given: BTreeSet<String>,
}

fn ipv4() -> &'static Regex {
    static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(
        &R,
        r"\b(?:25[0-5]|2[0-4]\d|1?\d?\d)(?:\.(?:25[0-5]|2[0-4]\d|1?\d?\d)){3}\b",
    )
}

/// A run of hex digits and colons holding a colon: an IPv6 or MAC address, or neither (a
/// time, a PCI address), told apart by what it parses as.
fn colon_hex() -> &'static Regex {
    static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(&R, r"[0-9A-Fa-f]*:[0-9A-Fa-f:]*")
}

fn mail() -> &'static Regex {
    static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    crate::import::text::static_regex(&R, r"[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9-]+\.)+[A-Za-z]{2,}")
}

/// The `n`th address handed out (from 1): 762 in the three documentation ranges, then 10.x.
/// (Past those, a real 10.x address could equal a replacement; a bundle rarely names 762.)
fn ipv4_number(n: usize) -> Ipv4Addr {
    let octet = |v: usize| (v % 256) as u8;
    match n {
        0..=254 => Ipv4Addr::new(192, 0, 2, octet(n.max(1))),
        255..=508 => Ipv4Addr::new(198, 51, 100, octet(n - 254)),
        509..=762 => Ipv4Addr::new(203, 0, 113, octet(n - 508)),
        _ => {
            let q = n - 763;
            Ipv4Addr::new(
                10,
                octet(q / (254 * 256)),
                octet(q / 254),
                octet(q % 254 + 1),
            )
        }
    }
}

/// Six two-digit hex groups: a MAC address, lower case.
fn mac(text: &str) -> Option<String> {
    let groups: Vec<&str> = text.split(':').collect();
    (groups.len() == 6
        && groups
            .iter()
            .all(|g| g.len() == 2 && g.chars().all(|c| c.is_ascii_hexdigit())))
    .then(|| text.to_ascii_lowercase())
}

impl Addresses {
    pub fn addresses(&self) -> usize {
        self.v4.len() + self.v6.len() + self.macs.len()
    }

    pub fn mails(&self) -> usize {
        self.mails.len()
    }

    pub fn mails_in(&mut self, text: &str) -> String {
        mail()
            .replace_all(text, |c: &regex::Captures| {
                let found = &c[0];
                // The replacements' own domain (RFC 2606's) names no one: the summary's
                // `mail-N@example.com` stays as written.
                let domain = found.rsplit('@').next().unwrap_or("").to_ascii_lowercase();
                if domain == "example.com" || self.given.contains(found) {
                    return found.to_string();
                }
                let n = self.mails.len() + 1;
                let to = self
                    .mails
                    .entry(found.to_ascii_lowercase())
                    .or_insert_with(|| format!("mail-{n}@example.com"))
                    .clone();
                self.given.insert(to.clone());
                to
            })
            .into_owned()
    }

    /// IPv6 and MAC, then IPv4 (an IPv4-mapped IPv6 keeps its prefix and loses its IPv4).
    pub fn addresses_in(&mut self, text: &str) -> String {
        let word = |c: char| c.is_alphanumeric() || c == '_';
        let out = colon_hex()
            .replace_all(text, |c: &regex::Captures| {
                let m = c.get(0).map_or(0..0, |m| m.range());
                let found = &text[m.clone()];
                let before = text[..m.start].chars().next_back();
                let after = text[m.end..].chars().next();
                if before.is_some_and(word) || after.is_some_and(|c| word(c) || c == '.') {
                    return found.to_string();
                }
                self.colon_address(found)
            })
            .into_owned();
        ipv4()
            .replace_all(&out, |c: &regex::Captures| {
                let found = &c[0];
                match found.parse::<Ipv4Addr>() {
                    // Loopback and unspecified addresses say nothing about the site.
                    Ok(ip) if ip.is_loopback() || ip.is_unspecified() => found.to_string(),
                    Ok(_) if self.given.contains(found) => found.to_string(),
                    Ok(ip) => {
                        let n = self.v4.len() + 1;
                        let to = *self.v4.entry(ip).or_insert_with(|| ipv4_number(n));
                        self.given.insert(to.to_string());
                        to.to_string()
                    }
                    Err(_) => found.to_string(),
                }
            })
            .into_owned()
    }

    /// A colon-separated run: its replacement when it is a MAC or IPv6 address, else itself.
    fn colon_address(&mut self, found: &str) -> String {
        if self.given.contains(&found.to_ascii_lowercase()) {
            return found.to_string();
        }
        if let Some(key) = mac(found) {
            if key == "00:00:00:00:00:00" || key == "ff:ff:ff:ff:ff:ff" {
                return found.to_string();
            }
            let n = self.macs.len() + 1;
            let to = self
                .macs
                .entry(key)
                .or_insert_with(|| match n {
                    0..=255 => format!("00:00:5e:00:53:{n:02x}"),
                    _ => {
                        let b = (n as u32).to_be_bytes();
                        format!("02:00:{:02x}:{:02x}:{:02x}:{:02x}", b[0], b[1], b[2], b[3])
                    }
                })
                .clone();
            self.given.insert(to.clone());
            return to;
        }
        match found.parse::<Ipv6Addr>() {
            Ok(ip)
                if found.matches(':').count() >= 2 && !ip.is_loopback() && !ip.is_unspecified() =>
            {
                let n = self.v6.len() as u128 + 1;
                let to = *self
                    .v6
                    .entry(ip)
                    .or_insert_with(|| Ipv6Addr::from((0x2001_0db8u128 << 96) | n));
                self.given.insert(to.to_string());
                to.to_string()
            }
            _ => found.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ranges_follow_each_other_without_a_repeat() {
        let all: BTreeSet<Ipv4Addr> = (1..=5000).map(ipv4_number).collect();
        assert_eq!(all.len(), 5000);
        assert_eq!(ipv4_number(254), Ipv4Addr::new(192, 0, 2, 254));
        assert_eq!(ipv4_number(1017), Ipv4Addr::new(10, 0, 1, 1));
        assert!(all
            .iter()
            .all(|ip| ip.octets()[3] != 0 && ip.octets()[3] != 255));
    }
}
