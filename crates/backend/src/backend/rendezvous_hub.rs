//! The hub's accept loop: one thread polls the listener and every pending handshake over
//! non-blocking sockets, with a cap on pending handshakes (a full table drops its oldest, so a
//! flood cannot keep newcomers out), a total time for each, and, when no token authenticates
//! the ranks, only the addresses of the hosts the launcher names.

use super::super::launcher::{Meeting, PeerHosts};
use super::super::BackendError;
use super::handshake::{self, Hello, Nonce, ANSWER_LEN, HELLO_LEN, JOINED, PROOF_LEN, TAKEN};
use std::collections::{HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// What the hub asks of the machine: name resolution and which addresses are its own. Tests
/// pass their own, so the rules can be checked without DNS.
pub struct Net<'a> {
    pub resolve: &'a dyn Fn(&str) -> Result<Vec<IpAddr>, String>,
    pub is_local: &'a dyn Fn(IpAddr) -> bool,
}

/// How much the hub gives connections that have not yet joined.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Handshakes in progress at once; a newcomer beyond this drops the oldest.
    pub pending: usize,
    /// How long one connection may take, in all, from accept to its proof.
    pub patience: Duration,
}

pub const LIMITS: Limits = Limits {
    pending: 256,
    patience: Duration::from_secs(10),
};

/// Accepts taken from the listener between two polls: fewer than `pending`, so a connection
/// accepted in one round is read at least once before a flood behind it can push it out.
const ACCEPTS_PER_ROUND: usize = 64;

/// The addresses a hub admits, from the launcher's hosts resolved once at the start.
pub struct Allowed {
    /// Why any address is admitted, when it is.
    pub any: Option<String>,
    pub addrs: HashSet<IpAddr>,
    /// The names that did not resolve, with the resolver's reason.
    pub unresolved: Vec<String>,
}

impl Allowed {
    pub fn new(meet: &Meeting, resolve: &dyn Fn(&str) -> Result<Vec<IpAddr>, String>) -> Allowed {
        let mut allowed = Allowed {
            any: None,
            addrs: HashSet::new(),
            unresolved: Vec::new(),
        };
        if let Some(t) = &meet.token {
            allowed.any = Some(format!("{} authenticates every rank", t.from));
            return allowed;
        }
        match &meet.peer_hosts {
            PeerHosts::ThisHost => {}
            PeerHosts::Any(why) => allowed.any = Some(why.clone()),
            PeerHosts::Named { hosts, .. } => {
                for host in hosts {
                    match resolve(host) {
                        Ok(ips) => allowed
                            .addrs
                            .extend(ips.into_iter().map(|a| a.to_canonical())),
                        Err(e) => allowed.unresolved.push(format!("{host} ({e})")),
                    }
                }
            }
        }
        allowed
    }

    /// Whether a connection from `ip` may try the handshake: this host's own addresses always
    /// (the hub runs a rank here, so may others), the named hosts', or any when none is known.
    pub fn admits(&self, ip: IpAddr, is_local: &dyn Fn(IpAddr) -> bool) -> bool {
        let ip = ip.to_canonical();
        self.any.is_some() || self.addrs.contains(&ip) || is_local(ip)
    }
}

/// Resolution through the system's resolver (getaddrinfo: /etc/hosts, DNS).
pub fn system_resolve(host: &str) -> Result<Vec<IpAddr>, String> {
    use std::net::ToSocketAddrs;
    (host, 0)
        .to_socket_addrs()
        .map(|a| a.map(|s| s.ip()).collect())
        .map_err(|e| e.to_string())
}

/// Whether `ip` is one of this host's: binding to it works.
pub fn system_is_local(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind((ip, 0)).is_ok()
}

/// A connection between accept and its proof.
struct Pending {
    s: TcpStream,
    from: SocketAddr,
    until: Instant,
    buf: [u8; HELLO_LEN],
    got: usize,
    /// After the hello: what it said and the nonce the hub answered with.
    said: Option<(Hello, Nonce)>,
}

impl Pending {
    fn want(&self) -> usize {
        if self.said.is_some() {
            PROOF_LEN
        } else {
            HELLO_LEN
        }
    }
}

/// What came of a pending connection that is done.
enum Outcome {
    Wait,
    /// Not this job's ncclprobe (another program, another job, silent too long).
    Stranger,
    /// This job's key, but no proof of its token.
    Unproven(SocketAddr),
    /// A claim that contradicts the job, said if it never meets.
    Disputed(String),
    Joined(usize),
}

