//! The rendezvous handshake, both ends: fixed-size messages (nothing a peer says before it is
//! authenticated can make the other end wait for, or allocate, more), nonces from the OS, and
//! an HMAC-SHA256 each way over the job key, both nonces, the hub's rank, the claimed rank and
//! the job's size.
//!
//! ```text
//! hello   rank → hub  64 bytes  "ncclprb2" | key u64 | rank u64 | size u64 | rank nonce [32]
//! answer  hub → rank  80 bytes  "ncclprb2" | hub rank u64 | hub nonce [32] | hub MAC [32]
//! proof   rank → hub  32 bytes  rank MAC [32]
//! verdict hub → rank   8 bytes  "joined\0\0" or "taken\0\0\0"
//! MAC = HMAC-SHA256(K, label | key | rank nonce | hub nonce | hub rank | rank | size),
//! label "ncclprobe rendezvous hub\0" or "ncclprobe rendezvous rank\0"
//! ```
//!
//! K is the token's digest when the job was given one. Without one, K follows from the public
//! job key: the same exchange then tells jobs apart and authenticates nothing.

use super::super::launcher::Meeting;
use hmac::{Hmac, Mac};
use std::time::{Duration, Instant};

pub const MAGIC: &[u8; 8] = b"ncclprb2";
pub const HELLO_LEN: usize = 64;
pub const ANSWER_LEN: usize = 80;
pub const PROOF_LEN: usize = 32;
pub const VERDICT_LEN: usize = 8;
pub const JOINED: &[u8; VERDICT_LEN] = b"joined\0\0";
pub const TAKEN: &[u8; VERDICT_LEN] = b"taken\0\0\0";

/// The longest a spoke waits for one hub to answer: a hub answers as soon as it reads the
/// hello, so one that says nothing for this long is not the job's, and the next host is tried.
const ANSWER_PATIENCE: Duration = Duration::from_secs(10);

pub type Nonce = [u8; 32];

/// The first message, from the connecting rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Hello {
    pub key: u64,
    pub rank: u64,
    pub size: u64,
    pub nonce: Nonce,
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl Hello {
    pub fn bytes(&self) -> [u8; HELLO_LEN] {
        let mut b = [0u8; HELLO_LEN];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.key.to_le_bytes());
        b[16..24].copy_from_slice(&self.rank.to_le_bytes());
        b[24..32].copy_from_slice(&self.size.to_le_bytes());
        b[32..].copy_from_slice(&self.nonce);
        b
    }

    /// `None` when the bytes are not an ncclprobe hello of this version.
    pub fn parse(b: &[u8; HELLO_LEN]) -> Option<Hello> {
        if &b[..8] != MAGIC {
            return None;
        }
        let mut nonce = [0u8; 32];
        nonce.copy_from_slice(&b[32..]);
        Some(Hello {
            key: u64_at(b, 8),
            rank: u64_at(b, 16),
            size: u64_at(b, 24),
            nonce,
        })
    }
}

/// Which end a MAC speaks for: a MAC one end sent can never serve as the other's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Side {
    Hub,
    Rank,
}

/// The MAC key of `meet`: its token's digest, else one anyone can derive from the job key.
pub fn mac_key(meet: &Meeting) -> [u8; 32] {
    match &meet.token {
        Some(t) => *t.mac_key(),
        None => {
            use sha2::Digest;
            let mut h = sha2::Sha256::new();
            h.update(b"ncclprobe rendezvous public key\0");
            h.update(meet.key.to_le_bytes());
            h.finalize().into()
        }
    }
}

fn hmac_over(
    k: &[u8; 32],
    side: Side,
    hello: &Hello,
    hub_nonce: &Nonce,
    hub_rank: u64,
) -> Hmac<sha2::Sha256> {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut m = match <Hmac<sha2::Sha256> as Mac>::new_from_slice(k) {
        Ok(m) => m,
        Err(_) => unreachable!("HMAC accepts keys of every length"),
    };
    m.update(match side {
        Side::Hub => b"ncclprobe rendezvous hub\0".as_slice(),
        Side::Rank => b"ncclprobe rendezvous rank\0".as_slice(),
    });
    m.update(&hello.key.to_le_bytes());
    m.update(&hello.nonce);
    m.update(hub_nonce);
    m.update(&hub_rank.to_le_bytes());
    m.update(&hello.rank.to_le_bytes());
    m.update(&hello.size.to_le_bytes());
    m
}

/// The MAC `side` sends for this exchange.
pub fn mac(k: &[u8; 32], side: Side, hello: &Hello, hub_nonce: &Nonce, hub_rank: u64) -> [u8; 32] {
    hmac_over(k, side, hello, hub_nonce, hub_rank)
        .finalize()
        .into_bytes()
        .into()
}

/// Whether `tag` is `side`'s MAC for this exchange, compared in constant time.
pub fn verify(
    k: &[u8; 32],
    side: Side,
    (hello, hub_nonce, hub_rank): (&Hello, &Nonce, u64),
    tag: &[u8],
) -> bool {
    hmac_over(k, side, hello, hub_nonce, hub_rank)
        .verify_slice(tag)
        .is_ok()
}

/// 32 bytes from the OS's random source.
pub fn nonce() -> Result<Nonce, String> {
    let mut n = [0u8; 32];
    getrandom::fill(&mut n).map_err(|e| {
        format!(
            "rendezvous: the OS gave no random bytes for the handshake ({e}); check /dev/urandom"
        )
    })?;
    Ok(n)
}

