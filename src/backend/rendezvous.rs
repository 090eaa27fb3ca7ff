//! Control-plane exchanges between ranks (results, decisions, NCCL's unique id) when the
//! backend has none of its own: ranks as threads of one process, or processes started
//! torchrun-style that meet over TCP.

use super::BackendError;
use std::sync::{Arc, Mutex};
use std::time::Instant;

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

/// Ranks in separate processes started torchrun-style (RANK, WORLD_SIZE, MASTER_ADDR): a star
/// over TCP with rank 0 at the centre. torchrun's own store already listens on MASTER_PORT, so
/// the rendezvous uses MASTER_PORT + 1 (or NCCLPROBE_RENDEZVOUS_PORT).
pub struct Tcp {
    rank: usize,
    peers: Vec<std::net::TcpStream>,
}

fn io(what: &str, e: std::io::Error) -> BackendError {
    BackendError::Failed(format!("rendezvous {what}: {e}"))
}

impl Tcp {
    pub fn connect(
        rank: usize,
        nranks: usize,
        addr: &str,
        port: u16,
        timeout: std::time::Duration,
    ) -> Result<Tcp, BackendError> {
        use std::io::{Read, Write};
        let deadline = Instant::now() + timeout;
        if rank == 0 {
            // Listen on every interface, as torchrun's TCPStore does: MASTER_ADDR is the name
            // peers use to reach rank 0, and on Debian/Ubuntu a host's own name often resolves
            // to 127.0.1.1 (/etc/hosts), where a listener would be reachable from no other host.
            let listener = std::net::TcpListener::bind(("0.0.0.0", port))
                .map_err(|e| io(&format!("listening on port {port} (for {addr})"), e))?;
            listener
                .set_nonblocking(true)
                .map_err(|e| io("listener", e))?;
            let mut slots: Vec<Option<std::net::TcpStream>> =
                (0..nranks.saturating_sub(1)).map(|_| None).collect();
            while slots.iter().any(Option::is_none) {
                match listener.accept() {
                    Ok((mut s, _)) => {
                        s.set_nonblocking(false).map_err(|e| io("accept", e))?;
                        // Small control messages: without this, Nagle + delayed ACK add 40 ms.
                        s.set_nodelay(true).map_err(|e| io("accept", e))?;
                        let mut r = [0u8; 8];
                        s.read_exact(&mut r)
                            .map_err(|e| io("reading a peer's rank", e))?;
                        let peer = u64::from_le_bytes(r) as usize;
                        if peer == 0 || peer >= nranks {
                            return Err(BackendError::Failed(format!(
                                "rendezvous: a peer claims rank {peer} of {nranks}"
                            )));
                        }
                        slots[peer - 1] = Some(s);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            let missing: Vec<usize> = slots
                                .iter()
                                .enumerate()
                                .filter(|(_, s)| s.is_none())
                                .map(|(i, _)| i + 1)
                                .collect();
                            return Err(BackendError::Failed(format!("rendezvous on {addr}:{port}: ranks {missing:?} did not connect within {:?}", timeout)));
                        }
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    Err(e) => return Err(io("accept", e)),
                }
            }
            Ok(Tcp {
                rank,
                peers: slots.into_iter().flatten().collect(),
            })
        } else {
            loop {
                match std::net::TcpStream::connect((addr, port)) {
                    Ok(mut s) => {
                        // Both ends: a frame held back by Nagle's algorithm until the peer's
                        // delayed ACK (40 ms on Linux) would add that to every exchange.
                        s.set_nodelay(true).map_err(|e| io("connect", e))?;
                        s.write_all(&(rank as u64).to_le_bytes())
                            .map_err(|e| io("sending our rank", e))?;
                        return Ok(Tcp {
                            rank,
                            peers: vec![s],
                        });
                    }
                    Err(e) if Instant::now() > deadline => {
                        return Err(io(&format!("connecting to rank 0 at {addr}:{port}"), e))
                    }
                    Err(_) => std::thread::sleep(std::time::Duration::from_millis(50)),
                }
            }
        }
    }
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

fn read_frame(s: &mut std::net::TcpStream) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut len = [0u8; 8];
    s.read_exact(&mut len)?;
    let len = u64::from_le_bytes(len) as usize;
    if len > 1 << 30 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "frame too large",
        ));
    }
    let mut buf = vec![0u8; len];
    s.read_exact(&mut buf)?;
    Ok(buf)
}