/// What the hub saw besides the ranks, for the message when the job does not meet.
#[derive(Default)]
struct Seen {
    strangers: usize,
    evicted: usize,
    refused: Tally,
    unproven: Tally,
    disputes: Tally,
}

/// How many of a kind, and the first: a flood is counted, not kept.
#[derive(Default)]
struct Tally {
    count: usize,
    first: Option<String>,
}

impl Tally {
    fn note(&mut self, what: impl std::fmt::Display) {
        self.count += 1;
        if self.first.is_none() {
            self.first = Some(what.to_string());
        }
    }
}

/// The listening end: every other rank, proven (or from an admitted host), by the deadline;
/// (rank, stream) in rank order.
pub fn hub(
    (rank, nranks): (usize, usize),
    meet: &Meeting,
    (timeout, deadline): (Duration, Instant),
    net: &Net,
    limits: &Limits,
) -> Result<Vec<(usize, TcpStream)>, BackendError> {
    let listener = listen(meet)?;
    let allowed = Allowed::new(meet, net.resolve);
    let k = handshake::mac_key(meet);
    let mut slots: Vec<Option<TcpStream>> = (0..nranks).map(|_| None).collect();
    let mut pending: VecDeque<Pending> = VecDeque::new();
    let mut seen = Seen::default();
    let job = Job {
        rank,
        nranks,
        key: meet.key,
        k: &k,
    };
    while (0..nranks).any(|r| r != rank && slots[r].is_none()) {
        if Instant::now() > deadline {
            return Err(timed_out(
                (rank, nranks),
                meet,
                timeout,
                &slots,
                &seen,
                &allowed,
            ));
        }
        let ready = wait(&listener, &pending);
        let now = Instant::now();
        // Back to front, so removing one leaves the indices of those still to visit.
        for i in (0..pending.len()).rev() {
            // The total time first: a trickle is readable every time it is looked at.
            let outcome = if now > pending[i].until {
                Outcome::Stranger
            } else if ready.get(i + 1).copied().unwrap_or(false) {
                advance(&mut pending[i], &job, &mut slots)
            } else {
                Outcome::Wait
            };
            match outcome {
                Outcome::Wait => continue,
                Outcome::Stranger => seen.strangers += 1,
                Outcome::Unproven(from) => seen.unproven.note(from),
                Outcome::Disputed(m) => seen.disputes.note(m),
                Outcome::Joined(peer) => {
                    if let Some(p) = pending.remove(i) {
                        slots[peer] = Some(p.s);
                    }
                    continue;
                }
            }
            pending.remove(i);
        }
        if ready.first().copied().unwrap_or(false) {
            accept_some(
                &listener,
                &mut pending,
                (&allowed, net, limits),
                &mut seen,
                deadline,
            )?;
        }
    }
    Ok(slots
        .into_iter()
        .enumerate()
        .filter_map(|(r, s)| Some((r, s?)))
        .collect())
}

fn io(what: &str, e: std::io::Error) -> BackendError {
    BackendError::Failed(format!("rendezvous {what}: {e}"))
}

/// "1, 2, 5" (the first twenty, then a count).
fn list(ranks: &[usize]) -> String {
    let mut out: Vec<String> = ranks.iter().take(20).map(usize::to_string).collect();
    if ranks.len() > 20 {
        out.push(format!("and {} more", ranks.len() - 20));
    }
    out.join(", ")
}

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

