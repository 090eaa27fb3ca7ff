//! Control-plane exchanges between ranks (results, decisions, NCCL's unique id) when the
//! backend has none of its own: ranks as threads of one process, or processes started
//! torchrun-style that meet over TCP.

use super::launcher::Meeting;
use super::BackendError;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Control-plane exchange between ranks (results, decisions, the unique id).
pub trait ControlPlane: Send {
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError>;
}

/// Ranks that are threads of one process.
pub struct InProcess {
    rank: usize,
    board: Arc<(Mutex<Vec<Vec<u8>>>, std::sync::Barrier)>,
}

impl InProcess {
    pub fn group(n: usize) -> Vec<InProcess> {
        let board = Arc::new((Mutex::new(vec![Vec::new(); n]), std::sync::Barrier::new(n)));
        (0..n)
            .map(|rank| InProcess {
                rank,
                board: Arc::clone(&board),
            })
            .collect()
    }
}

impl ControlPlane for InProcess {
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        let poisoned = || BackendError::Failed("a rank thread panicked".into());
        self.board.0.lock().map_err(|_| poisoned())?[self.rank] = data.to_vec();
        self.board.1.wait();
        let all = self.board.0.lock().map_err(|_| poisoned())?.clone();
        self.board.1.wait();
        Ok(all)
    }
}

/// Ranks in separate processes that meet over TCP (see `launcher`): a star with the hub at the
/// centre. The hub need not be rank 0; exchanges still come back in rank order.
pub struct Tcp {
    rank: usize,
    hub: bool,
    /// The hub's: (rank, stream) of every other rank, in rank order. A peer's: the hub.
    peers: Vec<(usize, std::net::TcpStream)>,
}

fn io(what: &str, e: std::io::Error) -> BackendError {
    BackendError::Failed(format!("rendezvous {what}: {e}"))
}

/// What a peer says first: this word, the job's key, its rank and the job's size; the hub
/// answers with the word. Anything else on the port is not this job's rendezvous.
const HELLO: &[u8; 8] = b"ncclprb1";

impl Tcp {
    pub fn connect(
        rank: usize,
        nranks: usize,
        meet: &Meeting,
        timeout: Duration,
    ) -> Result<Tcp, BackendError> {
        let deadline = Instant::now() + timeout;
        if meet.hub {
            hub(rank, nranks, meet, timeout, deadline)
        } else {
            spoke(rank, nranks, meet, timeout, deadline)
        }
    }
}