/// The answer to `hello`, MAC'd.
pub fn answer(k: &[u8; 32], hello: &Hello, hub_rank: u64, hub_nonce: &Nonce) -> [u8; ANSWER_LEN] {
    let mut b = [0u8; ANSWER_LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&hub_rank.to_le_bytes());
    b[16..48].copy_from_slice(hub_nonce);
    b[48..].copy_from_slice(&mac(k, Side::Hub, hello, hub_nonce, hub_rank));
    b
}

/// How one attempt at a hub ended, when it did not join.
pub enum Refused {
    /// Try again, or the next host: what was heard.
    Retry(String),
    /// A hub that proved it is the job's says the rank is taken: no retry changes that.
    Final(String),
}

/// One attempt at one address: hello, check the hub's answer, prove this rank, hear the verdict.
pub fn join(
    s: &mut std::net::TcpStream,
    rank: usize,
    nranks: usize,
    meet: &Meeting,
    deadline: Instant,
) -> Result<usize, Refused> {
    use std::io::{Read, Write};
    let retry = |e: std::io::Error| Refused::Retry(e.to_string());
    let k = mac_key(meet);
    let hello = Hello {
        key: meet.key,
        rank: rank as u64,
        size: nranks as u64,
        nonce: nonce().map_err(Refused::Final)?,
    };
    let left = deadline.saturating_duration_since(Instant::now());
    // Both ends: a frame held back by Nagle's algorithm until the peer's delayed ACK (40 ms
    // on Linux) would add that to every exchange.
    s.set_nodelay(true).map_err(retry)?;
    s.set_read_timeout(Some(
        left.clamp(Duration::from_millis(100), ANSWER_PATIENCE),
    ))
    .map_err(retry)?;
    s.write_all(&hello.bytes()).map_err(retry)?;
    let mut answer = [0u8; ANSWER_LEN];
    if s.read_exact(&mut answer).is_err() || &answer[..8] != MAGIC {
        return Err(Refused::Retry("something answers on this port that is not this job's rendezvous (another program, or another job's ncclprobe)".into()));
    }
    let hub_rank = u64_at(&answer, 8);
    let mut hub_nonce = [0u8; 32];
    hub_nonce.copy_from_slice(&answer[16..48]);
    if !verify(&k, Side::Hub, (&hello, &hub_nonce, hub_rank), &answer[48..]) {
        let with = meet.token.as_ref().map_or("this job's key", |t| t.from);
        return Err(Refused::Retry(format!("a listener answered as this job's hub but could not prove it holds {with} (wrong MAC): another job's ncclprobe, or a program impersonating the hub; turned away")));
    }
    s.write_all(&mac(&k, Side::Rank, &hello, &hub_nonce, hub_rank))
        .map_err(retry)?;
    let mut verdict = [0u8; VERDICT_LEN];
    s.read_exact(&mut verdict).map_err(|_| {
        let with = meet.token.as_ref().map_or("this job's key", |t| t.from);
        Refused::Retry(format!(
            "the hub refused this rank's proof: do all ranks have the same {with}?"
        ))
    })?;
    if &verdict == TAKEN {
        return Err(Refused::Final(format!("the hub (rank {hub_rank}) already has a rank {rank}: the launcher started it twice, or, without NCCLPROBE_RENDEZVOUS_TOKEN, something else on the job's hosts claimed it first; give every rank a token")));
    }
    if &verdict != JOINED {
        return Err(Refused::Retry(
            "the hub's verdict was not one this version knows".into(),
        ));
    }
    s.set_read_timeout(None).map_err(retry)?;
    usize::try_from(hub_rank)
        .map_err(|_| Refused::Retry(format!("the hub said it is rank {hub_rank}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mac_binds_every_field_and_one_side_cannot_serve_as_the_other() {
        let k = [1u8; 32];
        let hello = Hello {
            key: 7,
            rank: 1,
            size: 4,
            nonce: [2; 32],
        };
        assert_eq!(Hello::parse(&hello.bytes()), Some(hello.clone()));
        let hub_mac = mac(&k, Side::Hub, &hello, &[3; 32], 0);
        assert!(verify(&k, Side::Hub, (&hello, &[3; 32], 0), &hub_mac));
        assert!(
            !verify(&k, Side::Rank, (&hello, &[3; 32], 0), &hub_mac),
            "reflected"
        );
        assert!(
            !verify(&[9; 32], Side::Hub, (&hello, &[3; 32], 0), &hub_mac),
            "key"
        );
        assert!(
            !verify(&k, Side::Hub, (&hello, &[4; 32], 0), &hub_mac),
            "hub nonce"
        );
        assert!(
            !verify(&k, Side::Hub, (&hello, &[3; 32], 2), &hub_mac),
            "hub rank"
        );
        for other in [
            Hello {
                key: 8,
                ..hello.clone()
            },
            Hello {
                rank: 2,
                ..hello.clone()
            },
            Hello {
                size: 5,
                ..hello.clone()
            },
            Hello {
                nonce: [0; 32],
                ..hello.clone()
            },
        ] {
            assert!(
                !verify(&k, Side::Hub, (&other, &[3; 32], 0), &hub_mac),
                "{other:?}"
            );
        }
        assert!(
            !verify(&k, Side::Hub, (&hello, &[3; 32], 0), &hub_mac[..31]),
            "short"
        );
    }
}