/// Listen on every interface, as torchrun's TCPStore does: the name peers use may resolve
/// here to 127.0.1.1 (Debian's /etc/hosts), where a listener would be reachable from no other
/// host. When every rank meets on the loopback interface, only there: nothing off this host
/// can reach the port.
fn listen(meet: &Meeting) -> Result<TcpListener, BackendError> {
    let port = meet.port;
    let loopback = meet.hosts.iter().all(|h| h == "127.0.0.1");
    let address = if loopback { "127.0.0.1" } else { "0.0.0.0" };
    let listener = TcpListener::bind((address, port)).map_err(|e| {
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
    Ok(listener)
}

/// Polls the listener and every pending connection for up to 50 ms; which are readable
/// (index 0 the listener, then `pending` in order).
fn wait(listener: &TcpListener, pending: &VecDeque<Pending>) -> Vec<bool> {
    use std::os::fd::AsRawFd;
    let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
        .chain(pending.iter().map(|p| p.s.as_raw_fd()))
        .map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs that outlives the call.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
    if n < 0 {
        // EINTR, or no memory for the poll: look at everything, as if all were ready.
        return vec![true; fds.len()];
    }
    fds.iter().map(|f| f.revents != 0).collect()
}

/// Takes what the listener holds, up to a round's worth, into `pending`.
fn accept_some(
    listener: &TcpListener,
    pending: &mut VecDeque<Pending>,
    (allowed, net, limits): (&Allowed, &Net, &Limits),
    seen: &mut Seen,
    deadline: Instant,
) -> Result<(), BackendError> {
    for _ in 0..ACCEPTS_PER_ROUND {
        let (s, from) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
            // Out of descriptors (EMFILE, ENFILE): the oldest handshake gives its one up, so
            // the next connection, which may well be a rank's, can be taken.
            Err(e) if transient(&e) => {
                seen.strangers += 1;
                if pending.pop_front().is_some() {
                    seen.evicted += 1;
                }
                return Ok(());
            }
            Err(e) => return Err(io("accept", e)),
        };
        if !allowed.admits(from.ip(), net.is_local) {
            seen.refused.note(from);
            continue;
        }
        // Small control messages: without TCP_NODELAY, Nagle + delayed ACK add 40 ms.
        if s.set_nonblocking(true)
            .and_then(|_| s.set_nodelay(true))
            .is_err()
        {
            seen.strangers += 1;
            continue;
        }
        if pending.len() >= limits.pending.max(1) {
            pending.pop_front();
            seen.evicted += 1;
        }
        pending.push_back(Pending {
            s,
            from,
            until: (Instant::now() + limits.patience).min(deadline),
            buf: [0; HELLO_LEN],
            got: 0,
            said: None,
        });
    }
    Ok(())
}

/// The job as the hub checks hellos against it.
struct Job<'a> {
    rank: usize,
    nranks: usize,
    key: u64,
    k: &'a [u8; 32],
}

/// Reads what `p` has sent and takes the handshake as far as it goes.
fn advance(p: &mut Pending, job: &Job, slots: &mut [Option<TcpStream>]) -> Outcome {
    use std::io::{Read, Write};
    loop {
        let want = p.want();
        match p.s.read(&mut p.buf[p.got..want]) {
            Ok(0) => return Outcome::Stranger,
            Ok(n) => p.got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Outcome::Wait,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return Outcome::Stranger,
        }
        if p.got < want {
            continue;
        }
        p.got = 0;
        let Some((hello, hub_nonce)) = p.said.take() else {
            let Some(hello) = Hello::parse(&p.buf) else {
                return Outcome::Stranger;
            };
            if hello.key != job.key {
                return Outcome::Stranger;
            }
            if hello.size != job.nranks as u64 || hello.rank >= job.nranks as u64 {
                return Outcome::Disputed(format!(
                    "{} said it is rank {} of a job of {} ranks; this rank was told {}",
                    p.from, hello.rank, hello.size, job.nranks
                ));
            }
            let Ok(hub_nonce) = handshake::nonce() else {
                return Outcome::Stranger;
            };
            let answer = handshake::answer(job.k, &hello, job.rank as u64, &hub_nonce);
            // A fresh socket's send buffer takes 80 bytes whole: a short write is no rank's.
            if !matches!(p.s.write(&answer), Ok(ANSWER_LEN)) {
                return Outcome::Stranger;
            }
            p.said = Some((hello, hub_nonce));
            continue;
        };
        let binding = (&hello, &hub_nonce, job.rank as u64);
        if !handshake::verify(job.k, handshake::Side::Rank, binding, &p.buf[..PROOF_LEN]) {
            return Outcome::Unproven(p.from);
        }
        let peer = hello.rank as usize;
        if peer == job.rank || slots[peer].as_ref().is_some_and(alive) {
            let _ = p.s.write(TAKEN);
            return Outcome::Disputed(format!(
                "{} proved it is rank {peer} of {}, which is taken",
                p.from, job.nranks
            ));
        }
        return match p.s.write(JOINED) {
            Ok(n) if n == JOINED.len() => match p.s.set_nonblocking(false) {
                Ok(()) => Outcome::Joined(peer),
                Err(_) => Outcome::Stranger,
            },
            _ => Outcome::Stranger,
        };
    }
}

/// Whether a rank's connection is still open: one whose process went away (a rank restarted
/// and trying again) gives its slot to the newcomer that proves the same rank.
fn alive(s: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    if s.set_nonblocking(true).is_err() {
        return true;
    }
    let open = !matches!(s.peek(&mut byte), Ok(0));
    let _ = s.set_nonblocking(false);
    open
}

