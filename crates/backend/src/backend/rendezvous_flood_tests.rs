//! The rendezvous under attack (review item 3, hostile D15 and D16): a flood on the port while
//! a 4-rank job meets, impostors without the token, a fake hub, a peer from a host the launcher
//! does not name, a hub that lies about lengths. Each shows the four ranks still meet and an
//! allgather completes; deadlines are generous (a busy 2-core VM keeps them).

use super::super::launcher::{PeerHosts, Token};
use super::handshake::{self, Hello, Side, ANSWER_LEN, HELLO_LEN, MAGIC};
use super::*;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use super::test_ports::free_port;

/// Each rank's own deadline: long, so that only the bound below decides.
const JOB: Duration = Duration::from_secs(60);
/// How soon four ranks must have met and exchanged, flood or not: well under the 10 s one
/// silent connection may hold a handshake (the hub's patience), which is how long the
/// thread-per-hello hub kept ranks out while 64 silent connections held its greeters.
const MEETS_WITHIN: Duration = Duration::from_secs(8);

fn meeting(hosts: &[&str], hub: bool, token: Option<&str>, peers: PeerHosts) -> Meeting {
    Meeting {
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        port: 0,
        hub,
        source: "a test".into(),
        key: 7,
        token: token.map(|t| Token::new(t.as_bytes(), "NCCLPROBE_RENDEZVOUS_TOKEN")),
        peer_hosts: peers,
    }
}

/// Names as a test's launcher gives them: gpu-a is 127.0.0.2, gpu-b resolves nowhere.
fn resolve(host: &str) -> Result<Vec<IpAddr>, String> {
    match host {
        "gpu-a" => Ok(vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))]),
        _ => Err("no such host".into()),
    }
}

/// This host's own address, as far as the tests' hub is told: 127.0.0.1 alone.
fn is_local(ip: IpAddr) -> bool {
    ip == IpAddr::V4(Ipv4Addr::LOCALHOST)
}

/// Rank 0 as the hub on `port`, on a thread: what its allgather returned.
fn hub(
    port: u16,
    mut meet: Meeting,
    limits: hub::Limits,
) -> JoinHandle<Result<Vec<Vec<u8>>, BackendError>> {
    meet.port = port;
    std::thread::spawn(move || {
        let net = hub::Net {
            resolve: &resolve,
            is_local: &is_local,
        };
        let mut t = Tcp::connect_with(0, 4, &meet, JOB, (&net, &limits))?;
        t.allgather(b"r0")
    })
}

/// What every rank's allgather returns.
fn want() -> Vec<Vec<u8>> {
    (0..4).map(|r| format!("r{r}").into_bytes()).collect()
}

/// Ranks 1, 2, 3 (or those given) join the hub and exchange; every rank checked, and how long
/// the meeting took from their start.
fn spokes_meet(
    port: u16,
    mut meet: Meeting,
    hub: JoinHandle<Result<Vec<Vec<u8>>, BackendError>>,
    what: &str,
) -> Duration {
    meet.port = port;
    let start = Instant::now();
    let spokes: Vec<_> = (1..4)
        .map(|r| {
            let m = meet.clone();
            std::thread::spawn(move || {
                let mut t = Tcp::connect(r, 4, &m, JOB)?;
                t.allgather(format!("r{r}").as_bytes())
            })
        })
        .collect();
    for (r, s) in spokes.into_iter().enumerate() {
        assert_eq!(s.join().unwrap().unwrap(), want(), "rank {}", r + 1);
    }
    assert_eq!(hub.join().unwrap().unwrap(), want(), "rank 0");
    let took = start.elapsed();
    eprintln!("{what}: 4 ranks met and exchanged in {took:?}");
    assert!(
        took < MEETS_WITHIN,
        "{what}: the ranks took {took:?} to meet"
    );
    took
}

