//! `ncclprobe bundle` under abuse: conf files that are links, FIFOs, directories or huge; an
//! output directory others can write; `-o .`, a missing parent and escapes in the name; and
//! `--redact` against the addresses, mails and hosts an environment names. Each case names the
//! exit code and what the bundle and its archive hold.

use crate::common::bin;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a secret file holds; it must reach neither the bundle nor its archive.
const SECRET: &str = "root:$6$SECRETHASH:19000:0:99999:7:::";

/// `bundle --no-run -o OUT` with HOME at `home`, no USER, a minute at most.
fn bundle(home: &Path, out: &Path, extra: &[&str]) -> assert_cmd::Command {
    let mut c = bin();
    c.args(["bundle", "--no-run"])
        .args(extra)
        .arg("-o")
        .arg(out)
        .env("HOME", home)
        .env_remove("USER")
        .env_remove("LOGNAME")
        .timeout(Duration::from_secs(60));
    c
}

/// Every entry of `archive` with its content.
fn archive_entries(archive: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let file = std::fs::File::open(archive).unwrap();
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    tar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let path = e.path().unwrap().into_owned();
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut body).unwrap();
            (path, body)
        })
        .collect()
}

fn holds(entries: &[(PathBuf, Vec<u8>)], needle: &str) -> bool {
    entries
        .iter()
        .any(|(p, b)| p.to_string_lossy().contains(needle) || text(b).contains(needle))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// D7: `~/.nccl.conf -> /etc/shadow` (here a secret file of ours). The link is named and where
/// it points; its content is read neither into the bundle nor into the archive. With
/// `--redact`, the home directory's name (the user's) is replaced too.
#[test]
fn a_conf_file_that_is_a_link_is_named_and_its_target_left_out() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("fakehome/alice");
    std::fs::create_dir(dir.path().join("fakehome")).unwrap();
    std::fs::create_dir(&home).unwrap();
    let secret = dir.path().join("shadow");
    std::fs::write(&secret, SECRET).unwrap();
    std::os::unix::fs::symlink(&secret, home.join(".nccl.conf")).unwrap();
    let out = dir.path().join("b1");
    let run = bundle(&home, &out, &["--redact"]).output().unwrap();
    let stdout = text(&run.stdout);
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(!out.join("nccl-conf/home-nccl.conf").exists());
    assert!(stdout.contains("is a link to"), "{stdout}");
    assert!(!stdout.contains("SECRETHASH"), "{stdout}");
    assert!(!stdout.contains("alice"), "{stdout}");
    let entries = archive_entries(&dir.path().join("b1.tar.gz"));
    assert!(!holds(&entries, "SECRETHASH"));
}

/// D12: a FIFO is never opened for reading (the bundle used to wait on it for ever), a
/// directory is said to be one, and a regular file is read up to 1 MiB and said to be cut.
#[test]
fn a_conf_file_that_is_a_fifo_a_directory_or_huge_is_said_and_never_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let fifo_home = dir.path().join("fifohome");
    std::fs::create_dir(&fifo_home).unwrap();
    nix::unistd::mkfifo(
        &fifo_home.join(".nccl.conf"),
        nix::sys::stat::Mode::from_bits_truncate(0o644),
    )
    .unwrap();
    let run = bundle(&fifo_home, &dir.path().join("bf"), &[])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(stdout.contains("is a FIFO, left out"), "{stdout}");

    let dir_home = dir.path().join("dirhome");
    std::fs::create_dir_all(dir_home.join(".nccl.conf")).unwrap();
    let run = bundle(&dir_home, &dir.path().join("bd"), &[])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(stdout.contains("is a directory, left out"), "{stdout}");

    let big_home = dir.path().join("bighome");
    std::fs::create_dir(&big_home).unwrap();
    let line = "NCCL_DEBUG=INFO\n";
    std::fs::write(
        big_home.join(".nccl.conf"),
        line.repeat((2 << 20) / line.len()),
    )
    .unwrap();
    let out = dir.path().join("bb");
    let run = bundle(&big_home, &out, &[]).output().unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let stdout = text(&run.stdout);
    assert!(stdout.contains("cut at 1 MiB"), "{stdout}");
    let kept = std::fs::metadata(out.join("nccl-conf/home-nccl.conf")).unwrap();
    assert!(kept.len() <= 1 << 20, "{}", kept.len());
}

