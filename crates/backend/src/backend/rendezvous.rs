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
    world: usize,
    hub: bool,
    /// The hub's: (rank, stream) of every other rank, in rank order. A peer's: the hub.
    peers: Vec<(usize, std::net::TcpStream)>,
}

#[path = "rendezvous_handshake.rs"]
mod handshake;
#[path = "rendezvous_hub.rs"]
mod hub;

impl Tcp {
    /// Meets the job's other ranks where `meet` says, by the deadline `timeout` sets.
    pub fn connect(
        rank: usize,
        nranks: usize,
        meet: &Meeting,
        timeout: Duration,
    ) -> Result<Tcp, BackendError> {
        let net = hub::Net {
            resolve: &hub::system_resolve,
            is_local: &hub::system_is_local,
        };
        Tcp::connect_with(rank, nranks, meet, timeout, (&net, &hub::LIMITS))
    }

    /// `connect` with the machine's resolver and the hub's limits given (tests give their own).
    fn connect_with(
        rank: usize,
        nranks: usize,
        meet: &Meeting,
        timeout: Duration,
        (net, limits): (&hub::Net, &hub::Limits),
    ) -> Result<Tcp, BackendError> {
        let deadline = Instant::now() + timeout;
        if meet.hub {
            let peers = hub::hub((rank, nranks), meet, (timeout, deadline), net, limits)?;
            Ok(Tcp {
                rank,
                world: nranks,
                hub: true,
                peers,
            })
        } else {
            spoke(rank, nranks, meet, timeout, deadline)
        }
    }
}

/// The connecting end: the hub's hosts in turn until one proves it is this job's hub.
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
                        world: nranks,
                        hub: false,
                        peers: vec![(hub, s)],
                    })
                }
                Err(handshake::Refused::Final(e)) => {
                    return Err(BackendError::Failed(format!(
                        "rendezvous: rank {rank} at {host}:{}: {e}",
                        meet.port
                    )))
                }
                Err(handshake::Refused::Retry(e)) => last = format!("{host}:{}: {e}", meet.port),
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

/// One attempt at `host`: each of its addresses until one joins.
fn hello(
    host: &str,
    rank: usize,
    nranks: usize,
    meet: &Meeting,
    deadline: Instant,
) -> Result<(usize, std::net::TcpStream), handshake::Refused> {
    use std::net::ToSocketAddrs;
    let addrs: Vec<_> = (host, meet.port)
        .to_socket_addrs()
        .map_err(|e| handshake::Refused::Retry(format!("cannot resolve the host name: {e}")))?
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
        match handshake::join(&mut s, rank, nranks, meet, deadline) {
            Ok(hub) if hub < nranks && hub != rank => return Ok((hub, s)),
            Ok(hub) => last = format!("the hub said it is rank {hub} of {nranks}"),
            Err(handshake::Refused::Retry(e)) => last = e,
            Err(fin) => return Err(fin),
        }
    }
    Err(handshake::Refused::Retry(last))
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
            unpack(&packed, self.world).map_err(|e| {
                BackendError::PeerLost(format!("the hub (rank {hub}) sent {e}; it is not this job's ncclprobe, or it is broken"))
            })
        }
    }
}

/// The hub's packed exchange (length, then bytes, for each rank), every length checked: a
/// length near u64::MAX from a broken or hostile hub is refused, not a panic.
fn unpack(packed: &[u8], world: usize) -> Result<Vec<Vec<u8>>, String> {
    let mut all = Vec::with_capacity(world);
    let mut at = 0usize;
    while at < packed.len() {
        let head = at
            .checked_add(8)
            .and_then(|end| packed.get(at..end))
            .ok_or("an exchange cut short inside a length")?;
        let mut len = [0u8; 8];
        len.copy_from_slice(head);
        let len = u64::from_le_bytes(len);
        at += 8;
        let part = usize::try_from(len)
            .ok()
            .and_then(|n| at.checked_add(n))
            .and_then(|end| packed.get(at..end))
            .ok_or_else(|| format!("a part of {len} bytes where {} remain", packed.len() - at))?;
        at += part.len();
        all.push(part.to_vec());
    }
    if all.len() != world {
        return Err(format!("{} parts for a job of {world} ranks", all.len()));
    }
    Ok(all)
}

#[cfg(test)]
#[path = "test_ports.rs"]
mod test_ports;

#[cfg(test)]
#[path = "rendezvous_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "rendezvous_flood_tests.rs"]
mod flood_tests;
