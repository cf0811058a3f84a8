//! Child processes of the multi-process tests (`tests/xproc.rs`, `tests/examples.rs`).

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// Kills and reaps a child on every exit path (only processes this test started).
pub struct Reap(pub Child);

impl Drop for Reap {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for a child with a deadline; `None` on timeout.
pub fn wait_for(c: &mut Child, limit: Duration) -> Option<ExitStatus> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if let Ok(Some(st)) = c.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    None
}
