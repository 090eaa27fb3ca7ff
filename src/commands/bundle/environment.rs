//! The environment a bundle keeps (`environment.txt`: NCCL's, CUDA's and the launchers'
//! variables, a secret's by name only) and the host names an environment gives away, for
//! `--redact`: Slurm's node lists (`gpu[017-020,023]` expanded, and the list as written), the
//! submit and launch hosts, `MASTER_ADDR` and the like, and the host of every URL in the
//! variables the bundle keeps.

/// Whether `environment.txt` keeps a variable: NCCL's, CUDA's and the launchers'.
pub fn kept_variable(k: &str) -> bool {
    [
        "NCCL_", "CUDA_", "NVIDIA_", "UCX_", "FI_", "OMPI_", "SLURM_", "TORCH_",
    ]
    .iter()
    .any(|p| k.starts_with(p))
        || matches!(
            k,
            "LD_LIBRARY_PATH"
                | "LD_PRELOAD"
                | "MASTER_ADDR"
                | "MASTER_PORT"
                | "WORLD_SIZE"
                | "RANK"
                | "LOCAL_RANK"
        )
}

/// `environment.txt`.
pub fn kept() -> String {
    let mut vars: Vec<(String, String)> =
        std::env::vars().filter(|(k, _)| kept_variable(k)).collect();
    vars.sort();
    // Names that say they hold a secret keep the name only; credentials in values go.
    vars.into_iter()
        .map(|(k, v)| format!("{k}={}\n", crate::secrets::kept_value(&k, &v)))
        .collect()
}

/// The most names one node list expands to: `node[0-99999999]` must not fill memory.
const MAX_EXPANDED: usize = 10_000;

/// Variables that name one host or a list of them, by the end of their name.
fn names_hosts(var: &str) -> bool {
    let v = var.to_ascii_uppercase();
    [
        "NODELIST",
        "_HOST",
        "_HOSTS",
        "_HOSTNAME",
        "_NODENAME",
        "_ADDR",
        "_HOST_LIST",
    ]
    .iter()
    .any(|end| v.ends_with(end))
        || matches!(v.as_str(), "HOSTNAME" | "SLURMD_NODENAME" | "PMIX_HOSTNAME")
}

/// Every host name in `vars`: the values of the variables that name hosts, and the host of
/// each URL in `kept` (the variables the bundle writes).
pub fn hosts<'a>(
    vars: impl IntoIterator<Item = (&'a str, &'a str)>,
    kept: impl Fn(&str) -> bool,
) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in vars {
        if names_hosts(k) {
            for item in split_list(v)
                .into_iter()
                .map(strip_port)
                .filter(|i| host_like(i))
            {
                if item.contains('[') {
                    out.push(item.to_string());
                }
                expand(item, &mut out);
            }
        }
        if kept(k) {
            out.extend(url_hosts(v));
        }
    }
    out.retain(|h| !h.is_empty() && h.parse::<std::net::IpAddr>().is_err());
    // A fully qualified name's host part is a name of its own (`login01.corp.example`).
    let short: Vec<String> = out
        .iter()
        .filter_map(|h| h.split_once('.').map(|(s, _)| s.to_string()))
        .filter(|s| !s.is_empty() && !s.contains('['))
        .collect();
    out.extend(short);
    out.sort();
    out.dedup();
    out
}

/// Whether `item` can be a host name or a Slurm host list item (not a path or a socket).
fn host_like(item: &str) -> bool {
    !item.is_empty()
        && item
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ','))
}

/// `a,b c[1-2,5]` → `a`, `b`, `c[1-2,5]`: split at commas and spaces outside brackets.
fn split_list(list: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' | ' ' | '\t' | '\n' if depth <= 0 => {
                out.push(&list[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&list[start..]);
    out.retain(|s| !s.is_empty());
    out
}

/// `host:29500` → `host` (an IPv6 address keeps its colons).
fn strip_port(item: &str) -> &str {
    match item.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.contains(':') => {
            host
        }
        _ => item,
    }
}

/// A Slurm host list item expanded: `gpu[017-019]` → `gpu017`, `gpu018`, `gpu019` (the start's
/// zero padding kept); several bracket groups multiply out.
pub fn expand(item: &str, out: &mut Vec<String>) {
    if out.len() >= MAX_EXPANDED {
        return;
    }
    let Some((prefix, rest)) = item.split_once('[') else {
        out.push(item.to_string());
        return;
    };
    let Some((body, suffix)) = rest.split_once(']') else {
        out.push(item.to_string());
        return;
    };
    for range in body.split(',') {
        let (from, to) = range.split_once('-').unwrap_or((range, range));
        let width = from.len();
        let (Ok(a), Ok(b)) = (from.parse::<u64>(), to.parse::<u64>()) else {
            continue;
        };
        for n in a..=b.min(a.saturating_add(MAX_EXPANDED as u64)) {
            if out.len() >= MAX_EXPANDED {
                return;
            }
            expand(&format!("{prefix}{n:0width$}{suffix}"), out);
        }
    }
}

/// The host of each `scheme://[user[:pw]@]host[:port]` in `text`.
fn url_hosts(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("://") {
        rest = &rest[at + 3..];
        let end = rest
            .find(|c: char| c == '/' || c == '?' || c == '#' || c.is_whitespace())
            .unwrap_or(rest.len());
        let authority = &rest[..end];
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let host = strip_port(host.trim_start_matches('[').trim_end_matches(']'));
        if host.chars().any(|c| c.is_ascii_alphabetic()) {
            out.push(host.to_string());
        }
        rest = &rest[end..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_lists_expand_with_their_padding_and_urls_give_their_host() {
        let mut out = Vec::new();
        expand("gpu[017-019,023]-ib", &mut out);
        assert_eq!(out, ["gpu017-ib", "gpu018-ib", "gpu019-ib", "gpu023-ib"]);
        let vars = [
            ("SLURM_NODELIST", "gpu[017-018],login01"),
            ("SLURM_SUBMIT_HOST", "login01.corp.example"),
            ("MASTER_ADDR", "10.0.0.1"),
            ("NCCL_DB_URL", "postgres://u:pw@db.corp.example:5432/x"),
            ("PIP_INDEX_URL", "https://pypi.example/simple"),
            ("NCCL_SOCKET_IFNAME", "eth0"),
            ("DOCKER_HOST", "unix:///var/run/docker.sock"),
        ];
        assert_eq!(
            hosts(vars, |k| k.starts_with("NCCL_")),
            [
                "db",
                "db.corp.example",
                "gpu017",
                "gpu018",
                "gpu[017-018]",
                "login01",
                "login01.corp.example"
            ]
        );
    }

    #[test]
    fn a_huge_range_stops_at_the_cap() {
        let mut out = Vec::new();
        expand("n[0-99999999999]", &mut out);
        assert_eq!(out.len(), MAX_EXPANDED);
    }
}