impl ControlPlane for Tcp {
    fn allgather(&mut self, data: &[u8]) -> Result<Vec<Vec<u8>>, BackendError> {
        let lost = |r: usize, e: std::io::Error| {
            BackendError::PeerLost(format!("rank {r} is gone (rendezvous connection: {e})"))
        };
        if self.rank == 0 {
            let mut all = vec![data.to_vec()];
            for (i, s) in self.peers.iter_mut().enumerate() {
                all.push(read_frame(s).map_err(|e| lost(i + 1, e))?);
            }
            let mut packed = Vec::new();
            for part in &all {
                packed.extend_from_slice(&(part.len() as u64).to_le_bytes());
                packed.extend_from_slice(part);
            }
            for (i, s) in self.peers.iter_mut().enumerate() {
                write_frame(s, &packed).map_err(|e| lost(i + 1, e))?;
            }
            Ok(all)
        } else {
            let s = &mut self.peers[0];
            write_frame(s, data).map_err(|e| lost(0, e))?;
            let packed = read_frame(s).map_err(|e| lost(0, e))?;
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
mod tests {
    use super::*;
    use std::time::Duration;

    fn free_port() -> u16 {
        std::net::TcpListener::bind(("127.0.0.1", 0))
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap()
    }

    #[test]
    fn rank_zero_listens_on_every_interface_not_only_master_addr() {
        // Rank 0 is told 127.0.1.1 (how Debian's /etc/hosts resolves the host's own name);
        // its peer reaches the same host through another address, as a remote rank would.
        let port = free_port();
        let peer = std::thread::spawn(move || {
            let mut t = Tcp::connect(1, 2, "127.0.0.1", port, Duration::from_secs(5)).unwrap();
            t.allgather(b"one").unwrap()
        });
        let mut zero = Tcp::connect(0, 2, "127.0.1.1", port, Duration::from_secs(5)).unwrap();
        let all = zero.allgather(b"zero").unwrap();
        assert_eq!(all, peer.join().unwrap());
    }

    #[test]
    fn tcp_ranks_exchange_in_rank_order_and_a_vanished_peer_is_lost_not_failed() {
        let port = free_port();
        let peer = std::thread::spawn(move || {
            let mut t = Tcp::connect(1, 2, "127.0.0.1", port, Duration::from_secs(10)).unwrap();
            let all = t.allgather(b"one").unwrap();
            assert_eq!(all, vec![b"zero".to_vec(), b"one".to_vec()]);
            // Rank 1 goes away without another word, as a crashed process would.
        });
        let mut zero = Tcp::connect(0, 2, "127.0.0.1", port, Duration::from_secs(10)).unwrap();
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
            let mut t = Tcp::connect(1, 2, "127.0.0.1", port, Duration::from_secs(10)).unwrap();
            assert!(t.peers.iter().all(|s| s.nodelay().unwrap()));
            for _ in 0..ROUNDS {
                t.allgather(b"one").unwrap();
            }
        });
        let mut zero = Tcp::connect(0, 2, "127.0.0.1", port, Duration::from_secs(10)).unwrap();
        assert!(zero.peers.iter().all(|s| s.nodelay().unwrap()));
        let start = Instant::now();
        for _ in 0..ROUNDS {
            zero.allgather(b"zero").unwrap();
        }
        peer.join().unwrap();
        let took = start.elapsed();
        assert!(
            took < Duration::from_millis(1500),
            "{ROUNDS} exchanges took {took:?}: each waits for a delayed ACK"
        );
    }
}