/// The listening end: every other rank's hello, checked, within the deadline.
fn hub(
    rank: usize,
    nranks: usize,
    meet: &Meeting,
    timeout: Duration,
    deadline: Instant,
) -> Result<Tcp, BackendError> {
    let port = meet.port;
    // Listen on every interface, as torchrun's TCPStore does: the name peers use may resolve
    // here to 127.0.1.1 (Debian's /etc/hosts), where a listener would be reachable from no
    // other host. When every rank meets on the loopback interface, only there: nothing off
    // this host can reach the port.
    let loopback = meet.hosts.iter().all(|h| h == "127.0.0.1");
    let address = if loopback { "127.0.0.1" } else { "0.0.0.0" };
    let listener = std::net::TcpListener::bind((address, port)).map_err(|e| {
        let taken = e.kind() == std::io::ErrorKind::AddrInUse;
        let said = if taken {
            format!("rendezvous: port {port} on {} ({}) is taken by another program; give every rank a free port with NCCLPROBE_RENDEZVOUS_PORT", meet.hosts.join(" or "), meet.source)
        } else {
            format!("rendezvous: cannot listen on port {port} ({}): {e}", meet.source)
        };
        BackendError::Unavailable(said)
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|e| io("listener", e))?;
    let mut slots: Vec<Option<std::net::TcpStream>> = (0..nranks).map(|_| None).collect();
    let mut strangers = 0usize;
    // Hellos that claimed a taken rank or another job size: said if the job never meets.
    let mut disputes: Vec<String> = Vec::new();
    // Each hello is read on a thread of its own: a connection that says nothing (a port
    // scanner, a health check) must not hold up the ranks behind it. At most MAX_GREETERS at
    // once: a flood of idle connections is turned away, not given a thread (and a
    // descriptor) each.
    let greeters = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    while (0..nranks).any(|r| r != rank && slots[r].is_none()) {
        use std::sync::atomic::Ordering::SeqCst;
        match listener.accept() {
            Ok((s, from)) => {
                if greeters.load(SeqCst) >= MAX_GREETERS {
                    strangers += 1;
                    drop(s);
                    continue;
                }
                let (tx, key, busy) = (tx.clone(), meet.key, greeters.clone());
                busy.fetch_add(1, SeqCst);
                let spawned = std::thread::Builder::new()
                    .name("rendezvous-hello".into())
                    .spawn(move || {
                        let greeting = greet(s, (rank, key), nranks, deadline);
                        busy.fetch_sub(1, SeqCst);
                        let _ = tx.send((from, greeting));
                    });
                // No thread to spare: the connection was dropped with the closure.
                if spawned.is_err() {
                    greeters.fetch_sub(1, SeqCst);
                    strangers += 1;
                }
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            // Out of descriptors (EMFILE, ENFILE), a peer gone before it was taken: the next
            // connection may well be a rank's; the deadline still ends the wait.
            Err(e) if transient(&e) => strangers += 1,
            Err(e) => return Err(io("accept", e)),
        }
        while let Ok((from, greeting)) = rx.try_recv() {
            match greeting {
                Ok((peer, s)) if peer != rank && peer < nranks && slots[peer].is_none() => {
                    slots[peer] = Some(s)
                }
                // The key is public (see the README): a hello that claims a taken rank is not
                // trusted enough to end the job. It is turned away, and said if the job
                // never meets.
                Ok((peer, _)) => disputes.push(format!(
                    "{from} said it is rank {peer} of {nranks}, which is taken or out of range"
                )),
                Err(Greeting::Stranger) => strangers += 1,
                Err(Greeting::Disputed(m)) => disputes.push(format!("{from} {m}")),
            }
        }
        if Instant::now() > deadline {
            let missing: Vec<usize> = (0..nranks)
                .filter(|&r| r != rank && slots[r].is_none())
                .collect();
            let mut noise = match strangers {
                0 => String::new(),
                n => format!("; {n} connection(s) from something else (another job, or not ncclprobe) were turned away"),
            };
            if let Some(first) = disputes.first() {
                noise.push_str(&format!(
                    "; {} hello(s) with this job's key disagreed with it ({first}): two jobs share rank numbers, the launcher started a rank twice, or its variables disagree between processes",
                    disputes.len()
                ));
            }
            return Err(BackendError::TimedOut(format!(
                "rendezvous: rank {rank} listened on port {port} of {} ({}) but ranks {} did not connect within {timeout:?}{noise}; are they running, and can they reach this host on that port?",
                meet.hosts.join(" or "), meet.source, list(&missing)
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let peers = slots
        .into_iter()
        .enumerate()
        .filter_map(|(r, s)| Some((r, s?)))
        .collect();
    Ok(Tcp {
        rank,
        hub: true,
        peers,
    })
}

/// "1, 2, 5" (the first twenty, then a count).
fn list(ranks: &[usize]) -> String {
    let mut out: Vec<String> = ranks.iter().take(20).map(usize::to_string).collect();
    if ranks.len() > 20 {
        out.push(format!("and {} more", ranks.len() - 20));
    }
    out.join(", ")
}

/// Hellos read at once, at most (see `hub`).
const MAX_GREETERS: usize = 64;

/// How long one connection may take to say its hello, in all.
const HELLO_PATIENCE: Duration = Duration::from_secs(10);

/// An `accept` error that says nothing about the listener itself.
fn transient(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(
            libc::EMFILE
                | libc::ENFILE
                | libc::ENOBUFS
                | libc::ENOMEM
                | libc::ECONNABORTED
                | libc::EPROTO
                | libc::EINTR
        )
    ) || e.kind() == std::io::ErrorKind::Interrupted
}

enum Greeting {
    /// Not this job's ncclprobe: turned away, the wait goes on.
    Stranger,
    /// This job's key, but a claim that contradicts the job (another size): turned away as
    /// well, since anyone who knows the job's public values can send it; said at the end.
    Disputed(String),
}

/// Reads exactly `buf.len()` bytes by `until`, however slowly they come: a peer that sends a
/// byte at a time cannot stretch the wait past it.
fn read_by(s: &mut std::net::TcpStream, buf: &mut [u8], until: Instant) -> std::io::Result<()> {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        s.set_read_timeout(Some(left))?;
        match s.read(&mut buf[got..]) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A connecting peer's hello, read within the deadline, and the answer.
fn greet(
    mut s: std::net::TcpStream,
    (rank, key): (usize, u64),
    nranks: usize,
    deadline: Instant,
) -> Result<(usize, std::net::TcpStream), Greeting> {
    use std::io::Write;
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    let until = Instant::now() + left.min(HELLO_PATIENCE);
    let setup = s
        .set_nonblocking(false)
        // Small control messages: without this, Nagle + delayed ACK add 40 ms.
        .and_then(|_| s.set_nodelay(true));
    let mut hello = [0u8; 32];
    if setup
        .and_then(|_| read_by(&mut s, &mut hello, until))
        .is_err()
        || &hello[..8] != HELLO
    {
        return Err(Greeting::Stranger);
    }
    let field = |i: usize| u64::from_le_bytes(hello[i..i + 8].try_into().unwrap_or([0; 8]));
    if field(8) != key {
        return Err(Greeting::Stranger);
    }
    let (peer, size) = (field(16) as usize, field(24) as usize);
    if size != nranks {
        return Err(Greeting::Disputed(format!(
            "said it is rank {peer} of a job of {size} ranks; this rank was told {nranks}"
        )));
    }
    let mut answer = HELLO.to_vec();
    answer.extend_from_slice(&(rank as u64).to_le_bytes());
    s.write_all(&answer)
        .and_then(|_| s.set_read_timeout(None))
        .map_err(|_| Greeting::Stranger)?;
    Ok((peer, s))
}

/// The connecting end: the hub's hosts in turn until one answers as this job's hub.
fn spoke(
    rank: usize,
    nranks: usize,
    meet: &Meeting,
    timeout: Duration,
    deadline: Instant,
) -> Result<Tcp, BackendError> {
    let mut last = String::from("nothing tried");
    loop {
        for host in &meet.hosts {
            match hello(host, rank, nranks, meet, deadline) {
                Ok((hub, s)) => {
                    return Ok(Tcp {
                        rank,
                        hub: false,
                        peers: vec![(hub, s)],
                    })
                }
                Err(e) => last = format!("{host}:{}: {e}", meet.port),
            }
        }
        if Instant::now() > deadline {
            return Err(BackendError::TimedOut(format!(
                "rendezvous: rank {rank} could not reach the rank that listens at {}:{} ({}) within {timeout:?}; last attempt: {last}",
                meet.hosts.join(" or "),
                meet.port,
                meet.source
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// One attempt at `host`: connect, say hello, hear it back.
fn hello(
    host: &str,
    rank: usize,
    nranks: usize,
    meet: &Meeting,
    deadline: Instant,
) -> Result<(usize, std::net::TcpStream), String> {
    use std::io::{Read, Write};
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = (host, meet.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve the host name: {e}"))?
        .collect();
    let left = deadline.saturating_duration_since(Instant::now());
    let wait = left.clamp(Duration::from_millis(100), Duration::from_secs(5));
    let mut last = String::from("no address");
    for addr in addrs {
        let mut s = match std::net::TcpStream::connect_timeout(&addr, wait) {
            Ok(s) => s,
            Err(e) => {
                last = e.to_string();
                continue;
            }
        };
        let mut frame = Vec::with_capacity(32);
        frame.extend_from_slice(HELLO);
        for n in [meet.key, rank as u64, nranks as u64] {
            frame.extend_from_slice(&n.to_le_bytes());
        }
        // Both ends: a frame held back by Nagle's algorithm until the peer's delayed ACK
        // (40 ms on Linux) would add that to every exchange.
        let mut answer = [0u8; 16];
        let said = s
            .set_nodelay(true)
            // A hub answers as soon as it reads the hello; wait for that to the deadline, so
            // that a slow hub is not left holding a rank that has gone.
            .and_then(|_| s.set_read_timeout(Some(left.max(Duration::from_millis(100)))))
            .and_then(|_| s.write_all(&frame))
            .and_then(|_| s.read_exact(&mut answer));
        match said {
            Ok(()) if &answer[..8] == HELLO => {
                s.set_read_timeout(None).map_err(|e| e.to_string())?;
                let hub = u64::from_le_bytes(answer[8..].try_into().unwrap_or([0; 8]));
                return Ok((hub as usize, s));
            }
            _ => {
                last = "something answers on this port that is not this job's rendezvous (another program, or another job's ncclprobe)".into()
            }
        }
    }
    Err(last)
}

/// One frame (length, then bytes) in one write: two small writes would be two segments, the
/// second waiting for the ACK of the first where TCP_NODELAY is not in effect.
fn write_frame(s: &mut std::net::TcpStream, data: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut frame = Vec::with_capacity(8 + data.len());
    frame.extend_from_slice(&(data.len() as u64).to_le_bytes());
    frame.extend_from_slice(data);
    s.write_all(&frame)
}

/// The largest frame a rank sends: NCCL's unique id, a plan, a rank's results.
const MAX_FRAME: u64 = 256 << 20;

fn read_frame(s: &mut std::net::TcpStream) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut len = [0u8; 8];
    s.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len);
    if len > MAX_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes, more than the {MAX_FRAME} a rendezvous carries"),
        ));
    }
    // Grown as the bytes arrive: a length that lies costs no more memory than was sent.
    let mut buf = Vec::new();
    s.take(len).read_to_end(&mut buf)?;
    if buf.len() as u64 != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(buf)
}

impl ControlPlane for Tcp {
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        let lost = |r: usize, e: std::io::Error| {
            BackendError::PeerLost(format!("rank {r} is gone (rendezvous connection: {e})"))
        };
        if self.hub {
            let mut all = Vec::with_capacity(self.peers.len() + 1);
            for (r, s) in self.peers.iter_mut() {
                if all.len() == self.rank {
                    all.push(data.to_vec());
                }
                all.push(read_frame(s).map_err(|e| lost(*r, e))?);
            }
            if all.len() == self.rank {
                all.push(data.to_vec());
            }
            let mut packed = Vec::new();
            for part in &all {
                packed.extend_from_slice(&(part.len() as u64).to_le_bytes());
                packed.extend_from_slice(part);
            }
            for (r, s) in self.peers.iter_mut() {
                write_frame(s, &packed).map_err(|e| lost(*r, e))?;
            }
            Ok(all)
        } else {
            let (hub, s) = &mut self.peers[0];
            let hub = *hub;
            write_frame(s, data).map_err(|e| lost(hub, e))?;
            let packed = read_frame(s).map_err(|e| lost(hub, e))?;
            let mut all = Vec::new();
            let mut at = 0;
            while at + 8 <= packed.len() {
                let len =
                    u64::from_le_bytes(packed[at..at + 8].try_into().unwrap_or([0; 8])) as usize;
                at += 8;
                let end = (at + len).min(packed.len());
                all.push(packed[at..end].to_vec());
                at = end;
            }
            Ok(all)
        }
    }
}

#[cfg(test)]
#[path = "test_ports.rs"]
mod test_ports;

#[cfg(test)]
#[path = "rendezvous_tests.rs"]
mod tests;
