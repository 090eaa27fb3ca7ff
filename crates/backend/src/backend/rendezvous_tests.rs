//! The TCP rendezvous: order, hubs other than rank 0, strangers, and what failures say.

use super::*;
use std::time::Duration;

fn meet(hosts: &str, port: u16, hub: bool) -> Meeting {
    Meeting {
        hosts: hosts.split(',').map(str::to_string).collect(),
        port,
        hub,
        source: "a test".into(),
        key: 7,
        token: None,
        peer_hosts: super::super::launcher::PeerHosts::ThisHost,
    }
}

use super::test_ports::free_port;

#[test]
fn rank_zero_listens_on_every_interface_not_only_master_addr() {
    // Rank 0 is told 127.0.1.1 (how Debian's /etc/hosts resolves the host's own name);
    // its peer reaches the same host through another address, as a remote rank would.
    let port = free_port();
    let peer = std::thread::spawn(move || {
        let mut t = Tcp::connect(
            1,
            2,
            &meet("127.0.0.1", port, false),
            Duration::from_secs(5),
        )
        .unwrap();
        t.allgather(b"one").unwrap()
    });
    let mut zero =
        Tcp::connect(0, 2, &meet("127.0.1.1", port, true), Duration::from_secs(5)).unwrap();
    let all = zero.allgather(b"zero").unwrap();
    assert_eq!(all, peer.join().unwrap());
}