fn timed_out(
    (rank, nranks): (usize, usize),
    meet: &Meeting,
    timeout: Duration,
    slots: &[Option<TcpStream>],
    seen: &Seen,
    allowed: &Allowed,
) -> BackendError {
    let missing: Vec<usize> = (0..nranks)
        .filter(|&r| r != rank && slots[r].is_none())
        .collect();
    let mut noise = String::new();
    if seen.strangers > 0 {
        noise.push_str(&format!("; {} connection(s) from something else (another job, or not ncclprobe) were turned away", seen.strangers));
    }
    if seen.evicted > 0 {
        noise.push_str(&format!(
            "; {} unfinished handshake(s) were dropped to make room for newer ones",
            seen.evicted
        ));
    }
    if let Some(first) = &seen.refused.first {
        let hosts = match &meet.peer_hosts {
            PeerHosts::Named { from, .. } => format!("the hosts of {from}"),
            _ => "this host".into(),
        };
        noise.push_str(&format!("; {} connection(s) from addresses outside {hosts} were refused (first {first}): if those are the job's own hosts under other addresses, give every rank NCCLPROBE_RENDEZVOUS_TOKEN", seen.refused.count));
    }
    if !allowed.unresolved.is_empty() {
        noise.push_str(&format!("; {} of the job's host names did not resolve when this rank began to listen (first {})", allowed.unresolved.len(), allowed.unresolved[0]));
    }
    if let Some(first) = &seen.unproven.first {
        let with = meet.token.as_ref().map_or("this job's key", |t| t.from);
        noise.push_str(&format!("; {} hello(s) with this job's key could not prove {with} (first from {first}): do all ranks have the same one?", seen.unproven.count));
    }
    if let Some(first) = &seen.disputes.first {
        noise.push_str(&format!(
            "; {} hello(s) disagreed with this job ({first}): two jobs share rank numbers, the launcher started a rank twice, or its variables disagree between processes",
            seen.disputes.count
        ));
    }
    BackendError::TimedOut(format!(
        "rendezvous: rank {rank} listened on port {} of {} ({}) but ranks {} did not connect within {timeout:?}{noise}; are they running, and can they reach this host on that port?",
        meet.port, meet.hosts.join(" or "), meet.source, list(&missing)
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn meeting(token: Option<&str>, peer_hosts: PeerHosts) -> Meeting {
        Meeting {
            hosts: vec!["127.0.0.1".into()],
            port: 0,
            hub: true,
            source: "a test".into(),
            key: 7,
            token: token.map(|t| super::super::super::launcher::Token::new(t.as_bytes(), "t")),
            peer_hosts,
        }
    }

    /// gpu-a is 127.0.0.2; gpu-b resolves nowhere.
    fn resolve(host: &str) -> Result<Vec<IpAddr>, String> {
        match host {
            "gpu-a" => Ok(vec![IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))]),
            _ => Err("no such host".into()),
        }
    }

    fn is_local(ip: IpAddr) -> bool {
        ip == IpAddr::V4(Ipv4Addr::LOCALHOST)
    }

    #[test]
    fn the_hub_admits_its_own_host_the_named_hosts_or_anyone_as_the_launcher_says() {
        let at = |s: &str| s.parse::<IpAddr>().unwrap();
        let named = PeerHosts::Named {
            hosts: vec!["gpu-a".into(), "gpu-b".into()],
            from: "a test".into(),
        };
        let allowed = Allowed::new(&meeting(None, named.clone()), &resolve);
        assert!(allowed.admits(at("127.0.0.2"), &is_local), "a named host");
        assert!(
            allowed.admits(at("::ffff:127.0.0.2"), &is_local),
            "the same, IPv4-mapped"
        );
        assert!(allowed.admits(at("127.0.0.1"), &is_local), "this host");
        assert!(!allowed.admits(at("10.1.2.3"), &is_local), "a stranger");
        assert_eq!(allowed.unresolved, ["gpu-b (no such host)"]);
        let local = Allowed::new(&meeting(None, PeerHosts::ThisHost), &resolve);
        assert!(!local.admits(at("127.0.0.2"), &is_local));
        let any = Allowed::new(&meeting(None, PeerHosts::Any("torchrun".into())), &resolve);
        assert!(any.admits(at("10.1.2.3"), &is_local));
        // A token authenticates each rank, wherever it connects from.
        let token = Allowed::new(&meeting(Some("t"), named), &resolve);
        assert!(token.admits(at("10.1.2.3"), &is_local));
    }
}
