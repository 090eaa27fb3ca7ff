//! A TCP port for a test's rendezvous (TEST-ONLY; unit tests and, through `#[path]`, the
//! integration tests' common module use this one file).
//!
//! A port the kernel hands out for `bind(0)` is an ephemeral one, and once released it may be
//! the source port of any outgoing connection before the test's hub binds it again (ranks that
//! retry every 50 ms make many). Ports here come from below the ephemeral range and outside
//! 20000-29999, where the product derives ports from job ids; each process starts at its own
//! offset, and the port and the one above it (torchrun-style launchers listen on MASTER_PORT + 1)
//! must both be free on every interface, as the hub binds.

use std::sync::atomic::{AtomicU32, Ordering};

const FIRST: u32 = 10_000;
const PAIRS: u32 = 4_999;

/// A port `p` with `p` and `p + 1` free at the time of asking.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7_919) % PAIRS;
    for _ in 0..PAIRS {
        let pair = (start + NEXT.fetch_add(1, Ordering::Relaxed)) % PAIRS;
        let port = (FIRST + 2 * pair) as u16;
        let free = |p: u16| std::net::TcpListener::bind(("0.0.0.0", p)).is_ok();
        if free(port) && free(port + 1) {
            return port;
        }
    }
    panic!(
        "no free pair of TCP ports between {FIRST} and {}",
        FIRST + 2 * PAIRS + 1
    );
}