#[test]
fn tcp_ranks_exchange_in_rank_order_and_a_vanished_peer_is_lost_not_failed() {
    let port = free_port();
    let peer = std::thread::spawn(move || {
        let mut t = Tcp::connect(
            1,
            2,
            &meet("127.0.0.1", port, false),
            Duration::from_secs(10),
        )
        .unwrap();
        let all = t.allgather(b"one").unwrap();
        assert_eq!(all, vec![b"zero".to_vec(), b"one".to_vec()]);
        // Rank 1 goes away without another word, as a crashed process would.
    });
    let mut zero = Tcp::connect(
        0,
        2,
        &meet("127.0.0.1", port, true),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(
        zero.allgather(b"zero").unwrap(),
        vec![b"zero".to_vec(), b"one".to_vec()]
    );
    peer.join().unwrap();
    match zero.allgather(b"again") {
        Err(BackendError::PeerLost(m)) => assert!(m.contains("rank 1 is gone"), "{m}"),
        other => panic!("expected PeerLost, got {other:?}"),
    }
}

#[test]
fn exchanges_are_not_held_back_by_nagle_and_delayed_acks() {
    // Every socket of both ends has TCP_NODELAY, and a frame goes out in one write: a
    // client without it waited out the server's 40 ms delayed ACK on every exchange, 2 s
    // or more for these 50 (the sweep's barriers under torchrun-style launch: a 2-process
    // sweep on the GPU double took 19.5 s before, 0.9 s after).
    let port = free_port();
    const ROUNDS: usize = 50;
    let peer = std::thread::spawn(move || {
        let mut t = Tcp::connect(
            1,
            2,
            &meet("127.0.0.1", port, false),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(t.peers.iter().all(|(_, s)| s.nodelay().unwrap()));
        for _ in 0..ROUNDS {
            t.allgather(b"one").unwrap();
        }
    });
    let mut zero = Tcp::connect(
        0,
        2,
        &meet("127.0.0.1", port, true),
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(zero.peers.iter().all(|(_, s)| s.nodelay().unwrap()));
    // With a delayed ACK in the way every round takes ~40 ms; the median round says so while
    // a busy machine's odd stalls do not.
    let mut rounds: Vec<Duration> = (0..ROUNDS)
        .map(|_| {
            let start = Instant::now();
            zero.allgather(b"zero").unwrap();
            start.elapsed()
        })
        .collect();
    peer.join().unwrap();
    rounds.sort();
    let median = rounds[ROUNDS / 2];
    assert!(
        median < Duration::from_millis(20),
        "the median of {ROUNDS} exchanges took {median:?}: each waits for a delayed ACK"
    );
}

#[test]
fn the_hub_need_not_be_rank_zero_and_exchanges_stay_in_rank_order() {
    // Slurm and Open MPI put the listener on the first local process of the first host,
    // which is not always rank 0.
    let port = free_port();
    let spokes: Vec<_> = [0usize, 1, 3]
        .into_iter()
        .map(|r| {
            std::thread::spawn(move || {
                let mut t = Tcp::connect(
                    r,
                    4,
                    &meet("127.0.0.1", port, false),
                    Duration::from_secs(10),
                )
                .unwrap();
                t.allgather(format!("r{r}").as_bytes()).unwrap()
            })
        })
        .collect();
    let mut hub = Tcp::connect(
        2,
        4,
        &meet("127.0.0.1", port, true),
        Duration::from_secs(10),
    )
    .unwrap();
    let all = hub.allgather(b"r2").unwrap();
    let want: Vec<Vec<u8>> = (0..4).map(|r| format!("r{r}").into_bytes()).collect();
    assert_eq!(all, want);
    for s in spokes {
        assert_eq!(s.join().unwrap(), want);
    }
}

#[test]
fn strangers_on_the_port_are_turned_away_and_the_wait_goes_on() {
    use std::io::Write;
    let port = free_port();
    let hub = std::thread::spawn(move || {
        Tcp::connect(
            0,
            2,
            &meet("127.0.0.1", port, true),
            Duration::from_secs(10),
        )
        .map(|mut t| t.allgather(b"zero").unwrap())
    });
    // A port scanner, then another job's ncclprobe (another key); the hub's thread may not
    // be listening yet.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut junk = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(e) if std::time::Instant::now() > deadline => panic!("the hub never listened: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    junk.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    let mut other = meet("127.0.0.1", port, false);
    other.key = 8;
    let e = Tcp::connect(1, 2, &other, Duration::from_millis(600))
        .err()
        .unwrap();
    assert!(e.to_string().contains("not this job's rendezvous"), "{e}");
    let mut one = Tcp::connect(
        1,
        2,
        &meet("127.0.0.1", port, false),
        Duration::from_secs(10),
    )
    .unwrap();
    assert_eq!(one.allgather(b"one").unwrap(), hub.join().unwrap().unwrap());
}

#[test]
fn a_missing_peer_and_an_unreachable_hub_are_named_within_the_timeout() {
    let port = free_port();
    let start = Instant::now();
    let e = Tcp::connect(
        0,
        3,
        &meet("node01", port, true),
        Duration::from_millis(500),
    )
    .err()
    .unwrap();
    let m = e.to_string();
    assert!(
        m.contains(&format!("port {port} of node01 (a test)")),
        "{m}"
    );
    assert!(m.contains("ranks 1, 2 did not connect within 500ms"), "{m}");
    // Nobody listens: the peer names the host, the port and what it heard.
    let e = Tcp::connect(
        1,
        3,
        &meet("127.0.0.1", port, false),
        Duration::from_millis(500),
    )
    .err()
    .unwrap();
    let m = e.to_string();
    assert!(
        m.contains(&format!(
            "could not reach the rank that listens at 127.0.0.1:{port} (a test) within 500ms"
        )),
        "{m}"
    );
    assert!(m.contains("refused"), "{m}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_taken_port_is_said_with_the_variable_that_moves_it() {
    let taken = std::net::TcpListener::bind(("0.0.0.0", 0)).unwrap();
    let port = taken.local_addr().unwrap().port();
    let e = Tcp::connect(0, 2, &meet("gpu01", port, true), Duration::from_secs(1))
        .err()
        .unwrap();
    let m = e.to_string();
    assert!(
        m.contains(&format!("port {port} on gpu01 (a test) is taken")),
        "{m}"
    );
    assert!(m.contains("NCCLPROBE_RENDEZVOUS_PORT"), "{m}");
}

/// Connects to the hub at `port` once it listens.
fn reach(port: u16) -> std::net::TcpStream {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => return s,
            Err(e) if std::time::Instant::now() > deadline => panic!("the hub never listened: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// A hello with the job's key (7, as `meet` gives) claiming `rank` of `size`.
fn claim(port: u16, rank: u64, size: u64) -> std::net::TcpStream {
    use std::io::Write;
    let mut s = reach(port);
    let hello = handshake::Hello {
        key: 7,
        rank,
        size,
        nonce: [1; 32],
    };
    s.write_all(&hello.bytes()).unwrap();
    s
}

#[test]
fn a_flood_of_idle_connections_and_false_claims_do_not_end_the_job() {
    // Review D15, D16: 300 connections that say nothing (more than the hub reads at once), a
    // slow trickle, a hello with the job's public key claiming another job size, and one
    // claiming the hub's own rank: the hub neither ends nor runs out of threads, and the real
    // rank 1 still joins.
    use std::io::Write;
    let port = free_port();
    let hub = std::thread::spawn(move || {
        Tcp::connect(
            0,
            2,
            &meet("127.0.0.1", port, true),
            Duration::from_secs(30),
        )
        .map(|mut t| t.allgather(b"zero").unwrap())
    });
    let idle: Vec<std::net::TcpStream> = (0..300).map(|_| reach(port)).collect();
    let mut trickle = reach(port);
    trickle.write_all(&handshake::MAGIC[..1]).unwrap();
    let _wrong_size = claim(port, 1, 3);
    let _hubs_rank = claim(port, 0, 2);
    let mut one = Tcp::connect(
        1,
        2,
        &meet("127.0.0.1", port, false),
        Duration::from_secs(30),
    )
    .unwrap();
    assert_eq!(one.allgather(b"one").unwrap(), hub.join().unwrap().unwrap());
    drop(idle);
}

#[test]
fn false_claims_are_said_when_the_job_never_meets() {
    let port = free_port();
    let hub = std::thread::spawn(move || {
        Tcp::connect(0, 2, &meet("127.0.0.1", port, true), Duration::from_secs(2))
            .err()
            .unwrap()
    });
    let _wrong_size = claim(port, 1, 3);
    let m = hub.join().unwrap().to_string();
    assert!(m.contains("ranks 1 did not connect"), "{m}");
    assert!(
        m.contains("said it is rank 1 of a job of 3 ranks; this rank was told 2"),
        "{m}"
    );
}

#[test]
fn a_frame_that_lies_about_its_length_costs_no_memory() {
    use std::io::Write;
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let mut liar = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut s, _) = listener.accept().unwrap();
    // 200 MiB announced, 3 bytes sent, then the connection closes.
    liar.write_all(&(200u64 << 20).to_le_bytes()).unwrap();
    liar.write_all(b"abc").unwrap();
    drop(liar);
    let e = read_frame(&mut s).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    let (mut a, mut b) = {
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let p = l.local_addr().unwrap().port();
        let a = std::net::TcpStream::connect(("127.0.0.1", p)).unwrap();
        (a, l.accept().unwrap().0)
    };
    a.write_all(&(1u64 << 40).to_le_bytes()).unwrap();
    let e = read_frame(&mut b).unwrap_err();
    assert!(e.to_string().contains("more than the"), "{e}");
}