/// Connects to `port` once something listens there.
fn reach(port: u16) -> TcpStream {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("the hub never listened: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

/// A connection to 127.0.0.1:`port` from the source address `from` (std cannot bind first).
fn connect_from(from: Ipv4Addr, port: u16) -> std::io::Result<TcpStream> {
    use std::os::fd::FromRawFd;
    let sockaddr = |ip: Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(ip).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: plain socket calls on a descriptor this function owns until it is handed to
    // TcpStream; the addresses are valid sockaddr_in structs of `len` bytes.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0);
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let s = TcpStream::from_raw_fd(fd);
        let src = sockaddr(from, 0);
        if libc::bind(fd, (&src as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let dst = sockaddr(Ipv4Addr::LOCALHOST, port);
        if libc::connect(fd, (&dst as *const libc::sockaddr_in).cast(), len) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(s)
    }
}

/// The soft limit on descriptors raised to the hard one: a thousand idle connections, both
/// their ends in this process, are more than the usual soft 1024.
fn raise_descriptor_limit(need: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit with a valid rlimit struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < r.rlim_max {
            r.rlim_cur = r.rlim_max;
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
    assert!(
        r.rlim_cur >= need,
        "this test needs {need} descriptors and the hard limit is {}: raise it (ulimit -Hn)",
        r.rlim_cur
    );
}

#[test]
fn a_thousand_idle_connections_do_not_keep_four_ranks_apart() {
    // Review D15: 1,000 connections that say nothing, held, and more opened while the ranks
    // meet. The thread-per-hello hub gave 64 of them its greeters for 10 s each and dropped
    // everything else, the ranks included; one loop with the oldest pending handshake dropped
    // for a newcomer lets the ranks in at once.
    raise_descriptor_limit(4096);
    let port = free_port();
    let hub = hub(
        port,
        meeting(&["127.0.0.1"], true, None, PeerHosts::ThisHost),
        hub::LIMITS,
    );
    // Said from the first idle connection too (the old hub held its greeters for 10 s from
    // then); not bounded, since opening the thousand alone takes seconds on a busy machine.
    reach(port);
    let flood_began = Instant::now();
    let mut held: std::collections::VecDeque<TcpStream> = (0..1000).map(|_| reach(port)).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut opened = 1000usize;
            while !stop.load(Ordering::Relaxed) {
                if let Ok(s) = TcpStream::connect(("127.0.0.1", port)) {
                    held.push_back(s);
                    held.pop_front();
                    opened += 1;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            opened
        })
    };
    let spoke = meeting(&["127.0.0.1"], false, None, PeerHosts::ThisHost);
    spokes_meet(port, spoke, hub, "1,000 idle connections and more coming");
    let since = flood_began.elapsed();
    eprintln!("1,000 idle connections: the job met {since:?} after the first");
    stop.store(true, Ordering::Relaxed);
    let opened = flood.join().unwrap();
    eprintln!("the flood opened {opened} connections in all");
}

#[test]
fn a_four_gigabyte_length_sent_as_a_hello_is_dropped_not_read() {
    // A hello has no length: the hub reads 64 bytes and no more. A hundred connections that
    // announce a 4 GiB frame and wait, and one that streams it, cost the hub 64 bytes each.
    let port = free_port();
    let hub = hub(
        port,
        meeting(&["127.0.0.1"], true, None, PeerHosts::ThisHost),
        hub::LIMITS,
    );
    let four_gib = (4u64 << 30).to_le_bytes();
    let waiting: Vec<TcpStream> = (0..100)
        .map(|_| {
            let mut s = reach(port);
            s.write_all(&four_gib).unwrap();
            s
        })
        .collect();
    let mut s = reach(port);
    s.write_all(&four_gib).unwrap();
    let streamer = std::thread::spawn(move || {
        let chunk = vec![0u8; 1 << 20];
        let mut sent = 8u64;
        let start = Instant::now();
        // The hub closes it after 64 bytes: the writes fail long before 4 GiB.
        while sent < 4 << 30 && start.elapsed() < Duration::from_secs(60) {
            match s.write(&chunk) {
                Ok(n) => sent += n as u64,
                Err(_) => break,
            }
        }
        (sent, start.elapsed())
    });
    let spoke = meeting(&["127.0.0.1"], false, None, PeerHosts::ThisHost);
    spokes_meet(port, spoke, hub, "101 hellos announcing 4 GiB");
    let (sent, took) = streamer.join().unwrap();
    eprintln!("the 4 GiB stream was cut after {sent} bytes, in {took:?}");
    assert!(sent < 1 << 30, "the hub read {sent} bytes of a 4 GiB hello");
    drop(waiting);
}

#[test]
fn a_trickle_of_one_byte_per_100_ms_is_cut_at_its_deadline() {
    // 100 connections each sending a real hello one byte per 100 ms (6.4 s for its 64 bytes)
    // are cut when their time is up (3 s here), however often a byte comes, and the hub they
    // held still lets the ranks meet.
    let port = free_port();
    let patience = Duration::from_secs(3);
    let limits = hub::Limits {
        pending: 256,
        patience,
    };
    let hub = hub(
        port,
        meeting(&["127.0.0.1"], true, None, PeerHosts::ThisHost),
        limits,
    );
    let hello = Hello {
        key: 7,
        rank: 1,
        size: 4,
        nonce: [9; 32],
    }
    .bytes();
    let mut conns: Vec<(TcpStream, usize, Option<Duration>)> =
        (0..100).map(|_| (reach(port), 0, None)).collect();
    // Trickled to their cut before the ranks come: once the job meets, the hub lets go of
    // every connection, cut or not.
    let start = Instant::now();
    while conns.iter().any(|c| c.2.is_none()) && start.elapsed() < Duration::from_secs(30) {
        for (s, sent, cut) in conns.iter_mut().filter(|c| c.2.is_none()) {
            if *sent >= HELLO_LEN || s.write(&hello[*sent..*sent + 1]).is_err() {
                *cut = Some(start.elapsed());
            } else {
                *sent += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let latest = conns.iter().filter_map(|c| c.2).max().unwrap();
    eprintln!("the last of 100 trickles was cut {latest:?} after it began");
    for (_, sent, cut) in &conns {
        let cut = cut.expect("a trickle the hub never cut");
        assert!(
            *sent < HELLO_LEN,
            "a trickle finished its hello ({sent} bytes) before its cut"
        );
        assert!(
            cut >= patience && cut < patience + Duration::from_secs(10),
            "{cut:?}"
        );
    }
    let spoke = meeting(&["127.0.0.1"], false, None, PeerHosts::ThisHost);
    spokes_meet(port, spoke, hub, "after 100 trickles of a byte per 100 ms");
}

/// A hello and proof for `rank` with MAC key `k` (the right one or not); `replay` replaces
/// the nonce the hub sent, as a proof recorded from an earlier exchange would; whether the hub
/// let it join.
fn impostor(port: u16, key: u64, k: &[u8; 32], rank: u64, replay: Option<[u8; 32]>) -> bool {
    let mut s = reach(port);
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let hello = Hello {
        key,
        rank,
        size: 4,
        nonce: [5; 32],
    };
    s.write_all(&hello.bytes()).unwrap();
    let mut answer = [0u8; ANSWER_LEN];
    if s.read_exact(&mut answer).is_err() {
        return false;
    }
    let mut hub_nonce = [0u8; 32];
    hub_nonce.copy_from_slice(&answer[16..48]);
    let proof = handshake::mac(k, Side::Rank, &hello, &replay.unwrap_or(hub_nonce), 0);
    s.write_all(&proof).unwrap();
    let mut verdict = [0u8; 8];
    s.read_exact(&mut verdict).is_ok()
}

#[test]
fn a_wrong_key_a_wrong_mac_and_a_replayed_proof_take_no_rank() {
    // Review D16: with a token, a hello with the job's public key proves nothing. Impostors
    // claim rank 1 before it comes: another job's key, a MAC from a wrong token, the public
    // key alone, and a proof the right token made for another exchange (another hub nonce,
    // as a recorded one would be). None joins; the real rank 1 does.
    let port = free_port();
    let hub = hub(
        port,
        meeting(&["127.0.0.1"], true, Some("right"), PeerHosts::ThisHost),
        hub::LIMITS,
    );
    let right = *Token::new(b"right", "t").mac_key();
    let wrong = *Token::new(b"wrong", "t").mac_key();
    let public = handshake::mac_key(&meeting(&[], true, None, PeerHosts::ThisHost));
    assert!(
        !impostor(port, 8, &right, 1, None),
        "another job's key joined"
    );
    assert!(
        !impostor(port, 7, &wrong, 1, None),
        "a wrong token's MAC joined"
    );
    assert!(
        !impostor(port, 7, &public, 1, None),
        "the public key alone joined"
    );
    assert!(
        !impostor(port, 7, &right, 1, Some([3; 32])),
        "a replayed proof joined"
    );
    let spoke = meeting(&["127.0.0.1"], false, Some("right"), PeerHosts::ThisHost);
    spokes_meet(port, spoke, hub, "four impostors before rank 1");
}

#[test]
fn a_fake_hub_that_cannot_prove_the_token_is_refused_and_named() {
    // Review item 3: spokes trusted any listener that answered with the protocol's word. A
    // fake hub squats the port on 127.0.0.2 and answers every hello with a MAC it cannot
    // make: a rank that can reach only it keeps trying to its deadline and says so; ranks
    // told to try it first, then the real hub, join the real one.
    let port = free_port();
    let fake = std::net::TcpListener::bind(("127.0.0.2", port)).unwrap();
    let proofs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    {
        let (proofs, tries) = (Arc::clone(&proofs), Arc::clone(&tries));
        std::thread::spawn(move || {
            for s in fake.incoming() {
                let Ok(mut s) = s else { continue };
                tries.fetch_add(1, Ordering::Relaxed);
                let mut hello = [0u8; HELLO_LEN];
                if s.read_exact(&mut hello).is_err() {
                    continue;
                }
                let mut answer = [0x5au8; ANSWER_LEN];
                answer[..8].copy_from_slice(MAGIC);
                answer[8..16].copy_from_slice(&0u64.to_le_bytes());
                let _ = s.write_all(&answer);
                let mut proof = [0u8; 32];
                if s.read_exact(&mut proof).is_ok() {
                    proofs.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    let alone = meeting(&["127.0.0.2"], false, Some("t"), PeerHosts::ThisHost);
    let mut alone_at = alone.clone();
    alone_at.port = port;
    let e = Tcp::connect(1, 4, &alone_at, Duration::from_secs(2))
        .err()
        .unwrap();
    let m = e.to_string();
    assert!(m.contains(&format!("127.0.0.2:{port}: a listener answered as this job's hub but could not prove it holds NCCLPROBE_RENDEZVOUS_TOKEN")), "{m}");
    assert!(
        tries.load(Ordering::Relaxed) >= 2,
        "the rank did not keep trying"
    );
    let hub = hub(
        port,
        meeting(&["127.0.0.1"], true, Some("t"), PeerHosts::ThisHost),
        hub::LIMITS,
    );
    let spoke = meeting(
        &["127.0.0.2", "127.0.0.1"],
        false,
        Some("t"),
        PeerHosts::ThisHost,
    );
    spokes_meet(port, spoke, hub, "a fake hub tried first");
    assert_eq!(
        proofs.load(Ordering::Relaxed),
        0,
        "a rank proved itself to the fake hub"
    );
}

#[test]
fn a_peer_from_a_host_the_launcher_does_not_name_is_refused() {
    // Without a token, the hub admits this host and the hosts the launcher names (gpu-a is
    // 127.0.0.2; gpu-b does not resolve). A stranger on 127.0.0.5 who knows the public key
    // and speaks the protocol perfectly claims rank 1 first: refused before it says a word.
    // Rank 3 comes from gpu-a; ranks 1 and 2 from this host.
    let port = free_port();
    let named = PeerHosts::Named {
        hosts: vec!["gpu-a".into(), "gpu-b".into()],
        from: "SLURM_STEP_NODELIST".into(),
    };
    let hub = hub(
        port,
        meeting(&["127.0.0.1"], true, None, named.clone()),
        hub::LIMITS,
    );
    let mut spoke = meeting(&["127.0.0.1"], false, None, named.clone());
    spoke.port = port;
    reach(port);
    let mut stranger = connect_from(Ipv4Addr::new(127, 0, 0, 5), port).unwrap();
    let joined = handshake::join(
        &mut stranger,
        1,
        4,
        &spoke,
        Instant::now() + Duration::from_secs(20),
    );
    assert!(joined.is_err(), "a stranger from 127.0.0.5 took rank 1");
    let start = Instant::now();
    let three = std::thread::spawn({
        let spoke = spoke.clone();
        move || {
            let mut s = connect_from(Ipv4Addr::new(127, 0, 0, 2), port).unwrap();
            let hub = handshake::join(&mut s, 3, 4, &spoke, Instant::now() + JOB)
                .ok()
                .unwrap();
            let mut t = Tcp {
                rank: 3,
                world: 4,
                hub: false,
                peers: vec![(hub, s)],
            };
            t.allgather(b"r3")
        }
    });
    let ones: Vec<_> = (1..3)
        .map(|r| {
            let m = spoke.clone();
            std::thread::spawn(move || {
                Tcp::connect(r, 4, &m, JOB)?.allgather(format!("r{r}").as_bytes())
            })
        })
        .collect();
    for r in ones {
        assert_eq!(r.join().unwrap().unwrap(), want());
    }
    assert_eq!(three.join().unwrap().unwrap(), want());
    assert_eq!(hub.join().unwrap().unwrap(), want());
    eprintln!(
        "a stranger from another address: 4 ranks met in {:?}",
        start.elapsed()
    );
    // A job that never meets says whom it refused and which names did not resolve.
    let port = free_port();
    let mut lone = meeting(&["127.0.0.1"], true, None, named);
    lone.port = port;
    let waiter = std::thread::spawn(move || {
        let net = hub::Net {
            resolve: &resolve,
            is_local: &is_local,
        };
        Tcp::connect_with(0, 2, &lone, Duration::from_secs(3), (&net, &hub::LIMITS))
            .err()
            .unwrap()
    });
    reach(port);
    let _refused = connect_from(Ipv4Addr::new(127, 0, 0, 5), port).unwrap();
    let m = waiter.join().unwrap().to_string();
    assert!(m.contains("from addresses outside the hosts of SLURM_STEP_NODELIST were refused (first 127.0.0.5:"), "{m}");
    assert!(
        m.contains("did not resolve when this rank began to listen (first gpu-b (no such host))"),
        "{m}"
    );
    assert!(m.contains("NCCLPROBE_RENDEZVOUS_TOKEN"), "{m}");
}

#[test]
fn a_hub_that_lies_about_lengths_is_refused_not_a_panic() {
    // Review item 3: `at + len` in the spoke's unpacking overflowed (a panic) for a length
    // near u64::MAX. A hub that proves itself (the public key suffices) answers the exchange
    // with such a length, then with a frame over the cap: each is an error for the rank.
    for (what, frame) in [
        ("a part of", {
            let mut packed = (u64::MAX - 3).to_le_bytes().to_vec();
            packed.extend_from_slice(b"abc");
            let mut f = (packed.len() as u64).to_le_bytes().to_vec();
            f.extend_from_slice(&packed);
            f
        }),
        ("more than the", u64::MAX.to_le_bytes().to_vec()),
    ] {
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let m = meeting(&["127.0.0.1"], false, None, PeerHosts::ThisHost);
        let k = handshake::mac_key(&m);
        let liar = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut hello = [0u8; HELLO_LEN];
            s.read_exact(&mut hello).unwrap();
            let hello = Hello::parse(&hello).unwrap();
            s.write_all(&handshake::answer(&k, &hello, 0, &[4; 32]))
                .unwrap();
            let mut proof = [0u8; 32];
            s.read_exact(&mut proof).unwrap();
            s.write_all(handshake::JOINED).unwrap();
            let _ = read_frame(&mut s);
            s.write_all(&frame).unwrap();
            s
        });
        let mut at = m.clone();
        at.port = port;
        let mut one = Tcp::connect(1, 2, &at, Duration::from_secs(20)).unwrap();
        let e = one.allgather(b"one").unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
        drop(liar.join().unwrap());
    }
}