/// D8: an existing directory someone else may write into is refused (another user could plant
/// links in it while the bundle runs); one that is the user's own and empty is used.
#[test]
fn an_output_directory_others_can_write_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let open = dir.path().join("b4");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
    let run = bundle(&home, &open, &[]).output().unwrap();
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("others can write"), "{stderr}");
    assert_eq!(std::fs::read_dir(&open).unwrap().count(), 0);
    assert!(!dir.path().join("b4.tar.gz").exists());

    let own = dir.path().join("b5");
    std::fs::create_dir(&own).unwrap();
    std::fs::set_permissions(&own, std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = bundle(&home, &own, &[]).output().unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    assert!(own.join("versions.txt").is_file());
    // What the bundle writes is the user's alone: a conf file or a log may hold secrets.
    let mode = std::fs::metadata(own.join("environment.txt"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o077, 0, "{mode:o}");
}

/// D34: `-o .` archives the working directory beside itself, under its real name, never
/// inside what it archives; `-o ..` likewise.
#[test]
fn dot_as_the_output_writes_the_archive_beside_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let here = dir.path().join("dot_test");
    std::fs::create_dir(&here).unwrap();
    let run = bundle(&home, Path::new("."), &[])
        .current_dir(&here)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let archive = dir.path().join("dot_test.tar.gz");
    assert!(archive.is_file(), "{}", text(&run.stderr));
    assert!(!here.join("bundle.tar.gz").exists());
    let entries = archive_entries(&archive);
    assert!(
        entries
            .iter()
            .all(|(p, _)| p.starts_with("dot_test") && !p.to_string_lossy().contains(".partial")),
        "{:?}",
        entries.iter().map(|(p, _)| p).collect::<Vec<_>>()
    );
    assert!(entries.iter().any(|(p, _)| p.ends_with("versions.txt")));
    // `..` names the directory above, which is not empty: refused as before.
    let run = bundle(&home, Path::new(".."), &[])
        .current_dir(&here)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2), "{}", text(&run.stderr));
}

/// D34, D31: a parent that does not exist is refused (exit 2) and nothing is made; the name is
/// printed without its escape sequences.
#[test]
fn a_missing_parent_is_refused_and_the_name_is_printed_safely() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let missing = dir.path().join("nonexistent/\x1b]0;PWNED\x07\x1b[2J/b");
    let run = bundle(&home, &missing, &[]).output().unwrap();
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("does not exist"), "{stderr}");
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\x07'),
        "{stderr:?}"
    );
    assert!(!dir.path().join("nonexistent").exists());
    // A new directory whose name holds escapes: made, and its name printed without them.
    let odd = dir.path().join("\x1b[31mred\x07");
    let run = bundle(&home, &odd, &[]).output().unwrap();
    let stderr = text(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr:?}");
    assert!(
        !stderr.contains('\x1b') && !stderr.contains('\x07'),
        "{stderr:?}"
    );
}

/// D10: `--redact` replaces IPv6 and MAC addresses, mail addresses, the hosts launcher
/// variables name (a Slurm node list, the submit host, a URL's host) and gives each of 300
/// IPv4 addresses its own replacement.
#[test]
fn redact_covers_ipv6_mac_mail_launcher_hosts_and_hundreds_of_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir(&home).unwrap();
    let addresses: Vec<String> = (0..300)
        .map(|i| format!("10.{}.{}.{}", 1 + i / 200, (i / 10) % 20, 1 + i % 10))
        .collect();
    let out = dir.path().join("b3");
    let run = bundle(&home, &out, &["--redact"])
        .env(
            "NCCL_COMMENT",
            "alice@corp.example fe80::1ff:fe23:4567:890a 2001:db8:85a3::8a2e:370:7334 00:1a:2b:3c:4d:5e",
        )
        .env("SLURM_SUBMIT_HOST", "login01.corp.example")
        .env("SLURM_NODELIST", "gpu[017-020]")
        .env("MASTER_ADDR", "gpu018")
        .env("NCCL_DB_URL", "postgres://fleet@db7.corp.example:5432/x")
        .env("NCCL_HOSTS", addresses.join(","))
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", text(&run.stderr));
    let env = std::fs::read_to_string(out.join("environment.txt")).unwrap();
    for leaked in [
        "alice",
        "corp.example",
        "fe80::1ff",
        "2001:db8:85a3",
        "00:1a:2b",
        "login01",
        "gpu[017-020]",
        "gpu018",
        "db7",
        "10.1.",
        "10.2.",
    ] {
        assert!(!env.contains(leaked), "{leaked} in {env}");
    }
    let hosts = env
        .lines()
        .find_map(|l| l.strip_prefix("NCCL_HOSTS="))
        .unwrap();
    let replaced: std::collections::BTreeSet<&str> = hosts.split(',').collect();
    assert_eq!(replaced.len(), 300, "{hosts}");
    let entries = archive_entries(&dir.path().join("b3.tar.gz"));
    assert!(!holds(&entries, "corp.example"));
}
